"""Names of PFMH's loss forms, without importing torch (the config layer reads them).

``CONTRASTS``: the forms of the prototype contrast of Eqs. 9-10
(:func:`hashing.pfmh.losses.prototype_contrastive_loss` defines both):
``"infonce"`` keeps the positive prototype in the denominator, ``"decoupled"``
leaves it out as the paper prints it.
"""

CONTRASTS = ("infonce", "decoupled")

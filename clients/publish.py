"""Publication: the only places where a client's codes or prototypes leave the node.

* :func:`publish_codes` -- database codes for retrieval evaluation (PHashing: Random
  Flipping with ``code-flip-epsilon``).
* :func:`publish_prototypes` -- FedHAP's class prototypes (private mode with
  ``prototype-flip-epsilon``: binarised prototypes, Random Flipping).
* :func:`publish_pfmh_prototypes` -- PFMH's class prototypes (no mechanism).

Each returns what is published together with the privacy mechanisms applied (with
their epsilon and its unit), which the client reports to the server's ledger.

What the epsilons mean (README "Privacy"): flipping with ``beta`` is
``ln((1-beta)/beta)``-DP per bit and ``bits`` times that per code, i.e. when one
record's code is replaced by any other code. That holds *given the hashing network*:
the network is trained on the same data and is not itself private unless trained
with DP-SGD, so these are guarantees for the released codes with the model fixed.
"""

from __future__ import annotations

import numpy as np

from hashing.pfmh_prototypes import ClientPrototypes
from hashing.prototypes import ClassPrototypes
from privacy.flipping import UNIT_CODE, epsilon_per_code, flip_beta, flip_codes
from privacy.ledger import MechanismUse
from settings import keys as K
from settings.run_settings import RunSettings

CODES_MECHANISM = K.MECH_CODES_FLIP
PROTOTYPES_MECHANISM = K.MECH_PROTOTYPES_FLIP


def publish_codes(
    codes: np.ndarray, *, settings: RunSettings, rng: np.random.Generator
) -> tuple[np.ndarray, list[MechanismUse]]:
    """Return the database codes this client publishes, and the mechanisms applied.

    Parameters
    ----------
    codes : np.ndarray
        (n, bits) int8 in {-1, +1}: sign of the global model's outputs.
    settings : RunSettings
        ``code-flip-epsilon`` (0 = publish as is) and ``flip-calibration``.
    rng : np.random.Generator
        Seeded generator for the flips.

    Returns
    -------
    tuple
        (n, bits) int8 in {-1, +1}, and ``[]`` or one :class:`MechanismUse` with
        the true epsilon per code.
    """
    eps = settings.code_flip_epsilon
    if eps <= 0:
        return codes, []
    beta = flip_beta(eps, settings.flip_calibration)
    use = MechanismUse(
        CODES_MECHANISM, epsilon_per_code(beta, codes.shape[1]), 0.0, UNIT_CODE
    )
    return flip_codes(codes, beta, rng), [use]


def publish_prototypes(
    protos: ClassPrototypes, *, settings: RunSettings, rng: np.random.Generator
) -> tuple[ClassPrototypes, list[MechanismUse]]:
    """Return the class prototypes this client uploads, and the mechanisms applied.

    Without ``prototype-flip-epsilon`` the relaxed class means (Eq. 5) go as they
    are. In the private mode each prototype is binarised (sign, ties +1), every bit
    is flipped with the calibrated ``beta``, and the counts are replaced by 1, so
    the server learns neither the relaxed values nor the class sizes (it still
    learns which classes the client holds). The server's per-class mean of these
    +-1 codes followed by sign is a per-bit majority vote.

    Parameters
    ----------
    protos : ClassPrototypes
        Relaxed per-class means of the classes this client holds.
    settings : RunSettings
        ``prototype-flip-epsilon`` (0 = off) and ``flip-calibration``.
    rng : np.random.Generator
        Seeded generator for the flips.

    Returns
    -------
    tuple
        The prototypes to upload, and ``[]`` or one :class:`MechanismUse` with the
        true epsilon per prototype code (one record changes at most one prototype
        when labels are single; a multi-label record changes one per label).
    """
    eps = settings.prototype_flip_epsilon
    if eps <= 0:
        return protos, []
    beta = flip_beta(eps, settings.flip_calibration)
    signs = np.where(protos.means >= 0, 1, -1).astype(np.int8)
    flipped = flip_codes(signs, beta, rng).astype(np.float32)
    use = MechanismUse(
        PROTOTYPES_MECHANISM,
        epsilon_per_code(beta, signs.shape[1]),
        0.0,
        UNIT_CODE,
    )
    published = ClassPrototypes(
        classes=protos.classes,
        means=flipped,
        counts=np.ones_like(protos.counts),
    )
    return published, [use]


def publish_pfmh_prototypes(protos: ClientPrototypes) -> ClientPrototypes:
    """Return the PFMH prototypes this client uploads: as computed (Eq. 5).

    PFMH's uploads are the unit-norm class means of the fused representation H,
    with the per-class counts and the ids of the classes the client holds. No
    privacy mechanism is applied (the paper has none; ``prototype-flip-epsilon`` is
    FedHAP's), so nothing is charged to the ledger: the server learns the client's
    classes, their sizes and the class means. README "PFMH" says what this leaks.
    """
    return protos

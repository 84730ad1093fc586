"""The DPHE paper's elastic net: a training-time penalty that makes updates sparse.

DPHE (Sec. 3.1) trains each user's linear SVM by SGD with the elastic net of Zou and
Hastie, "the combination of L1 and L2 regularizations, to enforce sparsity on
locally-updated classifiers"; the relative strength of L1 is fixed to 0.5 and the
overall strength tuned until local classifiers are more than 90% sparse. The sparse
support ``K`` of Sec. 2.3 (``w = K v``) is then read off as the non-zeros of the
trained vector, and only those values are encrypted.

Our form (per local round, added to the mini-batch loss, which is a mean)::

    R(w) = l1 * ||w - w_ref||_1 + (l2 / 2) * ||w - w_ref||_2^2

summed over every coordinate of every trainable parameter. With the paper's
parametrisation (overall strength ``alpha``, L1 ratio ``rho``, scikit-learn's
``SGDClassifier(penalty="elasticnet")`` convention) ``l1 = alpha * rho`` and
``l2 = alpha * (1 - rho)``, so the paper's ``rho = 0.5`` is ``l1 = l2``.

**Which vector is penalised.** The paper's users send the classifier ``w`` itself,
so its elastic net is on ``w`` (``w_ref = 0``). Our clients send the *update*
``d = w - w_global`` (``clients/sparse_updates.py``; DPHE encrypts ``d``), and a
deep hashing network cannot have mostly-zero weights, so the clients centre the
penalty on the round's global model (``w_ref = w_global``): it is the update that
is made sparse, exactly the vector whose non-zeros are encrypted. ``reference=None``
gives the paper's literal form (``w_ref = 0``).

**Exact zeros.** A subgradient of ``|x|`` (what autograd gives, ``sign(0) = 0``)
pulls a weak coordinate *towards* its reference but leaves it oscillating around it
by about one optimiser step; it is never exactly zero. The paper's SGD solver gets
exact zeros by truncation (the L1 step clips at zero); our clients train with Adam,
whose per-coordinate step is at most about ``learning_rate`` whatever the gradient
scale. So after the last step :func:`snap_to_reference` reads off the support: every
coordinate within ``tolerance = learning_rate`` (one Adam step) of its reference is
set *to* the reference, so its update is exactly 0; the other coordinates are left
as trained (a hard threshold, not a second shrinkage: the L1 shrinkage is already in
the objective). Coordinates the data moved consistently are many steps away and
keep their value. Without the penalty the same read-off would zero only what
happened to end near the reference; the measured table in ``docs/methods/dphe.md``
shows that the penalty, not the read-off, makes the sparsity.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _check_weights(l1: float, l2: float) -> None:
    if not (l1 >= 0 and l2 >= 0):  # also refuses NaN
        raise ValueError(f"elastic-net weights must be >= 0, got l1={l1}, l2={l2}")


def elastic_net_penalty(
    params: Sequence[torch.Tensor],
    reference: Sequence[torch.Tensor] | None,
    *,
    l1: float,
    l2: float,
) -> torch.Tensor:
    """``l1 * ||w - w_ref||_1 + (l2 / 2) * ||w - w_ref||_2^2`` over all tensors.

    Parameters
    ----------
    params : sequence of torch.Tensor
        The trainable tensors ``w`` (any shapes); gradients flow through them.
    reference : sequence of torch.Tensor or None
        ``w_ref``, one detached tensor per parameter with the same shape (the round's
        global model), or ``None`` for ``w_ref = 0`` (the paper's penalty on ``w``).
    l1, l2 : float
        Non-negative weights of the L1 and the (halved) squared L2 norm.

    Returns
    -------
    torch.Tensor
        Scalar (0-dim) tensor on the parameters' device; ``0.0`` for no parameters.
        Its gradient is ``l1 * sign(w - w_ref) + l2 * (w - w_ref)``.

    Raises
    ------
    ValueError
        If a weight is negative (or NaN), or ``reference`` has another length.
    """
    _check_weights(l1, l2)
    refs = [None] * len(params) if reference is None else list(reference)
    if len(refs) != len(params):
        raise ValueError(
            f"reference has {len(refs)} tensors for {len(params)} parameters"
        )
    total = torch.zeros((), device=params[0].device if params else None)
    for p, r in zip(params, refs, strict=True):
        d = p if r is None else p - r
        if l1 > 0:
            total = total + l1 * d.abs().sum()
        if l2 > 0:
            total = total + 0.5 * l2 * (d * d).sum()
    return total


@torch.no_grad()
def snap_to_reference(
    params: Sequence[torch.Tensor],
    reference: Sequence[torch.Tensor],
    *,
    tolerance: float,
) -> int:
    """Set every coordinate within ``tolerance`` of its reference to it, in place.

    The support read-off after elastic-net training (module docstring): afterwards
    ``w - w_ref`` is exactly 0 wherever ``|w - w_ref| <= tolerance``.

    Parameters
    ----------
    params : sequence of torch.Tensor
        Trained tensors, modified in place.
    reference : sequence of torch.Tensor
        Same shapes: the round's global model.
    tolerance : float
        Non-negative distance below which a coordinate counts as unmoved (the
        clients use the Adam step size).

    Returns
    -------
    int
        Number of coordinates whose update is exactly 0 afterwards.
    """
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    if len(reference) != len(params):
        raise ValueError(
            f"reference has {len(reference)} tensors for {len(params)} parameters"
        )
    zeros = 0
    for p, r in zip(params, reference, strict=True):
        near = (p - r).abs() <= tolerance
        p.copy_(torch.where(near, r, p))
        zeros += int(near.sum())
    return zeros

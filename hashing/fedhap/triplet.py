"""Triplet ranking losses of FedHAP (Eqs. 2-3) as pure functions of a batch.

Distances between relaxed codes (``distance`` key):

* ``cosine``    -- d(a, b) = 1 - cos(a, b), in [0, 2]; the paper's default.
* ``euclidean`` -- d(a, b) = ||a - b||_2 / sqrt(bits), the root-mean-square
  difference per bit, so that for +-1 codes it also lies in [0, 2] and one margin
  default serves both metrics (the paper's Table 7 compares the two but gives no
  margin; our default ``fedhap.triplet-margin = 0.5`` is our choice).

Triplet selection is not specified by the paper. We use all valid triplets of the
mini-batch ("batch-all"): every anchor j, every positive p != j with
``sim(j, p)`` and every negative n with ``not sim(j, n)``; the loss is the mean hinge
over those triplets (the paper writes a sum over anchors; a mean keeps mu and lambda
independent of the batch size). Multi-label samples: p is a positive of j when they
share at least one label and n a negative when they share none; against the global
prototypes, every class of j that has a prototype is a positive and every other
class with a prototype is a negative.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from hashing.losses import pairwise_similarity

DISTANCES = ("cosine", "euclidean")


def pairwise_distance(a: torch.Tensor, b: torch.Tensor, *, metric: str) -> torch.Tensor:
    """Distance matrix between the rows of ``a`` (n, bits) and ``b`` (m, bits).

    Returns
    -------
    torch.Tensor
        (n, m) float, see the module docstring for the two metrics.
    """
    if metric == "cosine":
        return 1.0 - F.normalize(a, dim=1) @ F.normalize(b, dim=1).T
    if metric == "euclidean":
        sq = (a[:, None, :] - b[None, :, :]).pow(2).sum(-1)
        # + tiny constant: the gradient of sqrt at 0 (an anchor with itself) is inf
        return (sq + 1e-12).sqrt() / math.sqrt(a.shape[1])
    raise ValueError(f"distance={metric!r}: accepted are {', '.join(DISTANCES)}")


def _triplet_hinges(d: torch.Tensor, margin: float) -> torch.Tensor:
    """(n, p, q) max(d[a, p] - d[a, q] + margin, 0) for anchors a."""
    return (d[:, :, None] - d[:, None, :] + margin).clamp_min(0.0)


def _mean_over_valid(hinge: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean of ``hinge`` over ``valid`` triplets; 0 (keeping the graph) if none."""
    count = valid.sum()
    if count == 0:
        return hinge.sum() * 0.0
    return (hinge * valid).sum() / count


def _prototype_triplets(
    b: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    prototype_classes: torch.Tensor,
    *,
    num_classes: int,
    margin: float,
    metric: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hinges and validity of (anchor, positive prototype, negative prototype)."""
    multi_hot = (
        F.one_hot(labels, num_classes).bool() if labels.dim() == 1 else labels.bool()
    )
    member = multi_hot[:, prototype_classes]  # (n, m): prototype is of j's class
    d = pairwise_distance(b, prototypes.to(b.dtype), metric=metric)
    valid = (member[:, :, None] & ~member[:, None, :]).float()
    return _triplet_hinges(d, margin), valid


def local_triplet_loss(
    b: torch.Tensor, labels: torch.Tensor, *, margin: float, metric: str
) -> torch.Tensor:
    """L_tl^local (Eq. 2): batch-all triplets among the samples of one mini-batch.

    Parameters
    ----------
    b : torch.Tensor
        (n, bits) relaxed codes.
    labels : torch.Tensor
        (n,) class ids or (n, C) multi-hot.
    margin : float
        Hinge margin a > 0.
    metric : str
        ``cosine`` or ``euclidean``.

    Returns
    -------
    torch.Tensor
        Scalar: mean hinge over all valid triplets (0 if there is none).
    """
    sim = pairwise_similarity(labels).bool()
    eye = torch.eye(len(b), dtype=torch.bool, device=b.device)
    pos = sim & ~eye
    neg = ~sim
    d = pairwise_distance(b, b, metric=metric)
    valid = (pos[:, :, None] & neg[:, None, :]).float()
    return _mean_over_valid(_triplet_hinges(d, margin), valid)


def global_triplet_loss(
    b: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    prototype_classes: torch.Tensor,
    *,
    num_classes: int,
    margin: float,
    metric: str,
) -> torch.Tensor:
    """L_tl^global (Eq. 3): anchors from the batch, positives/negatives prototypes.

    Parameters
    ----------
    b : torch.Tensor
        (n, bits) relaxed codes.
    labels : torch.Tensor
        (n,) class ids or (n, C) multi-hot.
    prototypes : torch.Tensor
        (m, bits) global prototype codes h_c in {-1, +1}, one per class present.
    prototype_classes : torch.Tensor
        (m,) int64 class id of each prototype; classes nobody holds are absent.
    num_classes : int
        Size of the label space C.
    margin : float
        Hinge margin a > 0.
    metric : str
        ``cosine`` or ``euclidean``.

    Returns
    -------
    torch.Tensor
        Scalar: mean hinge over all (anchor, positive prototype, negative
        prototype) triplets; anchors whose classes have no prototype contribute
        nothing.
    """
    hinge, valid = _prototype_triplets(
        b,
        labels,
        prototypes,
        prototype_classes,
        num_classes=num_classes,
        margin=margin,
        metric=metric,
    )
    return _mean_over_valid(hinge, valid)


def global_triplet_per_sample(
    b: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    prototype_classes: torch.Tensor,
    *,
    num_classes: int,
    margin: float,
    metric: str,
) -> torch.Tensor:
    """L_tl^global per anchor: (n,) mean hinge over that anchor's own triplets.

    Each entry depends on one sample and the (fixed) prototypes only, as DP-SGD
    needs; an anchor without a valid triplet gets 0.
    """
    hinge, valid = _prototype_triplets(
        b,
        labels,
        prototypes,
        prototype_classes,
        num_classes=num_classes,
        margin=margin,
        metric=metric,
    )
    return (hinge * valid).sum((1, 2)) / valid.sum((1, 2)).clamp_min(1.0)

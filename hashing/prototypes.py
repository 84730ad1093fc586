"""Class prototypes of hash codes: client side (Eq. 5) and server side (Eq. 6).

A client summarises its data by one relaxed code per class it holds, the mean of the
network outputs over its samples of that class (multi-label samples count for each
of their labels), with the per-class count. The server averages, per class, over
the clients that hold it -- the paper's plain mean, or optionally a mean weighted by
the per-class counts -- and takes the sign (ties, an exact 0, go to +1). A class no
client holds has no prototype: it is absent, never zero-filled.

Everything here is numpy/torch and framework-free; the strategy and the client
trainer move these arrays through Flower records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

WEIGHTINGS = ("mean", "count")


@dataclass(frozen=True)
class ClassPrototypes:
    """Per-class relaxed codes of one client.

    Attributes
    ----------
    classes : np.ndarray
        (m,) int64, sorted, unique class ids held by the client.
    means : np.ndarray
        (m, bits) float32 mean relaxed code b_bar(i, c) of each class.
    counts : np.ndarray
        (m,) int64 number of the client's samples of each class (>= 1).
    """

    classes: np.ndarray
    means: np.ndarray
    counts: np.ndarray


@dataclass(frozen=True)
class GlobalPrototypes:
    """The server's prototypes for the classes at least one client holds.

    Attributes
    ----------
    classes : np.ndarray
        (m,) int64 sorted class ids.
    relaxed : np.ndarray
        (m, bits) float32 aggregated b_hat_c.
    codes : np.ndarray
        (m, bits) float32 h_c = sign(b_hat_c) in {-1, +1} (ties -> +1).
    """

    classes: np.ndarray
    relaxed: np.ndarray
    codes: np.ndarray


def class_prototypes(
    codes: torch.Tensor, labels: torch.Tensor, *, num_classes: int
) -> ClassPrototypes:
    """Eq. (5): mean relaxed code per class the client holds.

    Parameters
    ----------
    codes : torch.Tensor
        (n, bits) relaxed codes b_j of the client's samples.
    labels : torch.Tensor
        (n,) class ids or (n, C) multi-hot.
    num_classes : int
        Size of the label space C.
    """
    b = codes.detach().double().cpu()
    if labels.dim() == 1:
        member = torch.nn.functional.one_hot(labels.cpu(), num_classes).double()
    else:
        member = labels.cpu().double()
    counts = member.sum(0)  # (C,)
    held = torch.nonzero(counts > 0).flatten()
    sums = member[:, held].T @ b  # (m, bits)
    means = sums / counts[held, None]
    return ClassPrototypes(
        classes=held.numpy().astype(np.int64),
        means=means.numpy().astype(np.float32),
        counts=counts[held].numpy().astype(np.int64),
    )


def prototype_problem(
    protos: ClassPrototypes, *, num_classes: int, bits: int
) -> str | None:
    """Why an uploaded prototype set is unusable, or ``None`` if it is fine."""
    classes, means, counts = protos.classes, protos.means, protos.counts
    if classes.ndim != 1 or classes.dtype.kind not in "iu":
        return f"classes must be 1-D integers, got {classes.dtype} {classes.shape}"
    if means.ndim != 2 or means.shape != (len(classes), bits):
        return f"prototype codes {means.shape}, expected ({len(classes)}, {bits})"
    if counts.shape != classes.shape or counts.dtype.kind not in "iu":
        return f"counts must be {classes.shape} integers, got {counts.shape}"
    if len(classes) == 0:
        return "no class prototypes"
    if classes.min() < 0 or classes.max() >= num_classes:
        return (
            f"class id {int(classes.min() if classes.min() < 0 else classes.max())} "
            f"outside the label space 0..{num_classes - 1}"
        )
    if len(np.unique(classes)) != len(classes):
        return "duplicate class ids"
    if (counts <= 0).any():
        return "non-positive class counts"
    if not np.isfinite(means).all():
        return "non-finite prototype values"
    return None


def aggregate_prototypes(
    uploads: Sequence[ClassPrototypes],
    *,
    num_classes: int,
    bits: int,
    weighting: str = "mean",
) -> GlobalPrototypes:
    """Eq. (6): per-class average over the clients holding the class, then sign.

    Parameters
    ----------
    uploads : sequence of ClassPrototypes
        Validated uploads (see :func:`prototype_problem`), in a fixed order.
    num_classes : int
        Size of the label space C.
    bits : int
        Code length.
    weighting : str
        ``mean`` (the paper: every holding client counts once) or ``count``
        (weighted by the clients' per-class sample counts).

    Returns
    -------
    GlobalPrototypes
        Only the classes that at least one upload holds.
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting={weighting!r}: accepted are {WEIGHTINGS}")
    total = np.zeros((num_classes, bits), dtype=np.float64)
    weight = np.zeros(num_classes, dtype=np.float64)
    for up in uploads:
        w = (
            np.ones(len(up.classes))
            if weighting == "mean"
            else up.counts.astype(np.float64)
        )
        total[up.classes] += w[:, None] * up.means.astype(np.float64)
        weight[up.classes] += w
    present = np.nonzero(weight > 0)[0]
    relaxed = (total[present] / weight[present, None]).astype(np.float32)
    return GlobalPrototypes(
        classes=present.astype(np.int64),
        relaxed=relaxed,
        codes=np.where(relaxed >= 0, 1.0, -1.0).astype(np.float32),
    )


def prototype_sum_vector(
    protos: ClassPrototypes, *, num_classes: int, bits: int
) -> np.ndarray:
    """Lay out a client's prototypes so that their sum over clients gives Eq. (6).

    Row ``c`` of the ``(C, bits + 1)`` layout holds the class mean and a holder
    indicator 1 for every class the client holds, zeros elsewhere. Summed over
    clients (e.g. under DPHE), row ``c`` holds the sum of the holders' means and the
    number of holders: :func:`prototypes_from_sums` divides them (the ``mean``
    weighting: every holding client counts once).

    Returns
    -------
    numpy.ndarray
        ``(C * (bits + 1),)`` float64.
    """
    out = np.zeros((num_classes, bits + 1), dtype=np.float64)
    out[protos.classes, :bits] = protos.means
    out[protos.classes, bits] = 1.0
    return out.ravel()


def prototypes_from_sums(
    sums: np.ndarray, *, num_classes: int, bits: int
) -> GlobalPrototypes:
    """Eq. (6) from summed :func:`prototype_sum_vector` outputs, then sign.

    Parameters
    ----------
    sums : numpy.ndarray
        ``(C * (bits + 1),)`` sum over clients (holder counts are near integers: a
        decrypted fixed-point sum may be off by its quantization error).

    Returns
    -------
    GlobalPrototypes
        Only the classes held by at least one client.
    """
    table = np.asarray(sums, dtype=np.float64).reshape(num_classes, bits + 1)
    holders = table[:, bits]
    present = np.nonzero(holders >= 0.5)[0]
    relaxed = (table[present, :bits] / holders[present, None]).astype(np.float32)
    return GlobalPrototypes(
        classes=present.astype(np.int64),
        relaxed=relaxed,
        codes=np.where(relaxed >= 0, 1.0, -1.0).astype(np.float32),
    )

"""Class prototypes: the exchange FedHAP and PFMH share (Eq. 5 and Eq. 6 of both).

Client (Eq. 5): for every class a client holds, the mean of a per-sample vector
over its samples of that class (a multi-label sample counts for each of its
labels), with the per-class count. Classes the client does not hold get no
prototype.

Server (Eq. 6): for every class, the mean over the clients holding it. Both papers
give every holding client weight 1 regardless of its sample count; that is the
default (``weighting="mean"``). ``weighting="count"`` weights by the clients'
per-class counts instead (an option, not the papers). A class no client holds has
no prototype: it is absent, never zero-filled.

The methods differ only in what a prototype is, a parameter here:

* FedHAP (:mod:`hashing.fedhap.prototypes`): relaxed codes, averaged as they are;
  the server then takes the sign of its averages (the broadcast codes).
* PFMH (:mod:`hashing.pfmh.prototypes`): the fused representation H, every mean
  (client and server side) scaled to unit L2 norm (``normalise=True``). A mean of
  norm below ``DEGENERATE_NORM`` (unit vectors that cancel exactly) has no
  direction; it is left out, so the class is treated like one nobody holds.

Everything here is numpy/torch and framework-free; ``settings/prototype_records.py``
moves these sets through Flower records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

#: Per-class weightings of Eq. 6: ``mean`` (the papers) or ``count``.
WEIGHTINGS = ("mean", "count")
#: Class means with a smaller L2 norm have no direction (``normalise=True``).
DEGENERATE_NORM = 1e-8
#: With ``unit_norm=True`` a prototype's L2 norm must be within this of 1.
UNIT_NORM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class ClassPrototypes:
    """One client's per-class prototypes (Eq. 5), as uploaded to the server.

    Attributes
    ----------
    classes : np.ndarray
        (m,) int64, sorted, unique class ids held by the client.
    vectors : np.ndarray
        (m, d) float32 prototype of each class, row r for ``classes[r]``: the mean
        relaxed code (FedHAP, d = bits) or the unit-norm mean of H (PFMH, d = k).
    counts : np.ndarray
        (m,) int64 number of the client's samples of each class (>= 1).
    """

    classes: np.ndarray
    vectors: np.ndarray
    counts: np.ndarray


@dataclass(frozen=True)
class PrototypeSet:
    """Class prototypes without counts: the server's Eq. 6 result and what it sends.

    Attributes
    ----------
    classes : np.ndarray
        (m,) int64, sorted, unique class ids.
    vectors : np.ndarray
        (m, d) float32 prototypes, row r for ``classes[r]``.
    """

    classes: np.ndarray
    vectors: np.ndarray


def class_prototypes(
    features: torch.Tensor | np.ndarray,
    labels: torch.Tensor | np.ndarray,
    *,
    num_classes: int,
    normalise: bool = False,
) -> ClassPrototypes:
    """Eq. 5: the mean of ``features`` per class the client holds.

    Parameters
    ----------
    features : torch.Tensor or np.ndarray
        (n, d) per-sample vectors: relaxed codes b (FedHAP) or H (PFMH, computed in
        eval mode, see :func:`hashing.pfmh.train.local_prototypes`).
    labels : torch.Tensor or np.ndarray
        (n,) class ids in ``0..num_classes-1`` or (n, num_classes) multi-hot.
    num_classes : int
        Size of the label space C.
    normalise : bool
        Scale every mean to unit L2 norm, leaving out degenerate means (PFMH).

    Returns
    -------
    ClassPrototypes
        Classes with at least one sample (and, with ``normalise``, a
        non-degenerate mean), their prototypes and sample counts.

    Raises
    ------
    ValueError
        Shapes that do not fit, or labels outside the label space.
    """
    x = torch.as_tensor(features).detach().cpu().double()
    y = torch.as_tensor(labels).detach().cpu()
    if x.dim() != 2:
        raise ValueError(f"features must be (n, d), got shape {tuple(x.shape)}")
    member = _membership(y, num_classes=num_classes, n=len(x))
    counts = member.sum(0)  # (C,)
    held = torch.nonzero(counts > 0).flatten()
    means = (member[:, held].T @ x) / counts[held, None]  # (m, d)
    if normalise:
        norms = means.norm(dim=1)
        keep = norms >= DEGENERATE_NORM
        held, means = held[keep], means[keep] / norms[keep][:, None]
    return ClassPrototypes(
        classes=held.numpy().astype(np.int64),
        vectors=means.numpy().astype(np.float32),
        counts=counts[held].numpy().astype(np.int64),
    )


def pooled_prototypes(
    uploads: Sequence[ClassPrototypes],
    *,
    num_classes: int,
    dim: int,
    weighting: str = "mean",
    normalise: bool = False,
) -> PrototypeSet:
    """Eq. 6: per-class mean over the clients holding the class.

    Parameters
    ----------
    uploads : sequence of ClassPrototypes
        Validated uploads (see :func:`prototype_problem`), in a fixed order.
    num_classes : int
        Size of the label space C.
    dim : int
        Prototype dimension d.
    weighting : str
        ``mean`` (the papers: each holding client counts once) or ``count``
        (weighted by the clients' per-class sample counts).
    normalise : bool
        Scale every mean to unit L2 norm, leaving out degenerate means (PFMH).

    Returns
    -------
    PrototypeSet
        Only classes that at least one upload holds (and, with ``normalise``,
        whose mean is not degenerate); empty when there are no uploads.
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting={weighting!r}: accepted are {WEIGHTINGS}")
    total = np.zeros((num_classes, dim), dtype=np.float64)
    weight = np.zeros(num_classes, dtype=np.float64)
    for up in uploads:
        w = (
            np.ones(len(up.classes))
            if weighting == "mean"
            else up.counts.astype(np.float64)
        )
        np.add.at(total, up.classes, w[:, None] * up.vectors.astype(np.float64))
        np.add.at(weight, up.classes, w)
    present = np.nonzero(weight > 0)[0]
    means = total[present] / weight[present, None]
    if normalise:
        norms = np.linalg.norm(means, axis=1)
        keep = norms >= DEGENERATE_NORM
        present, means = present[keep], means[keep] / norms[keep, None]
    return PrototypeSet(
        classes=present.astype(np.int64), vectors=means.astype(np.float32)
    )


def prototype_problem(
    protos: ClassPrototypes | PrototypeSet,
    *,
    num_classes: int,
    dim: int,
    unit_norm: bool = False,
) -> str | None:
    """Why a prototype set is unusable, or ``None`` if it is fine.

    Checks, in order: 1-D integer class ids; floating-point vectors of shape
    (m, dim); counts (for :class:`ClassPrototypes`) of shape (m,), integer and >= 1;
    at least one class; class ids in ``0..num_classes-1``; no duplicate class ids;
    finite values; with ``unit_norm``, unit L2 norm (within
    ``UNIT_NORM_TOLERANCE``).

    Parameters
    ----------
    protos : ClassPrototypes or PrototypeSet
        An uploaded (client) or received (server) set.
    num_classes : int
        Size of the label space C.
    dim : int
        Expected prototype dimension d.
    unit_norm : bool
        Require unit-norm prototypes (PFMH).

    Returns
    -------
    str or None
        A short description of the first problem found.
    """
    classes = np.asarray(protos.classes)
    vectors = np.asarray(protos.vectors)
    if classes.ndim != 1 or classes.dtype.kind not in "iu":
        return f"classes must be 1-D integers, got {classes.dtype} {classes.shape}"
    if vectors.ndim != 2 or vectors.shape != (len(classes), dim):
        return (
            f"prototype vectors have shape {vectors.shape}, expected "
            f"({len(classes)}, {dim})"
        )
    if vectors.dtype.kind != "f":
        return f"prototype vectors must be floating point, got {vectors.dtype}"
    if isinstance(protos, ClassPrototypes):
        counts = np.asarray(protos.counts)
        if counts.shape != classes.shape or counts.dtype.kind not in "iu":
            return (
                f"counts must be {classes.shape} integers, got {counts.dtype} "
                f"{counts.shape}"
            )
        if len(counts) and counts.min() < 1:
            return f"class counts must be >= 1, found {int(counts.min())}"
    if len(classes) == 0:
        return "no class prototypes"
    if classes.min() < 0 or classes.max() >= num_classes:
        bad = int(classes.min() if classes.min() < 0 else classes.max())
        return f"class id {bad} outside the label space 0..{num_classes - 1}"
    if len(np.unique(classes)) != len(classes):
        return "duplicate class ids"
    if not np.isfinite(vectors).all():
        return "non-finite prototype values"
    if unit_norm:
        norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
        off = np.abs(norms - 1.0) > UNIT_NORM_TOLERANCE
        if off.any():
            r = int(np.argmax(off))
            return (
                f"prototype of class {int(classes[r])} has L2 norm {norms[r]:.4g}, "
                "expected unit norm"
            )
    return None


def _membership(y: torch.Tensor, *, num_classes: int, n: int) -> torch.Tensor:
    """(n, C) float64 0/1 membership from (n,) ids or (n, C) multi-hot."""
    if len(y) != n:
        raise ValueError(f"labels have {len(y)} rows but the features have {n}")
    if y.dim() == 1:
        if n and (int(y.min()) < 0 or int(y.max()) >= num_classes):
            raise ValueError(
                f"labels must be class ids in 0..{num_classes - 1}, found "
                f"{int(y.min())}..{int(y.max())}"
            )
        return torch.nn.functional.one_hot(y.long(), num_classes).double()
    if y.dim() != 2 or y.shape[1] != num_classes:
        raise ValueError(
            f"labels must be (n,) ids or (n, {num_classes}) multi-hot, got shape "
            f"{tuple(y.shape)}"
        )
    return (y != 0).double()

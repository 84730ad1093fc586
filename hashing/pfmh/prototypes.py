"""PFMH prototypes: client (Eq. 5), centralized (Eq. 6) and completion (Eq. 7).

Pure numpy/torch functions, no Flower. Prototypes live in the k-dim space of the
integrated representation H (:mod:`hashing.pfmh.model`), not in code space.

* Eq. 5 (client): for every class j the client holds, the mean of H over its samples
  of class j, scaled to unit L2 norm. A multi-label sample counts once for each of
  its labels. Classes the client does not hold get no prototype. A class whose mean
  is numerically zero (norm < ``DEGENERATE_NORM``, which can only happen when unit
  vectors cancel exactly) has no direction; our choice is to leave it out, so the
  server completes it like a missing class.
* Eq. 6 (server): for every class j, the mean over the clients holding j (the set
  M_j) of their prototypes P_i^j, then unit norm. The paper's formula gives every
  holding client weight 1 regardless of how many samples it has; that is our default
  (``weighting="mean"``). ``weighting="count"`` weights by the clients' per-class
  sample counts instead (an option, not the paper). A class no client holds has no
  centralized prototype: it is absent, never zero-filled. A class whose client
  prototypes cancel exactly (norm < ``DEGENERATE_NORM``) is likewise left out.
* Eq. 7 (server): each client's set is completed with the centralized prototype of
  every class it misses; its own prototypes are kept as they are. A class held by
  nobody stays absent from every set. The client then receives its completed
  personal set P_i and the centralized set P_bar (Algorithm 1, line 13).

Without prototype enhancement (ablation w/o-PE) :func:`aggregate_and_enhance` is
called with ``complete=False``: the centralized set is still computed and sent, but
each client's personal set is only its own classes (FedProto-like exchange).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

#: Per-class weightings of Eq. 6: ``mean`` (the paper) or ``count``.
WEIGHTINGS = ("mean", "count")
#: A prototype must have an L2 norm within this of 1 to pass validation.
UNIT_NORM_TOLERANCE = 1e-3
#: Class means with a smaller norm have no direction and are left out.
DEGENERATE_NORM = 1e-8


@dataclass(frozen=True)
class ClientPrototypes:
    """One client's Eq. 5 prototypes, as uploaded to the server.

    Attributes
    ----------
    classes : np.ndarray
        (m,) int64, sorted, unique class ids the client holds.
    vectors : np.ndarray
        (m, k) float32 unit-norm prototypes P_i^j, row r for ``classes[r]``.
    counts : np.ndarray
        (m,) int64 number of the client's samples of each class (>= 1).
    """

    classes: np.ndarray
    vectors: np.ndarray
    counts: np.ndarray


@dataclass(frozen=True)
class PrototypeSet:
    """A set of unit-norm class prototypes without counts.

    Used for the centralized set P_bar (Eq. 6) and for a client's completed
    personal set (Eq. 7).

    Attributes
    ----------
    classes : np.ndarray
        (m,) int64, sorted, unique class ids.
    vectors : np.ndarray
        (m, k) float32 unit-norm prototypes, row r for ``classes[r]``.
    """

    classes: np.ndarray
    vectors: np.ndarray


def client_prototypes(
    h: torch.Tensor | np.ndarray,
    labels: torch.Tensor | np.ndarray,
    *,
    num_classes: int,
) -> ClientPrototypes:
    """Eq. 5: unit-norm class means of H for the classes the client holds.

    Parameters
    ----------
    h : torch.Tensor or np.ndarray
        (n, k) integrated representations H of the client's samples (compute them
        in eval mode, see :func:`hashing.pfmh.train.local_prototypes`).
    labels : torch.Tensor or np.ndarray
        (n,) class ids in ``0..num_classes-1`` or (n, num_classes) multi-hot.
    num_classes : int
        Size of the label space C.

    Returns
    -------
    ClientPrototypes
        Classes with at least one sample (and a non-degenerate mean), their unit
        prototypes and sample counts; a multi-label sample counts for each label.

    Raises
    ------
    ValueError
        Shapes that do not fit, or labels outside the label space.
    """
    hh = torch.as_tensor(h).detach().cpu().double()
    y = torch.as_tensor(labels).detach().cpu()
    if hh.dim() != 2:
        raise ValueError(f"h must be (n, k), got shape {tuple(hh.shape)}")
    member = _membership(y, num_classes=num_classes, n=len(hh))
    counts = member.sum(0)  # (C,)
    held = torch.nonzero(counts > 0).flatten()
    means = (member[:, held].T @ hh) / counts[held, None]  # (m, k)
    norms = means.norm(dim=1)
    keep = norms >= DEGENERATE_NORM
    held, means, norms = held[keep], means[keep], norms[keep]
    return ClientPrototypes(
        classes=held.numpy().astype(np.int64),
        vectors=(means / norms[:, None]).numpy().astype(np.float32),
        counts=counts[held].numpy().astype(np.int64),
    )


def centralized_prototypes(
    uploads: Sequence[ClientPrototypes],
    *,
    num_classes: int,
    dim: int,
    weighting: str = "mean",
) -> PrototypeSet:
    """Eq. 6: per-class mean over the clients holding the class, then unit norm.

    Parameters
    ----------
    uploads : sequence of ClientPrototypes
        Validated uploads (see :func:`prototype_problem`), in a fixed order.
    num_classes : int
        Size of the label space C.
    dim : int
        Prototype dimension k.
    weighting : str
        ``mean`` (the paper: each holding client counts once) or ``count``
        (weighted by the clients' per-class sample counts).

    Returns
    -------
    PrototypeSet
        Only classes that at least one upload holds (and whose mean is not
        degenerate); may be empty when there are no uploads.
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
    norms = np.linalg.norm(means, axis=1)
    keep = norms >= DEGENERATE_NORM
    return PrototypeSet(
        classes=present[keep].astype(np.int64),
        vectors=(means[keep] / norms[keep, None]).astype(np.float32),
    )


def complete_prototypes(
    own: ClientPrototypes | PrototypeSet, centralized: PrototypeSet
) -> PrototypeSet:
    """Eq. 7: fill the classes a client misses with the centralized prototypes.

    Parameters
    ----------
    own : ClientPrototypes or PrototypeSet
        The client's prototypes P_i (classes it holds).
    centralized : PrototypeSet
        P_bar from :func:`centralized_prototypes`.

    Returns
    -------
    PrototypeSet
        Sorted union of both class sets: ``own``'s vector for every class the
        client holds (i in M_j), the centralized one for the others (i not in
        M_j). Classes in neither set (held by nobody) stay absent.

    Raises
    ------
    ValueError
        If the two sets have different prototype dimensions.
    """
    if own.vectors.shape[1:] != centralized.vectors.shape[1:]:
        raise ValueError(
            f"prototype dimension mismatch: the client's are {own.vectors.shape[1:]}, "
            f"the centralized ones {centralized.vectors.shape[1:]}; both must be (k,)"
        )
    missing = ~np.isin(centralized.classes, own.classes)
    classes = np.concatenate([own.classes, centralized.classes[missing]])
    vectors = np.concatenate([own.vectors, centralized.vectors[missing]])
    order = np.argsort(classes, kind="stable")
    return PrototypeSet(
        classes=classes[order].astype(np.int64),
        vectors=vectors[order].astype(np.float32),
    )


def aggregate_and_enhance(
    uploads: Sequence[ClientPrototypes],
    *,
    num_classes: int,
    dim: int,
    weighting: str = "mean",
    complete: bool = True,
) -> tuple[PrototypeSet, list[PrototypeSet]]:
    """Server step of Algorithm 1 (lines 8-11): Eq. 6, then Eq. 7 per client.

    Parameters
    ----------
    uploads : sequence of ClientPrototypes
        Validated uploads, one per client, in a fixed order.
    num_classes : int
        Size of the label space C.
    dim : int
        Prototype dimension k.
    weighting : str
        See :func:`centralized_prototypes`.
    complete : bool
        Apply Eq. 7. ``False`` is the w/o-PE ablation: each personal set is only
        the client's own prototypes.

    Returns
    -------
    centralized : PrototypeSet
        P_bar, sent to every client.
    personal : list of PrototypeSet
        ``personal[i]`` is the (completed) set for ``uploads[i]``.
    """
    central = centralized_prototypes(
        uploads, num_classes=num_classes, dim=dim, weighting=weighting
    )
    personal = [
        complete_prototypes(up, central)
        if complete
        else PrototypeSet(classes=up.classes.copy(), vectors=up.vectors.copy())
        for up in uploads
    ]
    return central, personal


def prototype_problem(
    protos: ClientPrototypes | PrototypeSet, *, num_classes: int, dim: int
) -> str | None:
    """Why a prototype set is unusable, or ``None`` if it is fine.

    Checks, in order: 1-D integer class ids; vectors of shape (m, dim); counts
    (for :class:`ClientPrototypes`) of shape (m,), integer and >= 1; at least one
    class; class ids in ``0..num_classes-1``; no duplicate class ids; finite
    values; unit L2 norm (within ``UNIT_NORM_TOLERANCE``, Eqs. 5-6).

    Parameters
    ----------
    protos : ClientPrototypes or PrototypeSet
        An uploaded (client) or received (centralized / personal) set.
    num_classes : int
        Size of the label space C.
    dim : int
        Expected prototype dimension k.

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
    if isinstance(protos, ClientPrototypes):
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
    norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
    off = np.abs(norms - 1.0) > UNIT_NORM_TOLERANCE
    if off.any():
        r = int(np.argmax(off))
        return (
            f"prototype of class {int(classes[r])} has L2 norm {norms[r]:.4g}, "
            "expected unit norm"
        )
    return None


def require_valid_prototypes(
    protos: ClientPrototypes | PrototypeSet,
    *,
    num_classes: int,
    dim: int,
    name: str = "prototypes",
) -> None:
    """Raise ``ValueError`` if :func:`prototype_problem` finds a problem.

    Parameters
    ----------
    protos : ClientPrototypes or PrototypeSet
        The set to check.
    num_classes : int
        Size of the label space C.
    dim : int
        Expected prototype dimension k.
    name : str
        What the set is, for the message (e.g. ``"global_prototypes"``).
    """
    problem = prototype_problem(protos, num_classes=num_classes, dim=dim)
    if problem is not None:
        raise ValueError(
            f"{name}: {problem}; accepted are unit-norm float ({dim},) vectors for "
            f"unique class ids in 0..{num_classes - 1}"
        )


def _membership(y: torch.Tensor, *, num_classes: int, n: int) -> torch.Tensor:
    """(n, C) float64 0/1 membership from (n,) ids or (n, C) multi-hot."""
    if len(y) != n:
        raise ValueError(f"labels have {len(y)} rows but h has {n}")
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

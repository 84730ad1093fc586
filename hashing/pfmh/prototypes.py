"""PFMH prototypes: client (Eq. 5), centralized (Eq. 6) and completion (Eq. 7).

Pure numpy/torch functions, no Flower. Prototypes live in the k-dim space of the
integrated representation H (:mod:`hashing.pfmh.model`), not in code space.

Eqs. 5 and 6 are the prototype exchange shared with FedHAP (:mod:`hashing.prototypes`)
with every mean scaled to unit L2 norm (``normalise=True``):

* Eq. 5 (client): for every class j the client holds, the mean of H over its samples
  of class j, scaled to unit L2 norm. A class whose mean is numerically zero (norm <
  ``DEGENERATE_NORM``, which can only happen when unit vectors cancel exactly) has
  no direction; our choice is to leave it out, so the server completes it like a
  missing class.
* Eq. 6 (server): for every class j, the mean over the clients holding j (the set
  M_j) of their prototypes P_i^j, then unit norm; ``weighting`` as in the core. A
  class whose client prototypes cancel exactly is likewise left out.

What is PFMH's own:

* Eq. 7 (server): each client's set is completed with the centralized prototype of
  every class it misses; its own prototypes are kept as they are. A class held by
  nobody stays absent from every set. The client then receives its completed
  personal set P_i and the centralized set P_bar (Algorithm 1, line 13).
* Validation requires unit-norm prototypes (``unit_norm=True``).

Without prototype enhancement (ablation w/o-PE) :func:`aggregate_and_enhance` is
called with ``complete=False``: the centralized set is still computed and sent, but
each client's personal set is only its own classes (FedProto-like exchange).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from hashing.prototypes import (
    ClassPrototypes,
    PrototypeSet,
    class_prototypes,
    pooled_prototypes,
    prototype_problem,
)


def client_prototypes(
    h: torch.Tensor | np.ndarray,
    labels: torch.Tensor | np.ndarray,
    *,
    num_classes: int,
) -> ClassPrototypes:
    """Eq. 5: unit-norm class means of H (n, k) for the classes the client holds.

    :func:`hashing.prototypes.class_prototypes` with ``normalise=True``.
    """
    return class_prototypes(h, labels, num_classes=num_classes, normalise=True)


def centralized_prototypes(
    uploads: Sequence[ClassPrototypes],
    *,
    num_classes: int,
    dim: int,
    weighting: str = "mean",
) -> PrototypeSet:
    """Eq. 6: per-class mean over the clients holding the class, then unit norm.

    :func:`hashing.prototypes.pooled_prototypes` with ``normalise=True``.
    """
    return pooled_prototypes(
        uploads,
        num_classes=num_classes,
        dim=dim,
        weighting=weighting,
        normalise=True,
    )


def complete_prototypes(
    own: ClassPrototypes | PrototypeSet, centralized: PrototypeSet
) -> PrototypeSet:
    """Eq. 7: fill the classes a client misses with the centralized prototypes.

    Parameters
    ----------
    own : ClassPrototypes or PrototypeSet
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


def personal_prototypes(
    own: ClassPrototypes, centralized: PrototypeSet, *, complete: bool = True
) -> PrototypeSet:
    """Return the personal set a client receives: Eq. 7, or its own (w/o-PE).

    Parameters
    ----------
    own : ClassPrototypes
        The client's latest upload P_i.
    centralized : PrototypeSet
        P_bar from :func:`centralized_prototypes`.
    complete : bool
        Apply Eq. 7. ``False`` is the w/o-PE ablation: a copy of ``own``.
    """
    if complete:
        return complete_prototypes(own, centralized)
    return PrototypeSet(classes=own.classes.copy(), vectors=own.vectors.copy())


def aggregate_and_enhance(
    uploads: Sequence[ClassPrototypes],
    *,
    num_classes: int,
    dim: int,
    weighting: str = "mean",
    complete: bool = True,
) -> tuple[PrototypeSet, list[PrototypeSet]]:
    """Server step of Algorithm 1 (lines 8-11): Eq. 6, then Eq. 7 per client.

    Parameters
    ----------
    uploads : sequence of ClassPrototypes
        Validated uploads, one per client, in a fixed order.
    num_classes : int
        Size of the label space C.
    dim : int
        Prototype dimension k.
    weighting : str
        See :func:`hashing.prototypes.pooled_prototypes`.
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
    personal = [personal_prototypes(up, central, complete=complete) for up in uploads]
    return central, personal


def require_valid_prototypes(
    protos: ClassPrototypes | PrototypeSet,
    *,
    num_classes: int,
    dim: int,
    name: str = "prototypes",
) -> None:
    """Raise ``ValueError`` if a PFMH set is unusable (unit norm required).

    Parameters
    ----------
    protos : ClassPrototypes or PrototypeSet
        The set to check.
    num_classes : int
        Size of the label space C.
    dim : int
        Expected prototype dimension k.
    name : str
        What the set is, for the message (e.g. ``"global_prototypes"``).
    """
    problem = prototype_problem(
        protos, num_classes=num_classes, dim=dim, unit_norm=True
    )
    if problem is not None:
        raise ValueError(
            f"{name}: {problem}; accepted are unit-norm float ({dim},) vectors for "
            f"unique class ids in 0..{num_classes - 1}"
        )

"""FedHAP's own part of the prototype exchange: signed global prototypes.

The client (Eq. 5) and server (Eq. 6) means are the shared
:mod:`hashing.prototypes` core, over relaxed codes and without normalisation.
What is FedHAP's own: the server takes the sign of every class average (ties, an
exact 0, go to +1) and broadcasts those codes; and, under DPHE, the per-class sums
travel in a fixed ``(C, bits + 1)`` layout (:func:`prototype_sum_vector`) so that
the server only ever sees their total (:func:`prototypes_from_sums`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hashing.prototypes import ClassPrototypes, PrototypeSet, pooled_prototypes


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


def signed(protos: PrototypeSet) -> GlobalPrototypes:
    """Keep the relaxed averages and add their signs (ties, an exact 0, -> +1)."""
    return GlobalPrototypes(
        classes=protos.classes,
        relaxed=protos.vectors,
        codes=np.where(protos.vectors >= 0, 1.0, -1.0).astype(np.float32),
    )


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
        Validated uploads (see :func:`hashing.prototypes.prototype_problem`), in a
        fixed order.
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
    return signed(
        pooled_prototypes(
            uploads, num_classes=num_classes, dim=bits, weighting=weighting
        )
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
    out[protos.classes, :bits] = protos.vectors
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
    return signed(PrototypeSet(classes=present.astype(np.int64), vectors=relaxed))

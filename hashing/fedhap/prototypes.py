"""FedHAP's own part of the prototype exchange: signed global prototypes.

The client (Eq. 5) and server (Eq. 6) means are the shared
:mod:`hashing.prototypes` core, over relaxed codes and without normalisation.
What is FedHAP's own: the server takes the sign of every class average (ties, an
exact 0, go to +1) and broadcasts those codes; and, under DPHE, the per-class sums
travel in a fixed ``(C, bits + 1)`` layout (:func:`prototype_sum_vector`) so that
the server only ever sees their total (:func:`prototypes_from_fixed_point`).

The DPHE sum layout and its range. A relaxed code ``b`` is the hashing network's
raw last-layer output (the paper's ``b_j in R^K``; :mod:`hashing.models` has no
``tanh``): nothing bounds it, the quantization loss (Eq. 7) only pulls it towards
``+-1``. Class means of trained FedHAP codes do exceed 1 (measured on digits, 16 and
32 bits, 5 rounds: 14-33 % of the class-mean entries, at most 2.1 in magnitude). So
the layout is not clipped at ``dphe.clip`` (a bound for model updates): its entries
are encoded exactly up to :data:`PROTOTYPE_BOUND`, a constant about 2000 times the
largest class mean measured; a client with a larger class mean refuses to encode it
(:func:`prototype_sum_vector` raises, naming the class and the value) instead of
clipping it. The holder indicator is exactly 1, so its fixed-point code is the
integer ``2**scale_bits`` and the decrypted holder count is an exact integer
(:func:`prototypes_from_fixed_point` checks it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hashing.prototypes import ClassPrototypes, PrototypeSet, pooled_prototypes

PROTOTYPE_BOUND = 4096.0
"""Largest ``|entry|`` of the DPHE prototype layout (``2**12``; see the module
docstring): class-mean entries up to it are encoded without clipping, a larger one is
refused by :func:`prototype_sum_vector`. Holder indicators are 1. Under DPHE it is the
prototype stream's ``FixedPointParams.clip`` (:mod:`strategies.dphe.setup`), so one
summand is at most ``4096 * 2**scale_bits`` and a slot sum of ``max_summands`` of
them fits ``(2 * 4096 * 2**scale_bits * max_summands).bit_length()`` bits, checked
before the run starts."""


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
    protos: ClassPrototypes,
    *,
    num_classes: int,
    bits: int,
    bound: float = PROTOTYPE_BOUND,
) -> np.ndarray:
    """Lay out a client's prototypes so that their sum over clients gives Eq. (6).

    Row ``c`` of the ``(C, bits + 1)`` layout holds the class mean and a holder
    indicator 1 for every class the client holds, zeros elsewhere. Summed over
    clients (e.g. under DPHE), row ``c`` holds the sum of the holders' means and the
    number of holders: :func:`prototypes_from_fixed_point` (or, for plain float
    sums, :func:`prototypes_from_sums`) divides them (the ``mean`` weighting: every
    holding client counts once).

    Parameters
    ----------
    protos : ClassPrototypes
        The client's relaxed class means (Eq. 5), finite.
    num_classes : int
        Size of the label space C.
    bits : int
        Code length.
    bound : float
        Largest accepted ``|entry|`` (:data:`PROTOTYPE_BOUND`, the range the DPHE
        fixed point encodes without clipping).

    Returns
    -------
    numpy.ndarray
        ``(C * (bits + 1),)`` float64, every entry in ``[-bound, bound]``.

    Raises
    ------
    ValueError
        If a class-mean entry is not finite or exceeds ``bound`` in magnitude
        (it would be clipped by the fixed point: refused, naming the class and the
        value).
    """
    vectors = np.asarray(protos.vectors, dtype=np.float64)
    magnitude = np.abs(vectors)
    if vectors.size and not (magnitude <= bound).all():
        row, bit = np.unravel_index(
            int(np.argmax(np.where(np.isfinite(magnitude), magnitude, np.inf))),
            vectors.shape,
        )
        raise ValueError(
            f"class {int(protos.classes[row])} has a relaxed class-mean entry "
            f"{vectors[row, bit]!r} (bit {int(bit)}) outside [-{bound}, {bound}], the "
            "range the DPHE prototype sums encode exactly (PROTOTYPE_BOUND in "
            "hashing/fedhap/prototypes.py); refused rather than clipped"
        )
    out = np.zeros((num_classes, bits + 1), dtype=np.float64)
    out[protos.classes, :bits] = vectors
    out[protos.classes, bits] = 1.0
    return out.ravel()


def prototypes_from_sums(
    sums: np.ndarray, *, num_classes: int, bits: int
) -> GlobalPrototypes:
    """Eq. (6) from summed (plain, float) :func:`prototype_sum_vector` outputs.

    Parameters
    ----------
    sums : numpy.ndarray
        ``(C * (bits + 1),)`` sum over clients; the holder counts (the last column
        of each row) are whole numbers. Encrypted sums go through
        :func:`prototypes_from_fixed_point`, which checks they are exact.

    Returns
    -------
    GlobalPrototypes
        Only the classes held by at least one client.
    """
    table = np.asarray(sums, dtype=np.float64).reshape(num_classes, bits + 1)
    holders = np.rint(table[:, bits])
    present = np.nonzero(holders >= 1)[0]
    relaxed = (table[present, :bits] / holders[present, None]).astype(np.float32)
    return signed(PrototypeSet(classes=present.astype(np.int64), vectors=relaxed))


def prototypes_from_fixed_point(
    sums: np.ndarray,
    *,
    num_classes: int,
    bits: int,
    scale_bits: int,
    max_holders: int | None = None,
) -> GlobalPrototypes:
    """Eq. (6) from the decrypted integer sums of the DPHE prototype stream.

    Every client encodes its layout entry ``x`` as ``round(x * 2**scale_bits)``
    (unclipped, :data:`PROTOTYPE_BOUND`); the holder indicator 1 as exactly
    ``2**scale_bits``. So a holder count is ``sum >> scale_bits`` with no
    remainder, and a class mean is within ``2**-(scale_bits + 1)`` of Eq. (6) on the
    clients' values (each holder's rounding error is at most half a unit; the mean
    of ``n`` such errors is at most half a unit too), before the float32 cast.

    Parameters
    ----------
    sums : numpy.ndarray
        ``(C * (bits + 1),)`` integer fixed-point sums, offsets removed (the
        keyholder's decrypted aggregate without its weight coordinate).
    num_classes : int
        Size of the label space C.
    bits : int
        Code length.
    scale_bits : int
        The prototype stream's fractional bits.
    max_holders : int, optional
        Most clients that can hold a class (the number of contributors).

    Returns
    -------
    GlobalPrototypes
        Only the classes held by at least one client.

    Raises
    ------
    ValueError
        If ``sums`` are not integers of the layout's shape, or a holder count is
        not a whole number in ``[0, max_holders]`` (corrupt or mis-encoded sums).
    """
    values = np.asarray(sums)
    if values.shape != (num_classes * (bits + 1),) or values.dtype.kind not in "iu":
        raise ValueError(
            f"prototype sums must be ({num_classes * (bits + 1)},) integers, got "
            f"{values.dtype} {values.shape}"
        )
    table = values.astype(np.int64).reshape(num_classes, bits + 1)
    unit = 1 << int(scale_bits)
    raw = table[:, bits]
    holders = raw >> int(scale_bits)
    bad = np.nonzero((raw & (unit - 1)) | (holders < 0))[0]
    if max_holders is not None:
        bad = np.union1d(bad, np.nonzero(holders > max_holders)[0])
    if bad.size:
        c = int(bad[0])
        most = "" if max_holders is None else f" <= {max_holders}"
        raise ValueError(
            f"holder count of class {c} decodes to {int(raw[c])} / 2**{scale_bits}, "
            f"not a whole number >= 0{most}: the prototype sums are corrupt or "
            "were not encoded with prototype_sum_vector"
        )
    present = np.nonzero(holders >= 1)[0]
    means = table[present, :bits].astype(np.float64) / float(unit)
    relaxed = (means / holders[present, None]).astype(np.float32)
    return signed(PrototypeSet(classes=present.astype(np.int64), vectors=relaxed))

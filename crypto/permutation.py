"""Secret permutations derived from 32-byte seeds with a cryptographic PRF.

DPHE needs two kinds of permutation (paper, Sections 2.3-2.4): the user-shared
permutation phi (known to every user and to the keyholder, never to the aggregator)
and one user-aggregator permutation phi_n per user (known to that user and to the
aggregator). Rather than shipping permutation matrices, the key generator hands out
32-byte seeds, and every party expands a seed into the permutation it needs with
:func:`keyed_permutation`. This keeps key bundles small and lets the model dimension
be chosen after key generation.

Construction: SHAKE-256 of ``seed || label (UTF-8) || size (8 bytes, big-endian)``
yields ``8 * size`` bytes, read as ``size`` big-endian uint64 keys; the permutation
is the stable argsort of those keys. Ties (probability about ``size**2 / 2**65``)
are broken by index, so the result is always a permutation and is deterministic per
``(seed, label, size)``. The seed has a fixed length, and the size a fixed width, so
the encoding of the three inputs is unambiguous and different labels (``"phi"``,
``"phi_n"``) give independent permutations from the same seed.

No Flower imports.
"""

from __future__ import annotations

import hashlib

import numpy as np

SEED_BYTES = 32
"""Length in bytes of every permutation seed."""


def keyed_permutation(seed: bytes, size: int, label: str) -> np.ndarray:
    """Expand a secret seed into a pseudo-random permutation of ``range(size)``.

    Parameters
    ----------
    seed : bytes
        Secret seed, exactly :data:`SEED_BYTES` (32) bytes.
    size : int
        Number of elements permuted, ``>= 0``.
    label : str
        Domain-separation label, non-empty (``"phi"`` for the user-shared
        permutation, ``"phi_n"`` for a user-aggregator permutation).

    Returns
    -------
    np.ndarray
        ``(size,)`` int64 permutation ``perm``; the element at original position
        ``i`` moves to position ``perm[i]``.

    Raises
    ------
    ValueError
        If the seed has the wrong length, ``size`` is negative or the label is empty.
    """
    if not isinstance(seed, bytes | bytearray) or len(seed) != SEED_BYTES:
        raise ValueError(f"seed must be {SEED_BYTES} bytes, got {_describe(seed)}")
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 0:
        raise ValueError(f"size must be an integer >= 0, got {size!r}")
    if not isinstance(label, str) or not label:
        raise ValueError(f"label must be a non-empty string, got {label!r}")
    size = int(size)
    message = bytes(seed) + label.encode("utf-8") + size.to_bytes(8, "big")
    stream = hashlib.shake_256(message).digest(8 * size)
    keys = np.frombuffer(stream, dtype=">u8")
    return np.argsort(keys, kind="stable").astype(np.int64)


def inverse_permutation(perm: np.ndarray) -> np.ndarray:
    """Invert a permutation.

    Parameters
    ----------
    perm : np.ndarray
        ``(size,)`` integer permutation of ``range(size)``.

    Returns
    -------
    np.ndarray
        ``(size,)`` int64 ``inv`` with ``inv[perm[i]] == i``.
    """
    inverse = np.empty(len(perm), dtype=np.int64)
    inverse[perm] = np.arange(len(perm), dtype=np.int64)
    return inverse


def _describe(value: object) -> str:
    if isinstance(value, bytes | bytearray):
        return f"{len(value)} bytes"
    return type(value).__name__

"""Binary hash codes: binarization, bit packing and Hamming distances.

Conventions used across the project
-----------------------------------
* A code of ``bits`` bits is an ``int8`` row of values in {-1, +1}.
* Packed codes are ``uint64`` arrays of shape ``(n, ceil(bits / 64))``. Bit ``j`` of
  a code is bit ``j % 64`` (least significant first) of word ``j // 64``; a set bit
  means +1. Padding bits beyond ``bits`` are always zero, so they never add Hamming
  distance.
* The byte form (:func:`pack_bytes`) is ``uint8`` of shape ``(n, ceil(bits / 8))``
  with the same bit order (``np.packbits(..., bitorder="little")``); it is the
  compact form for shipping codes in messages.

Pure numpy (>= 2.0, for ``np.bitwise_count``); no torch, no Flower.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

WORD_BITS = 64


def n_words(bits: int) -> int:
    """Return the number of 64-bit words that hold ``bits`` bits.

    Parameters
    ----------
    bits : int
        Code length in bits, >= 1.

    Returns
    -------
    int
        ``ceil(bits / 64)``.

    """
    if bits < 1:
        raise ValueError(f"bits must be >= 1, got {bits}")
    return -(-bits // WORD_BITS)


def distance_dtype(bits: int) -> np.dtype:
    """Return the smallest unsigned dtype for Hamming distances of ``bits`` bits.

    Parameters
    ----------
    bits : int
        Code length in bits (for packed codes: ``64 * n_words``).

    Returns
    -------
    numpy.dtype
        ``uint8`` when ``bits <= 255``, else ``uint16``.

    """
    return np.dtype(np.uint8) if bits <= 255 else np.dtype(np.uint16)


def sign_codes(x: ArrayLike) -> NDArray[np.int8]:
    """Binarize real-valued network outputs into {-1, +1} codes.

    Parameters
    ----------
    x : array_like
        (n, bits) real values (e.g. tanh outputs). NaN is rejected.

    Returns
    -------
    numpy.ndarray
        (n, bits) int8 in {-1, +1}. ``sign(0)`` is taken as +1 (so every value maps
        to a valid bit; ``np.sign`` would give 0).

    """
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise ValueError(f"expected a 2-D (n, bits) array, got shape {arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"expected a real-valued array, got dtype {arr.dtype}")
    if arr.dtype.kind == "f" and np.isnan(arr).any():
        raise ValueError("codes contain NaN")
    return np.where(arr >= 0, np.int8(1), np.int8(-1))


def _as_bits(codes: ArrayLike) -> NDArray[np.bool_]:
    """Validate (n, bits) codes in {-1, +1} (or bool) and return bool (True = +1)."""
    arr = np.asarray(codes)
    if arr.ndim != 2:
        raise ValueError(f"expected a 2-D (n, bits) array, got shape {arr.shape}")
    if arr.shape[1] < 1:
        raise ValueError("codes must have at least one bit")
    if arr.dtype == np.bool_:
        return arr
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"expected codes in {{-1, +1}} or bool, got dtype {arr.dtype}")
    positive = arr == 1
    if not np.all(positive | (arr == -1)):
        raise ValueError("codes must contain only -1 and +1 (binarize with sign_codes)")
    return positive


def pack_bytes(codes: ArrayLike) -> NDArray[np.uint8]:
    """Pack {-1, +1} codes into bytes, 8 bits per byte.

    Parameters
    ----------
    codes : array_like
        (n, bits) values in {-1, +1} (any real dtype) or bool with True = +1.

    Returns
    -------
    numpy.ndarray
        (n, ceil(bits / 8)) uint8; bit ``j`` is bit ``j % 8`` of byte ``j // 8``,
        set for +1; padding bits are zero.

    """
    return np.packbits(_as_bits(codes), axis=1, bitorder="little")


def unpack_bytes(packed: ArrayLike, bits: int) -> NDArray[np.int8]:
    """Inverse of :func:`pack_bytes`.

    Parameters
    ----------
    packed : array_like
        (n, ceil(bits / 8)) uint8.
    bits : int
        Code length in bits.

    Returns
    -------
    numpy.ndarray
        (n, bits) int8 in {-1, +1}.

    Raises
    ------
    ValueError
        If the shape or dtype does not match ``bits`` or a padding bit is set.

    """
    if bits < 1:
        raise ValueError(f"bits must be >= 1, got {bits}")
    arr = np.asarray(packed)
    n_bytes = -(-bits // 8)
    if arr.dtype != np.uint8 or arr.ndim != 2 or arr.shape[1] != n_bytes:
        raise ValueError(
            f"expected a (n, {n_bytes}) uint8 array for {bits} bits, "
            f"got {arr.dtype} {arr.shape}"
        )
    unpacked = np.unpackbits(arr, axis=1, bitorder="little")
    if unpacked[:, bits:].any():
        raise ValueError("padding bits beyond `bits` must be zero")
    return (unpacked[:, :bits].astype(np.int8) << 1) - np.int8(1)


def pack_codes(codes: ArrayLike) -> NDArray[np.uint64]:
    """Pack {-1, +1} codes into 64-bit words for fast Hamming distances.

    Parameters
    ----------
    codes : array_like
        (n, bits) values in {-1, +1} (any real dtype) or bool with True = +1.

    Returns
    -------
    numpy.ndarray
        (n, ceil(bits / 64)) uint64, C-contiguous; bit ``j`` is bit ``j % 64`` of
        word ``j // 64``, set for +1; padding bits are zero.

    Raises
    ------
    ValueError
        If ``codes`` is not 2-D, has no bits, or holds values other than -1 and +1.

    """
    as_bytes = pack_bytes(codes)
    n, n_bytes = as_bytes.shape
    words = -(-n_bytes // 8)
    padded = np.zeros((n, words * 8), dtype=np.uint8)
    padded[:, :n_bytes] = as_bytes
    return np.ascontiguousarray(padded.view("<u8").astype(np.uint64, copy=False))


def _check_packed(packed: ArrayLike, name: str = "packed") -> NDArray[np.uint64]:
    arr = np.asarray(packed)
    if arr.dtype != np.uint64 or arr.ndim != 2 or arr.shape[1] < 1:
        raise ValueError(
            f"{name} must be a 2-D (n, words) uint64 array from pack_codes, "
            f"got {arr.dtype} {arr.shape}"
        )
    return arr


def unpack_codes(packed: ArrayLike, bits: int) -> NDArray[np.int8]:
    """Inverse of :func:`pack_codes`.

    Parameters
    ----------
    packed : array_like
        (n, ceil(bits / 64)) uint64.
    bits : int
        Code length in bits.

    Returns
    -------
    numpy.ndarray
        (n, bits) int8 in {-1, +1}.

    Raises
    ------
    ValueError
        If the shape does not match ``bits`` or a padding bit is set.

    """
    arr = _check_packed(packed)
    words = n_words(bits)
    if arr.shape[1] != words:
        raise ValueError(f"{bits} bits need {words} words per code, got {arr.shape[1]}")
    as_bytes = np.ascontiguousarray(arr.astype("<u8", copy=False)).view(np.uint8)
    unpacked = np.unpackbits(as_bytes, axis=1, bitorder="little")
    if unpacked[:, bits:].any():
        raise ValueError("padding bits beyond `bits` must be zero")
    return (unpacked[:, :bits].astype(np.int8) << 1) - np.int8(1)


def hamming_distance(
    query_packed: ArrayLike, db_packed: ArrayLike
) -> NDArray[np.unsignedinteger]:
    """All-pairs Hamming distances between packed codes (XOR + popcount).

    Builds the full (nq, ndb) matrix: meant for small inputs. For large databases
    use :mod:`hashing.retrieval`, which works in blocks.

    Parameters
    ----------
    query_packed : array_like
        (nq, words) uint64 from :func:`pack_codes`.
    db_packed : array_like
        (ndb, words) uint64 with the same number of words.

    Returns
    -------
    numpy.ndarray
        (nq, ndb) distances in bits; uint8 when ``64 * words <= 255``, else uint16.

    """
    q = _check_packed(query_packed, "query_packed")
    db = _check_packed(db_packed, "db_packed")
    if q.shape[1] != db.shape[1]:
        raise ValueError(
            f"query and database codes differ in words: {q.shape[1]} vs {db.shape[1]}"
        )
    dtype = distance_dtype(WORD_BITS * q.shape[1])
    out = np.zeros((q.shape[0], db.shape[0]), dtype=dtype)
    for j in range(q.shape[1]):
        out += np.bitwise_count(q[:, j, None] ^ db[None, :, j]).astype(
            dtype, copy=False
        )
    return out

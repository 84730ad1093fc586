"""Naive baseline: element-wise Paillier of the dense quantized update.

Every one of the ``D + 1`` encoded coordinates (the update and the weight, with the
same fixed-point and offset encoding as DPHE, :mod:`crypto.fixed_point`) is encrypted
on its own: no packing, no sparsity, no permutation (paper, Eq. 2). This is the
cost DPHE is compared against; it shares the encoding and the decoding checks with
DPHE so that both decrypt to the same integer sums.

No Flower imports.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from gmpy2 import mpz
from phe import paillier

from crypto.dphe import DPHEParams
from crypto.fixed_point import quantize, remove_offsets


def naive_encrypt(
    update: np.ndarray,
    *,
    weight: int,
    public_key: paillier.PaillierPublicKey,
    params: DPHEParams,
) -> list[int]:
    """Encrypt every encoded coordinate of an update separately.

    Parameters
    ----------
    update : np.ndarray
        ``(D,)`` real update, finite, ``D == params.dimension``.
    weight : int
        The user's weight, ``1 <= weight <= max_weight``.
    public_key : PaillierPublicKey
        Encryption key.
    params : DPHEParams
        Only ``dimension`` and ``fixed_point`` are used.

    Returns
    -------
    list of int
        ``D + 1`` ciphertexts of ``q_i + offset``.

    Raises
    ------
    ValueError
        If the update has the wrong shape or is not finite, or the weight is out of
        range.
    """
    values = np.asarray(update)
    if values.ndim != 1 or values.shape[0] != params.dimension:
        raise ValueError(
            f"update must have shape ({params.dimension},), got {values.shape}"
        )
    encoded = quantize(values, weight=weight, params=params.fixed_point) + params.offset
    return [public_key.raw_encrypt(value) for value in encoded.tolist()]


def naive_aggregate(
    ciphertexts: Sequence[Sequence[int]], public_key: paillier.PaillierPublicKey
) -> list[int]:
    """Multiply users' ciphertext vectors element-wise (their plaintexts add up).

    Parameters
    ----------
    ciphertexts : sequence of sequence of int
        ``(N, D + 1)`` one ciphertext list per user, all of equal length.
    public_key : PaillierPublicKey
        The key they were made with.

    Returns
    -------
    list of int
        ``D + 1`` ciphertexts of the sums.

    Raises
    ------
    ValueError
        If no user is given, the lengths differ or a ciphertext is outside
        ``(0, n**2)``.
    """
    if not ciphertexts:
        raise ValueError("no ciphertext lists to aggregate")
    length = len(ciphertexts[0])
    nsquare = mpz(public_key.nsquare)
    totals = [mpz(1)] * length
    for user, row in enumerate(ciphertexts):
        if len(row) != length:
            raise ValueError(
                f"user {user} sent {len(row)} ciphertexts, user 0 sent {length}"
            )
        for index, ciphertext in enumerate(row):
            value = mpz(ciphertext)
            if not 0 < value < nsquare:
                raise ValueError(f"user {user} ciphertext {index} is outside (0, n**2)")
            totals[index] = totals[index] * value % nsquare
    return [int(total) for total in totals]


def naive_decrypt(
    ciphertexts: Sequence[int],
    private_key: paillier.PaillierPrivateKey,
    summands: int,
    params: DPHEParams,
) -> np.ndarray:
    """Decrypt element-wise sums and remove the offsets.

    Parameters
    ----------
    ciphertexts : sequence of int
        ``D + 1`` ciphertexts from :func:`naive_aggregate`.
    private_key : PaillierPrivateKey
        Decryption key.
    summands : int
        Number of users summed ``S``.
    params : DPHEParams
        The encoding.

    Returns
    -------
    np.ndarray
        ``(D + 1,)`` int64 sums, as :meth:`crypto.keyholder.Keyholder.decrypt_aggregate`
        returns (feed to :func:`crypto.keyholder.decode_average`).

    Raises
    ------
    ValueError
        On a wrong length, or a sum outside ``[-S * B, S * B]`` (overflow or
        corruption).
    """
    if len(ciphertexts) != params.padded_dimension:
        raise ValueError(
            f"expected {params.padded_dimension} ciphertexts, got {len(ciphertexts)}"
        )
    plaintexts = [private_key.raw_decrypt(int(c)) for c in ciphertexts]
    return remove_offsets(plaintexts, summands=summands, params=params.fixed_point)

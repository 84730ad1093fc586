"""The DPHE keyholder: decrypts and un-permutes aggregated sums only.

The keyholder holds the Paillier secret key and the user-shared permutation phi
(Algorithm 1, step 6: "A asks G for decrypting and reordering"). It only decrypts an
:class:`~crypto.dphe.EncryptedSum` of at least ``min_contributors >= 3`` users: with
N >= 3 no user can recover another's update from the average (paper, Section 2.5).

Checks before anything is released (each refusal is an :class:`AggregateRefused`):
the claimed contributor count matches the sum's ``summands`` and is within
``[min_contributors, max_summands]``; the key id is the keyholder's; the parameters
are valid for its key; block ids are in range and distinct; every ciphertext is in
``(0, n**2)``; after decryption no plaintext has stray bits above its slots, every
slot sum lies in ``[-S * B, S * B]``, and the total weight lies in
``[S, S * max_weight]`` (each user has weight >= 1, so a sum padded with fewer
real users than claimed is refused when weights are bounded).

Limitation (semi-honest model, as in the paper): the keyholder cannot tell whether the
aggregator asks for two sums that differ by one user; it trusts the aggregator to
follow the protocol, and the aggregator trusts it not to collude.

No Flower imports.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from crypto.dphe import DPHEParams, EncryptedSum
from crypto.fixed_point import remove_offsets
from crypto.keys import KeyholderBundle
from crypto.packing import unpack

MIN_CONTRIBUTORS = 3
"""The paper's N >= 3 condition: fewer users would expose individual updates."""


class AggregateRefused(ValueError):
    """The keyholder refused to decrypt an aggregate (the message says why)."""


@runtime_checkable
class KeyholderLike(Protocol):
    """Anything that decrypts aggregates: :class:`Keyholder` or a remote client."""

    def decrypt_aggregate(
        self, encrypted_sum: EncryptedSum, contributors: int
    ) -> np.ndarray:
        """Decrypt and un-permute an encrypted sum of ``contributors`` users.

        Parameters
        ----------
        encrypted_sum : EncryptedSum
            The aggregator's result.
        contributors : int
            Number of users summed.

        Returns
        -------
        np.ndarray
            ``(D + 1,)`` int64 sums in original coordinate order (see
            :meth:`Keyholder.decrypt_aggregate`).
        """
        ...


class Keyholder:
    """Decrypt and reorder aggregated DPHE sums.

    Parameters
    ----------
    bundle : KeyholderBundle
        Secret key and phi seed.
    min_contributors : int
        Smallest number of users an aggregate must have, ``>= 3``.

    Raises
    ------
    ValueError
        If ``min_contributors < 3``.
    """

    def __init__(
        self, bundle: KeyholderBundle, *, min_contributors: int = MIN_CONTRIBUTORS
    ) -> None:
        if (
            isinstance(min_contributors, bool)
            or not isinstance(min_contributors, int)
            or min_contributors < MIN_CONTRIBUTORS
        ):
            raise ValueError(
                f"min_contributors must be an integer >= {MIN_CONTRIBUTORS} (DPHE "
                f"needs N >= 3 users), got {min_contributors!r}"
            )
        self._bundle = bundle
        self._private_key = bundle.private_key
        self.min_contributors = min_contributors

    @property
    def key_id(self) -> bytes:
        """32-byte identifier of the keyholder's public key."""
        return self._bundle.key_id

    @property
    def key_bits(self) -> int:
        """Bit length of the Paillier modulus."""
        return self._bundle.key_bits

    def decrypt_aggregate(
        self, encrypted_sum: EncryptedSum, contributors: int
    ) -> np.ndarray:
        """Decrypt an encrypted sum, remove offsets and undo phi.

        Parameters
        ----------
        encrypted_sum : EncryptedSum
            The aggregator's result.
        contributors : int
            Number of users summed ``S``; must equal ``encrypted_sum.summands``.

        Returns
        -------
        np.ndarray
            ``(D + 1,)`` int64 in original coordinate order: entries ``0 .. D-1``
            are sums of ``q_i`` (units of ``2**-scale_bits``), entry ``D`` is the
            total weight. Feed it to :func:`decode_average`.

        Raises
        ------
        AggregateRefused
            On any failed check (see the module docstring); nothing is returned.
        """
        if not isinstance(encrypted_sum, EncryptedSum):
            raise AggregateRefused(
                f"expected an EncryptedSum, got {type(encrypted_sum).__name__}"
            )
        params = encrypted_sum.params
        summands = encrypted_sum.summands
        if isinstance(contributors, bool) or not isinstance(contributors, int):
            raise AggregateRefused(
                f"contributors must be an integer, got {contributors!r}"
            )
        if contributors < self.min_contributors:
            raise AggregateRefused(
                f"{contributors} contributors, fewer than min_contributors = "
                f"{self.min_contributors}: decrypting would expose individual updates"
            )
        if contributors != summands:
            raise AggregateRefused(
                f"claimed {contributors} contributors but the sum has {summands} "
                "summands"
            )
        if not isinstance(params, DPHEParams):
            raise AggregateRefused("encrypted_sum.params must be DPHEParams")
        try:
            params.validate(self.key_bits)
        except ValueError as error:
            raise AggregateRefused(
                f"parameters invalid for this key: {error}"
            ) from None
        if summands > params.fixed_point.max_summands:
            raise AggregateRefused(
                f"{summands} summands exceed max_summands = "
                f"{params.fixed_point.max_summands}: slots may have overflowed"
            )
        if encrypted_sum.key_id != self.key_id:
            raise AggregateRefused("the sum was encrypted under another key")
        block_ids = np.asarray(encrypted_sum.block_ids)
        if block_ids.ndim != 1 or not np.issubdtype(block_ids.dtype, np.integer):
            raise AggregateRefused("block ids must be a 1-D integer array")
        if len(block_ids) != len(encrypted_sum.ciphertexts):
            raise AggregateRefused(
                f"{len(block_ids)} block ids for {len(encrypted_sum.ciphertexts)} "
                "ciphertexts"
            )
        if block_ids.size and (
            block_ids.min() < 0 or block_ids.max() >= params.num_blocks
        ):
            raise AggregateRefused(f"block ids outside [0, {params.num_blocks})")
        if np.unique(block_ids).size != block_ids.size:
            raise AggregateRefused("duplicated block ids")
        nsquare = self._bundle.n * self._bundle.n
        for ciphertext in encrypted_sum.ciphertexts:
            if (
                isinstance(ciphertext, bool)
                or not isinstance(ciphertext, int)
                or not 0 < ciphertext < nsquare
            ):
                raise AggregateRefused("a ciphertext is outside (0, n**2)")

        packing = params.packing
        slot_bits = params.slot_bits
        phi_space = np.zeros(params.num_blocks * packing, dtype=np.int64)
        decrypt = self._private_key.raw_decrypt
        for block, ciphertext in zip(
            block_ids.tolist(), encrypted_sum.ciphertexts, strict=True
        ):
            try:
                slots = unpack(decrypt(int(ciphertext)), packing, slot_bits)
                values = remove_offsets(
                    slots, summands=summands, params=params.fixed_point
                )
            except ValueError as error:
                raise AggregateRefused(f"block {block}: {error}") from None
            phi_space[block * packing : (block + 1) * packing] = values
        sums = phi_space[self._bundle.phi(params.padded_dimension)]
        total_weight = int(sums[-1])
        max_weight = params.fixed_point.max_weight
        if not summands <= total_weight <= summands * max_weight:
            raise AggregateRefused(
                f"total weight {total_weight} outside [{summands}, "
                f"{summands * max_weight}] for {summands} summands: some summand "
                "carried no weight (padded sum or corruption)"
            )
        return sums


def decode_average(sums: np.ndarray, params: DPHEParams) -> tuple[np.ndarray, int]:
    """Turn decrypted sums into the weighted average update.

    Parameters
    ----------
    sums : np.ndarray
        ``(D + 1,)`` integer sums from :meth:`Keyholder.decrypt_aggregate`.
    params : DPHEParams
        The aggregation's parameters.

    Returns
    -------
    average : np.ndarray
        ``(D,)`` float64 ``sums[:D] / 2**scale_bits / total_weight`` (model units):
        the weighted average of the clipped updates, within
        ``N * 0.5 / 2**scale_bits / total_weight`` per coordinate for N users.
    total_weight : int
        ``sums[D]``, the sum of the users' weights.

    Raises
    ------
    ValueError
        If ``sums`` has the wrong shape or ``total_weight <= 0``.
    """
    values = np.asarray(sums)
    if values.shape != (params.padded_dimension,):
        raise ValueError(
            f"sums must have shape ({params.padded_dimension},), got {values.shape}"
        )
    if not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f"sums must be integers, got dtype {values.dtype}")
    total_weight = int(values[-1])
    if total_weight <= 0:
        raise ValueError(f"total weight must be > 0, got {total_weight}")
    average = values[:-1].astype(np.float64) / 2.0**params.fixed_point.scale_bits
    return average / total_weight, total_weight

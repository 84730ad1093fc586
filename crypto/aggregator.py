"""The DPHE aggregator (the server): sums encrypted updates without decrypting.

The aggregator holds the public key and every user's seed for phi_n, never the
secret key and never the user-shared permutation phi (Algorithm 1, step 5). For each
user it undoes phi_n, which maps the user's block ids back to phi-space blocks, and
multiplies ciphertexts per phi-space block modulo ``n**2`` (Paillier: the product
decrypts to the sum). A user's shards are disjoint, so each user is one summand.

A block that some contributors did not touch is filled for each of them with
``Enc(packed offsets)``, an encrypted block of encoded zeros (the paper's ``Enc0``,
Eq. 5, generalised to the offset encoding), computed once per aggregate: the fill is
``Enc(packed offsets) ** missing``. Every block of the result then sums exactly
``S = contributors`` summands, which the keyholder needs to remove ``S * offset``.
The fill carries no tag (tag field 0): the keyholder expects, per block, the tags of
the users that touched it only.

The result is bound to one :class:`~crypto.dphe.AggregationContext` (keyholder
session, stream, round) and lists, per contributor, the phi-space blocks it sent
and its touch-set MAC, which the aggregator forwards unchanged (it cannot check
them: it has no MAC key), with its attestation (model digest, nonce, sealed weight).

Culprits. The aggregator keeps every contributor's phi-space blocks until the next
:meth:`DPHEAggregator.start`. When the keyholder names clients whose contribution is
wrong (:class:`crypto.keyholder.AggregateRefused` with ``culprits``), :meth:`drop`
takes them out and :meth:`result` sums the rest. When a sum fails its tag check,
:meth:`masked_blocks` gives the keyholder each contributor's blocks with the data
part blinded by a fresh uniform mask of ``P * slot_bits + GUARD_BITS`` bits, so the
keyholder can check every contributor's tags
(:meth:`crypto.keyholder.Keyholder.identify`)
without seeing its data.

No Flower imports.
"""

from __future__ import annotations

import secrets

import numpy as np
from gmpy2 import gcd, mpz, powmod

from crypto.dphe import (
    MAC_BYTES,
    AggregationContext,
    Attestation,
    Contribution,
    DPHEParams,
    EncryptedSum,
    EncryptedUpdate,
    tag_shift,
)
from crypto.keys import AggregatorBundle
from crypto.packing import pack
from crypto.permutation import inverse_permutation


class DPHEAggregator:
    """Accumulate DPHE-encrypted updates into one encrypted, phi-permuted sum.

    Call :meth:`start` to begin an aggregate (the constructor starts the first),
    :meth:`add` once per user and :meth:`result` for the :class:`EncryptedSum` to send
    to the keyholder. :meth:`add` validates the whole update before it changes any
    state, and raises ``ValueError`` naming the problem: the caller can log it and
    drop that user.

    Parameters
    ----------
    bundle : AggregatorBundle
        Public key, every user's phi_n seed (no secret key, no phi seed).
    params : DPHEParams
        Public parameters of the aggregation, valid for ``bundle.key_bits``.
    context : AggregationContext
        Keyholder session, stream and round of the aggregate.

    Raises
    ------
    ValueError
        If ``params`` is invalid for the key.
    """

    def __init__(
        self,
        bundle: AggregatorBundle,
        params: DPHEParams,
        context: AggregationContext,
    ) -> None:
        params.validate(bundle.key_bits)
        if not isinstance(context, AggregationContext):
            raise ValueError("context must be an AggregationContext")
        self._bundle = bundle
        self._params = params
        self._context = context
        self._n = mpz(bundle.n)
        self._nsquare = self._n * self._n
        self._inverse_phi_n: dict[int, np.ndarray] = {}
        self._offsets_plaintext = pack(
            [params.offset] * params.packing, params.slot_bits
        )
        self._products: dict[int, mpz] = {}
        self._touch_counts: dict[int, int] = {}
        self._contributors: list[int] = []
        self._contributions: list[Contribution] = []
        self._updates: dict[int, tuple[np.ndarray, list[mpz]]] = {}
        self._enc_offsets = mpz(1)
        self.start()

    @property
    def params(self) -> DPHEParams:
        """Public parameters of the aggregation."""
        return self._params

    @property
    def contributors(self) -> int:
        """Number of users added to the current aggregate."""
        return len(self._contributors)

    @property
    def contributor_ids(self) -> tuple[int, ...]:
        """Client ids added to the current aggregate, in order of addition."""
        return tuple(self._contributors)

    def start(self) -> None:
        """Begin a new aggregate: forget all added users; fresh ``Enc(offsets)``."""
        self._products = {}
        self._touch_counts = {}
        self._contributors = []
        self._contributions = []
        self._updates = {}
        self._enc_offsets = mpz(
            self._bundle.public_key.raw_encrypt(self._offsets_plaintext)
        )

    def check(self, client_id: int, update: EncryptedUpdate) -> None:
        """Run every check of :meth:`add` without adding (state unchanged).

        Raises
        ------
        ValueError
            As :meth:`add`.
        """
        self._validated(client_id, update)

    def add(self, client_id: int, update: EncryptedUpdate) -> None:
        """Add one user's encrypted update to the current aggregate.

        Parameters
        ----------
        client_id : int
            The user's id (the one its bundle was made for).
        update : EncryptedUpdate
            The user's shards.

        Raises
        ------
        ValueError
            If anything is wrong, with the state unchanged: unknown or repeated client
            id, too many contributors, another key, an empty update, a shard whose
            size breaks the capacity (or differs from it with padding), block ids
            out of ``[0, num_blocks)`` or repeated, or a ciphertext outside
            ``(0, n**2)`` or not coprime with ``n``.
        """
        blocks, ciphertexts = self._validated(client_id, update)
        client_id = int(client_id)
        # Validated: from here on nothing raises.
        self._accumulate(blocks, ciphertexts)
        self._contributors.append(client_id)
        self._updates[client_id] = (blocks, ciphertexts)
        self._contributions.append(
            Contribution(
                client_id, np.sort(blocks), bytes(update.touch_mac), update.attestation
            )
        )

    def _accumulate(self, blocks: np.ndarray, ciphertexts: list) -> None:
        nsquare = self._nsquare
        products = self._products
        counts = self._touch_counts
        for block, ciphertext in zip(blocks.tolist(), ciphertexts, strict=True):
            current = products.get(block)
            products[block] = (
                ciphertext if current is None else current * ciphertext % nsquare
            )
            counts[block] = counts.get(block, 0) + 1

    def drop(self, client_ids: tuple[int, ...] | list[int]) -> None:
        """Take the named contributors out of the current aggregate.

        Raises
        ------
        ValueError
            If one of them is not a contributor (state unchanged).
        """
        gone = {int(i) for i in client_ids}
        unknown = gone - set(self._contributors)
        if unknown:
            raise ValueError(f"clients {sorted(unknown)} are not in this aggregate")
        self._contributors = [i for i in self._contributors if i not in gone]
        self._contributions = [
            c for c in self._contributions if c.client_id not in gone
        ]
        for i in gone:
            del self._updates[i]
        self._products = {}
        self._touch_counts = {}
        for i in self._contributors:
            self._accumulate(*self._updates[i])

    def masked_blocks(self) -> dict[int, tuple[np.ndarray, list[int]]]:
        """Every contributor's blocks with its data part blinded, for identification.

        Each ciphertext is multiplied by a fresh encryption of a uniform mask of
        ``P * slot_bits + GUARD_BITS`` bits: the keyholder sees the tag field (with
        a carry of at most 1) and nothing of the data but a value within
        statistical distance ``2**-GUARD_BITS`` of uniform.

        Returns
        -------
        dict of int to (np.ndarray, list of int)
            Client id -> its sorted phi-space block ids and masked ciphertexts.
        """
        bits = tag_shift(self._params)
        public = self._bundle.public_key
        nsquare = self._nsquare
        out = {}
        for client_id in self._contributors:
            blocks, ciphertexts = self._updates[client_id]
            order = np.argsort(blocks)
            masked = [
                int(
                    ciphertexts[j]
                    * mpz(public.raw_encrypt(secrets.randbits(bits)))
                    % nsquare
                )
                for j in order.tolist()
            ]
            out[client_id] = (blocks[order].copy(), masked)
        return out

    def _validated(
        self, client_id: int, update: EncryptedUpdate
    ) -> tuple[np.ndarray, list]:
        """Check an update; return its phi-space blocks and ciphertexts."""
        params = self._params
        if isinstance(client_id, bool) or not isinstance(client_id, int | np.integer):
            raise ValueError(f"client id must be an integer, got {client_id!r}")
        client_id = int(client_id)
        if client_id not in self._bundle.client_seeds:
            raise ValueError(
                f"unknown client id {client_id}: the aggregator bundle has seeds for "
                f"{self._bundle.num_clients} clients"
            )
        if client_id in self._contributors:
            raise ValueError(f"client {client_id} was already added to this aggregate")
        if len(self._contributors) >= params.fixed_point.max_summands:
            raise ValueError(
                f"aggregate is full: max_summands = {params.fixed_point.max_summands}"
            )
        if not isinstance(update, EncryptedUpdate):
            raise ValueError(
                f"expected an EncryptedUpdate, got {type(update).__name__}"
            )
        if update.key_id != self._bundle.key_id:
            raise ValueError(
                f"client {client_id}: update encrypted under another key "
                f"(key id {bytes(update.key_id).hex()[:16]}..., expected "
                f"{self._bundle.key_id.hex()[:16]}...)"
            )
        mac = update.touch_mac
        if not isinstance(mac, bytes) or len(mac) != MAC_BYTES:
            raise ValueError(f"client {client_id}: touch MAC must be {MAC_BYTES} bytes")
        if not isinstance(update.attestation, Attestation):
            raise ValueError(f"client {client_id}: the update has no attestation")
        ids, ciphertexts = self._check_shards(client_id, update)
        return self._inverse(client_id)[ids], ciphertexts

    def result(self) -> EncryptedSum:
        """Return the encrypted sum over the current contributors.

        Every block touched by at least one contributor is in the result; for each
        contributor that did not touch it, it is multiplied by ``Enc(offsets)``, so
        every block holds exactly ``S = contributors`` summands. Blocks no one touched
        are left out (their sum is zero).

        Returns
        -------
        EncryptedSum
            Context, phi-space block ids (sorted), ciphertexts, the contributors'
            block sets and MACs, params.

        Raises
        ------
        ValueError
            If no user was added or ``S > max_summands``.
        """
        summands = len(self._contributors)
        if summands == 0:
            raise ValueError("no contributions: add at least one update first")
        if summands > self._params.fixed_point.max_summands:
            raise ValueError(
                f"{summands} contributors exceed max_summands = "
                f"{self._params.fixed_point.max_summands}"
            )
        nsquare = self._nsquare
        fills: dict[int, mpz] = {}
        block_ids = sorted(self._products)
        ciphertexts = []
        for block in block_ids:
            value = self._products[block]
            missing = summands - self._touch_counts[block]
            if missing:
                fill = fills.get(missing)
                if fill is None:
                    fill = powmod(self._enc_offsets, missing, nsquare)
                    fills[missing] = fill
                value = value * fill % nsquare
            ciphertexts.append(int(value))
        return EncryptedSum(
            key_id=self._bundle.key_id,
            context=self._context,
            block_ids=np.asarray(block_ids, dtype=np.int64),
            ciphertexts=ciphertexts,
            contributions=tuple(self._contributions),
            params=self._params,
        )

    def _inverse(self, client_id: int) -> np.ndarray:
        inverse = self._inverse_phi_n.get(client_id)
        if inverse is None:
            inverse = inverse_permutation(
                self._bundle.phi_n(client_id, self._params.num_blocks)
            )
            self._inverse_phi_n[client_id] = inverse
        return inverse

    def _check_shards(
        self, client_id: int, update: EncryptedUpdate
    ) -> tuple[np.ndarray, list[mpz]]:
        """Validate every shard; return the concatenated ids and ciphertexts."""
        params = self._params
        who = f"client {client_id}"
        if not update.shards:
            raise ValueError(f"{who}: update has no shards")
        if params.single_shard and len(update.shards) != 1:
            raise ValueError(
                f"{who}: {len(update.shards)} shards; single_shard params allow one"
            )
        ids = []
        ciphertexts: list[mpz] = []
        n = self._n
        nsquare = self._nsquare
        for index, shard in enumerate(update.shards):
            block_ids = np.asarray(shard.block_ids)
            if block_ids.ndim != 1 or not np.issubdtype(block_ids.dtype, np.integer):
                raise ValueError(f"{who}: shard {index} block ids must be 1-D integers")
            if len(block_ids) != len(shard.ciphertexts):
                raise ValueError(
                    f"{who}: shard {index} has {len(block_ids)} block ids but "
                    f"{len(shard.ciphertexts)} ciphertexts"
                )
            size = len(block_ids)
            if size == 0:
                raise ValueError(f"{who}: shard {index} is empty")
            if params.capacity and size > params.capacity:
                raise ValueError(
                    f"{who}: shard {index} has {size} blocks, above the capacity "
                    f"{params.capacity}"
                )
            if params.pad and size != params.capacity:
                raise ValueError(
                    f"{who}: shard {index} has {size} blocks; padded shards must have "
                    f"exactly capacity = {params.capacity}"
                )
            ids.append(block_ids.astype(np.int64))
            for position, ciphertext in enumerate(shard.ciphertexts):
                if isinstance(ciphertext, bool) or not isinstance(ciphertext, int):
                    raise ValueError(
                        f"{who}: shard {index} ciphertext {position} is not an integer"
                    )
                value = mpz(ciphertext)
                if not 0 < value < nsquare:
                    raise ValueError(
                        f"{who}: shard {index} ciphertext {position} is outside "
                        "(0, n**2)"
                    )
                if gcd(value, n) != 1:
                    raise ValueError(
                        f"{who}: shard {index} ciphertext {position} is not coprime "
                        "with n"
                    )
                ciphertexts.append(value)
        all_ids = np.concatenate(ids)
        bad = all_ids[(all_ids < 0) | (all_ids >= params.num_blocks)]
        if bad.size:
            raise ValueError(
                f"{who}: block id {int(bad[0])} outside [0, {params.num_blocks})"
            )
        unique, counts = np.unique(all_ids, return_counts=True)
        if unique.size != all_ids.size:
            raise ValueError(
                f"{who}: block id {int(unique[counts > 1][0])} appears more than once "
                "(block ids must be distinct across all shards)"
            )
        return all_ids, ciphertexts

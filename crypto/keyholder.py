"""The DPHE keyholder: decrypts and un-permutes honest aggregated sums only.

The keyholder holds the Paillier secret key, the user-shared permutation phi
(Algorithm 1, step 6: "A asks G for decrypting and reordering") and every user's
client-keyholder MAC key. The paper assumes a semi-honest aggregator; this keyholder
is built against a *malicious* one, which may send any ciphertexts and any claims:

* **Session.** Each :class:`Keyholder` draws a random 16-byte session id when it
  starts (:meth:`Keyholder.session_id`); the server hands it to the users, who bind
  phi, their block tags and their touch-set MACs to it (:mod:`crypto.dphe`). A
  restarted keyholder has a new session and refuses everything of the old one.
* **Pinned streams.** Every aggregation belongs to a stream (``model``,
  ``prototypes``) whose :class:`~crypto.dphe.DPHEParams` the keyholder is given by
  its own configuration, never by the caller; a request with other parameters is
  refused before anything is parsed, and every size comes from the pinned params.
* **Contributors.** The claimed contributors must be ``>= min_contributors`` (3,
  the paper's N >= 3) distinct users with a MAC key; each one's touch-set MAC over
  (session, stream, round, params, client id, phi-space blocks it sent) must verify,
  and the sum's blocks must be exactly the union of their blocks.
* **At most once.** Each (session, stream, round) is decrypted at most once, and a
  stream's rounds must increase: a replayed earlier sum, or a second sum of the
  same round over another set of users (differencing ``{1,2,3}`` and
  ``{1,2,3,4}``), is refused. A round is consumed as soon as its MACs verify, even
  if the decryption is then refused.
* **Tags.** After decryption each block's tag field must equal the sum of the
  expected tags of the contributors that touched it, nothing may lie above the tag
  field, every slot sum must lie in ``[-S * B, S * B]`` and the total weight in
  ``[S, S * max_weight]``. A ciphertext raised to a power (the "cube attack":
  ``c**3`` claimed as three users), blocks mixed across users, blocks, rounds or
  streams, or substituted ciphertexts fail with probability about ``1 - 2**-64``.
* **Generic refusals.** A refusal (:class:`AggregateRefused`) says only
  "aggregate refused (<category>)"; the details go to this module's logger (the
  keyholder's local log) and never contain a decrypted value.

Remaining limit: across rounds the server chooses who takes part. A user's updates in
two rounds differ by its training only (new data order, new model), so comparing
round averages tells the server about one user only as much as the training noise
allows: DP-SGD (``privacy/``) is what bounds that. A malicious *user* can still push
the average by up to its weight share times the clip (docs/methods/dphe.md).

No Flower imports.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import NoReturn, Protocol, runtime_checkable

import numpy as np
from gmpy2 import mpz, powmod_base_list

from crypto.dphe import (
    SESSION_BYTES,
    AggregationContext,
    DPHEParams,
    EncryptedSum,
    block_tags,
    check_stream,
    touch_mac,
)
from crypto.fixed_point import remove_offsets, tag_field_bits
from crypto.keys import KeyholderBundle
from crypto.packing import unpack

logger = logging.getLogger(__name__)

MIN_CONTRIBUTORS = 3
PARALLEL_MIN = 16
"""Fewest ciphertexts worth splitting across decryption threads."""
DEFAULT_WORKERS = 2
"""Decryption threads (gmpy2 releases the GIL): both cores of a 2-core machine."""
"""The paper's N >= 3 condition: fewer users would expose individual updates."""

REFUSAL_CATEGORIES = (
    "malformed",
    "session",
    "parameters",
    "contributors",
    "authentication",
    "replay",
    "integrity",
)
"""Non-secret reasons a refusal may name."""


class AggregateRefused(ValueError):
    """The keyholder refused to decrypt an aggregate.

    Its message is generic -- ``aggregate refused (<category>)`` with a category of
    :data:`REFUSAL_CATEGORIES` -- and carries no decrypted value and no weight.

    Parameters
    ----------
    category : str
        One of :data:`REFUSAL_CATEGORIES` (anything else becomes ``malformed``).
    """

    def __init__(self, category: str = "malformed") -> None:
        if category not in REFUSAL_CATEGORIES:
            category = "malformed"
        self.category = category
        super().__init__(f"aggregate refused ({category})")


@runtime_checkable
class KeyholderLike(Protocol):
    """Anything that decrypts aggregates: :class:`Keyholder` or a remote client."""

    def session_id(self) -> bytes:
        """Return the keyholder's current 16-byte session id."""
        ...

    def decrypt_aggregate(self, encrypted_sum: EncryptedSum) -> np.ndarray:
        """Decrypt and un-permute an honest encrypted sum.

        Parameters
        ----------
        encrypted_sum : EncryptedSum
            The aggregator's result, with its contributors and MACs.

        Returns
        -------
        np.ndarray
            ``(D + 1,)`` int64 sums in original coordinate order (see
            :meth:`Keyholder.decrypt_aggregate`).
        """
        ...


class Keyholder:
    """Decrypt and reorder honest aggregated DPHE sums (see the module docstring).

    Parameters
    ----------
    bundle : KeyholderBundle
        Secret key, phi seed and the users' MAC keys.
    streams : mapping of str to DPHEParams
        The pinned parameters of every stream this keyholder decrypts.
    min_contributors : int
        Smallest number of distinct users an aggregate must have, ``>= 3``.
    workers : int
        Threads that run the decryption exponentiations (gmpy2 releases the GIL,
        see :meth:`_raw_decrypt_all`); 1 = this thread only. Every check is the same.

    Raises
    ------
    ValueError
        If ``min_contributors < 3``, no stream is given, a stream name is malformed
        or its parameters do not fit the key.
    """

    def __init__(
        self,
        bundle: KeyholderBundle,
        streams: Mapping[str, DPHEParams],
        *,
        min_contributors: int = MIN_CONTRIBUTORS,
        workers: int = DEFAULT_WORKERS,
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
        if not isinstance(streams, Mapping) or not streams:
            raise ValueError("streams must map at least one stream name to DPHEParams")
        pinned: dict[str, DPHEParams] = {}
        for name, params in streams.items():
            check_stream(name)
            if not isinstance(params, DPHEParams):
                raise ValueError(f"stream {name!r}: expected DPHEParams")
            params.validate(bundle.key_bits)
            pinned[name] = params
        self._bundle = bundle
        self._private_key = bundle.private_key
        self._nsquare = bundle.n * bundle.n
        self._streams = pinned
        self.min_contributors = min_contributors
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
        self.workers = workers
        self._session = os.urandom(SESSION_BYTES)
        self._last_round: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def key_id(self) -> bytes:
        """32-byte identifier of the keyholder's public key."""
        return self._bundle.key_id

    @property
    def key_bits(self) -> int:
        """Bit length of the Paillier modulus."""
        return self._bundle.key_bits

    @property
    def streams(self) -> dict[str, DPHEParams]:
        """The pinned parameters, by stream name (a copy)."""
        return dict(self._streams)

    def session_id(self) -> bytes:
        """Return the random 16-byte session id (fixed for this keyholder's life)."""
        return self._session

    def decrypted_rounds(self) -> dict[str, int]:
        """Last round decrypted per stream in this session (``{}`` while unused).

        Not secret (the aggregator asked for those rounds). A session serves one
        run: rounds must increase, so a second run starting at round 1 would be
        refused as a replay; the server checks this before its first round.
        """
        with self._lock:
            return dict(self._last_round)

    def parse_request(self, data: object) -> EncryptedSum:
        """Parse an ``EncryptedSum.to_json()`` object against the pinned streams.

        Raises
        ------
        AggregateRefused
            ``parameters`` for an unknown stream or other parameters, ``malformed``
            for anything else that does not parse; nothing larger than the pinned
            sizes is allocated.
        """
        if not isinstance(data, Mapping):
            self._refuse("malformed", "encrypted_sum is not an object")
        stream = data.get("stream")
        params = self._streams.get(stream) if isinstance(stream, str) else None
        if params is None:
            self._refuse("parameters", f"unknown stream {str(stream)[:64]!r}")
        if data.get("params") != params.to_dict():
            self._refuse("parameters", f"stream {stream}: parameters differ")
        try:
            return EncryptedSum.from_json(data, params=params, key_bits=self.key_bits)
        except ValueError as error:
            self._refuse("malformed", str(error))

    def decrypt_aggregate(self, encrypted_sum: EncryptedSum) -> np.ndarray:
        """Check an encrypted sum, decrypt it, remove offsets and undo phi.

        Parameters
        ----------
        encrypted_sum : EncryptedSum
            The aggregator's result.

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
        with self._lock:
            return self._decrypt(encrypted_sum)

    def _raw_decrypt_all(self, ciphertexts: list[int]) -> list[int]:
        """Paillier-decrypt every ciphertext with CRT, on ``workers`` threads.

        The two exponentiations per ciphertext (``c**(p-1) mod p**2`` and
        ``c**(q-1) mod q**2``) run in gmpy2's ``powmod_base_list``, which releases
        the GIL, so ``workers`` threads use that many cores; the key never leaves
        this process and every check runs afterwards, as with one.
        """
        key = self._private_key
        p, q = mpz(key.p), mpz(key.q)
        psquare, qsquare = p * p, q * q
        values = [mpz(c) for c in ciphertexts]
        workers = self.workers if len(values) >= PARALLEL_MIN else 1
        size = max(1, -(-len(values) // workers))
        chunks = [values[i : i + size] for i in range(0, len(values), size)]

        def exponentiate(chunk: list[mpz]) -> tuple[list[mpz], list[mpz]]:
            return (
                powmod_base_list([c % psquare for c in chunk], p - 1, psquare),
                powmod_base_list([c % qsquare for c in chunk], q - 1, qsquare),
            )

        if len(chunks) > 1:
            with ThreadPoolExecutor(len(chunks)) as pool:
                parts = list(pool.map(exponentiate, chunks))
        else:
            parts = [exponentiate(chunk) for chunk in chunks]
        hp, hq, p_inverse = mpz(key.hp), mpz(key.hq), mpz(key.p_inverse)
        out = []
        for xs_p, xs_q in parts:
            for x_p, x_q in zip(xs_p, xs_q, strict=True):
                m_p = (x_p - 1) // p * hp % p
                m_q = (x_q - 1) // q * hq % q
                out.append(int(m_p + (m_q - m_p) * p_inverse % q * p))
        return out

    def _refuse(self, category: str, detail: str) -> NoReturn:
        logger.warning("keyholder refused an aggregate (%s): %s", category, detail)
        raise AggregateRefused(category)

    def _decrypt(self, encrypted_sum: EncryptedSum) -> np.ndarray:
        if not isinstance(encrypted_sum, EncryptedSum):
            self._refuse("malformed", "not an EncryptedSum")
        context = encrypted_sum.context
        if not isinstance(context, AggregationContext):
            self._refuse("malformed", "no aggregation context")
        if not hmac.compare_digest(context.session, self._session):
            self._refuse("session", "session id of another keyholder session")
        params = self._streams.get(context.stream)
        if params is None:
            self._refuse("parameters", f"unknown stream {context.stream!r}")
        if encrypted_sum.params != params:
            self._refuse("parameters", f"stream {context.stream}: parameters differ")
        if encrypted_sum.key_id != self.key_id:
            self._refuse("malformed", "the sum was encrypted under another key")
        contributions = encrypted_sum.contributions
        ids = [c.client_id for c in contributions]
        summands = len(ids)
        if len(set(ids)) != summands:
            self._refuse("contributors", "a client is listed more than once")
        unknown = [i for i in ids if i not in self._bundle.mac_keys]
        if unknown:
            self._refuse("contributors", f"unknown client ids {unknown[:5]}")
        if not self.min_contributors <= summands <= params.fixed_point.max_summands:
            self._refuse(
                "contributors",
                f"{summands} contributors outside [{self.min_contributors}, "
                f"{params.fixed_point.max_summands}]",
            )
        num_blocks = params.num_blocks
        block_ids = np.asarray(encrypted_sum.block_ids)
        if (
            block_ids.ndim != 1
            or not np.issubdtype(block_ids.dtype, np.integer)
            or len(block_ids) != len(encrypted_sum.ciphertexts)
        ):
            self._refuse("malformed", "block ids and ciphertexts disagree")
        union = np.zeros(num_blocks, dtype=bool)
        for item in contributions:
            blocks = np.asarray(item.block_ids)
            if (
                blocks.ndim != 1
                or blocks.size == 0
                or blocks.min() < 0
                or blocks.max() >= num_blocks
                or np.any(np.diff(blocks) <= 0)
            ):
                self._refuse("malformed", f"client {item.client_id}: bad block set")
            union[blocks] = True
        if not np.array_equal(block_ids, np.flatnonzero(union)):
            self._refuse("malformed", "blocks are not the union of the contributors'")
        nsquare = self._nsquare
        for ciphertext in encrypted_sum.ciphertexts:
            if (
                isinstance(ciphertext, bool)
                or not isinstance(ciphertext, int)
                or not 0 < ciphertext < nsquare
            ):
                self._refuse("malformed", "a ciphertext is outside (0, n**2)")
        last = self._last_round.get(context.stream)
        if last is not None and context.round <= last:
            self._refuse(
                "replay",
                f"stream {context.stream} round {context.round}: round {last} was "
                "already decrypted (each round once, rounds increasing)",
            )
        for item in contributions:
            expected = touch_mac(
                self._bundle.mac_keys[item.client_id],
                context,
                params,
                item.client_id,
                item.block_ids,
            )
            if not hmac.compare_digest(expected, bytes(item.mac)):
                self._refuse(
                    "authentication", f"client {item.client_id}: touch MAC invalid"
                )
        # Every check a caller controls without the secret key has passed: the round
        # is consumed now, whatever the decryption finds.
        self._last_round[context.stream] = context.round
        return self._open(encrypted_sum, params)

    def _open(self, encrypted_sum: EncryptedSum, params: DPHEParams) -> np.ndarray:
        context = encrypted_sum.context
        summands = encrypted_sum.summands
        mask32 = np.uint64(0xFFFFFFFF)
        high = np.zeros(params.num_blocks, dtype=np.uint64)
        low = np.zeros(params.num_blocks, dtype=np.uint64)
        for item in encrypted_sum.contributions:
            tags = block_tags(self._bundle.mac_keys[item.client_id], context, params)
            blocks = np.asarray(item.block_ids, dtype=np.int64)
            high[blocks] += tags[blocks] >> np.uint64(32)
            low[blocks] += tags[blocks] & mask32
        packing = params.packing
        slot_bits = params.slot_bits
        shift = packing * slot_bits
        data_mask = (1 << shift) - 1
        limit = 1 << (shift + tag_field_bits(params.fixed_point.max_summands))
        phi_space = np.zeros(params.num_blocks * packing, dtype=np.int64)
        plaintexts = self._raw_decrypt_all(encrypted_sum.ciphertexts)
        for block, plaintext in zip(
            encrypted_sum.block_ids.tolist(), plaintexts, strict=True
        ):
            expected = (int(high[block]) << 32) + int(low[block])
            if plaintext >= limit or plaintext >> shift != expected:
                self._refuse("integrity", f"block {block}: tag check failed")
            try:
                values = remove_offsets(
                    unpack(plaintext & data_mask, packing, slot_bits),
                    summands=summands,
                    params=params.fixed_point,
                )
            except ValueError:
                self._refuse("integrity", f"block {block}: slot sum out of range")
            phi_space[block * packing : (block + 1) * packing] = values
        phi = self._bundle.phi(params.padded_dimension, context.phi_context)
        sums = phi_space[phi]
        total_weight = int(sums[-1])
        if not summands <= total_weight <= summands * params.fixed_point.max_weight:
            self._refuse("integrity", "total weight out of range")
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


STREAMS_FORMAT = "fedhash-dphe-keyholder-streams"
"""``format`` field of a streams file (:func:`write_streams_file`)."""


def write_streams_file(
    path: str | os.PathLike[str], streams: Mapping[str, DPHEParams]
) -> None:
    """Write the pinned stream parameters the keyholder service reads (``--streams``).

    Parameters
    ----------
    path : path
        Output JSON file.
    streams : mapping of str to DPHEParams
        Stream name -> parameters.
    """
    data = {
        "format": STREAMS_FORMAT,
        "version": 1,
        "streams": {name: params.to_dict() for name, params in streams.items()},
    }
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.write("\n")


def read_streams_file(path: str | os.PathLike[str]) -> dict[str, DPHEParams]:
    """Read a file written by :func:`write_streams_file`.

    Raises
    ------
    FileNotFoundError
        If it is missing.
    ValueError
        If it is not such a file or a stream is malformed (naming it).
    """
    where = f"streams file {os.fspath(path)}"
    with open(path, encoding="utf-8") as handle:
        try:
            data = json.load(handle)
        except json.JSONDecodeError as error:
            raise ValueError(f"{where} is not valid JSON: {error}") from None
    if (
        not isinstance(data, dict)
        or data.get("format") != STREAMS_FORMAT
        or data.get("version") != 1
        or not isinstance(data.get("streams"), dict)
        or not data["streams"]
    ):
        raise ValueError(
            f"{where} is not a {STREAMS_FORMAT} version 1 file (write it with "
            "`python -m strategies.dphe.keyholder_streams`)"
        )
    streams = {}
    for name, raw in data["streams"].items():
        try:
            check_stream(name)
            streams[name] = DPHEParams.from_dict(raw)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{where}: stream {name!r}: {error}") from None
    return streams

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
* **One model, sealed weights** (:class:`crypto.dphe.Attestation`). Every
  contributor attests the digest of the model it received, a fresh nonce and its
  sealed weight, all under its MAC. A sum whose contributors attest different models
  is refused (``model``): when at least ``min_contributors`` of them attest one model
  more than any other, the others are named (dropped, the round is not consumed; the
  victim of a zero-model attack is then left out), otherwise the round is consumed.
  A weight
  outside ``[1, max_weight]`` names its client (``weight``). The total weight is the
  sum of the attested weights, and every coordinate sum is kept within
  ``W * ceil(clip * 2**scale_bits)`` (clamped, counted in the log): a client that
  skips quantization moves the average by at most the clip range, not by
  ``S * max_weight / W * clip``.
* **Culprits, not blocked rounds.** A contributor whose touch MAC fails is named in
  the refusal (``culprits``; the round is not consumed), so the aggregator drops it
  and asks again. A sum whose tags fail is refused and opens an identification
  (:meth:`Keyholder.identify`): the aggregator sends every contributor's blocks with
  the data blinded by a ``P * slot_bits + GUARD_BITS``-bit mask; the keyholder checks
  each contributor's tags, names those that fail and then decrypts once more, for
  exactly the other contributors of that round. If every contributor's tags check,
  the aggregator's product was wrong: nothing more is decrypted that round.
* **A session serves one run** (:meth:`Keyholder.bind_run`, :mod:`crypto.binding`):
  the keyholder binds its session to the run id once and returns a proof the
  clients check. With a state file (``state_path``), it keeps across restarts the
  run ids it bound and, per (stream, round, model digest), the contributor set it
  decrypted: a later sum over the same model in the same round with another set
  (run 1 {0,1,2,3}, run 2 {1,2,3}: the difference is client 0's update) is refused.

Remaining limit: across rounds the server chooses who takes part. A user's updates in
two rounds differ by its training only (new data order, new model), so comparing
round averages tells the server about one user only as much as the training noise
allows: DP-SGD (``privacy/``) is what bounds that. A malicious *user* can still push
a value of the average by up to ``2 * clip`` (its weight share times the clip range
if it encodes honestly); range proofs would be needed to bound it to its share
(docs/threat-model.md).

No Flower imports.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import os
import tempfile
import threading
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import NoReturn, Protocol, runtime_checkable

import numpy as np
from gmpy2 import mpz, powmod_base_list

from crypto.binding import session_proof
from crypto.dphe import (
    SESSION_BYTES,
    AggregationContext,
    Attestation,
    Contribution,
    DPHEParams,
    EncryptedSum,
    block_tags,
    check_stream,
    open_weight,
    tag_shift,
    touch_mac,
)
from crypto.fixed_point import tag_field_bits
from crypto.keys import KeyholderBundle
from crypto.packing import unpack
from privacy import DPHE_MIN_CONTRIBUTORS as MIN_CONTRIBUTORS

logger = logging.getLogger(__name__)

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
    "model",
    "weight",
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
    culprits : tuple of int
        Client ids whose contribution is wrong (not secret: the aggregator knows
        who contributed); drop them and ask again.
    identify : bool
        The sum failed its tag check: the keyholder accepts one
        :meth:`Keyholder.identify` for this round.
    """

    def __init__(
        self,
        category: str = "malformed",
        *,
        culprits: tuple[int, ...] = (),
        identify: bool = False,
    ) -> None:
        if category not in REFUSAL_CATEGORIES:
            category = "malformed"
        self.category = category
        self.culprits = tuple(int(i) for i in culprits)
        self.identify = bool(identify)
        super().__init__(f"aggregate refused ({category})")


@runtime_checkable
class KeyholderLike(Protocol):
    """Anything that decrypts aggregates: :class:`Keyholder` or a remote client."""

    def session_id(self) -> bytes:
        """Return the keyholder's current 16-byte session id."""
        ...

    def bind_run(self, run_id: int) -> bytes:
        """Bind the session to one run; return the 32-byte proof clients check."""
        ...

    def identify(
        self,
        stream: str,
        server_round: int,
        masked: Mapping[int, tuple[np.ndarray, list[int]]],
    ) -> tuple[int, ...]:
        """Name the contributors whose tags are wrong (:meth:`Keyholder.identify`)."""
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
        state_path: str | os.PathLike[str] | None = None,
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
        self._run_id: int | None = None
        self._suspect: dict[str, tuple[int, EncryptedSum]] = {}
        self._retry: dict[str, tuple[int, frozenset[int]]] = {}
        self._state_path = None if state_path is None else os.fspath(state_path)
        self._state = _read_state(self._state_path)

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

    @property
    def run_id(self) -> int | None:
        """The run id this session is bound to (``None`` before :meth:`bind_run`)."""
        return self._run_id

    def bind_run(self, run_id: int) -> bytes:
        """Bind this session to one Flower run; return the proof clients check.

        Binding the same run id again returns the same proof; another run id is
        refused, and so is a run id an earlier session bound (with a state file).

        Raises
        ------
        AggregateRefused
            ``session`` if the session is bound to another run or the run id was
            bound by an earlier session.
        """
        if isinstance(run_id, bool) or not isinstance(run_id, int):
            self._refuse("malformed", f"run id must be an integer, got {run_id!r}")
        with self._lock:
            if self._run_id is not None and self._run_id != run_id:
                self._refuse(
                    "session", f"session bound to run {self._run_id}, not {run_id}"
                )
            earlier = self._state["runs"].get(str(run_id))
            if earlier is not None and earlier != self._session.hex():
                self._refuse("session", f"run {run_id} was bound by an earlier session")
            if self._run_id is None:
                self._run_id = run_id
                self._state["runs"][str(run_id)] = self._session.hex()
                self._save_state()
            return session_proof(self._bundle.phi_seed, self._session, run_id)

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

    def _refuse(
        self,
        category: str,
        detail: str,
        *,
        culprits: tuple[int, ...] = (),
        identify: bool = False,
    ) -> NoReturn:
        logger.warning("keyholder refused an aggregate (%s): %s", category, detail)
        raise AggregateRefused(category, culprits=culprits, identify=identify)

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
        if any(not isinstance(c.attestation, Attestation) for c in contributions):
            self._refuse("malformed", "a contribution has no attestation")
        ids_set = frozenset(ids)
        stream = context.stream
        retry = self._retry.get(stream)
        is_retry = retry is not None and retry == (context.round, ids_set)
        last = self._last_round.get(stream)
        if not is_retry and last is not None and context.round <= last:
            self._refuse(
                "replay",
                f"stream {stream} round {context.round}: round {last} was "
                "already decrypted (each round once, rounds increasing)",
            )
        bad_macs = [
            item.client_id
            for item in contributions
            if not hmac.compare_digest(
                touch_mac(
                    self._bundle.mac_keys[item.client_id],
                    context,
                    params,
                    item.client_id,
                    item.block_ids,
                    _attested(item),
                ),
                bytes(item.mac),
            )
        ]
        if bad_macs:
            # the round is not consumed: nothing was decrypted; drop them, ask again
            self._refuse(
                "authentication",
                f"clients {bad_macs}: touch MAC invalid",
                culprits=tuple(bad_macs),
            )
        weights = {
            item.client_id: open_weight(
                self._bundle.mac_keys[item.client_id],
                context,
                params,
                _attested(item),
            )
            for item in contributions
        }
        heavy = [
            i for i, w in weights.items() if not 1 <= w <= params.fixed_point.max_weight
        ]
        if heavy:
            self._refuse(
                "weight",
                f"clients {heavy}: attested weight outside [1, "
                f"{params.fixed_point.max_weight}]",
                culprits=tuple(heavy),
            )
        models = Counter(_attested(c).model for c in contributions)
        if len(models) > 1:
            (top, most), (_, second) = models.most_common(2)
            if most > second and most >= self.min_contributors:
                # authenticated claims, nothing decrypted: name the others (a client
                # that lies about its model, or the victim of a model-inconsistency
                # attack, which is then left out) and let the aggregator ask again
                self._refuse(
                    "model",
                    f"stream {stream} round {context.round}: {summands - most} of "
                    f"{summands} contributors attest another model than the others",
                    culprits=tuple(
                        c.client_id for c in contributions if _attested(c).model != top
                    ),
                )
        # Every check a caller controls without the secret key has passed: the round
        # is consumed now, whatever the decryption finds.
        self._last_round[stream] = context.round
        self._retry.pop(stream, None)
        self._suspect.pop(stream, None)
        if len(models) != 1:
            self._refuse(
                "model",
                f"stream {stream} round {context.round}: the {summands} contributors "
                f"attest {len(models)} different models, no {self.min_contributors} "
                "of them one model more than any other",
            )
        key = f"{stream}/{context.round}/{next(iter(models)).hex()}"
        earlier = self._state["sums"].get(key)
        if earlier is not None and sorted(earlier) != sorted(ids):
            self._refuse(
                "replay",
                f"stream {stream} round {context.round}: this model's sum was "
                f"decrypted before (an earlier session or run) for another set of "
                f"{len(earlier)} contributors",
            )
        sums = self._open(encrypted_sum, params, weights)
        if earlier is None:
            self._state["sums"][key] = sorted(ids)
            self._save_state()
        return sums

    def identify(
        self,
        stream: str,
        server_round: int,
        masked: Mapping[int, tuple[np.ndarray, list[int]]],
    ) -> tuple[int, ...]:
        """Name the contributors whose tags are wrong, after a sum failed its check.

        Allowed once, for the round whose sum was just refused with ``identify``.
        ``masked`` maps every contributor of that sum to its phi-space block ids
        and ciphertexts, each multiplied by an encryption of a uniform mask of
        ``P * slot_bits + GUARD_BITS`` bits
        (:meth:`crypto.DPHEAggregator.masked_blocks`):
        the keyholder checks the tag field (a carry of 1 allowed) and sees nothing of
        the data. The named clients are then left out: the keyholder decrypts once
        more, for exactly the other contributors of that round.

        Returns
        -------
        tuple of int
            The culprits' client ids (at least one).

        Raises
        ------
        AggregateRefused
            ``replay`` if no identification is open for that round, ``malformed``
            for blocks other than those the contributors MACed, ``integrity`` (and
            nothing more for that round) if every contributor's tags check: the
            aggregator's sum was then not the product of their ciphertexts.
        """
        with self._lock:
            suspect = self._suspect.pop(stream, None)
            if suspect is None or suspect[0] != server_round:
                self._refuse(
                    "replay", f"stream {stream} round {server_round}: no failed sum"
                )
            encrypted_sum = suspect[1]
            params = encrypted_sum.params
            context = encrypted_sum.context
            contributions = {c.client_id: c for c in encrypted_sum.contributions}
            if not isinstance(masked, Mapping) or set(masked) != set(contributions):
                self._refuse("malformed", "masked blocks of other contributors")
            shift = tag_shift(params)
            nsquare = self._nsquare
            culprits = []
            for client_id, item in contributions.items():
                blocks, ciphertexts = masked[client_id]
                blocks = np.asarray(blocks)
                if (
                    blocks.shape != item.block_ids.shape
                    or not np.array_equal(blocks, item.block_ids)
                    or len(ciphertexts) != len(blocks)
                    or not all(
                        isinstance(c, int) and 0 < c < nsquare for c in ciphertexts
                    )
                ):
                    self._refuse("malformed", f"client {client_id}: masked blocks")
                tags = block_tags(
                    self._bundle.mac_keys[client_id],
                    context,
                    params,
                    _attested(item),
                )
                plaintexts = self._raw_decrypt_all(list(ciphertexts))
                if any(
                    not 0 <= (p >> shift) - int(tags[b]) <= 1
                    for b, p in zip(blocks.tolist(), plaintexts, strict=True)
                ):
                    culprits.append(client_id)
            if not culprits:
                self._refuse(
                    "integrity",
                    f"stream {stream} round {server_round}: every contributor's tags "
                    "check; the aggregator's sum was not their product",
                )
            rest = frozenset(contributions) - set(culprits)
            logger.warning(
                "keyholder: stream %s round %d: clients %s sent blocks with wrong "
                "tags; %d contributors remain",
                stream,
                server_round,
                culprits,
                len(rest),
            )
            self._retry[stream] = (server_round, rest)
            return tuple(culprits)

    def _open(
        self,
        encrypted_sum: EncryptedSum,
        params: DPHEParams,
        weights: Mapping[int, int],
    ) -> np.ndarray:
        context = encrypted_sum.context
        summands = encrypted_sum.summands
        mask32 = np.uint64(0xFFFFFFFF)
        high = np.zeros(params.num_blocks, dtype=np.uint64)
        low = np.zeros(params.num_blocks, dtype=np.uint64)
        for item in encrypted_sum.contributions:
            tags = block_tags(
                self._bundle.mac_keys[item.client_id],
                context,
                params,
                _attested(item),
            )
            blocks = np.asarray(item.block_ids, dtype=np.int64)
            high[blocks] += tags[blocks] >> np.uint64(32)
            low[blocks] += tags[blocks] & mask32
        packing = params.packing
        slot_bits = params.slot_bits
        shift = tag_shift(params)
        data_mask = (1 << (packing * slot_bits)) - 1
        limit = 1 << (shift + tag_field_bits(params.fixed_point.max_summands))
        offset = summands * params.offset
        phi_space = np.zeros(params.num_blocks * packing, dtype=np.int64)
        plaintexts = self._raw_decrypt_all(encrypted_sum.ciphertexts)
        for block, plaintext in zip(
            encrypted_sum.block_ids.tolist(), plaintexts, strict=True
        ):
            expected = (int(high[block]) << 32) + int(low[block])
            # a carry of at most 1 per contributor from data past the guard bits
            # (only a malicious client's block can carry; each one is checked
            # alone by identify)
            if plaintext >= limit or not (
                0 <= (plaintext >> shift) - expected < summands
            ):
                self._suspect[context.stream] = (context.round, encrypted_sum)
                self._refuse(
                    "integrity", f"block {block}: tag check failed", identify=True
                )
            values = [
                v - offset for v in unpack(plaintext & data_mask, packing, slot_bits)
            ]
            phi_space[block * packing : (block + 1) * packing] = values
        phi = self._bundle.phi(params.padded_dimension, context.phi_context)
        sums = phi_space[phi]
        total_weight = sum(weights.values())
        if int(sums[-1]) != total_weight:
            logger.warning(
                "keyholder: stream %s round %d: the encrypted weights differ from "
                "the attested ones; the attested total is used",
                context.stream,
                context.round,
            )
        bound = total_weight * math.ceil(
            float(params.fixed_point.clip) * 2.0**params.fixed_point.scale_bits
        )
        data = sums[:-1]
        clamped = int(np.count_nonzero(np.abs(data) > bound))
        if clamped:
            logger.warning(
                "keyholder: stream %s round %d: %d coordinate sums beyond the total "
                "weight times the clip were clamped (a client sent values outside "
                "its clip)",
                context.stream,
                context.round,
                clamped,
            )
        out = np.empty_like(sums)
        out[:-1] = np.clip(data, -bound, bound)
        out[-1] = total_weight
        return out

    def _save_state(self) -> None:
        """Write the state file atomically (temporary file, fsync, rename)."""
        if self._state_path is None:
            return
        folder = os.path.dirname(os.path.abspath(self._state_path))
        fd, tmp = tempfile.mkstemp(prefix=".keyholder-state.", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(self._state, handle, sort_keys=True)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self._state_path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


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


def _attested(item: Contribution) -> Attestation:
    """Return a contribution's attestation (checked present before any use)."""
    if not isinstance(item.attestation, Attestation):
        raise AggregateRefused("malformed")
    return item.attestation


STATE_FORMAT = "fedhash-dphe-keyholder-state"
"""``format`` field of the keyholder's state file."""


def _read_state(path: str | None) -> dict:
    """Return the state file's content (an empty state when there is no file).

    Raises
    ------
    ValueError
        If the file exists but is not a keyholder state file.
    """
    empty = {"format": STATE_FORMAT, "version": 1, "runs": {}, "sums": {}}
    if path is None or not os.path.exists(path):
        return empty
    with open(path, encoding="utf-8") as handle:
        try:
            data = json.load(handle)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"keyholder state {path} is not valid JSON: {error}"
            ) from None
    if (
        not isinstance(data, dict)
        or data.get("format") != STATE_FORMAT
        or data.get("version") != 1
        or not isinstance(data.get("runs"), dict)
        or not isinstance(data.get("sums"), dict)
    ):
        raise ValueError(f"keyholder state {path} is not a {STATE_FORMAT} v1 file")
    return data


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

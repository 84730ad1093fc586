"""DPHE secure aggregation as components of the FedAvg-family strategies.

The strategy (the DPHE paper's *aggregator*) holds components built from the
aggregator's key bundle -- the Paillier public key and the user-aggregator
permutations, never the secret key, the user-shared permutation or a MAC key -- and
a keyholder handle (:class:`crypto.KeyholderLike`: an in-process ``Keyholder`` in
simulation only, a ``RemoteKeyholder`` HTTP client in deployment).

* :class:`SecureSum` sums one *stream* (``model``, ``prototypes``) per round:
  parse, check, add, then have the keyholder decrypt the aggregate -- once per
  round; the keyholder checks every contributor's tags and touch-set MAC, bound to
  its session, the stream and the round (``crypto/keyholder.py``).
* :class:`SecureAggregation` uses it for the model: each reply's ``dphe`` record is
  taken out and added in :meth:`SecureAggregation.screen`; :meth:`aggregate`
  refuses aggregates of fewer than 3 contributors (no update that round) and
  otherwise adds the decrypted weighted average update to the global model. The
  weights (``num-examples`` or 1) and the train loss are encrypted inside the
  update (the loss as the model stream's last coordinate,
  :func:`strategies.dphe.setup.with_loss`): the server learns only the total weight
  and the weighted average loss, which it reports as ``train-loss``.

A bad reply (missing record, malformed bytes, another key, bad block ids, ...) is
refused with the reason; the strategy logs it naming the client and goes on. A
keyholder refusal is logged with its generic category only (it carries no value).
When the keyholder names culprits (a touch MAC that fails, a sealed weight above
``max_weight``, or tags that fail the keyholder's per-client check after a sum was
refused), they are logged by partition, dropped, and the rest is decrypted, so one
malicious client cannot block every round.

Client contract: every train message carries the keyholder's session id
(``dphe-session``, hex) and the keyholder's proof that the session serves this run
(``dphe-session-proof``, hex, :func:`crypto.binding.session_proof`) in its config;
reply with one ``dphe`` ArrayRecord
(``strategies/dphe/setup.py``, encrypted under that session, the ``model`` stream and
the message's ``server-round``) and one MetricRecord without entries (nothing about
one client travels in clear), and no ``arrays`` record.
"""

from __future__ import annotations

from logging import INFO, WARNING

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord
from flwr.common.logger import log

from crypto import (
    STREAM_MODEL,
    AggregateRefused,
    AggregationContext,
    AggregatorBundle,
    DPHEAggregator,
    DPHEParams,
    EncryptedUpdate,
    KeyholderLike,
    decode_average,
)
from hashing.update_sparsity import ArrayLayout, flatten_arrays, unflatten_arrays
from settings import keys as K
from strategies.dphe.config import MIN_CONTRIBUTORS as DPHE_MIN_CONTRIBUTORS
from strategies.dphe.protocol import SecureAggregator
from strategies.dphe.setup import read_dphe_record, split_loss


def _partition_name(client_id: int) -> str:
    """DPHE client ids are partition ids."""
    return f"partition {client_id}"


class SecureSum:
    """One encrypted sum per round of one stream, with pinned parameters.

    Parameters
    ----------
    bundle : AggregatorBundle
        Public key and every client's user-aggregator permutation seed.
    keyholder : KeyholderLike
        Decrypts aggregated sums only (``session_id``, ``decrypt_aggregate``).
    params : DPHEParams
        The stream's parameters (the keyholder pins the same).
    stream : str
        Stream name (``model``, ``prototypes``).
    what : str
        Name in log lines (``model update``, ``prototype sums``).
    session : bytes, optional
        The keyholder's session id; fetched from ``keyholder`` when omitted.
    """

    def __init__(
        self,
        bundle: AggregatorBundle,
        keyholder: KeyholderLike,
        params: DPHEParams,
        *,
        stream: str,
        what: str = "model update",
        session: bytes | None = None,
    ) -> None:
        self.bundle = bundle
        self.keyholder = keyholder
        self.params = params
        self.stream = stream
        self.what = what
        self.min_contributors = DPHE_MIN_CONTRIBUTORS
        self.session = keyholder.session_id() if session is None else session
        self._aggregator: DPHEAggregator | None = None
        self._round = 0
        self.name_of = _partition_name  # how log lines name a client id

    def begin(self, server_round: int) -> None:
        """Start a new (empty) sum for ``server_round``."""
        self._round = int(server_round)
        context = AggregationContext(self.session, self.stream, self._round)
        self._aggregator = DPHEAggregator(self.bundle, self.params, context)

    @property
    def contributors(self) -> int:
        """Clients added to the current sum."""
        return 0 if self._aggregator is None else self._aggregator.contributors

    def parse(self, record: object, partition_id: int | None) -> EncryptedUpdate:
        """Parse and check a record against the current sum (nothing is added).

        Raises
        ------
        ValueError
            Naming what is wrong with the record.
        """
        if self._aggregator is None:
            raise RuntimeError("begin() must be called before adding updates")
        if partition_id is None:
            raise ValueError("unknown partition id (no DPHE permutation for this node)")
        update = read_dphe_record(record, key_bits=self.bundle.key_bits)
        self._aggregator.check(partition_id, update)
        return update

    def add(self, partition_id: int, update: EncryptedUpdate) -> None:
        """Add a parsed update (ValueError, state unchanged, if it is refused)."""
        assert self._aggregator is not None
        self._aggregator.add(partition_id, update)

    def decrypt_sums(self, server_round: int) -> tuple[np.ndarray, int, int] | None:
        """Decrypt the sum; return its integer sums, the total weight, the blocks.

        The sums are the keyholder's ``(D,)`` int64 fixed-point totals (offsets
        removed, weight coordinate split off), exact: the prototype stream decodes
        its holder counts from them (:mod:`hashing.fedhap.prototypes`).
        ``None`` (with a log line) when fewer than 3 clients contributed or the
        keyholder refused the aggregate (logged with its generic category only).
        """
        assert self._aggregator is not None
        contributors = self._aggregator.contributors
        if contributors < self.min_contributors:
            log(
                WARNING,
                "round %d: DPHE %s aggregate has %d contributor(s), fewer than %d: "
                "not decrypted (the average would reveal individual values)",
                server_round,
                self.what,
                contributors,
                self.min_contributors,
            )
            return None
        sums = None
        while sums is None:
            encrypted_sum = self._aggregator.result()
            try:
                sums = np.asarray(self.keyholder.decrypt_aggregate(encrypted_sum))
            except AggregateRefused as exc:
                if not self._drop_culprits(server_round, exc):
                    return None
        contributors = self._aggregator.contributors
        # decode_average checks the shape, the integer dtype and the total weight
        _, total_weight = decode_average(sums, self.params)
        log(
            INFO,
            "round %d: DPHE %s aggregate of %d clients, %d encrypted blocks "
            "decrypted by the keyholder",
            server_round,
            self.what,
            contributors,
            len(encrypted_sum.block_ids),
        )
        return sums[:-1], int(total_weight), len(encrypted_sum.block_ids)

    def _drop_culprits(self, server_round: int, exc: AggregateRefused) -> bool:
        """Drop the clients a refusal names (or that identification finds).

        Returns True when the rest may be decrypted (>= 3 contributors left).
        """
        assert self._aggregator is not None
        culprits = exc.culprits
        if exc.identify:
            try:
                culprits = self.keyholder.identify(
                    self.stream, server_round, self._aggregator.masked_blocks()
                )
            except AggregateRefused as again:
                exc = again
                culprits = ()
        if not culprits:
            log(
                WARNING,
                "round %d: keyholder refused the %s aggregate: %s",
                server_round,
                self.what,
                exc,
            )
            return False
        names = ", ".join(self.name_of(i) for i in culprits)
        log(
            WARNING,
            "round %d: the keyholder names %s: its %s contribution is wrong "
            "(%s); dropped, the rest is decrypted",
            server_round,
            names,
            self.what,
            exc,
        )
        self._aggregator.drop(culprits)
        if self._aggregator.contributors < self.min_contributors:
            log(
                WARNING,
                "round %d: DPHE %s aggregate has %d contributor(s) left, fewer "
                "than %d: not decrypted",
                server_round,
                self.what,
                self._aggregator.contributors,
                self.min_contributors,
            )
            return False
        return True

    def decrypt_average(self, server_round: int) -> tuple[np.ndarray, int, int] | None:
        """Decrypt the average vector; return it, the total weight, the blocks.

        ``None`` as :meth:`decrypt_sums`.
        """
        result = self.decrypt_sums(server_round)
        if result is None:
            return None
        sums, total_weight, blocks = result
        scale = 2.0**self.params.fixed_point.scale_bits
        return sums.astype(np.float64) / scale / total_weight, total_weight, blocks


class SecureAggregation(SecureAggregator):
    """The aggregator's side of DPHE for the model, one model layout per run.

    Parameters
    ----------
    bundle : AggregatorBundle
        The aggregator's bundle.
    keyholder : KeyholderLike
        The keyholder handle.
    params : DPHEParams
        The model stream's parameters: ``dimension`` = model size + 1 (the loss).
    """

    def __init__(
        self,
        bundle: AggregatorBundle,
        keyholder: KeyholderLike,
        params: DPHEParams,
        *,
        session_proof: bytes = b"",
    ) -> None:
        self.sum = SecureSum(bundle, keyholder, params, stream=STREAM_MODEL)
        self.session_proof = session_proof
        self._global: np.ndarray | None = None
        self._layout: ArrayLayout | None = None
        self.history: dict[int, dict[str, float]] = {}

    @property
    def keyholder(self) -> KeyholderLike:
        """The keyholder handle (never the key itself)."""
        return self.sum.keyholder

    @keyholder.setter
    def keyholder(self, value: KeyholderLike) -> None:
        self.sum.keyholder = value

    @property
    def session(self) -> bytes:
        """The keyholder's session id, sent to the clients in the train config."""
        return self.sum.session

    def begin_round(self, arrays: ArrayRecord, server_round: int) -> None:
        """Start a new encrypted sum for the model ``arrays`` sent this round.

        Raises
        ------
        ValueError
            If the model's size does not match the pinned model stream.
        """
        vector, layout = flatten_arrays({n: a.numpy() for n, a in arrays.items()})
        if vector.size + 1 != self.sum.params.dimension:
            raise ValueError(
                f"the model has {vector.size} values but the DPHE model stream is "
                f"pinned to {self.sum.params.dimension - 1} (+1 for the loss)"
            )
        self._global, self._layout = vector, layout
        self.sum.begin(server_round)

    def screen(self, msg: Message, partition_id: int | None) -> str | None:
        """Take the ``dphe`` record out of ``msg`` and add it to the sum.

        Returns the reason the reply is unusable, or ``None`` once it is added.
        """
        content = msg.content
        record = content.pop(K.DPHE, None)
        if record is None:
            return f"no '{K.DPHE}' record (secure aggregation is on)"
        if len(content.array_records) or len(content.metric_records) != 1:
            return (
                f"expected only the '{K.DPHE}' record and one MetricRecord, got "
                f"{len(content.array_records)} other ArrayRecord(s) and "
                f"{len(content.metric_records)} MetricRecord(s)"
            )
        try:
            update = self.sum.parse(record, partition_id)
            self.sum.add(partition_id, update)  # type: ignore[arg-type]
        except ValueError as exc:
            return f"DPHE update refused: {exc}"
        return None

    def aggregate(
        self, server_round: int, kept: object = None
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Decrypt (via the keyholder) and apply the average update.

        Returns ``(None, None)`` -- no update this round -- when fewer than 3
        clients contributed or the keyholder refuses the aggregate; otherwise the
        new model and ``{"train-loss": weighted average loss}`` (decrypted with the
        update: no client's own loss is ever seen). ``kept`` is unused: the
        replies' MetricRecords carry nothing under DPHE.
        """
        assert self._global is not None and self._layout is not None
        result = self.sum.decrypt_average(server_round)
        if result is None:
            return None, None
        average, total_weight, blocks = result
        update, loss = split_loss(average)
        arrays = unflatten_arrays(self._global + update, self._layout)
        self.history[server_round] = {
            "contributors": self.sum.contributors,
            "blocks": blocks,
            "total-weight": float(total_weight),
        }
        record = ArrayRecord(
            {name: Array(np.ascontiguousarray(v)) for name, v in arrays.items()}
        )
        return record, MetricRecord({K.TRAIN_LOSS: loss})

"""Reproducible client selection and aggregation order, by partition id.

Flower's node ids are random per run, and its ``sample_nodes`` draws from Python's
global ``random``. To get the same clients, in the same order, for the same seed,
the server first learns each node's ``partition-id`` (``server/discovery.py``); this
mixin then (a) shows Flower's sampling the node list sorted by partition id and seeds
``random`` for that one call (restoring its state after), and (b) sorts replies by
partition id before aggregation, so floating-point sums are always taken in the same
order. It also screens replies (``strategies/reply_checks.py``), keeps the
aggregated train metrics per round and measures the bytes exchanged per client.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable
from logging import INFO, WARNING
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result

from privacy.ledger import MechanismUse
from privacy.policy import split_refusal
from server.discovery import (
    NodesRefusedError,
    is_policy_refusal,
    refusal_reason,
    refusal_summary,
)
from settings import keys as K
from settings.privacy_records import missing_mechanisms, read_privacy
from strategies.dphe.protocol import SecureAggregator
from strategies.reply_checks import (
    array_signature,
    restore_dtypes,
    train_reply_problem,
)

if TYPE_CHECKING:
    from strategies.dphe.aggregation import SecureSum


class _PartitionOrderedGrid:
    """A view of a Grid whose ``get_node_ids`` is sorted by partition id."""

    def __init__(self, grid: Grid, strategy: PartitionOrderedMixin) -> None:
        self._grid = grid
        self._strategy = strategy

    def get_node_ids(self) -> list[int]:
        nodes = self._grid.get_node_ids()
        known = self._strategy.node_partitions
        if known:  # nodes that failed discovery or joined later take no part
            nodes = [n for n in nodes if n in known]
        return sorted(nodes, key=self._strategy.order_key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)


class PartitionOrderedMixin:
    """Mix in *before* a Flower FedAvg-family strategy class.

    Gives every strategy the whole :class:`strategies.protocol.HashingStrategy`
    interface the experiment loop uses; a method overrides what it has of its own
    (:meth:`set_label_space`, :meth:`set_secure_prototypes`, the screening hooks).

    Client contract: every train reply carries exactly one ArrayRecord with the same
    names/shapes/dtypes as the global model and one MetricRecord with a positive
    ``num-examples``; other replies are dropped for that round.
    """

    #: attributes of a method's own state that a checkpoint keeps
    #: (:meth:`state_dict`); dicts keyed by node id are listed in ``NODE_KEYED``
    #: too, and are saved keyed by partition id (node ids change between runs)
    CHECKPOINTED: tuple[str, ...] = ()
    NODE_KEYED: tuple[str, ...] = ()

    def __init__(
        self,
        *args: Any,
        sampling_seed: int = 0,
        faults: tuple[int, str, float] = (0, "raise", 0.0),
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.sampling_seed = sampling_seed
        # (clients told to fail per round, how, delay of a "timeout" fault)
        self.faults = faults
        self.node_partitions: dict[int, int] = {}
        self.train_history: dict[int, MetricRecord] = {}
        self.comm_history: dict[int, dict[str, float]] = {}
        self.kept_nodes: list[int] = []  # nodes whose replies the last round used
        # {round: [(partition id, mechanisms applied)]} from kept replies' privacy
        # records (the ledger itself charges every reply as it arrives:
        # server/charging_grid.py)
        self.privacy_history: dict[int, list[tuple[int, list[MechanismUse]]]] = {}
        self._privacy: dict[int, list[MechanismUse]] = {}
        self.required_mechanisms: tuple[str, ...] = ()
        self._expected: dict[str, tuple[tuple[int, ...], str]] = {}
        self._sent: list[Message] = []
        self.secure_aggregation: SecureAggregator | None = None
        self.num_classes: int | None = None
        # {round: {"classes": [...], "clients": n, ...}}; methods with prototypes
        self.prototype_history: dict[int, dict[str, Any]] = {}

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
        *,
        first_round: int = 1,
    ) -> Result:
        """Flower's ``Strategy.start`` loop, able to begin at a later round.

        The same calls in the same order as Flower 1.42's ``Strategy.start``
        (configure/aggregate train, configure/aggregate evaluate, ``evaluate_fn``),
        which always begins at round 1. ``first_round > 1`` continues a run from a
        checkpoint: ``initial_arrays`` are then the arrays after round
        ``first_round - 1`` and the round-0 evaluation is not repeated.
        """
        train_config = ConfigRecord() if train_config is None else train_config
        evaluate_config = ConfigRecord() if evaluate_config is None else evaluate_config
        result = Result()
        result.arrays = initial_arrays
        arrays = initial_arrays
        if evaluate_fn and first_round == 1:
            res = evaluate_fn(0, initial_arrays)
            if res is not None:
                result.evaluate_metrics_serverapp[0] = res
        for current_round in range(first_round, num_rounds + 1):
            log(INFO, "[ROUND %s/%s]", current_round, num_rounds)
            replies = grid.send_and_receive(
                messages=self.configure_train(  # type: ignore[attr-defined]
                    current_round, arrays, train_config, grid
                ),
                timeout=timeout,
            )
            agg_arrays, agg_metrics = self.aggregate_train(current_round, replies)
            if agg_arrays is not None:
                result.arrays = arrays = agg_arrays
            if agg_metrics is not None:
                result.train_metrics_clientapp[current_round] = agg_metrics
            replies = grid.send_and_receive(
                messages=self.configure_evaluate(  # type: ignore[attr-defined]
                    current_round, arrays, evaluate_config, grid
                ),
                timeout=timeout,
            )
            agg_eval = self.aggregate_evaluate(  # type: ignore[attr-defined]
                current_round, replies
            )
            if agg_eval is not None:
                result.evaluate_metrics_clientapp[current_round] = agg_eval
            if evaluate_fn:
                res = evaluate_fn(current_round, arrays)
                if res is not None:
                    result.evaluate_metrics_serverapp[current_round] = res
        return result

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs from this strategy (for a checkpoint).

        The per-round histories (train metrics, bytes, privacy mechanisms,
        prototype classes) and the method's :attr:`CHECKPOINTED` attributes;
        node-keyed dicts are keyed by partition id.
        """
        own = {}
        for name in self.CHECKPOINTED:
            value = getattr(self, name)
            if name in self.NODE_KEYED:
                value = {self.node_partitions[n]: v for n, v in value.items()}
            own[name] = value
        return {
            "train_history": self.train_history,
            "comm_history": self.comm_history,
            "privacy_history": self.privacy_history,
            "prototype_history": self.prototype_history,
            "own": own,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`; call after :meth:`set_node_partitions`.

        Raises
        ------
        ValueError
            If a node-keyed entry names a partition no connected node holds.
        """
        self.train_history = dict(state["train_history"])
        self.comm_history = dict(state["comm_history"])
        self.privacy_history = {
            r: [(int(pid), list(uses)) for pid, uses in rows]
            for r, rows in state["privacy_history"].items()
        }
        self.prototype_history = dict(state["prototype_history"])
        node_of = {pid: n for n, pid in self.node_partitions.items()}
        for name in self.CHECKPOINTED:
            value = state["own"][name]
            if name in self.NODE_KEYED:
                missing = sorted(set(value) - set(node_of))
                if missing:
                    raise ValueError(
                        f"checkpoint holds {name} of partitions {missing}, which no "
                        "connected node holds"
                    )
                value = {node_of[pid]: v for pid, v in value.items()}
            setattr(self, name, value)

    def set_secure_aggregation(self, secure: SecureAggregator | None) -> None:
        """Aggregate encrypted updates (DPHE) instead of plaintext models."""
        self.secure_aggregation = secure

    def set_secure_prototypes(self, secure: SecureSum | None) -> None:
        """Encrypted prototype sums; only a method that exchanges prototypes takes them.

        Raises
        ------
        ValueError
            If ``secure`` is given to a method without prototypes.
        """
        if secure is not None:
            raise ValueError(f"{type(self).__name__} exchanges no prototypes")

    def set_label_space(self, num_classes: int) -> None:
        """Size of the label space; class ids outside ``0..C-1`` are rejected."""
        self.num_classes = int(num_classes)

    def set_required_mechanisms(self, names: tuple[str, ...]) -> None:
        """Privacy mechanisms every train reply must report (else it is dropped)."""
        self.required_mechanisms = tuple(names)

    def set_node_partitions(self, node_partitions: dict[int, int]) -> None:
        """Record ``{node_id: partition_id}`` learnt at discovery."""
        self.node_partitions = dict(node_partitions)

    def order_key(self, node_id: int) -> tuple[int, int]:
        """Sort key: partition id; nodes without one sort after, by node id."""
        pid = self.node_partitions.get(node_id)
        return (0, pid) if pid is not None else (1, node_id)

    def client_name(self, node_id: int) -> str:
        """``partition P (node N)`` for log lines."""
        pid = self.node_partitions.get(node_id, "?")
        return f"partition {pid} (node {node_id})"

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Flower's configure_train on a partition-sorted grid with seeded sampling."""
        self._expected = array_signature(arrays)
        if self.secure_aggregation is not None:
            self.secure_aggregation.begin_round(arrays, server_round)
            # the clients bind their encrypted updates to the keyholder's session
            config = ConfigRecord(
                {
                    **dict(config),
                    K.DPHE_SESSION: self.secure_aggregation.session.hex(),
                    K.DPHE_SESSION_PROOF: self.secure_aggregation.session_proof.hex(),
                    # the layout of encrypted prototype sums (FedHAP)
                    **(
                        {K.NUM_CLASSES: self.num_classes}
                        if self.num_classes is not None
                        else {}
                    ),
                }
            )
        state = random.getstate()
        random.seed(self.sampling_seed * 1_000_003 + server_round)
        try:
            messages = super().configure_train(  # type: ignore[misc]
                server_round, arrays, config, _PartitionOrderedGrid(grid, self)
            )
        finally:
            random.setstate(state)
        # kept so that aggregate_train can count what was sent, including records
        # that subclasses add to these messages after this call
        self._sent = sorted(
            messages, key=lambda m: self.order_key(m.metadata.dst_node_id)
        )
        self._mark_faults(server_round)
        return self._sent

    def _mark_faults(self, server_round: int) -> None:
        """Tell ``faults.clients`` of the sampled clients how to fail (seeded)."""
        count, kind, delay = self.faults
        if not count or not self._sent:
            return
        rng = np.random.default_rng([self.sampling_seed, server_round, 0xFA])
        picked = rng.choice(
            len(self._sent), size=min(count, len(self._sent)), replace=False
        )
        for i in sorted(int(j) for j in picked):
            msg = self._sent[i]
            # Flower builds every message on one shared RecordDict: copy it
            content = RecordDict(dict(msg.content.items()))
            content[K.CONFIG] = ConfigRecord(
                {**dict(content[K.CONFIG]), K.FAULT: kind, K.FAULT_DELAY: delay}
            )
            msg.content = content
            log(
                INFO,
                "round %d: fault injection: %s is told to fail (%s)",
                server_round,
                self.client_name(msg.metadata.dst_node_id),
                kind,
            )

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Drop bad replies (logged), sort by partition id, then Flower's FedAvg."""
        kept = []
        up_bytes = []
        refusals: Counter[str] = Counter()  # nodes' privacy-policy refusals
        self._privacy = {}
        for msg in sorted(
            replies, key=lambda m: self.order_key(m.metadata.src_node_id)
        ):
            if msg.has_error() and is_policy_refusal(msg.error.reason):
                refusals[refusal_reason(split_refusal(msg.error.reason)[0])] += 1
                problem = f"refused by its privacy policy: {msg.error.reason}"
            elif msg.has_error():  # the ClientApp raised, timed out or went away
                reason = str(msg.error.reason).strip().splitlines()
                problem = f"error reply ({reason[-1] if reason else msg.error.code})"
            else:
                up_bytes.append(content_bytes(msg.content))
                problem = self.screen_train_reply(msg)
            if problem is not None:
                log(
                    WARNING,
                    "round %d: dropping reply from %s: %s",
                    server_round,
                    self.client_name(msg.metadata.src_node_id),
                    problem,
                )
                continue
            kept.append(msg)
        self.kept_nodes = [m.metadata.src_node_id for m in kept]
        self.privacy_history[server_round] = [
            (self.node_partitions.get(n, -1), self._privacy[n])
            for n in self.kept_nodes
            if self._privacy.get(n)
        ]
        sent = self._sent
        self.comm_history[server_round] = {
            "down_bytes_per_client": _mean(content_bytes(m.content) for m in sent),
            "up_bytes_per_client": _mean(up_bytes),
        }
        minimum = int(getattr(self, "min_train_nodes", 1))
        if len(kept) < minimum and len(sent) - sum(refusals.values()) < minimum:
            # a node's policy refuses every later round too: stop, loudly
            raise NodesRefusedError(
                f"round {server_round}: {sum(refusals.values())} of {len(sent)} "
                f"node(s) refused the run under their privacy policy, fewer than "
                f"min-train-nodes={minimum} can take part" + refusal_summary(refusals)
            )
        if len(kept) < minimum:
            log(
                WARNING,
                "round %d: %d usable replies of %d sent, fewer than min-train-nodes="
                "%d: no update this round (the global model stays as it was)",
                server_round,
                len(kept),
                len(sent),
                minimum,
            )
            self.kept_nodes = []
            return None, None
        if self.secure_aggregation is not None:
            arrays, metrics = self.secure_aggregation.aggregate(server_round, kept)
        else:
            arrays, metrics = super().aggregate_train(server_round, kept)  # type: ignore[misc]
        if arrays is not None:
            # integer buffers (BatchNorm's num_batches_tracked) come back as floats
            arrays = restore_dtypes(arrays, self._expected)
        if metrics is not None:
            self.train_history[server_round] = metrics
        return arrays, metrics

    def screen_train_reply(self, msg: Message) -> str | None:
        """Why a (non-error) train reply is unusable, or ``None`` to keep it.

        The one screening path of every strategy, in order: the method's own
        records (:meth:`screen_extras` takes them out of ``msg``: Flower's FedAvg
        wants exactly one ArrayRecord and one MetricRecord); a ``privacy``
        ConfigRecord (mechanisms the client applied), read for the ledger -- a
        malformed one, or one that lacks a mechanism the run requires, drops the
        reply; then the model update (:func:`train_reply_problem`, or the DPHE
        component's screen). Only a reply that passes all of them is kept, and
        what :meth:`screen_extras` read from it goes to :meth:`keep_extras`.
        """
        problem, extras = self.screen_extras(msg)
        if problem is not None:
            return problem
        uses: list[MechanismUse] = []
        if K.PRIVACY in msg.content:
            try:
                uses = read_privacy(msg.content[K.PRIVACY])
            except ValueError as exc:
                return str(exc)
        problem = missing_mechanisms(uses, self.required_mechanisms)
        if problem:
            return problem
        if self.secure_aggregation is not None:
            problem = self.secure_aggregation.screen(
                msg, self.node_partitions.get(msg.metadata.src_node_id)
            )
        else:
            problem = train_reply_problem(msg, self._expected)
        if problem is None:
            self._privacy[msg.metadata.src_node_id] = uses
            self.keep_extras(msg.metadata.src_node_id, extras)
        return problem

    def screen_extras(self, msg: Message) -> tuple[str | None, object]:
        """Take the method's own records out of a train reply and check them.

        Returns ``(problem, extras)``: a reason to drop the reply, or ``None`` and
        what was read (handed to :meth:`keep_extras` if the reply is kept). The
        baselines carry no extra records: ``(None, None)``.
        """
        return None, None

    def keep_extras(self, node_id: int, extras: object) -> None:
        """Keep what :meth:`screen_extras` read from a kept reply (here: nothing)."""


def content_bytes(content: RecordDict) -> int:
    """Payload bytes of a message's records (Flower's ``count_bytes``).

    Flower 1.42's ``ConfigRecord.count_bytes`` raises IndexError on an empty list
    value; such a record (from a client) counts 0 bytes here instead of ending the
    round, and the reply is then judged by the screening like any other.
    """
    total = 0
    for record in content.values():
        try:
            total += record.count_bytes()
        except (IndexError, TypeError):
            continue
    return total


def _mean(values: Iterable[float]) -> float:
    vals = list(values)
    return float(sum(vals) / len(vals)) if vals else 0.0

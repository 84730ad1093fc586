"""Screening of train replies, aggregation in partition order, per-round histories.

Every strategy (:class:`strategies.base.HashingStrategyBase`) drops unusable train
replies (``strategies/reply_checks.py``) before Flower's FedAvg, or DPHE's secure
sum, sees them, and keeps per round the aggregated train metrics, the bytes
exchanged per client and the privacy mechanisms the kept replies applied.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from logging import WARNING
from typing import TYPE_CHECKING

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

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
from strategies.reply_checks import (
    array_signature,
    restore_dtypes,
    train_reply_problem,
)

if TYPE_CHECKING:
    from strategies.dphe.protocol import SecureAggregator


def client_metrics(msg: Message) -> dict[str, float]:
    """Return the numbers of a train reply's MetricRecords (``train-loss`` ...)."""
    return {
        name: float(value)
        for record in msg.content.metric_records.values()
        for name, value in record.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


class ReplyScreening:
    """Drop unusable train replies; aggregate the others in partition order.

    Client contract: every train reply carries exactly one ArrayRecord with the
    same names/shapes/dtypes as the global model and one MetricRecord with a
    positive ``num-examples``; other replies are dropped for that round.
    """

    node_partitions: dict[int, int]
    secure_aggregation: SecureAggregator | None
    required_mechanisms: tuple[str, ...]
    train_history: dict[int, MetricRecord]
    client_train_history: dict[int, dict[int, dict[str, float]]]
    comm_history: dict[int, dict[str, float]]
    privacy_history: dict[int, list[tuple[int, list[MechanismUse]]]]
    kept_nodes: list[int]
    _privacy: dict[int, list[MechanismUse]]
    _expected: dict[str, tuple[tuple[int, ...], str]]
    _sent: list[Message]

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Note the global arrays' names, shapes and dtypes the replies must match."""
        self._expected = array_signature(arrays)
        return super().configure_train(  # type: ignore[misc,no-any-return]
            server_round, arrays, config, grid
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
            replies,
            key=lambda m: self.order_key(m.metadata.src_node_id),  # type: ignore[attr-defined]
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
        self.client_train_history[server_round] = {
            self.node_partitions.get(m.metadata.src_node_id, -1): client_metrics(m)
            for m in kept
        }
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

"""Reproducible client selection and aggregation order, by partition id.

Flower's node ids are random per run, and its ``sample_nodes`` draws from Python's
global ``random``. To get the same clients, in the same order, for the same seed,
the server first learns each node's ``partition-id`` (``server/discovery.py``); this
mixin then (a) shows Flower's sampling the node list sorted by partition id and seeds
``random`` for that one call (restoring its state after), and (b) sorts replies by
partition id before aggregation, so floating-point sums are always taken in the same
order. It also screens replies (``strategies/reply_checks.py``) and keeps the
aggregated train metrics per round.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from logging import WARNING
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid

from strategies.reply_checks import array_signature, train_reply_problem


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

    Client contract: every train reply carries exactly one ArrayRecord with the same
    names/shapes/dtypes as the global model and one MetricRecord with a positive
    ``num-examples``; other replies are dropped for that round.
    """

    def __init__(self, *args: Any, sampling_seed: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sampling_seed = sampling_seed
        self.node_partitions: dict[int, int] = {}
        self.train_history: dict[int, MetricRecord] = {}
        self._expected: dict[str, tuple[tuple[int, ...], str]] = {}

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
        state = random.getstate()
        random.seed(self.sampling_seed * 1_000_003 + server_round)
        try:
            messages = super().configure_train(  # type: ignore[misc]
                server_round, arrays, config, _PartitionOrderedGrid(grid, self)
            )
        finally:
            random.setstate(state)
        return sorted(messages, key=lambda m: self.order_key(m.metadata.dst_node_id))

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Drop bad replies (logged), sort by partition id, then Flower's FedAvg."""
        kept = []
        for msg in sorted(
            replies, key=lambda m: self.order_key(m.metadata.src_node_id)
        ):
            problem = None if msg.has_error() else self.train_reply_problem(msg)
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
        arrays, metrics = super().aggregate_train(server_round, kept)  # type: ignore[misc]
        if metrics is not None:
            self.train_history[server_round] = metrics
        return arrays, metrics

    def train_reply_problem(self, msg: Message) -> str | None:
        """Why a train reply is unusable (subclasses extend for extra records)."""
        return train_reply_problem(msg, self._expected)

"""Reproducible client selection and aggregation order, by partition id.

Flower's node ids are random per run, and its ``sample_nodes`` draws from Python's
global ``random``. To get the same clients, in the same order, for the same seed,
the server first learns each node's ``partition-id`` (``server/discovery.py``); this
part of every strategy (:class:`strategies.base.HashingStrategyBase`) then shows
Flower's sampling the node list sorted by partition id and seeds ``random`` for that
one call (restoring its state after); the replies are sorted the same way before
aggregation (:mod:`strategies.reply_screening`), so floating-point sums are always
taken in the same order.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.serverapp import Grid


class _PartitionOrderedGrid:
    """A view of a Grid whose ``get_node_ids`` is sorted by partition id."""

    def __init__(self, grid: Grid, strategy: PartitionOrder) -> None:
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


class PartitionOrder:
    """Nodes known by partition id; seeded sampling over them, in that order."""

    node_partitions: dict[int, int]
    sampling_seed: int
    _sent: list[Message]

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
        return self._sent

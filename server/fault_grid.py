"""A Grid that tells some of each round's train receivers how to fail (tests only).

Installed by the experiment around the ServerApp's grid only when the run config
asks for fault injection (``faults.clients > 0``, :mod:`settings.faults`; the
ServerApp refuses it outside Flower's simulation engine), so no strategy knows of
faults. Of each round's train messages it picks ``faults.clients`` (seeded by the
run seed and the round, so a resumed run picks the same ones) and adds the fault to
their config; the client's :func:`clients.faults.fault_mod` acts it out.
"""

from __future__ import annotations

from collections.abc import Iterable
from logging import INFO
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common import MessageType
from flwr.common.logger import log
from flwr.serverapp import Grid

from settings import keys as K


class FaultGrid:
    """Wrap ``grid``; all but the train messages' content passes through.

    Parameters
    ----------
    grid : Grid
        The grid the strategy sends through.
    clients : int
        Train receivers told to fail per round.
    kind : str
        How they fail (:data:`settings.faults.FAULT_KINDS`).
    delay : float
        Seconds a ``timeout`` fault sleeps.
    seed : int
        The run seed (with the round, it picks the receivers).
    partitions : dict
        ``{node_id: partition_id}`` from discovery, for the log lines.
    """

    def __init__(
        self,
        grid: Grid,
        *,
        clients: int,
        kind: str,
        delay: float,
        seed: int,
        partitions: dict[int, int] | None = None,
    ) -> None:
        self._grid = grid
        self.clients = clients
        self.kind = kind
        self.delay = delay
        self.seed = seed
        self.partitions = dict(partitions or {})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Mark the round's train messages, then send them through the grid."""
        return self._grid.send_and_receive(self.mark(messages), timeout=timeout)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Mark the round's train messages, then push them through the grid."""
        return self._grid.push_messages(self.mark(messages))

    def mark(self, messages: Iterable[Message]) -> list[Message]:
        """Tell ``clients`` of the train messages how to fail (seeded); return all.

        The picked messages get a copy of their content (Flower builds every
        message of a round on one shared RecordDict) with the fault in its config.
        """
        messages = list(messages)
        train = [m for m in messages if m.metadata.message_type == MessageType.TRAIN]
        if not self.clients or not train:
            return messages
        server_round = int(train[0].content[K.CONFIG][K.SERVER_ROUND])
        rng = np.random.default_rng([self.seed, server_round, 0xFA])
        picked = rng.choice(
            len(train), size=min(self.clients, len(train)), replace=False
        )
        for i in sorted(int(j) for j in picked):
            msg = train[i]
            content = RecordDict(dict(msg.content.items()))
            content[K.CONFIG] = ConfigRecord(
                {
                    **dict(content[K.CONFIG]),
                    K.FAULT: self.kind,
                    K.FAULT_DELAY: self.delay,
                }
            )
            msg.content = content
            node = msg.metadata.dst_node_id
            log(
                INFO,
                "round %d: fault injection: partition %s (node %d) is told to fail "
                "(%s)",
                server_round,
                self.partitions.get(node, "?"),
                node,
                self.kind,
            )
        return messages

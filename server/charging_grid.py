"""A Grid that charges each reply's privacy report to the ledger as the reply arrives.

Every message of a run's rounds (train, evaluation, code publication) goes through
:meth:`ChargingGrid.send_and_receive`: it pushes the messages and pulls replies the
way Flower 1.42's grids do (``push_messages``, then ``pull_messages`` until every
reply is in or the timeout passes), and charges what each reply's ``privacy``
record reports the moment it is pulled, before any strategy or evaluator reads it.
The ledger appends each charge to its journal and fsyncs it
(:class:`privacy.ledger.LedgerJournal`), so a crash after a release reached the
ServerApp, but before the round's checkpoint, keeps its charge, and a resume charges
the redo on top. A reply is charged whether or not it is used afterwards: what
reached the server was released.

Whom it protects: the clients, whose spent epsilon the ledger states. What it cannot
see: a reply the SuperLink holds but the ServerApp never pulled (the ServerApp died
first) is charged by no one here; only the node's own ledger can count that.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from logging import WARNING
from typing import Any

from flwr.app import ConfigRecord, Message
from flwr.common.logger import log
from flwr.serverapp import Grid

from privacy.ledger import PrivacyCharge, PrivacyLedger
from settings import keys as K
from settings.privacy_records import read_privacy

#: seconds between pulls when the wrapped grid states none (Flower's gRPC grid: 3 s)
DEFAULT_PULL_S = 1.0


class ChargingGrid:
    """Wrap the ServerApp's ``grid``; all but ``send_and_receive`` passes through.

    Parameters
    ----------
    grid : Grid
        The grid Flower handed to the ServerApp.
    ledger : PrivacyLedger
        Where charges go (with a journal, durably).
    partitions : dict
        ``{node_id: partition_id}`` from discovery; charges name partitions.
    note : str
        Note of every charge (the seeded-noise warning, or ``""``).
    """

    def __init__(
        self,
        grid: Grid,
        ledger: PrivacyLedger,
        partitions: dict[int, int],
        *,
        note: str = "",
    ) -> None:
        self._grid = grid
        self.ledger = ledger
        self.partitions = dict(partitions)
        self.note = note
        self._round = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        """Push ``messages``; pull replies until all are in or ``timeout`` passes.

        Each reply is charged as soon as it is pulled. Returns the replies, like
        Flower's ``Grid.send_and_receive``.
        """
        messages = list(messages)
        self._round = _round_of(messages, self._round)
        pending = set(self._grid.push_messages(messages))
        del messages
        pause = float(getattr(self._grid, "pull_interval", DEFAULT_PULL_S))
        end = time.time() + (timeout if timeout is not None else 0.0)
        replies: list[Message] = []
        while timeout is None or time.time() < end:
            got = list(self._grid.pull_messages(pending))
            for reply in got:
                self._charge(reply)
            replies.extend(got)
            pending.difference_update(m.metadata.reply_to_message_id for m in got)
            if not pending:
                break
            time.sleep(pause)
        return replies

    def _charge(self, reply: Message) -> None:
        if reply.has_error() or K.PRIVACY not in reply.content:
            return
        node = reply.metadata.src_node_id
        pid = self.partitions.get(node)
        try:
            uses = read_privacy(reply.content[K.PRIVACY])
        except (TypeError, ValueError) as exc:
            log(
                WARNING,
                "round %d: node %d sent a malformed privacy record (%s): nothing to "
                "charge; the reply is not used",
                self._round, node, exc,
            )
            return
        if pid is None:
            log(WARNING, "round %d: a privacy report from unknown node %d: not "
                "charged (the reply is not used)", self._round, node)
            return
        try:  # all or nothing: a reply's charges are checked before any is kept
            charges = [
                PrivacyCharge(pid, self._round, u.mechanism, u.epsilon, u.delta,
                              u.unit, self.note)
                for u in uses
            ]
        except ValueError as exc:
            log(WARNING, "round %d: partition %d reported an invalid privacy use "
                "(%s): not charged", self._round, pid, exc)
            return
        for c in charges:
            self.ledger.charge(
                c.client, c.round, c.mechanism, epsilon=c.epsilon, delta=c.delta,
                unit=c.unit, note=c.note,
            )


def _round_of(messages: list[Message], current: int) -> int:
    """Return the ``server-round`` the messages carry (else the last known one)."""
    for msg in messages:
        for record in msg.content.values():
            if isinstance(record, ConfigRecord) and K.SERVER_ROUND in record:
                return int(record[K.SERVER_ROUND])  # type: ignore[arg-type]
    return current

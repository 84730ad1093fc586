"""A Flower Grid whose nodes are the real ClientApp, called in this process.

``run_experiment`` drives it like a SuperLink: ``push_messages`` hands each message
to the ClientApp of its node (``clients.client_app.build_client_app``, one Context
per node, kept across messages), ``pull_messages`` returns the replies. ``crash``
makes the server "die" at a chosen point: once the train replies of round
``crash_after_train`` have been pulled, the next push raises :class:`ServerCrash`
(the ServerApp process is gone; the replies reached it). Every reply that carried a
``privacy`` record is counted in ``releases`` (partition -> rounds), which is what
the clients really released to the server.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from flwr.app import Context, Message, MessageType, RecordDict

from clients.client_app import build_client_app
from settings import keys as K


class ServerCrash(BaseException):
    """The ServerApp process died here (not an Exception: nothing may catch it)."""


class InProcessGrid:
    """``num_partitions`` nodes (ids 101, 102, ...) running the real ClientApp."""

    def __init__(
        self,
        run_config: Mapping[str, Any],
        num_partitions: int,
        *,
        crash_after_train: int | None = None,
    ) -> None:
        self.app = build_client_app()
        self.contexts = {
            100 + pid + 1: Context(
                run_id=1,
                node_id=100 + pid + 1,
                node_config={K.PARTITION_ID: pid, K.NUM_PARTITIONS: num_partitions},
                state=RecordDict(),
                run_config=dict(run_config),
            )
            for pid in range(num_partitions)
        }
        self.crash_after_train = crash_after_train
        self._armed = False
        self._outbox: dict[str, Message] = {}
        self._asked: dict[str, tuple[str, int]] = {}  # message id -> (type, round)
        self.releases: dict[int, list[int]] = {}

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        if self._armed:
            raise ServerCrash("the ServerApp died after the replies arrived")
        ids = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = str(uuid.uuid4())
            context = self.contexts[msg.metadata.dst_node_id]
            reply = self.app(msg, context)
            self._outbox[msg.metadata.message_id] = reply
            self._asked[msg.metadata.message_id] = (
                msg.metadata.message_type, _round(msg)
            )
            ids.append(msg.metadata.message_id)
            if K.PRIVACY in reply.content and not reply.has_error():
                pid = int(context.node_config[K.PARTITION_ID])
                self.releases.setdefault(pid, []).append(_round(msg))
        return ids

    def pull_messages(self, ids: Iterable[str]) -> list[Message]:
        ids = [i for i in ids if i in self._outbox]
        for i in ids:
            if self._asked[i] == (MessageType.TRAIN, self.crash_after_train):
                self._armed = True
        return [self._outbox.pop(i) for i in ids]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        return self.pull_messages(self.push_messages(messages))


def _round(msg: Message) -> int:
    """The round a server message belongs to (discovery: -1)."""
    config = msg.content.get(K.CONFIG)
    if config is not None and K.SERVER_ROUND in config:
        return int(config[K.SERVER_ROUND])
    return -1

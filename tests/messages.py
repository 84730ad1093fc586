"""Build Flower Messages directly (no SuperLink) for strategy/evaluator tests."""

from __future__ import annotations

import time

from flwr.app import Error, Message, MessageType, Metadata, RecordDict


def _metadata(
    src: int, dst: int, message_type: str, *, reply_to: str, ttl: float
) -> Metadata:
    return Metadata(
        run_id=1,
        message_id=f"m{src}",
        src_node_id=src,
        dst_node_id=dst,
        reply_to_message_id=reply_to,
        group_id="1",
        created_at=time.time(),
        ttl=ttl,
        message_type=message_type,
    )


def request_to(node_id: int, content: RecordDict, message_type: str) -> Message:
    """A message as a ClientApp on ``node_id`` receives it from the server."""
    return Message(
        metadata=_metadata(0, node_id, message_type, reply_to="", ttl=600.0),
        content=content,
    )


def reply_from(
    node_id: int,
    content: RecordDict | None = None,
    *,
    error: str | None = None,
    message_type: str = MessageType.TRAIN,
) -> Message:
    """A reply as the server receives it from ``node_id``."""
    metadata = _metadata(node_id, 0, message_type, reply_to="x", ttl=60.0)
    if error is not None:
        return Message(metadata=metadata, error=Error(code=1, reason=error))
    return Message(metadata=metadata, content=content)

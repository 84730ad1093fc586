"""Build Flower Messages directly (no SuperLink) for strategy/evaluator tests."""

from __future__ import annotations

import time

from flwr.app import Error, Message, MessageType, Metadata, RecordDict


def reply_from(
    node_id: int,
    content: RecordDict | None = None,
    *,
    error: str | None = None,
    message_type: str = MessageType.TRAIN,
) -> Message:
    """A reply as the server receives it from ``node_id``."""
    metadata = Metadata(
        run_id=1,
        message_id=f"m{node_id}",
        src_node_id=node_id,
        dst_node_id=0,
        reply_to_message_id="x",
        group_id="1",
        created_at=time.time(),
        ttl=60.0,
        message_type=message_type,
    )
    if error is not None:
        return Message(metadata=metadata, error=Error(code=1, reason=error))
    return Message(metadata=metadata, content=content)

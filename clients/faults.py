"""The client side of fault injection (:mod:`settings.faults`): a Flower mod on train.

The server marks the train messages of the clients it picked with ``fault = <kind>``
(and ``fault-delay`` for timeouts). Outside Flower's simulation engine the mark is
ignored with a warning: a deployed client does not break itself because a message
says so.
"""

from __future__ import annotations

import logging
import time

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message
from flwr.clientapp.typing import ClientAppCallable

from settings import keys as K
from settings.runtime import client_in_simulation

logger = logging.getLogger(__name__)


class InjectedFault(RuntimeError):
    """The failure a ``raise`` fault asks for."""


def fault_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Act out the fault the server asked for in ``msg`` (simulation only)."""
    config = msg.content.get(K.CONFIG)
    kind = config.get(K.FAULT) if config is not None else None
    if kind is None:
        return call_next(msg, context)
    if not client_in_simulation():
        logger.warning("ignoring injected fault %r: not in the simulation engine", kind)
        return call_next(msg, context)
    if kind == "raise":
        raise InjectedFault("fault injection: this client was told to fail")
    if kind == "timeout":
        time.sleep(float(config.get(K.FAULT_DELAY, 0.0)))
        return call_next(msg, context)
    reply = call_next(msg, context)
    if reply.has_error():
        return reply
    for name, record in list(reply.content.items()):
        if isinstance(record, ArrayRecord):
            reply.content[name] = _corrupt(record, kind)
    return reply


def _corrupt(record: ArrayRecord, kind: str) -> ArrayRecord:
    out = {}
    for key, arr in record.items():
        x = arr.numpy()
        if kind == "nan" and np.issubdtype(x.dtype, np.floating):
            x = np.full_like(x, np.nan)
        elif kind == "oversize":
            x = np.concatenate([x.reshape(-1), x.reshape(-1)])
        out[key] = Array(np.ascontiguousarray(x))
    return ArrayRecord(out)

"""Call the real ClientApp's handlers in-process, as a SuperNode would.

The attack tests play the server: they send a query or train message to the
ClientApp built by :func:`clients.client_app.build_client_app` and inspect what
comes back, without a SuperLink or Ray.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    MessageType,
    RecordDict,
)

from clients.client_app import build_client_app
from clients.data import load_local_data
from hashing.codes import unpack_bytes
from settings import keys as K
from settings.run_model import build_run_model
from settings.run_settings import RunSettings
from tests.messages import request_to

NUM_PARTITIONS = 4
NODE_ID = 7


def _context(
    pid: int, config: Mapping[str, Any], num_partitions: int = NUM_PARTITIONS
) -> Context:
    return Context(
        run_id=1,
        node_id=NODE_ID,
        node_config={K.PARTITION_ID: pid, K.NUM_PARTITIONS: num_partitions},
        state=RecordDict(),
        run_config=dict(config),
    )


def global_model(
    settings: RunSettings, pid: int, num_partitions: int = NUM_PARTITIONS
) -> ArrayRecord:
    """The (untrained, seeded) global model the server would send."""
    data = load_local_data(settings, partition_id=pid, num_partitions=num_partitions)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        model = build_run_model(settings, data.input_shape, data.num_classes)
        return ArrayRecord(model.state_dict())


def query_encode_at(
    config: Mapping[str, Any], pid: int, num_partitions: int = NUM_PARTITIONS
) -> tuple[np.ndarray, np.ndarray]:
    """Send ``op=encode`` to client ``pid`` of ``num_partitions``; (codes, labels)."""
    settings = RunSettings.from_config(config)
    content = RecordDict(
        {
            K.ARRAYS: global_model(settings, pid, num_partitions),
            K.CONFIG: ConfigRecord({K.SERVER_ROUND: 1}),
        }
    )
    reply = build_client_app()(
        request_to(NODE_ID, content, K.QUERY_ENCODE),
        _context(pid, config, num_partitions),
    )
    bits = int(reply.content[K.CONFIG][K.CODE_BITS])
    record = reply.content[K.CODES]
    return (
        unpack_bytes(record[K.PACKED_CODES].numpy(), bits),
        record[K.CODE_LABELS].numpy(),
    )


def query_encode(
    config: Mapping[str, Any], pid: int, server_round: int
) -> tuple[np.ndarray, np.ndarray]:
    """Send ``op=encode``; return (published codes, the client's true codes)."""
    settings = RunSettings.from_config(config)
    arrays = global_model(settings, pid)
    content = RecordDict(
        {
            K.ARRAYS: arrays,
            K.CONFIG: ConfigRecord(
                {K.SERVER_ROUND: server_round}
            ),
        }
    )
    app = build_client_app()
    reply = app(request_to(NODE_ID, content, K.QUERY_ENCODE), _context(pid, config))
    bits = int(reply.content[K.CONFIG][K.CODE_BITS])
    packed = reply.content[K.CODES][K.PACKED_CODES].numpy()
    published = unpack_bytes(packed, bits)
    # the truth, which only the client knows: sign of its codes, no flips
    no_flip = {**config, "privacy.code-flip-epsilon": 0.0}
    reply = build_client_app()(
        request_to(NODE_ID, content, K.QUERY_ENCODE), _context(pid, no_flip)
    )
    true = unpack_bytes(reply.content[K.CODES][K.PACKED_CODES].numpy(), bits)
    return published, true


def train(config: Mapping[str, Any], pid: int, server_round: int) -> dict[str, Any]:
    """Send a train message; return the reply's model state (numpy arrays)."""
    settings = RunSettings.from_config(config)
    content = RecordDict(
        {
            K.ARRAYS: global_model(settings, pid),
            K.CONFIG: ConfigRecord({K.SERVER_ROUND: server_round}),
        }
    )
    app = build_client_app()
    reply = app(request_to(NODE_ID, content, MessageType.TRAIN), _context(pid, config))
    return {k: v.numpy() for k, v in reply.content[K.ARRAYS].items()}

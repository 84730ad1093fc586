"""The ClientApp: reads node/run config, loads local data, dispatches to library code.

Message types handled:

* ``train``  -- local training with the strategy's registered trainer.
* ``query``  -- ``op=describe``: report partition id and local database size;
  ``op=encode``: encode the local database with the sent model and publish the
  codes (never raw data) through :func:`clients.publish.publish_codes`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

import clients.fedhap_trainer  # noqa: F401  (registers the "fedhap" trainer)
from clients.data import load_local_data
from clients.publish import publish_codes
from clients.trainers import TrainContext, get_trainer
from hashing.codes import pack_bytes, sign_codes
from hashing.train import encode, select_device
from settings import keys as K
from settings.privacy_records import privacy_record
from settings.run_model import build_run_model
from settings.run_settings import RunSettings

logger = logging.getLogger(__name__)


def node_partition(context: Context) -> tuple[int, int]:
    """``(partition-id, num-partitions)`` from the node config, validated."""
    node = context.node_config
    missing = [k for k in (K.PARTITION_ID, K.NUM_PARTITIONS) if k not in node]
    if missing:
        raise ValueError(
            f"node config lacks {', '.join(missing)}: start the SuperNode with "
            "--node-config 'partition-id=<i> num-partitions=<n>'"
        )
    pid, num = int(node[K.PARTITION_ID]), int(node[K.NUM_PARTITIONS])
    if num < 1 or not 0 <= pid < num:
        raise ValueError(
            f"node config partition-id={pid}, num-partitions={num}: accepted is "
            "0 <= partition-id < num-partitions"
        )
    return pid, num


def derive_seed(*parts: int) -> int:
    """Derive a 63-bit seed from (run seed, round, partition id, purpose)."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1, np.uint64)[0] >> 1)


def build_client_app(overrides: Mapping[str, Any] | None = None) -> ClientApp:
    """ClientApp whose run config is ``context.run_config`` updated by ``overrides``.

    ``flwr run`` uses ``app`` (no overrides); tests pass overrides because
    ``flwr.simulation.run_simulation`` has no run-config argument.
    """
    app = ClientApp()
    extra = dict(overrides or {})

    def settings_of(context: Context) -> RunSettings:
        return RunSettings.from_config({**dict(context.run_config), **extra})

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        settings = settings_of(context)
        pid, num = node_partition(context)
        server_round = int(msg.content[K.CONFIG].get(K.SERVER_ROUND, 0))
        seed = derive_seed(settings.seed, server_round, pid, 0)
        torch.manual_seed(seed)  # dropout and any other torch randomness
        device = select_device(settings.device)
        logger.info("partition %d round %d training on %s", pid, server_round, device)
        ctx = TrainContext(
            settings=settings,
            data=load_local_data(settings, partition_id=pid, num_partitions=num),
            device=device,
            partition_id=pid,
            server_round=server_round,
            generator=torch.Generator().manual_seed(seed),
        )
        reply = get_trainer(settings.strategy)(msg.content, ctx)
        return Message(reply, reply_to=msg)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        settings = settings_of(context)
        pid, num = node_partition(context)
        data = load_local_data(settings, partition_id=pid, num_partitions=num)
        op = msg.content[K.CONFIG][K.QUERY_OP]
        if op == K.OP_DESCRIBE:
            reply = RecordDict(
                {
                    K.CONFIG: ConfigRecord(
                        {
                            K.PARTITION_ID: pid,
                            K.NUM_PARTITIONS: num,
                            K.NUM_DATABASE: len(data.inputs),
                            K.NODE_DEVICE: str(select_device(settings.device)),
                        }
                    )
                }
            )
            return Message(reply, reply_to=msg)
        if op != K.OP_ENCODE:
            raise ValueError(f"unknown query op {op!r}")
        server_round = int(msg.content[K.CONFIG].get(K.SERVER_ROUND, 0))
        model = build_run_model(settings, data.input_shape)
        model.load_state_dict(msg.content[K.ARRAYS].to_torch_state_dict())
        codes = sign_codes(
            encode(model, data.inputs, device=select_device(settings.device))
        )
        rng = np.random.default_rng(derive_seed(settings.seed, server_round, pid, 1))
        published, uses = publish_codes(codes, settings=settings, rng=rng)
        labels = data.labels.numpy()
        reply = RecordDict(
            {
                K.CODES: ArrayRecord(
                    {
                        K.PACKED_CODES: Array(pack_bytes(published)),
                        K.CODE_LABELS: Array(np.ascontiguousarray(labels)),
                    }
                ),
                K.CONFIG: ConfigRecord(
                    {K.CODE_BITS: published.shape[1], K.PARTITION_ID: pid}
                ),
            }
        )
        if uses:
            reply[K.PRIVACY] = privacy_record(uses)
        return Message(reply, reply_to=msg)

    return app


app = build_client_app()

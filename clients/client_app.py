"""The ClientApp: reads node/run config, loads local data, dispatches to library code.

Flower routes each message on its type (``<category>.<action>``):

* ``train``  -- local training with the method's trainer (its client side,
  :func:`strategies.client_side.client_side`); the update then leaves through the
  :func:`clients.sparse_updates.sparsify_mod` mod (sparsified as the run asks, with
  error feedback) and the :func:`clients.dphe_updates.dphe_mod` mod (DPHE-encrypted
  under ``secure-aggregation = "dphe"``, obfuscators from the node's pool; its
  Paillier code is imported only by a DPHE run), and :func:`clients.faults.fault_mod`
  acts out an injected fault (tests and benchmarks, simulation only).
* ``query.describe`` -- report partition id, local database size and device.
* ``query.encode`` -- encode the local database with the sent model and publish the
  codes (never raw data) through :func:`clients.publish.publish_codes`; a client of
  a repeated split (``partition-repeats > 1``) publishes none, split 0 holds its rows.
* ``query.<action>`` of a method (PFMH: ``query.pfmh_eval``, per-client retrieval
  with the client's own model), registered from :mod:`strategies.catalog`, answered
  by the run's method's client side.

The app imports no method's code: the client side of a run's method is loaded when
its first message arrives, and nothing of the server half is imported.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable, Mod

from clients.data import load_local_data
from clients.faults import fault_mod
from clients.node_inputs import check_node_inputs, with_node_data_path
from clients.node_log import record_nodes
from clients.node_policy import policy_mod
from clients.privacy_noise import (
    PURPOSE_PUBLISH,
    PURPOSE_TRAIN,
    node_entropy,
    node_noise,
)
from clients.publish import publish_codes
from clients.sparse_updates import BlockLayout, sparsify_mod
from clients.trainers import TrainContext, dp_noise_multiplier
from hashing.codes import pack_bytes, sign_codes
from hashing.train import encode, select_device
from settings import keys as K
from settings.privacy_records import privacy_record
from settings.run_settings import RunSettings
from strategies.catalog import query_actions
from strategies.client_side import client_side

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
    """Derive a 63-bit seed from (run seed, round, partition id, purpose[, entropy]).

    Where the run claims privacy, callers append :func:`node_entropy` words, so the
    server, which knows every other part, cannot reproduce the draw.
    """
    return int(np.random.SeedSequence(list(parts)).generate_state(1, np.uint64)[0] >> 1)


class _ClientApp(ClientApp):
    """A ClientApp that pickles as "build it from these overrides".

    Flower's Ray backend pickles the app with every message it hands an actor; a
    closure-laden app cost ~20 ms of cloudpickle per message (docs/benchmarks.md).
    This one pickles by reference: the actor rebuilds it once per process
    (:func:`build_client_app` keeps one per overrides).
    """

    def __init__(self, key: _AppKey) -> None:
        super().__init__()
        self._key = key

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _app_for, (self._key,)


_AppKey = tuple[tuple[tuple[str, Any], ...], str | None]  # (overrides, node log)
_APPS: dict[_AppKey, ClientApp] = {}
_SETTINGS_CACHE = 64  # parsed run configs kept per process


def train_device(settings: RunSettings) -> torch.device:
    """Return the device this node trains on (``device``, ``cuda-deterministic``)."""
    return select_device(settings.device, deterministic=settings.cuda_deterministic)


def build_client_app(
    overrides: Mapping[str, Any] | None = None, *, node_log: str | None = None
) -> ClientApp:
    """ClientApp whose run config is ``context.run_config`` updated by ``overrides``.

    ``flwr run`` uses ``app`` (no overrides); tests pass overrides because
    ``flwr.simulation.run_simulation`` has no run-config argument. ``node_log``:
    append which Ray node ran each message to that file
    (:func:`clients.node_log.record_nodes`). One app per process and arguments (the
    Ray actors rebuild it from its pickle).
    """
    return _app_for((tuple(sorted((overrides or {}).items())), node_log))


def _app_for(key: _AppKey) -> ClientApp:
    if key not in _APPS:
        _APPS[key] = _build(key)
    return _APPS[key]


def _build(key: _AppKey) -> ClientApp:
    app = _ClientApp(key)
    extra = dict(key[0])
    if key[1] is not None:
        record_nodes(app, Path(key[1]))
    parsed: dict[tuple[Any, ...], RunSettings] = {}

    def settings_of(context: Context) -> RunSettings:
        config = with_node_data_path(
            {**dict(context.run_config), **extra}, context.node_config
        )
        # RunSettings is frozen: parse each distinct config once per process
        memo = tuple(sorted(config.items()))
        if memo not in parsed:
            if len(parsed) >= _SETTINGS_CACHE:
                parsed.clear()
            parsed[memo] = RunSettings.from_config(config)
        return parsed[memo]

    def blocks_of(
        msg: Message, context: Context, settings: RunSettings, dimension: int
    ) -> BlockLayout | None:
        from clients.dphe_updates import model_blocks  # noqa: PLC0415 (Paillier)

        return model_blocks(
            settings,
            partition_id=node_partition(context)[0],
            node_bundle=str(context.node_config.get(K.DPHE_KEY_BUNDLE, "")),
            train_config=msg.content[K.CONFIG],
            dimension=dimension,
        )

    sparsify = sparsify_mod(settings_of, blocks_of)
    encrypt = _dphe_only(settings_of, node_partition, derive_seed)

    def noise_multiplier_of(settings: RunSettings, context: Context) -> float:
        pid, num = node_partition(context)
        data = load_local_data(settings, partition_id=pid, num_partitions=num)
        return dp_noise_multiplier(settings, len(data.training_view().inputs))

    # the node's privacy policy outermost: a refused run reaches no handler
    policy = policy_mod(settings_of, node_partition, noise_multiplier_of)

    # fault_mod next: a "nan"/"oversize" fault corrupts the reply as sent; the
    # update is sparsified (innermost), then encrypted
    @app.train(mods=[policy, fault_mod, encrypt, sparsify])
    def train(msg: Message, context: Context) -> Message:
        settings = settings_of(context)
        pid, num = node_partition(context)
        server_round = int(msg.content[K.CONFIG].get(K.SERVER_ROUND, 0))
        # batch order and dropout: the run seed, plus fresh node entropy where the
        # run claims privacy (no bit-identical update across runs)
        seed = derive_seed(settings.seed, server_round, pid, 0, *node_entropy(settings))
        torch.manual_seed(seed)  # dropout and any other torch randomness
        device = train_device(settings)
        logger.info("partition %d round %d training on %s", pid, server_round, device)
        ctx = TrainContext(
            settings=settings,
            data=load_local_data(
                settings, partition_id=pid, num_partitions=num
            ).training_view(),
            device=device,
            partition_id=pid,
            server_round=server_round,
            generator=torch.Generator().manual_seed(seed),
            noise=node_noise(
                settings,
                server_round=server_round,
                partition_id=pid,
                purpose=PURPOSE_TRAIN,
            ),
            state=context.state,
        )
        trainer = client_side(settings.strategy).trainer
        if trainer is None:
            raise ValueError(f"strategy {settings.strategy!r} trains nothing")
        reply = trainer(msg.content, ctx)
        return Message(reply, reply_to=msg)

    @app.query("describe", mods=[policy])
    def describe(msg: Message, context: Context) -> Message:
        settings = settings_of(context)
        pid, num = node_partition(context)
        # missing node-local inputs fail discovery, before any training
        check_node_inputs(settings, node_config=context.node_config, partition_id=pid)
        data = load_local_data(settings, partition_id=pid, num_partitions=num)
        data.training_view()  # a partition with no train-size row fails here
        reply = RecordDict(
            {
                K.CONFIG: ConfigRecord(
                    {
                        K.PARTITION_ID: pid,
                        K.NUM_PARTITIONS: num,
                        K.NUM_DATABASE: data.num_samples,
                        K.NODE_DEVICE: str(train_device(settings)),
                    }
                )
            }
        )
        return Message(reply, reply_to=msg)

    @app.query("encode", mods=[policy])
    def encode_database(msg: Message, context: Context) -> Message:
        settings = settings_of(context)
        pid, num = node_partition(context)
        data = load_local_data(settings, partition_id=pid, num_partitions=num)
        labels = data.labels.numpy()
        if data.publishes:
            build = client_side(settings.strategy).build_model
            model = build(settings, data.input_shape, data.num_classes)
            model.load_state_dict(msg.content[K.ARRAYS].to_torch_state_dict())
            codes = sign_codes(
                encode(model, data.inputs, device=train_device(settings))
            )
        else:  # partition-repeats > 1: split 0's clients publish these rows
            codes = np.zeros((0, settings.code_length), dtype=np.int8)
            labels = labels[:0]
        noise = _publish_noise(settings, msg, pid)
        published, uses = publish_codes(codes, settings=settings, noise=noise)
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

    def method_query(action: str, owner: str) -> Any:
        def run(msg: Message, context: Context) -> Message:
            settings = settings_of(context)
            if settings.strategy != owner:
                raise ValueError(
                    f"query.{action} belongs to strategy {owner!r}; this run's "
                    f"strategy is {settings.strategy!r}"
                )
            handler = client_side(owner).queries[action]
            pid, num = node_partition(context)
            reply = handler(
                msg.content,
                settings=settings,
                data=load_local_data(settings, partition_id=pid, num_partitions=num),
                state=context.state,
                partition_id=pid,
                device=train_device(settings),
                noise=_publish_noise(settings, msg, pid),
            )
            return Message(reply, reply_to=msg)

        return run

    for action, owner in query_actions().items():
        app.query(action, mods=[policy])(method_query(action, owner))

    return app


def _dphe_only(
    settings_of: Any, partition_of: Any, seed_of: Any
) -> Mod:
    """Return the DPHE mod, built when a DPHE run's first train message arrives.

    It imports the Paillier code; a process of a plaintext run, or one that answers
    a query (a deployment starts one per message), does not need it.
    """
    built: list[Mod] = []

    def mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        if settings_of(context).secure_aggregation != "dphe":
            return call_next(msg, context)
        if not built:
            from clients.dphe_updates import dphe_mod  # noqa: PLC0415

            built.append(dphe_mod(settings_of, partition_of, seed_of))
        return built[0](msg, context, call_next)

    return mod


def _publish_noise(settings: RunSettings, msg: Message, partition_id: int) -> Any:
    server_round = int(msg.content[K.CONFIG].get(K.SERVER_ROUND, 0))
    return node_noise(
        settings,
        server_round=server_round,
        partition_id=partition_id,
        purpose=PURPOSE_PUBLISH,
    )


app = build_client_app()

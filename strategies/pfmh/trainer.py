"""PFMH's client side: the trainer (``strategy = "pfmh"``) and its evaluation op.

Train (Algorithm 1, lines 13-19): build the client's multi-modal network -- in
personalized mode the one kept in ``context.state`` under ``pfmh-model`` (built
from the run seed on first use, so every client starts from the same weights), in
fedavg mode the received global arrays --, read the received personal set
(``pfmh-personal``) and centralized set (``pfmh-centralized``) if any (none in round
1: only L_hash is trained then), train with :func:`hashing.pfmh.train.train_pfmh` on
the local database (the partition minus its local queries, ``clients/data.py``),
then upload the Eq. 5 prototypes computed in eval mode over the same samples
(:func:`hashing.pfmh.train.local_prototypes`) through
:func:`clients.publish.publish_pfmh_prototypes`. In personalized mode the trained
weights go back into ``context.state`` and the reply's ``arrays`` record is empty.

Evaluate (``query.pfmh_eval`` message): the per-client protocol (local queries
against the local database, with the client's own model; only the two mAPs leave
the node) and, when the server sends its query inputs (personalized mode), the codes
of those queries and of the whole partition (published through
:func:`clients.publish.publish_codes`, like ``op = "encode"``).
"""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    MetricRecord,
    RecordDict,
)

from clients.data import LocalData
from clients.publish import publish_codes, publish_pfmh_prototypes
from clients.trainers import TrainContext
from hashing.codes import pack_bytes, sign_codes
from hashing.pfmh.evaluation import local_retrieval
from hashing.pfmh.losses import LOSS_PARTS
from hashing.pfmh.train import local_prototypes, train_pfmh
from hashing.train import encode
from privacy.noise import NoiseSource
from settings import keys as K
from settings.privacy_records import privacy_record
from settings.prototype_records import (
    PFMH_CENTRALIZED,
    PFMH_PERSONAL,
    PFMH_UPLOAD,
    prototype_record,
    read_prototype_record,
)
from settings.run_settings import RunSettings
from strategies.client_side import ClientSide
from strategies.pfmh.config import PFMHConfig
from strategies.pfmh.model import build_pfmh_model, pfmh_loss_config


def client_model(
    settings: RunSettings,
    data: LocalData,
    arrays: ArrayRecord | None,
    state: RecordDict | None,
) -> torch.nn.Module:
    """Build the model this client trains and encodes with.

    Personalized mode: its own, from ``state`` (``context.state``), or a fresh one
    from the run seed when it has none yet. Fedavg mode: the received global arrays.
    """
    model = build_pfmh_model(settings, data.input_shape)
    if settings.pfmh.personalized:
        if state is not None and K.PFMH_MODEL_STATE in state:
            model.load_state_dict(state[K.PFMH_MODEL_STATE].to_torch_state_dict())
        return model
    if arrays is None or not len(arrays):
        raise ValueError(
            f'{PFMHConfig.key("mode")}="fedavg": the message carries no model '
            "arrays to start from"
        )
    model.load_state_dict(arrays.to_torch_state_dict())
    return model


def pfmh_trainer(content: RecordDict, ctx: TrainContext) -> RecordDict:
    """One PFMH round on this client."""
    s = ctx.settings
    data = ctx.data
    if s.pfmh.personalized and ctx.state is None:
        raise ValueError("personalized PFMH needs the node's context.state")
    model = client_model(s, data, content.get(K.ARRAYS), ctx.state)
    personal = (
        read_prototype_record(content[K.PFMH_PERSONAL], PFMH_PERSONAL)
        if K.PFMH_PERSONAL in content
        else None
    )
    central = (
        read_prototype_record(content[K.PFMH_CENTRALIZED], PFMH_CENTRALIZED)
        if K.PFMH_CENTRALIZED in content
        else None
    )
    train_positions = data.local_database()
    inputs, labels = data.take(train_positions)
    loss_config = pfmh_loss_config(s)
    stats = train_pfmh(
        model,
        inputs,
        labels,
        personal_prototypes=personal,
        global_prototypes=central,
        config=loss_config,
        num_classes=data.num_classes,
        epochs=s.local_epochs,
        batch_size=s.batch_size,
        learning_rate=s.learning_rate,
        weight_decay=s.weight_decay,
        device=ctx.device,
        generator=ctx.generator,
    )
    metrics = {
        K.NUM_EXAMPLES: len(train_positions),
        K.TRAIN_LOSS: stats["loss"],
        **{
            K.PFMH_LOSS_PREFIX + part.replace("_", "-"): stats[part]
            for part in LOSS_PARTS
        },
    }
    reply = RecordDict({K.METRICS: MetricRecord(metrics)})
    if loss_config.uses_prototypes:
        protos = local_prototypes(
            model, inputs, labels, num_classes=data.num_classes, device=ctx.device
        )
        reply[K.PFMH_UPLOAD] = prototype_record(
            publish_pfmh_prototypes(protos), PFMH_UPLOAD
        )
    trained = ArrayRecord(model.cpu().state_dict())
    if s.pfmh.personalized:
        assert ctx.state is not None
        ctx.state[K.PFMH_MODEL_STATE] = trained
        reply[K.ARRAYS] = ArrayRecord()  # only prototypes travel
    else:
        reply[K.ARRAYS] = trained
    return reply


def pfmh_eval_reply(
    content: RecordDict,
    *,
    settings: RunSettings,
    data: LocalData,
    state: RecordDict | None,
    partition_id: int,
    device: torch.device,
    noise: NoiseSource,
) -> RecordDict:
    """Answer ``query.pfmh_eval``: per-client mAPs (+ global-query codes)."""
    if data.local_queries is None or not isinstance(data.inputs, dict):
        raise ValueError(
            "query.pfmh_eval needs the multi-modal PFMH data of this client"
        )
    model = client_model(settings, data, content.get(K.ARRAYS), state)
    database = data.local_database()
    report = local_retrieval(
        model,
        data.inputs,
        data.labels,
        queries=data.local_queries,
        database=database,
        top_k=settings.map_top_k,
        ks=settings.precision_ks(),
        device=device,
    )
    metrics: dict[str, float | int] = {
        K.LOCAL_QUERIES: len(data.local_queries),
        K.LOCAL_DATABASE: len(database),
    }
    if report is not None:
        metrics[K.LOCAL_MAP_ALL] = report.map_all
        metrics[K.LOCAL_MAP_AT_K] = report.map_at_k
    reply = RecordDict(
        {
            K.METRICS: MetricRecord(metrics),
            K.CONFIG: ConfigRecord(
                {K.PARTITION_ID: partition_id, K.CODE_BITS: settings.code_length}
            ),
        }
    )
    if K.PFMH_QUERIES in content:
        queries = {
            m: torch.from_numpy(arr.numpy())
            for m, arr in content[K.PFMH_QUERIES].items()
        }
        query_codes = sign_codes(encode(model, queries, device=device))
        db_codes = sign_codes(encode(model, data.inputs, device=device))
        published, uses = publish_codes(db_codes, settings=settings, noise=noise)
        reply[K.CODES] = ArrayRecord(
            {
                K.PACKED_CODES: Array(pack_bytes(published)),
                K.CODE_LABELS: Array(np.ascontiguousarray(data.labels.numpy())),
                K.QUERY_CODES: Array(pack_bytes(query_codes)),
            }
        )
        if uses:
            reply[K.PRIVACY] = privacy_record(uses)
    return reply


CLIENT_SIDE = ClientSide(
    pfmh_trainer, queries={"pfmh_eval": pfmh_eval_reply}, build_model=build_pfmh_model
)
"""PFMH's client half (:mod:`strategies.client_side`)."""

"""The FedAvg / FedProx client trainer: local hashing training from the global model."""

from __future__ import annotations

from flwr.app import ArrayRecord, MetricRecord, RecordDict

from clients.trainers import TrainContext, dp_train
from hashing.train import LocalTrainConfig, train_local
from privacy.ledger import MechanismUse
from settings import keys as K
from settings.privacy_records import privacy_record
from settings.run_model import build_hash_loss, build_run_model
from strategies.client_side import ClientSide


def dpsh_trainer(content: RecordDict, ctx: TrainContext) -> RecordDict:
    """Local training from the global model with the run's loss (DPSH, CSQ, ...).

    FedProx adds its proximal term, ``updates.sparsifier = "elastic-net"`` DPHE's
    elastic-net penalty (:mod:`hashing.elastic_net`); with ``dp-sgd.enabled`` the
    (per-sample) CSQ loss is minimised with Opacus' DP-SGD instead, and the round's
    epsilon is reported.
    """
    s = ctx.settings
    config = content[K.CONFIG]
    model = build_run_model(s, ctx.data.input_shape, ctx.data.num_classes)
    model.load_state_dict(content[K.ARRAYS].to_torch_state_dict())
    steps_per_round = s.local_epochs * -(-len(ctx.data.inputs) // s.batch_size)
    loss_fn = build_hash_loss(
        s,
        ctx.data.num_classes,
        first_step=(ctx.server_round - 1) * steps_per_round,
        model=model,
    )

    uses: list[MechanismUse] = []
    l1, l2 = s.updates.elastic_net_weights()
    if s.dp_sgd.enabled:
        loss, use = dp_train(model, loss_fn, ctx)
        uses.append(use)
    else:
        stats = train_local(
            model,
            ctx.data.inputs,
            ctx.data.labels,
            loss_fn=loss_fn,
            config=LocalTrainConfig(
                epochs=s.local_epochs,
                learning_rate=s.learning_rate,
                batch_size=s.batch_size,
                weight_decay=s.weight_decay,
                quantization_weight=s.quantization_weight,
                proximal_mu=float(config.get(K.PROXIMAL_MU, 0.0)),
                elastic_net_l1=l1,
                elastic_net_l2=l2,
            ),
            device=ctx.device,
            generator=ctx.generator,
        )
        loss = stats["loss"]
    reply = RecordDict(
        {
            K.ARRAYS: ArrayRecord(model.cpu().state_dict()),
            K.METRICS: MetricRecord(
                {K.NUM_EXAMPLES: len(ctx.data.inputs), K.TRAIN_LOSS: loss}
            ),
        }
    )
    if uses:
        reply[K.PRIVACY] = privacy_record(uses)
    return reply


CLIENT_SIDE = ClientSide(dpsh_trainer)
"""FedAvg's and FedProx's client half (:mod:`strategies.client_side`)."""

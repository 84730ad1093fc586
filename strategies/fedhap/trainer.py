"""FedHAP's client trainer (registered for ``strategy = "fedhap"``).

Receives the global hashing network + discriminator (one ArrayRecord, discriminator
under ``discriminator.``) and, once the server has them, the global prototype codes
in their own record; trains with :func:`hashing.fedhap.train.train_fedhap` (or, with
``dp-sgd.enabled``, with Opacus on the per-sample part of the objective); replies with
the updated parameters, the metrics and -- through the single upload function
:func:`clients.publish.publish_prototypes` -- its class prototypes (Eq. 5) computed
with the updated network on all its samples, for the classes it holds.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict

from clients.publish import labels_per_record, publish_prototypes
from clients.trainers import TrainContext, dp_train
from hashing.fedhap.discriminator import AnyDiscriminator
from hashing.fedhap.train import FedHAPTrainConfig, fedhap_dp_loss, train_fedhap
from hashing.prototypes import class_prototypes
from hashing.train import encode
from privacy.ledger import MechanismUse
from settings import keys as K
from settings.privacy_records import privacy_record
from settings.prototype_records import (
    FEDHAP_BROADCAST,
    FEDHAP_UPLOAD,
    prototype_record,
    read_prototype_record,
)
from settings.run_model import (
    build_run_discriminator,
    build_run_model,
    prefix_state,
    split_global_state,
)
from settings.run_settings import RunSettings
from strategies.client_side import ClientSide

Prototypes = tuple[torch.Tensor, torch.Tensor]


def fedhap_trainer(content: RecordDict, ctx: TrainContext) -> RecordDict:
    """One FedHAP round on this client."""
    s = ctx.settings
    num_classes = ctx.data.num_classes
    model_state, disc_state = split_global_state(
        content[K.ARRAYS].to_torch_state_dict()
    )
    model = build_run_model(s, ctx.data.input_shape)
    model.load_state_dict(model_state)
    disc = None
    if s.fedhap.uses_discriminator:
        disc = build_run_discriminator(s, num_classes)
        disc.load_state_dict(disc_state)
    prototypes = None
    if s.uses_prototypes and K.PROTOTYPES in content:
        received = read_prototype_record(content[K.PROTOTYPES], FEDHAP_BROADCAST)
        prototypes = (
            torch.from_numpy(received.vectors),
            torch.from_numpy(received.classes),
        )
    uses: list[MechanismUse] = []
    # with DP-SGD the settings guarantee fedhap-3, initial centres, flipped uploads
    if s.dp_sgd.enabled:
        if prototypes is None:
            raise ValueError("a DP-SGD FedHAP round needs global prototypes")
        loss, use = dp_train(model, dp_objective(s, num_classes, prototypes), ctx)
        uses.append(use)
    else:
        loss = _train(s, model, disc, prototypes, ctx)["loss"]
    state = dict(model.cpu().state_dict())
    if disc is not None:
        state.update(prefix_state(disc.cpu().state_dict()))
    reply = RecordDict(
        {
            K.ARRAYS: ArrayRecord(state),
            K.METRICS: MetricRecord(
                {K.NUM_EXAMPLES: len(ctx.data.inputs), K.TRAIN_LOSS: loss}
            ),
        }
    )
    if s.uses_prototypes:
        relaxed = torch.from_numpy(encode(model, ctx.data.inputs, device=ctx.device))
        protos = class_prototypes(relaxed, ctx.data.labels, num_classes=num_classes)
        published, flip_uses = publish_prototypes(
            protos,
            settings=s,
            noise=ctx.noise,
            labels_per_record=labels_per_record(ctx.data.labels),
        )
        reply[K.PROTOTYPES] = prototype_record(published, FEDHAP_UPLOAD)
        uses += flip_uses
    if uses:
        reply[K.PRIVACY] = privacy_record(uses)
    return reply


def _train(
    s: RunSettings,
    model: torch.nn.Module,
    disc: AnyDiscriminator | None,
    prototypes: Prototypes | None,
    ctx: TrainContext,
) -> dict[str, float]:
    return train_fedhap(
        model,
        disc,
        ctx.data.inputs,
        ctx.data.labels,
        prototypes=prototypes,
        config=FedHAPTrainConfig(
            epochs=s.local_epochs,
            learning_rate=s.learning_rate,
            batch_size=s.batch_size,
            num_classes=ctx.data.num_classes,
            margin=s.fedhap.triplet_margin,
            distance=s.fedhap.triplet_distance,
            mu=s.fedhap.mu,
            lam=s.fedhap.lambda_,
            global_triplet=s.fedhap.uses_global_triplet,
            weight_decay=s.weight_decay,
            discriminator_input=s.fedhap.discriminator_input,
        ),
        device=ctx.device,
        generator=ctx.generator,
    )


def dp_objective(
    s: RunSettings, num_classes: int, prototypes: Prototypes
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Bind the run's per-sample FedHAP objective for DP-SGD (``fedhap_dp_loss``)."""
    codes, classes = prototypes

    def loss_fn(b: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return fedhap_dp_loss(
            b,
            y,
            codes,
            classes,
            num_classes=num_classes,
            margin=s.fedhap.triplet_margin,
            metric=s.fedhap.triplet_distance,
            mu=s.fedhap.mu,
        )

    return loss_fn


CLIENT_SIDE = ClientSide(fedhap_trainer)
"""FedHAP's client half (:mod:`strategies.client_side`)."""

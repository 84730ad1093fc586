"""Client-side trainers, one per strategy family, looked up by the ``strategy`` key.

A trainer receives the train message's content and the node's local data, trains,
and returns the reply's RecordDict. FedAvg and FedProx share the DPSH trainer
(FedProx's ``proximal-mu`` arrives in the message's ConfigRecord); strategies added
later register their own trainer here without touching the ClientApp.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict

from clients.data import LocalData
from hashing.csq import csq_loss, hash_centers
from hashing.losses import dpsh_loss
from hashing.train import LocalTrainConfig, train_local
from privacy.dp_sgd import DPSGDConfig, noise_for_target, train_dp_sgd
from privacy.ledger import UNIT_RECORD, MechanismUse
from privacy.noise import NoiseSource
from settings import keys as K
from settings.privacy_records import privacy_record
from settings.run_model import build_run_model
from settings.run_settings import RunSettings


@dataclass(frozen=True)
class TrainContext:
    """What a trainer gets besides the message content."""

    settings: RunSettings
    data: LocalData
    device: torch.device
    partition_id: int
    server_round: int
    generator: torch.Generator  # experiment randomness (batch order): run seed
    noise: NoiseSource = field(default_factory=NoiseSource.secure)  # privacy draws
    state: RecordDict | None = None  # the node's context.state (personal models)


Trainer = Callable[[RecordDict, TrainContext], RecordDict]
_TRAINERS: dict[str, Trainer] = {}


def register_trainer(*strategy_names: str) -> Callable[[Trainer], Trainer]:
    """Register ``fn`` as the client trainer of the given strategies."""

    def decorator(fn: Trainer) -> Trainer:
        for name in strategy_names:
            if name in _TRAINERS:
                raise ValueError(f"a client trainer for {name!r} is already registered")
            _TRAINERS[name] = fn
        return fn

    return decorator


def get_trainer(strategy: str) -> Trainer:
    """Return the trainer of ``strategy`` (ValueError naming the known ones)."""
    try:
        return _TRAINERS[strategy]
    except KeyError:
        raise ValueError(
            f"strategy={strategy!r} has no client trainer; known: "
            f"{', '.join(sorted(_TRAINERS))}"
        ) from None


@register_trainer("fedavg", "fedprox")
def dpsh_trainer(content: RecordDict, ctx: TrainContext) -> RecordDict:
    """Local training from the global model with the run's loss (DPSH or CSQ).

    FedProx adds its proximal term; with ``dp-sgd`` the (per-sample) CSQ loss is
    minimised with Opacus' DP-SGD instead, and the round's epsilon is reported.
    """
    s = ctx.settings
    config = content[K.CONFIG]
    model = build_run_model(s, ctx.data.input_shape)
    model.load_state_dict(content[K.ARRAYS].to_torch_state_dict())
    if s.loss == "csq":
        centers = hash_centers(ctx.data.num_classes, s.code_length, seed=s.seed)

        def loss_fn(u: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return csq_loss(u, y, centers, quantization_weight=s.quantization_weight)

    else:

        def loss_fn(u: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return dpsh_loss(u, y, quantization_weight=s.quantization_weight)

    uses: list[MechanismUse] = []
    if s.dp_sgd:
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


DP_SGD_MECHANISM = K.MECH_DP_SGD


def dp_train(
    model: torch.nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ctx: TrainContext,
) -> tuple[float, MechanismUse]:
    """One DP-SGD local round with the run's noise (or per-round target epsilon).

    Returns the mean loss and the round's DP-SGD charge (epsilon per record).
    """
    s = ctx.settings
    n = len(ctx.data.inputs)
    noise = s.dp_noise_multiplier
    if s.dp_target_epsilon > 0:
        noise = noise_for_target(
            s.dp_target_epsilon,
            delta=s.dp_delta,
            sample_rate=min(s.batch_size, n) / n,
            epochs=s.local_epochs,
        )
    result = train_dp_sgd(
        model,
        ctx.data.inputs,
        ctx.data.labels,
        loss_fn=loss_fn,
        epochs=s.local_epochs,
        batch_size=s.batch_size,
        learning_rate=s.learning_rate,
        config=DPSGDConfig(noise, s.dp_max_grad_norm, s.dp_delta),
        noise=ctx.noise,
        device=ctx.device,
    )
    use = MechanismUse(DP_SGD_MECHANISM, result.epsilon, result.delta, UNIT_RECORD)
    return result.loss, use

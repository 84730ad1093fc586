"""Client-side trainers, one per strategy family, looked up by the ``strategy`` key.

A trainer receives the train message's content and the node's local data, trains,
and returns the reply's RecordDict. FedAvg and FedProx share the DPSH trainer
(FedProx's ``proximal-mu`` arrives in the message's ConfigRecord); strategies added
later register their own trainer here without touching the ClientApp.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict

from clients.data import LocalData
from hashing.train import LocalTrainConfig, train_dpsh
from settings import keys as K
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
    generator: torch.Generator


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
    """Local DPSH training from the global model; FedProx adds its proximal term."""
    config = content[K.CONFIG]
    model = build_run_model(ctx.settings, ctx.data.input_shape)
    model.load_state_dict(content[K.ARRAYS].to_torch_state_dict())
    stats = train_dpsh(
        model,
        ctx.data.inputs,
        ctx.data.labels,
        config=LocalTrainConfig(
            epochs=ctx.settings.local_epochs,
            learning_rate=ctx.settings.learning_rate,
            batch_size=ctx.settings.batch_size,
            weight_decay=ctx.settings.weight_decay,
            quantization_weight=ctx.settings.quantization_weight,
            proximal_mu=float(config.get(K.PROXIMAL_MU, 0.0)),
        ),
        device=ctx.device,
        generator=ctx.generator,
    )
    return RecordDict(
        {
            K.ARRAYS: ArrayRecord(model.cpu().state_dict()),
            K.METRICS: MetricRecord(
                {K.NUM_EXAMPLES: len(ctx.data.inputs), K.TRAIN_LOSS: stats["loss"]}
            ),
        }
    )

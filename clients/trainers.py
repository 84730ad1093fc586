"""What every client trainer shares: its context and the DP-SGD local round.

A trainer (``Trainer``) receives the train message's content and a
:class:`TrainContext`, trains, and returns the reply's RecordDict. Each method's
trainer lives beside its strategy (``strategies/<method>/trainer.py``) and is named
by its entry in :mod:`strategies.registry`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from flwr.app import RecordDict

from clients.data import LocalData
from privacy.dp_sgd import DPSGDConfig, noise_for_target, train_dp_sgd
from privacy.ledger import UNIT_RECORD, MechanismUse
from privacy.noise import NoiseSource
from settings import keys as K
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


DP_SGD_MECHANISM = K.MECH_DP_SGD


def dp_noise_multiplier(settings: RunSettings, num_examples: int) -> float:
    """DP-SGD's sigma on a node with ``num_examples``: the run's, or its target's.

    With ``dp-sgd.target-epsilon`` the sigma that reaches it per round at the
    sampling rate ``batch-size / n`` (Opacus RDP); else ``dp-sgd.noise-multiplier``.
    """
    s, n = settings, max(int(num_examples), 1)
    if s.dp_sgd.target_epsilon <= 0:
        return s.dp_sgd.noise_multiplier
    return noise_for_target(
        s.dp_sgd.target_epsilon,
        delta=s.dp_sgd.delta,
        sample_rate=min(s.batch_size, n) / n,
        epochs=s.local_epochs,
    )


def dp_train(
    model: torch.nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ctx: TrainContext,
) -> tuple[float, MechanismUse]:
    """One DP-SGD local round with the run's noise (or per-round target epsilon).

    Returns the mean loss and the round's DP-SGD charge (epsilon per record).
    """
    s = ctx.settings
    noise = dp_noise_multiplier(s, len(ctx.data.inputs))
    result = train_dp_sgd(
        model,
        ctx.data.inputs,
        ctx.data.labels,
        loss_fn=loss_fn,
        epochs=s.local_epochs,
        batch_size=s.batch_size,
        learning_rate=s.learning_rate,
        config=DPSGDConfig(noise, s.dp_sgd.max_grad_norm, s.dp_sgd.delta),
        noise=ctx.noise,
        device=ctx.device,
    )
    use = MechanismUse(DP_SGD_MECHANISM, result.epsilon, result.delta, UNIT_RECORD)
    return result.loss, use

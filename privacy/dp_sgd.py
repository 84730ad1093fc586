"""DP-SGD for local training of a hashing network, with Opacus.

Opacus clips each sample's gradient to ``max_grad_norm``, adds Gaussian noise of
standard deviation ``noise_multiplier * max_grad_norm`` to the sum, and samples
mini-batches by Poisson sampling with rate ``batch_size / n`` -- the setting its RDP
accountant assumes. The epsilon returned is the accountant's for the steps of *this*
call (one local round), at the given delta, **per record** (add/remove one training
sample of this client). The ledger composes rounds by basic composition.

The guarantee needs a loss that is a mean of per-sample terms, each depending on one
sample (and on fixed, non-private quantities such as class centres or the server's
prototypes). In-batch pairwise losses (DPSH, FedHAP's local triplet) couple samples:
removing one sample changes every other sample's clipped gradient, so the sensitivity
is not ``max_grad_norm`` and Opacus' epsilon would be wrong. Callers must pass a
per-sample loss; the run settings refuse DP-SGD with the coupled losses.

No Flower imports.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from privacy.noise import NoiseSource


@dataclass(frozen=True)
class DPSGDConfig:
    """DP-SGD parameters.

    Attributes
    ----------
    noise_multiplier : float
        sigma > 0; noise std is sigma * max_grad_norm.
    max_grad_norm : float
        Per-sample clipping norm C > 0.
    delta : float
        delta in (0, 1) at which epsilon is reported.
    """

    noise_multiplier: float
    max_grad_norm: float
    delta: float

    def __post_init__(self) -> None:
        """Refuse parameters that give no guarantee."""
        if not self.noise_multiplier > 0:
            raise ValueError(f"noise_multiplier={self.noise_multiplier}: must be > 0")
        if not self.max_grad_norm > 0:
            raise ValueError(f"max_grad_norm={self.max_grad_norm}: must be > 0")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta={self.delta}: accepted is 0 < delta < 1")


@dataclass(frozen=True)
class DPTrainResult:
    """What one DP-SGD local round did and cost."""

    loss: float
    steps: int
    sample_rate: float
    epsilon: float
    delta: float


def opacus_compatible(model: nn.Module) -> nn.Module:
    """Return ``model`` or an Opacus-fixed copy (BatchNorm -> GroupNorm).

    Raises
    ------
    ValueError
        Listing Opacus' objections if the model cannot be fixed.
    """
    from opacus.validators import ModuleValidator

    if not ModuleValidator.validate(model, strict=False):
        return model
    fixed = ModuleValidator.fix(model)
    errors = ModuleValidator.validate(fixed, strict=False)
    if errors:
        raise ValueError(
            "the model is not Opacus-compatible even after ModuleValidator.fix: "
            + "; ".join(str(e) for e in errors[:5])
        )
    return fixed


def noise_for_target(
    target_epsilon: float, *, delta: float, sample_rate: float, epochs: int
) -> float:
    """Noise multiplier that gives ``target_epsilon`` over ``epochs`` (Opacus RDP)."""
    from opacus.accountants.utils import get_noise_multiplier

    return float(
        get_noise_multiplier(
            target_epsilon=target_epsilon,
            target_delta=delta,
            sample_rate=sample_rate,
            epochs=epochs,
            accountant="rdp",
        )
    )


def train_dp_sgd(
    model: nn.Module,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    *,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    epochs: int,
    batch_size: int,
    learning_rate: float,
    config: DPSGDConfig,
    noise: NoiseSource,
    device: torch.device,
) -> DPTrainResult:
    """Train ``model`` in place with DP-SGD (Adam on the privatised gradients).

    Parameters
    ----------
    model : nn.Module
        Opacus-compatible network (see :func:`opacus_compatible`).
    inputs, labels : torch.Tensor
        The client's (n, ...) samples and (n,) / (n, C) labels, on CPU.
    loss_fn : callable
        ``loss_fn(outputs, labels)``: the MEAN over the batch of per-sample losses.
    epochs : int
        Expected passes: ``epochs * n / batch_size`` Poisson-sampled steps.
    batch_size : int
        Expected batch size; the sampling rate is ``batch_size / n``.
    learning_rate : float
        Adam step size.
    config : DPSGDConfig
        Noise, clipping, delta.
    noise : NoiseSource
        The node's privacy noise: seeds the Poisson sampler's CPU generator and the
        Gaussian noise generator, fresh for this call (OS entropy unless the run is
        in the simulation-only seeded mode). Opacus' floating-point hardening of
        the Gaussian (the noise path of its ``secure_mode``: a sum of four draws,
        arXiv:2107.10138) is on; ``torchcsprng``, which Opacus' full
        ``secure_mode`` also needs, is not installable for torch 2.14, so the
        generators are torch's (seeded per call from the CSPRNG), not a CSPRNG.
    device : torch.device
        Where to train.

    Returns
    -------
    DPTrainResult
        Mean loss, steps, sampling rate, and epsilon at delta for this call.
    """
    from opacus import PrivacyEngine

    n = len(inputs)
    loader = DataLoader(
        TensorDataset(inputs, labels),
        batch_size=min(batch_size, n),
        shuffle=False,
        generator=torch.Generator().manual_seed(noise.seed()),
    )
    model.to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    with warnings.catch_warnings():
        # Opacus warns about secure_mode=False (its RNG is not cryptographically
        # secure); documented in docs/methods/dp-sgd.md, the runs are seeded for
        # reproducibility
        warnings.simplefilter("ignore", UserWarning)
        engine = PrivacyEngine(accountant="rdp")
        dp_model, dp_optimizer, dp_loader = engine.make_private(
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=config.noise_multiplier,
            max_grad_norm=config.max_grad_norm,
            poisson_sampling=True,
            noise_generator=torch.Generator(device=device).manual_seed(noise.seed()),
        )
    # Opacus' floating-point-attack-resistant Gaussian (its secure_mode noise path;
    # same distribution); PrivacyEngine(secure_mode=True) would also demand
    # torchcsprng, which is not available for this torch.
    dp_optimizer.secure_mode = True
    total, steps = 0.0, 0
    try:
        for _ in range(epochs):
            for x, y in dp_loader:
                x, y = x.to(device), y.to(device)
                dp_optimizer.zero_grad(set_to_none=True)
                loss = loss_fn(dp_model(x), y)
                with warnings.catch_warnings():
                    # torch notes that Opacus' backward hooks fire on module outputs
                    # when inputs need no grad; that is how Opacus works
                    warnings.simplefilter("ignore", UserWarning)
                    loss.backward()
                dp_optimizer.step()
                total += float(loss.detach())
                steps += 1
        epsilon = float(engine.get_epsilon(config.delta))
    finally:
        if hasattr(dp_model, "remove_hooks"):
            dp_model.remove_hooks()
    return DPTrainResult(
        loss=total / max(steps, 1),
        steps=steps,
        sample_rate=float(dp_loader.sample_rate)
        if hasattr(dp_loader, "sample_rate")
        else min(batch_size, n) / n,
        epsilon=epsilon,
        delta=config.delta,
    )

"""FedHAP local training (Algorithm 1, client side), plain PyTorch.

Each mini-batch of each local epoch alternates (a) one discriminator step on the
current relaxed codes (detached) against the global prototypes and (b) one hashing
network step on

    L = L_tl^local + L_tl^global + mu * L_quan + lambda * L_adv        (Eq. 9)

where L_tl are the triplet losses of ``hashing/fedhap/triplet.py``, L_quan is the
mean of (b - sign(b))^2 over samples and bits (Eq. 7 as a mean, so mu does not depend on
batch size or code length) and L_adv the generator loss of
``hashing/fedhap/discriminator.py``. The paper's Algorithm 1 alternates the two steps
"each local epoch" without saying at which granularity; we alternate per mini-batch,
as GANs are usually trained. Terms that need global prototypes are skipped while
there are none (round 1) and in the ablations that switch them off.

Multi-label batches: both discriminator terms see one (code, one-hot label) pair per
label of each sample, averaged per pair (``label_pairs`` and the Notes of
``discriminator_loss``), so a fake's label vector is one-hot like a prototype's.
Single-label batches give one pair per sample, exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
from torch import nn

from hashing.batches import iterate_minibatches
from hashing.fedhap.discriminator import (
    AnyDiscriminator,
    discriminator_input,
    discriminator_loss,
    generator_loss,
)
from hashing.fedhap.triplet import (
    global_triplet_loss,
    global_triplet_per_sample,
    local_triplet_loss,
)


@dataclass(frozen=True)
class FedHAPTrainConfig:
    """Hyper-parameters of one FedHAP client's local training.

    Attributes
    ----------
    epochs : int
        Passes over the local data per round.
    learning_rate : float
        Adam step size (hashing network and discriminator).
    batch_size : int
        Mini-batch size; triplets are formed inside each batch.
    num_classes : int
        Size of the label space C.
    margin : float
        Triplet margin a.
    distance : str
        ``cosine`` or ``euclidean``.
    mu : float
        Weight of the quantization loss.
    lam : float
        Weight of the adversarial loss (lambda).
    global_triplet : bool
        Use L_tl^global (full FedHAP and FedHAP-3).
    weight_decay : float
        Adam L2 weight decay of the hashing network.
    discriminator_input : str
        ``relaxed`` (the paper: D sees b) or ``sign`` (D sees sign(b), gradient
        straight through; ``hashing.fedhap.discriminator.straight_through_sign``).
    """

    epochs: int
    learning_rate: float
    batch_size: int
    num_classes: int
    margin: float = 0.5
    distance: str = "cosine"
    mu: float = 0.05
    lam: float = 0.1
    global_triplet: bool = True
    weight_decay: float = 0.0
    discriminator_input: str = "relaxed"


def quantization_loss(b: torch.Tensor) -> torch.Tensor:
    """L_quan (Eq. 7) as a mean over samples and bits."""
    return (b - torch.sign(b).detach()).pow(2).mean()


def fedhap_dp_loss(
    b: torch.Tensor,
    labels: torch.Tensor,
    prototype_codes: torch.Tensor,
    prototype_classes: torch.Tensor,
    *,
    num_classes: int,
    margin: float,
    metric: str,
    mu: float,
) -> torch.Tensor:
    """FedHAP's per-sample terms for DP-SGD: batch mean of triplet_i + mu * quant_i.

    Only the terms that depend on one sample and the fixed global prototypes: the
    global triplet loss per anchor and the quantization loss. The in-batch local
    triplet loss couples samples and the discriminator is trained on the client's
    codes, so both are left out under DP-SGD. An empty batch (Poisson sampling)
    gives 0 with a graph.
    """
    if len(b) == 0:
        return b.sum() * 0.0
    triplet = global_triplet_per_sample(
        b,
        labels,
        prototype_codes.to(b.device),
        prototype_classes.to(b.device),
        num_classes=num_classes,
        margin=margin,
        metric=metric,
    )
    quant = (b - torch.sign(b).detach()).pow(2).mean(1)
    return (triplet + mu * quant).mean()


def train_fedhap(
    model: nn.Module,
    discriminator: AnyDiscriminator | None,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    *,
    prototypes: tuple[torch.Tensor, torch.Tensor] | None,
    config: FedHAPTrainConfig,
    device: torch.device,
    generator: torch.Generator,
) -> dict[str, float]:
    """Train ``model`` (and ``discriminator``) in place for one round.

    Parameters
    ----------
    model : nn.Module
        Hashing network holding the global weights.
    discriminator : Discriminator, ProjectionDiscriminator or None
        Holding the global discriminator weights; ``None`` without one (FedHAP-1/3).
    inputs : torch.Tensor
        (n, ...) float32 local samples (CPU).
    labels : torch.Tensor
        (n,) int64 class ids or (n, C) multi-hot (CPU). A multi-hot sample enters
        the adversarial terms once per label, as a one-hot pair.
    prototypes : tuple or None
        ``(codes (m, bits) float32 +-1, classes (m,) int64)`` global prototypes, or
        ``None`` when there are none yet or the variant does not use them.
    config : FedHAPTrainConfig
        Hyper-parameters.
    device : torch.device
        Where to train.
    generator : torch.Generator
        CPU generator for the mini-batch order.

    Returns
    -------
    dict
        Means over steps of ``loss`` (the hashing objective) and its weighted
        parts ``triplet_local``,
        ``triplet_global``, ``quantization``, ``adversarial`` and
        ``discriminator``; and ``steps``.
    """
    model.to(device).train()
    opt_g = torch.optim.Adam(
        model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    use_disc = discriminator is not None and prototypes is not None
    use_global = config.global_triplet and prototypes is not None
    p_codes: torch.Tensor | None = None
    p_classes: torch.Tensor | None = None
    if prototypes is not None:
        p_codes, p_classes = (t.to(device) for t in prototypes)
    opt_d = None
    if discriminator is not None:
        discriminator.to(device).train()
        opt_d = torch.optim.Adam(discriminator.parameters(), lr=config.learning_rate)
    names = (
        "loss",
        "triplet_local",
        "triplet_global",
        "quantization",
        "adversarial",
        "discriminator",
    )
    sums = dict.fromkeys(names, 0.0)
    steps = 0
    for _ in range(config.epochs):
        for idx in iterate_minibatches(
            len(inputs), config.batch_size, generator=generator
        ):
            x = inputs[idx].to(device, non_blocking=True)
            y = labels[idx].to(device, non_blocking=True)
            b = model(x)
            parts = {
                "triplet_local": local_triplet_loss(
                    b, y, margin=config.margin, metric=config.distance
                ),
                "quantization": config.mu * quantization_loss(b),
            }
            if use_disc:
                assert opt_d is not None and discriminator is not None
                assert p_codes is not None and p_classes is not None
                b_d = discriminator_input(b, config.discriminator_input)
                d_loss = discriminator_loss(
                    discriminator, b_d.detach(), y, p_codes, p_classes
                )
                opt_d.zero_grad(set_to_none=True)
                d_loss.backward()
                opt_d.step()
                sums["discriminator"] += float(d_loss.detach())
                parts["adversarial"] = config.lam * generator_loss(
                    discriminator, b_d, y
                )
            if use_global:
                assert p_codes is not None and p_classes is not None
                parts["triplet_global"] = global_triplet_loss(
                    b,
                    y,
                    p_codes,
                    p_classes,
                    num_classes=config.num_classes,
                    margin=config.margin,
                    metric=config.distance,
                )
            # at least two parts, so never sum()'s int start value
            loss = cast(torch.Tensor, sum(parts.values()))
            opt_g.zero_grad(set_to_none=True)
            loss.backward()
            opt_g.step()
            sums["loss"] += float(loss.detach())
            for k, v in parts.items():
                sums[k] += float(v.detach())
            steps += 1
    out = {k: v / max(steps, 1) for k, v in sums.items()}
    out["steps"] = float(steps)
    return out

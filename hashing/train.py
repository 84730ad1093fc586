"""Local training and encoding loops (plain PyTorch, no Flower).

Data are in-memory tensors (our datasets fit in memory); mini-batches are drawn with
an explicit ``torch.Generator`` so a seed fixes the order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from hashing.batches import iterate_minibatches
from hashing.elastic_net import elastic_net_penalty, snap_to_reference
from hashing.losses import dpsh_loss, proximal_term


@dataclass(frozen=True)
class LocalTrainConfig:
    """Hyper-parameters of one client's local training.

    Attributes
    ----------
    epochs : int
        Passes over the local data per round.
    learning_rate : float
        Adam step size.
    batch_size : int
        Mini-batch size (DPSH pairs are formed inside each batch).
    weight_decay : float
        Adam L2 weight decay.
    quantization_weight : float
        DPSH eta.
    proximal_mu : float
        FedProx mu; 0 disables the proximal term.
    elastic_net_l1, elastic_net_l2 : float
        DPHE's elastic-net penalty ``l1 * ||w - w_global||_1 + (l2 / 2) *
        ||w - w_global||_2^2`` (:mod:`hashing.elastic_net`); 0 and 0 disable it.
        With ``l1 > 0`` the support is read off after training: coordinates within
        ``learning_rate`` (one Adam step) of the global model are set to it, so the
        update is exactly 0 there.
    """

    epochs: int
    learning_rate: float
    batch_size: int
    weight_decay: float = 0.0
    quantization_weight: float = 0.1
    proximal_mu: float = 0.0
    elastic_net_l1: float = 0.0
    elastic_net_l2: float = 0.0


def train_dpsh(
    model: nn.Module,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    *,
    config: LocalTrainConfig,
    device: torch.device,
    generator: torch.Generator,
) -> dict[str, float]:
    """Train ``model`` in place with the DPSH loss; see :func:`train_local`."""

    def loss_fn(u: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return dpsh_loss(u, y, quantization_weight=config.quantization_weight)

    return train_local(
        model,
        inputs,
        labels,
        loss_fn=loss_fn,
        config=config,
        device=device,
        generator=generator,
    )


def train_local(
    model: nn.Module,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    *,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    config: LocalTrainConfig,
    device: torch.device,
    generator: torch.Generator,
) -> dict[str, float]:
    """Train ``model`` in place with ``loss_fn`` plus FedProx's and DPHE's terms.

    The objective of a mini-batch is ``loss_fn`` + ``(mu / 2) * ||w - w_global||^2``
    (FedProx, if ``proximal_mu > 0``) + the elastic net of :mod:`hashing.elastic_net`
    centred on ``w_global`` (if ``elastic_net_l1`` or ``elastic_net_l2`` > 0), where
    ``w_global`` are the weights ``model`` holds on entry. With ``elastic_net_l1 >
    0``, after the last step every coordinate within ``learning_rate`` of
    ``w_global`` is set to it (:func:`hashing.elastic_net.snap_to_reference`).

    Parameters
    ----------
    model : nn.Module
        Hashing network, already holding the global weights.
    inputs : torch.Tensor
        (n, ...) float32 local samples (CPU).
    labels : torch.Tensor
        (n,) int64 or (n, C) multi-hot labels (CPU).
    loss_fn : callable
        ``loss_fn(outputs, labels)`` -> scalar loss of a mini-batch.
    config : LocalTrainConfig
        Local hyper-parameters.
    device : torch.device
        Where to train.
    generator : torch.Generator
        CPU generator for the mini-batch order.

    Returns
    -------
    dict
        ``loss`` (mean loss over all steps, without the proximal and elastic-net
        terms) and ``steps``.
    """
    model.to(device).train()
    optimizer = torch.optim.Adam(
        model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    elastic = config.elastic_net_l1 > 0 or config.elastic_net_l2 > 0
    global_params = (
        [p.detach().clone() for p in model.parameters()]
        if config.proximal_mu > 0 or elastic
        else []
    )
    total, steps = 0.0, 0
    for _ in range(config.epochs):
        for idx in iterate_minibatches(
            len(inputs), config.batch_size, generator=generator
        ):
            x = inputs[idx].to(device, non_blocking=True)
            y = labels[idx].to(device, non_blocking=True)
            u = model(x)
            loss = loss_fn(u, y)
            objective = loss
            if config.proximal_mu > 0:
                prox = proximal_term(list(model.parameters()), global_params)
                objective = loss + 0.5 * config.proximal_mu * prox
            if elastic:
                objective = objective + elastic_net_penalty(
                    list(model.parameters()),
                    global_params,
                    l1=config.elastic_net_l1,
                    l2=config.elastic_net_l2,
                )
            optimizer.zero_grad(set_to_none=True)
            objective.backward()
            optimizer.step()
            total += float(loss.detach())
            steps += 1
    if config.elastic_net_l1 > 0:
        snap_to_reference(
            list(model.parameters()), global_params, tolerance=config.learning_rate
        )
    return {"loss": total / max(steps, 1), "steps": float(steps)}


@torch.no_grad()
def encode(
    model: nn.Module,
    inputs: torch.Tensor | Mapping[str, torch.Tensor],
    *,
    device: torch.device,
    batch_size: int = 1024,
) -> np.ndarray:
    """Relaxed codes of ``inputs`` in eval mode.

    ``inputs`` is an (n, ...) tensor, or for PFMH's multi-modal network a dict
    modality name -> (n, ...) tensor (:func:`hashing.pfmh.train.encode_multimodal`).

    Returns
    -------
    np.ndarray
        (n, bits) float32; ``hashing.codes.sign_codes`` binarises them.
    """
    if isinstance(inputs, Mapping):
        # PFMH's code only for its networks (not imported by single-modal runs)
        from hashing.pfmh.train import encode_multimodal

        return encode_multimodal(
            model,  # type: ignore[arg-type]
            inputs,
            device=device,
            batch_size=batch_size,
        ).numpy()
    model.to(device).eval()
    outs = [
        model(inputs[i : i + batch_size].to(device)).float().cpu()
        for i in range(0, len(inputs), batch_size)
    ]
    return torch.cat(outs).numpy()


def select_device(preference: str, *, deterministic: bool = False) -> torch.device:
    """``cuda`` when requested or (for ``auto``) available, else ``cpu``.

    ``deterministic`` (run config ``cuda-deterministic``): on CUDA, switch this
    process to deterministic kernels (:func:`use_deterministic_cuda`); a no-op on
    the CPU, whose kernels are deterministic given the seeds.

    Raises
    ------
    ValueError
        If ``cuda`` is requested but no CUDA device is visible.
    """
    if preference == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        if deterministic:
            use_deterministic_cuda()
        return torch.device("cuda")
    if preference == "cuda":
        raise ValueError("device='cuda' but torch.cuda.is_available() is False")
    return torch.device("cpu")


def use_deterministic_cuda() -> None:
    """Deterministic CUDA kernels for this process (PyTorch's reproducibility notes).

    cuBLAS needs ``CUBLAS_WORKSPACE_CONFIG`` before its first call; an operation
    with no deterministic kernel then raises instead of running nondeterministically.
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True)

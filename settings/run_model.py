"""The networks of a run, built from its settings, and the global state layout.

The global ArrayRecord holds the hashing network's parameters under their own names
and, for FedHAP with a discriminator, the discriminator's parameters under
``discriminator.``; both are FedAvg'd together by Flower. For PFMH the network is
:class:`hashing.pfmh.model.MultiModalHash`; in its personalized mode the global
ArrayRecord is empty (the models stay on the clients); PFMH's network is built by
:mod:`strategies.pfmh.model`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

import torch
from torch import nn

from hashing.csq import csq_loss, hash_centers
from hashing.dch import dch_loss
from hashing.fedhap.discriminator import AnyDiscriminator, build_discriminator
from hashing.greedyhash import GreedyHashNet, greedyhash_loss
from hashing.hashnet import continuation_beta, default_alpha, hashnet_loss
from hashing.losses import dpsh_loss
from hashing.models import build_model
from privacy.dp_sgd import opacus_compatible
from settings import keys as K
from settings.run_settings import RunSettings

V = TypeVar("V")


def build_run_model(
    settings: RunSettings,
    input_shape: tuple[int, ...] | Mapping[str, int],
    num_classes: int | None = None,
) -> nn.Module:
    """Build the configured hashing network for samples of ``input_shape``.

    Reads ``model``, ``code-length``, ``hidden-dim``, ``model-weights`` and
    ``model-image-size``. With
    ``dp-sgd.enabled`` the model is made Opacus-compatible (BatchNorm -> GroupNorm),
    on the server and the clients alike, so the global arrays match. With
    ``loss = "greedyhash"`` the network carries GreedyHash's linear classifier
    (:class:`hashing.greedyhash.GreedyHashNet`, ``num_classes`` outputs), whose
    weights are global arrays like the rest.

    A multi-modal method builds its own network (its server and client sides'
    ``build_model``, e.g. :func:`strategies.pfmh.model.build_pfmh_model`).
    """
    if isinstance(input_shape, Mapping):
        raise ValueError(
            f"strategy {settings.strategy!r} trains a single-modal network; got the "
            f"modality sizes {dict(input_shape)}"
        )
    model = build_model(
        settings.model,
        input_shape,
        settings.code_length,
        hidden_dim=settings.hidden_dim,
        weights_path=settings.model_weights,
        image_size=settings.model_image_size,
    )
    if settings.loss == "greedyhash":
        if num_classes is None:
            raise ValueError(
                "loss 'greedyhash' needs num_classes to build its classifier; "
                "pass the dataset's number of classes to build_run_model"
            )
        model = GreedyHashNet(model, settings.code_length, num_classes)
    return opacus_compatible(model) if settings.dp_sgd.enabled else model


def build_hash_loss(
    settings: RunSettings,
    num_classes: int,
    *,
    first_step: int = 0,
    model: nn.Module | None = None,
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Return the run's ``loss`` as ``loss_fn(outputs, labels)`` of one mini-batch.

    ``dpsh``, ``csq`` and ``dch`` are pure functions of the batch. ``hashnet``
    counts the calls: its continuation beta is that of optimisation step
    ``first_step`` + the number of earlier calls (a client passes the steps of its
    earlier rounds). ``greedyhash`` scores the codes with the classifier of
    ``model`` (a :class:`hashing.greedyhash.GreedyHashNet`), which the optimizer
    trains with the network.
    """
    eta = settings.quantization_weight
    if settings.loss == "greedyhash":
        if not isinstance(model, GreedyHashNet):
            raise ValueError(
                "loss 'greedyhash' needs the run's GreedyHashNet (build_run_model "
                f"with num_classes) as model=, got {type(model).__name__}"
            )
        classifier = model.classifier
        return lambda u, y: greedyhash_loss(u, y, classifier, penalty_weight=eta)
    if settings.loss == "csq":
        centers = hash_centers(num_classes, settings.code_length, seed=settings.seed)
        return lambda u, y: csq_loss(u, y, centers, quantization_weight=eta)
    if settings.loss == "hashnet":
        alpha = default_alpha(settings.code_length)
        step = [first_step]

        def hashnet(u: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            beta = continuation_beta(step[0])
            step[0] += 1
            return hashnet_loss(u, y, beta=beta, alpha=alpha)

        return hashnet
    if settings.loss == "dch":
        return lambda u, y: dch_loss(u, y, quantization_weight=eta)
    return lambda u, y: dpsh_loss(u, y, quantization_weight=eta)


def build_run_discriminator(
    settings: RunSettings, num_classes: int
) -> AnyDiscriminator:
    """FedHAP's discriminator of this run (``fedhap.discriminator``)."""
    return build_discriminator(
        settings.fedhap.discriminator,
        settings.code_length,
        num_classes,
        hidden_dim=settings.fedhap.discriminator_hidden_dim,
    )


def prefix_state(state: Mapping[str, V]) -> dict[str, V]:
    """Discriminator parameters renamed with the ``discriminator.`` prefix."""
    return {K.DISCRIMINATOR_PREFIX + k: v for k, v in state.items()}


def split_global_state(state: Mapping[str, V]) -> tuple[dict[str, V], dict[str, V]]:
    """``(hashing-network entries, discriminator entries without prefix)``."""
    model, disc = {}, {}
    n = len(K.DISCRIMINATOR_PREFIX)
    for k, v in state.items():
        if k.startswith(K.DISCRIMINATOR_PREFIX):
            disc[k[n:]] = v
        else:
            model[k] = v
    return model, disc

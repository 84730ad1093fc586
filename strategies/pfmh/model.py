"""PFMH's network and loss weights, built from the run's settings (both apps).

The network is :class:`hashing.pfmh.model.MultiModalHash` over every modality; in
personalized mode no model travels, so the round-0 global state is empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from hashing.pfmh.losses import PFMHLossConfig, ablation_config
from hashing.pfmh.model import build_multimodal_model
from settings.run_settings import RunSettings


def build_pfmh_model(
    settings: RunSettings,
    input_shape: tuple[int, ...] | Mapping[str, int],
    num_classes: int | None = None,
) -> nn.Module:
    """PFMH's multi-modal network for modality sizes ``input_shape``.

    ``input_shape`` maps modality name -> flattened per-sample size
    (``hashdata.modality_dims``); ``code-length``, ``pfmh.k`` (FeaExtractor hidden
    width) and ``pfmh.dropout`` shape it (``model`` and ``hidden-dim`` are not
    used), with initial weights drawn from the run ``seed``: server and clients
    build the same model.
    """
    if not isinstance(input_shape, Mapping):
        raise ValueError(
            "strategy 'pfmh' needs a multi-modal dataset: input_shape must map "
            f"modality name -> size, got {input_shape!r}"
        )
    return build_multimodal_model(
        input_shape,
        bits=settings.code_length,
        k=settings.pfmh.k,
        dropout=settings.pfmh.dropout,
        seed=settings.seed,
    )


def pfmh_loss_config(settings: RunSettings) -> PFMHLossConfig:
    """PFMH's loss weights and Table 2 switches from ``pfmh-*`` keys."""
    return ablation_config(
        settings.pfmh.ablation,
        tau=settings.pfmh.tau,
        alpha=settings.pfmh.alpha,
        beta=settings.pfmh.beta,
        contrast=settings.pfmh.contrast,
        prototype_weight=settings.pfmh.prototype_weight,
    )


def pfmh_initial_state(
    settings: RunSettings, model: Any, num_classes: int
) -> dict[str, Any]:
    """Return the round-0 global arrays: the model's, none in personalized mode."""
    return {} if settings.pfmh.personalized else dict(model.state_dict())

"""The hashing network of a run, built from its settings."""

from __future__ import annotations

from torch import nn

from hashing.models import build_model
from settings.run_settings import RunSettings


def build_run_model(settings: RunSettings, input_shape: tuple[int, ...]) -> nn.Module:
    """Build the configured hashing network for samples of ``input_shape``.

    Reads ``model``, ``code-length``, ``hidden-dim`` and ``model-weights``.
    """
    return build_model(
        settings.model,
        input_shape,
        settings.code_length,
        hidden_dim=settings.hidden_dim,
        weights_path=settings.model_weights,
    )

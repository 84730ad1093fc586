"""FedHAP's round-0 global state: the hashing network and its discriminator.

The discriminator's parameters travel under ``discriminator.`` beside the network's
(:func:`settings.run_model.prefix_state`); both are FedAvg'd together by Flower.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from settings.run_model import build_run_discriminator, prefix_state
from settings.run_settings import RunSettings


def fedhap_initial_state(
    settings: RunSettings, model: nn.Module, num_classes: int
) -> dict[str, Any]:
    """Return the model's state, plus the discriminator's where the variant has one."""
    state = dict(model.state_dict())
    if settings.fedhap.uses_discriminator:
        disc = build_run_discriminator(settings, num_classes)
        state.update(prefix_state(disc.state_dict()))
    return state

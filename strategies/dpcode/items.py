"""What a DPcode client counts: frames of its images, or chunks of its hash codes.

One function for both sides, so the server's evaluation-only ground truth counts
exactly what the clients count.
"""

from __future__ import annotations

from typing import Any

import torch

from hashing.codes import sign_codes
from hashing.train import encode
from privacy.dpcode import (
    HadamardCodebook,
    code_transactions,
    patch_descriptors,
)
from settings.run_model import build_run_model
from settings.run_settings import RunSettings


def codebook(settings: RunSettings) -> HadamardCodebook | None:
    """Return the public codebook of ``source = "frames"`` (None for chunks)."""
    cfg = settings.dpcode
    return HadamardCodebook(cfg.patch * cfg.patch) if cfg.source == "frames" else None


def client_items(
    settings: RunSettings,
    inputs: torch.Tensor,
    *,
    model_state: dict[str, torch.Tensor] | None = None,
    device: torch.device | None = None,
) -> Any:
    """Frames (patch descriptors) of ``inputs``, or transactions of code chunks.

    ``inputs`` are images ``(n, C, H, W)`` for frames (channels averaged to grey);
    for codes, the items the run's model encodes with ``model_state``.
    """
    cfg = settings.dpcode
    if cfg.source == "frames":
        if inputs.ndim != 4:
            raise ValueError(
                f"dpcode frames need images (n, C, H, W), got shape "
                f"{tuple(inputs.shape)}"
            )
        grey = inputs.float().mean(dim=1).numpy()
        return patch_descriptors(grey, patch=cfg.patch, stride=cfg.stride)
    if model_state is None:
        raise ValueError("dpcode codes need the trained model's arrays")
    model = build_run_model(settings, tuple(inputs.shape[1:]))
    model.load_state_dict(model_state)
    codes = sign_codes(encode(model, inputs, device=device or torch.device("cpu")))
    return code_transactions(codes, chunk_bits=cfg.chunk_bits)

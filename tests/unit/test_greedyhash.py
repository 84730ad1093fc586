"""GreedyHash (sign forward, straight-through backward, classifier on the codes)."""

import math

import pytest
import torch
from torch import nn

from hashing.greedyhash import GreedyHashNet, greedyhash_loss, sign_straight_through
from settings.check import ConfigError
from settings.run_model import build_hash_loss, build_run_model
from settings.run_settings import RunSettings


def test_sign_is_exact_forward_and_identity_backward() -> None:
    u = torch.tensor([[0.3, -2.0, 1.5]], requires_grad=True)
    h = sign_straight_through(u)
    assert h.tolist() == [[1.0, -1.0, 1.0]]
    (h * torch.tensor([[1.0, 2.0, 3.0]])).sum().backward()
    assert u.grad.tolist() == [[1.0, 2.0, 3.0]]  # dL/du = dL/dh


def _classifier(weight: list[list[float]]) -> nn.Linear:
    lin = nn.Linear(len(weight[0]), len(weight), bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor(weight))
    return lin


def test_loss_matches_hand_computation_single_label() -> None:
    u = [[0.5, -2.0], [-1.0, 0.2]]
    w = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]  # 3 classes, 2 bits
    labels = [2, 0]
    alpha = 0.1
    fit = 0.0
    for row, y in zip(u, labels, strict=True):
        h = [math.copysign(1.0, x) for x in row]
        logits = [sum(a * b for a, b in zip(wc, h, strict=True)) for wc in w]
        fit += -logits[y] + math.log(sum(math.exp(z) for z in logits))
    penalty = sum(abs(abs(x) - 1) ** 3 for row in u for x in row) / 4
    want = fit / 2 + alpha * penalty
    got = greedyhash_loss(
        torch.tensor(u), torch.tensor(labels), _classifier(w), penalty_weight=alpha
    )
    assert got.item() == pytest.approx(want, rel=1e-6)


def test_multi_label_uses_binary_cross_entropy_per_label() -> None:
    u = torch.tensor([[1.0, -1.0]])  # on the vertices: no penalty
    w = [[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    y = torch.tensor([[1, 1, 0]])
    logits = [2.0, -1.0, 0.0]
    want = (
        -math.log(1 / (1 + math.exp(-logits[0])))
        - math.log(1 / (1 + math.exp(-logits[1])))
        - math.log(1 - 1 / (1 + math.exp(-logits[2])))
    ) / 3
    got = greedyhash_loss(u, y, _classifier(w), penalty_weight=0.5)
    assert got.item() == pytest.approx(want, rel=1e-6)


def test_gradient_reaches_network_and_classifier() -> None:
    torch.manual_seed(0)
    net = GreedyHashNet(nn.Linear(4, 6), bits=6, num_classes=3)
    x, y = torch.randn(8, 4), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    greedyhash_loss(net(x), y, net.classifier, penalty_weight=0.1).backward()
    assert net.backbone.weight.grad.abs().sum() > 0
    assert net.classifier.weight.grad.abs().sum() > 0
    assert net(x).shape == (8, 6)  # forward gives the relaxed codes u
    assert set(net.state_dict()) == {
        "backbone.weight",
        "backbone.bias",
        "classifier.weight",
    }


def test_training_separates_two_classes() -> None:
    torch.manual_seed(0)
    x = torch.cat([torch.randn(32, 5) + 2, torch.randn(32, 5) - 2])
    y = torch.tensor([0] * 32 + [1] * 32)
    net = GreedyHashNet(nn.Linear(5, 8), bits=8, num_classes=2)
    opt = torch.optim.Adam(net.parameters(), lr=0.05)
    for _ in range(60):
        opt.zero_grad()
        greedyhash_loss(net(x), y, net.classifier, penalty_weight=0.1).backward()
        opt.step()
    codes = torch.sign(net(x))
    # codes of a class agree with each other and differ from the other class
    same = (codes[:32] @ codes[:32].T).float().mean()
    other = (codes[:32] @ codes[32:].T).float().mean()
    assert same > 4 and other < -4


def test_greedyhash_is_wired_for_fedavg_only() -> None:
    settings = RunSettings.from_config(
        {"loss": "greedyhash", "code-length": 8, "model": "mlp"}
    )
    model = build_run_model(settings, (64,), 10)
    assert isinstance(model, GreedyHashNet)
    assert model.classifier.weight.shape == (10, 8)
    loss_fn = build_hash_loss(settings, 10, model=model)
    u, y = torch.randn(6, 8), torch.tensor([0, 1, 0, 2, 1, 0])
    assert loss_fn(u, y).item() == pytest.approx(
        greedyhash_loss(u, y, model.classifier, penalty_weight=0.1).item()
    )
    with pytest.raises(ValueError, match="needs num_classes"):
        build_run_model(settings, (64,))
    with pytest.raises(ValueError, match="GreedyHashNet"):
        build_hash_loss(settings, 10)
    with pytest.raises(ConfigError, match="GreedyHash is a baseline loss of FedAvg"):
        RunSettings.from_config({"loss": "greedyhash", "strategy": "fedhap"})
    with pytest.raises(ConfigError, match="dp-sgd"):
        RunSettings.from_config({"loss": "greedyhash", "dp-sgd.enabled": True})
    plain = RunSettings.from_config({"loss": "dpsh", "model": "mlp"})
    assert not isinstance(build_run_model(plain, (64,), 10), GreedyHashNet)


def test_the_client_app_trains_and_encodes_with_the_classifier() -> None:
    # the real ClientApp's train and query.encode handlers, in-process
    from settings.run_settings import RunSettings as RS
    from tests.integration.attacks.clientapp_calls import (
        global_model,
        query_encode_at,
        train,
    )

    config = {"loss": "greedyhash", "model": "mlp", "code-length": 16, "seed": 3}
    before = {
        k: v.numpy() for k, v in global_model(RS.from_config(config), 0).items()
    }
    after = train(config, pid=0, server_round=1)
    assert set(after) == set(before) and "classifier.weight" in after
    assert after["classifier.weight"].shape == (10, 16)
    assert not (after["classifier.weight"] == before["classifier.weight"]).all()
    codes, labels = query_encode_at(config, 0)
    assert codes.shape == (len(labels), 16) and len(labels) > 0

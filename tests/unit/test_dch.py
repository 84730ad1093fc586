"""DCH's loss (Deep Cauchy Hashing) and its use as a FedAvg / centralized loss."""

import math

import pytest
import torch

from hashing.dch import MAX_COSINE, dch_loss
from settings.check import ConfigError
from settings.run_model import build_hash_loss
from settings.run_settings import RunSettings


def _distance(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    cos = dot / (math.hypot(*a) * math.hypot(*b))
    return len(a) / 2 * (1 - min(cos, MAX_COSINE))


def test_dch_loss_matches_hand_computation_single_label() -> None:
    u = [[2.0, -1.0, 0.5], [1.0, 1.0, -0.2], [-1.0, 0.5, 3.0]]
    labels = torch.tensor([0, 0, 1])
    gamma, lam = 20.0, 0.1
    s = [[1, 1, 0], [1, 1, 0], [0, 0, 1]]
    n_sim, n_dis, n_all = 5, 4, 9
    pairs = 0.0
    for i in range(3):
        for j in range(3):
            d = _distance(u[i], u[j])
            if s[i][j]:
                pairs += n_all / n_sim * math.log(1 + d / gamma)
            else:
                pairs += n_all / n_dis * math.log(1 + gamma / d)
    quant = sum(
        math.log(1 + _distance([abs(x) for x in row], [1.0] * 3) / gamma) for row in u
    )
    want = pairs / n_all + lam * quant / 3
    got = dch_loss(torch.tensor(u), labels, gamma=gamma, quantization_weight=lam)
    assert got.item() == pytest.approx(want, rel=1e-6)


def test_dch_multi_label_pairs_sharing_a_label_are_similar() -> None:
    u = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    shared = torch.tensor([[1, 1, 0], [0, 1, 0]])
    disjoint = torch.tensor([[1, 0, 0], [0, 1, 0]])
    d = 2 / 2 * (1 - 0.0)  # orthogonal: cos 0
    diag = 2 / 2 * (1 - MAX_COSINE)
    # all similar: weights 1; diagonal and off-diagonal terms log(1 + d / gamma)
    want = (2 * math.log1p(diag / 20) + 2 * math.log1p(d / 20)) / 4
    got = dch_loss(u, shared, quantization_weight=0.0)
    assert got.item() == pytest.approx(want, rel=1e-6)
    # disjoint labels: the off-diagonal pairs are dissimilar (weight 4 / 2 = 2)
    want = (2 * 2 * math.log1p(diag / 20) + 2 * 2 * math.log1p(20 / d)) / 4
    got = dch_loss(u, disjoint, quantization_weight=0.0)
    assert got.item() == pytest.approx(want, rel=1e-6)


def test_dch_gradient_pulls_similar_and_pushes_dissimilar() -> None:
    def cos(x):
        return float(x[0] @ x[1] / (x[0].norm() * x[1].norm()))

    for labels, closer in ((torch.tensor([0, 0]), True), (torch.tensor([0, 1]), False)):
        u = torch.tensor([[1.0, -0.5, 0.3, 0.9], [-0.2, 1.0, 0.4, 0.1]])
        u.requires_grad_(True)
        dch_loss(u, labels, quantization_weight=0.0).backward()
        step = u.detach() - 0.05 * u.grad
        assert (cos(step) > cos(u.detach())) == closer
    empty = torch.zeros(0, 2, requires_grad=True)
    assert dch_loss(empty, torch.zeros(0, dtype=torch.long)) == 0


def test_dch_quantization_is_smallest_at_the_hypercube_vertices() -> None:
    labels = torch.tensor([0, 0])
    vertex = torch.tensor([[1.0, -1.0, 1.0, 1.0], [-1.0, -1.0, 1.0, -1.0]])
    uneven = torch.tensor([[3.0, -0.1, 1.0, 0.2], [-1.0, -2.0, 0.05, -1.0]])

    def quant(u):
        return dch_loss(u, labels, quantization_weight=1.0) - dch_loss(
            u, labels, quantization_weight=0.0
        )

    floor = math.log1p(4 / 2 * (1 - MAX_COSINE) / 20)
    assert quant(vertex).item() == pytest.approx(floor, rel=1e-5)
    assert quant(uneven).item() > floor + 1e-3


def test_dch_is_a_fedavg_loss_only() -> None:
    settings = RunSettings.from_config({"loss": "dch", "code-length": 8})
    loss_fn = build_hash_loss(settings, 10)
    u, y = torch.randn(6, 8), torch.tensor([0, 1, 0, 2, 1, 0])
    assert loss_fn(u, y).item() == pytest.approx(
        dch_loss(u, y, quantization_weight=settings.quantization_weight).item()
    )
    with pytest.raises(ConfigError, match="DCH is a baseline loss of FedAvg"):
        RunSettings.from_config({"loss": "dch", "strategy": "fedhap"})
    with pytest.raises(ConfigError, match="dp-sgd"):
        RunSettings.from_config({"loss": "dch", "dp-sgd.enabled": True})

"""HashNet's loss, continuation schedule and its use as a FedAvg / centralized loss."""

import math

import pytest
import torch

from hashing.hashnet import continuation_beta, default_alpha, hashnet_loss
from settings.check import ConfigError
from settings.run_model import build_hash_loss
from settings.run_settings import RunSettings


def _softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def test_hashnet_loss_matches_hand_computation_single_label() -> None:
    u = torch.tensor([[2.0, -1.0], [1.0, 1.0], [-1.0, 0.5]])
    labels = torch.tensor([0, 0, 1])
    beta, alpha = 1.5, 0.7
    h = torch.tanh(beta * u).tolist()
    s = [[1, 1, 0], [1, 1, 0], [0, 0, 1]]
    n_sim, n_dis, n_all = 5, 4, 9
    total = 0.0
    for i in range(3):
        for j in range(3):
            ip = alpha * sum(a * b for a, b in zip(h[i], h[j], strict=True))
            w = n_all / n_sim if s[i][j] else n_all / n_dis
            total += w * (_softplus(ip) - s[i][j] * ip)
    got = hashnet_loss(u, labels, beta=beta, alpha=alpha)
    assert got.item() == pytest.approx(total / n_all, rel=1e-6)


def test_hashnet_multi_label_weights_similar_pairs_by_jaccard() -> None:
    u = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    labels = torch.tensor([[1, 1, 0], [0, 1, 0]])  # overlap 1 of union 2
    h = torch.tanh(u)
    ip = (h @ h.T).tolist()
    # every pair similar: |S| / |S1| = 1, weight = Jaccard (1 on the diagonal)
    jac = [[1.0, 0.5], [0.5, 1.0]]
    want = (
        sum(
            jac[i][j] * (_softplus(ip[i][j]) - ip[i][j])
            for i in range(2)
            for j in range(2)
        )
        / 4
    )
    got = hashnet_loss(u, labels, beta=1.0, alpha=1.0)
    assert got.item() == pytest.approx(want, rel=1e-6)


def test_hashnet_gradient_pulls_similar_and_pushes_dissimilar() -> None:
    u = torch.tensor([[1.0, -1.0], [-1.0, 1.0], [1.0, -1.0]], requires_grad=True)
    labels = torch.tensor([0, 0, 1])
    hashnet_loss(u, labels, beta=1.0, alpha=1.0).backward()
    step = u.detach() - 0.1 * u.grad
    before = u.detach()
    assert (step[0] @ step[1]) > (before[0] @ before[1])  # similar, pulled together
    assert (step[0] @ step[2]) < (before[0] @ before[2])  # dissimilar, pushed apart
    empty = torch.zeros(0, 2, requires_grad=True)
    assert hashnet_loss(empty, torch.zeros(0, dtype=torch.long), beta=1, alpha=1) == 0


def test_continuation_schedule_and_alpha() -> None:
    assert continuation_beta(0) == 1.0
    assert continuation_beta(200) == pytest.approx(math.sqrt(2.0))
    assert continuation_beta(10_000) > continuation_beta(1_000)
    with pytest.raises(ValueError, match="step"):
        continuation_beta(-1)
    assert default_alpha(48) == pytest.approx(10 / 48)


def test_build_hash_loss_counts_steps_from_first_step() -> None:
    s = RunSettings.from_config({"loss": "hashnet", "code-length": 16})
    u = torch.randn(6, 16)
    y = torch.tensor([0, 1, 0, 1, 2, 2])
    fn = build_hash_loss(s, 3, first_step=400)
    first, second = fn(u, y), fn(u, y)
    alpha = default_alpha(16)
    assert first.item() == pytest.approx(
        hashnet_loss(u, y, beta=continuation_beta(400), alpha=alpha).item()
    )
    assert second.item() == pytest.approx(
        hashnet_loss(u, y, beta=continuation_beta(401), alpha=alpha).item()
    )


def test_hashnet_is_refused_outside_fedavg_and_for_dp_sgd() -> None:
    with pytest.raises(ConfigError, match="loss.*hashnet.*fedavg"):
        RunSettings.from_config({"loss": "hashnet", "strategy": "fedhap"})
    with pytest.raises(ConfigError, match="per-sample"):
        RunSettings.from_config({"loss": "hashnet", "dp-sgd.enabled": True})
    RunSettings.from_config({"loss": "hashnet", "strategy": "fedprox"})

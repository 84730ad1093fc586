"""DPHE's training-time elastic net: penalty, support read-off, training, config."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict
from torch import nn

from clients.train_reply import finish_train_reply, transforms_update
from hashing.elastic_net import elastic_net_penalty, snap_to_reference
from hashing.train import LocalTrainConfig, train_local
from settings import keys as K
from settings.run_settings import ConfigError, RunSettings


def test_penalty_value_and_gradient_match_the_formula():
    w = torch.tensor([[0.5, -0.2], [0.0, 1.5]], requires_grad=True)
    b = torch.tensor([-0.3], requires_grad=True)
    ref = [torch.tensor([[0.1, 0.1], [0.0, 1.0]]), torch.tensor([0.2])]
    # d = [[0.4, -0.3], [0, 0.5]], [-0.5]: ||d||_1 = 1.7, ||d||_2^2 = 0.75
    out = elastic_net_penalty([w, b], ref, l1=0.3, l2=2.0)
    assert out.shape == ()
    assert out.item() == pytest.approx(0.3 * 1.7 + 0.5 * 2.0 * 0.75)
    out.backward()
    d_w, d_b = w.detach() - ref[0], b.detach() - ref[1]
    torch.testing.assert_close(w.grad, 0.3 * torch.sign(d_w) + 2.0 * d_w)
    torch.testing.assert_close(b.grad, 0.3 * torch.sign(d_b) + 2.0 * d_b)
    assert w.grad[1, 0] == 0.0  # subgradient 0 where d = 0


def test_penalty_without_reference_is_on_the_weights_and_refuses_bad_weights():
    w = torch.tensor([1.0, -2.0])
    assert elastic_net_penalty([w], None, l1=1.0, l2=1.0).item() == pytest.approx(
        3.0 + 0.5 * 5.0
    )
    assert elastic_net_penalty([w], None, l1=0.0, l2=0.0).item() == 0.0
    for l1, l2 in ((-1.0, 0.0), (0.0, -0.1), (float("nan"), 0.0)):
        with pytest.raises(ValueError, match="elastic-net"):
            elastic_net_penalty([w], None, l1=l1, l2=l2)
    with pytest.raises(ValueError, match="reference"):
        elastic_net_penalty([w], [w, w], l1=1.0, l2=0.0)


def test_snap_to_reference_makes_near_coordinates_exactly_equal():
    ref = [torch.tensor([1.0, 2.0, 3.0, 4.0])]
    w = [torch.tensor([1.0004, 2.5, 2.9999, 4.001])]
    assert snap_to_reference(w, ref, tolerance=5e-4) == 2
    update = w[0] - ref[0]
    assert torch.equal(update == 0, torch.tensor([True, False, True, False]))
    assert w[0][1].item() == 2.5  # kept as trained (hard threshold, no shrinkage)


def _local_problem(seed: int = 0) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(96, 20, generator=g)
    y = torch.randint(0, 3, (96,), generator=g)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 8))
    return model, x, y


def _train(l1: float, l2: float, *, mu: float = 0.0, defaults: bool = False):
    """Train the tiny problem; return (global params, trained params)."""
    model, x, y = _local_problem()
    start = [p.detach().clone() for p in model.parameters()]

    def loss_fn(u: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        target = nn.functional.one_hot(labels, 8).float() * 2 - 1
        return ((u - target) ** 2).mean()

    kwargs = {} if defaults else {"elastic_net_l1": l1, "elastic_net_l2": l2}
    config = LocalTrainConfig(
        epochs=4, learning_rate=1e-2, batch_size=16, proximal_mu=mu, **kwargs
    )
    train_local(
        model,
        x,
        y,
        loss_fn=loss_fn,
        config=config,
        device=torch.device("cpu"),
        generator=torch.Generator().manual_seed(1),
    )
    return start, [p.detach().clone() for p in model.parameters()]


def _zero_fraction(start, trained) -> float:
    update = torch.cat([(t - s).ravel() for s, t in zip(start, trained, strict=True)])
    return float((update == 0).float().mean())


def test_elastic_net_training_gives_a_much_sparser_update():
    plain = _zero_fraction(*_train(0.0, 0.0))
    sparse = _zero_fraction(*_train(0.05, 0.05))
    assert plain < 0.05  # Adam moves (nearly) every coordinate
    assert sparse > 0.5
    assert sparse > plain + 0.45
    # the L2 part alone shrinks but reads off no support
    assert _zero_fraction(*_train(0.0, 0.5)) < 0.05


def test_zero_penalty_is_bit_identical_to_no_penalty():
    _, without = _train(0.0, 0.0, defaults=True)
    _, zero = _train(0.0, 0.0)
    assert all(torch.equal(a, b) for a, b in zip(without, zero, strict=True))
    _, prox = _train(0.0, 0.0, mu=0.1, defaults=True)  # FedProx path unchanged too
    _, prox_zero = _train(0.0, 0.0, mu=0.1)
    assert all(torch.equal(a, b) for a, b in zip(prox, prox_zero, strict=True))
    _, with_penalty = _train(0.05, 0.0)
    assert not all(
        torch.equal(a, b) for a, b in zip(without, with_penalty, strict=True)
    )


def test_elastic_net_config_is_accepted_and_reaches_the_trainer():
    s = RunSettings.from_config(
        {"updates.sparsifier": "elastic-net", "updates.elastic-net-l1": 0.01}
    )
    assert s.updates.elastic_net_weights() == (0.01, 0.0)
    assert RunSettings.from_config({}).updates.elastic_net_weights() == (0.0, 0.0)
    s = RunSettings.from_config(
        {"updates.sparsifier": "soft-threshold", "updates.soft-threshold": 0.001}
    )
    assert s.updates.elastic_net_weights() == (0.0, 0.0)
    # the old top-k key alone still means top-k
    assert RunSettings.from_config({"updates.sparsity": 0.9}).updates.sparsity == 0.9


EN = {"updates.sparsifier": "elastic-net", "updates.elastic-net-l1": 0.01}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"updates.elastic-net-l1": -0.1}, "updates.elastic-net-l1=-0.1"),
        ({**EN, "updates.elastic-net-l2": -1.0}, "updates.elastic-net-l2=-1.0"),
        ({"updates.soft-threshold": -0.1}, "updates.soft-threshold=-0.1"),
        ({"updates.sparsifier": "l1"}, "updates.sparsifier='l1': accepted are none"),
        # the old meaning of elastic-net-l1 (one prox step after training)
        (
            {"updates.elastic-net-l1": 0.01},
            'updates.elastic-net-l1=0.01 .*updates.sparsifier="soft-threshold" '
            "with updates.soft-threshold=0.01",
        ),
        ({"updates.elastic-net-l2": 0.5}, "updates.elastic-net-l2=0.5"),
        (
            {"updates.sparsifier": "elastic-net"},
            "updates.sparsifier=\"elastic-net\" needs updates.elastic-net-l1 > 0",
        ),
        (
            {"updates.sparsifier": "elastic-net", "updates.elastic-net-l2": 0.1},
            "needs updates.elastic-net-l1 > 0",
        ),
        ({"updates.sparsifier": "soft-threshold"}, "updates.soft-threshold > 0"),
        ({"updates.soft-threshold": 0.1}, "updates.soft-threshold=0.1"),
        (
            {"updates.sparsifier": "none", "updates.sparsity": 0.5},
            "updates.sparsity=0.5",
        ),
        ({**EN, "strategy": "fedhap"}, "strategy='fedhap'"),
        ({**EN, "dp-sgd.enabled": True, "loss": "csq"}, "dp-sgd.enabled=true"),
        (
            {
                "strategy": "pfmh",
                "dataset": "multiview-digits",
                "pfmh.mode": "personalized",
                "updates.sparsifier": "soft-threshold",
                "updates.soft-threshold": 0.1,
            },
            "updates.soft-threshold=0.1 with pfmh.mode",
        ),
    ],
)
def test_bad_sparsifier_settings_are_refused_naming_the_key(config, message):
    with pytest.raises(ConfigError, match=message):
        RunSettings.from_config(config)


def test_soft_threshold_and_elastic_net_in_the_client_transport():
    ref = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    local = np.array([1.05, 2.5, 2.98, 3.0], dtype=np.float32)

    def reply() -> RecordDict:
        return RecordDict(
            {
                K.ARRAYS: ArrayRecord({"w": torch.from_numpy(local.copy())}),
                K.METRICS: MetricRecord({K.NUM_EXAMPLES: 10}),
            }
        )

    soft = RunSettings.from_config(
        {"updates.sparsifier": "soft-threshold", "updates.soft-threshold": 0.1}
    )
    out = finish_train_reply(
        reply(),
        global_arrays=ArrayRecord({"w": torch.from_numpy(ref)}),
        settings=soft,
        partition_id=0,
        rng=np.random.default_rng(0),
    )
    sent = out[K.ARRAYS]["w"].numpy().astype(np.float64) - ref
    np.testing.assert_allclose(sent, [0.0, 0.4, 0.0, -0.9], atol=1e-6)
    # the elastic net's zeros are made in training: the transport leaves it alone
    assert not transforms_update(RunSettings.from_config(EN))
    assert transforms_update(RunSettings.from_config({**EN, "updates.sparsity": 0.5}))

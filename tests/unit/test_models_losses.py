import math

import pytest
import torch

from hashing.losses import dpsh_loss, pairwise_similarity, proximal_term
from hashing.models import build_model, resolve_model_name
from hashing.train import LocalTrainConfig, iterate_minibatches, train_dpsh


def test_dpsh_loss_matches_hand_computation():
    u = torch.tensor([[1.0, -1.0], [0.5, 0.5]])
    labels = torch.tensor([0, 1])
    # theta = 0.5 * u u^T = [[1, 0], [0, 0.25]]; s = I
    theta = [[1.0, 0.0], [0.0, 0.25]]
    s = [[1, 0], [0, 1]]
    lik = (
        sum(
            math.log1p(math.exp(theta[i][j])) - s[i][j] * theta[i][j]
            for i in range(2)
            for j in range(2)
        )
        / 4
    )
    quant = (0 + 0 + 0.25 + 0.25) / 4  # (u - sign u)^2 per entry
    got = dpsh_loss(u, labels, quantization_weight=0.5)
    assert got.item() == pytest.approx(lik + 0.5 * quant, rel=1e-6)


def test_multi_label_similarity_shares_a_label():
    labels = torch.tensor([[1, 0, 1], [0, 0, 1], [0, 1, 0]])
    s = pairwise_similarity(labels)
    assert s.tolist() == [[1, 1, 0], [1, 1, 0], [0, 0, 1]]


def test_dpsh_gradient_pulls_similar_codes_together():
    u = torch.tensor([[1.0, -1.0], [-1.0, 1.0]], requires_grad=True)
    loss = dpsh_loss(u, torch.tensor([3, 3]), quantization_weight=0.0)
    loss.backward()
    # descending the gradient must increase the inner product of the similar pair
    stepped = u.detach() - 0.1 * u.grad
    assert (stepped[0] @ stepped[1]) > (u[0] @ u[1]).detach()


def test_proximal_term():
    a = [torch.tensor([1.0, 2.0]), torch.tensor([[3.0]])]
    b = [torch.tensor([0.0, 0.0]), torch.tensor([[1.0]])]
    assert proximal_term(a, b).item() == pytest.approx(1 + 4 + 4)


@pytest.mark.parametrize(
    ("shape", "name", "expected"),
    [
        ((64,), "auto", "mlp"),
        ((1, 8, 8), "auto", "cnn"),
        ((3, 32, 32), "auto", "resnet18"),
    ],
)
def test_model_resolution_and_output_shape(shape, name, expected):
    assert resolve_model_name(name, shape) == expected
    model = build_model(name, shape, 24, hidden_dim=32)
    out = model(torch.zeros(2, *shape))
    assert out.shape == (2, 24)


def test_cnn_on_features_is_refused():
    with pytest.raises(ValueError, match="model='cnn' needs images"):
        build_model("cnn", (64,), 16)


def test_missing_resnet_weights_file_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="model-weights"):
        build_model("resnet18", (3, 32, 32), 16, weights_path=str(tmp_path / "no.pt"))


def test_resnet_loads_local_weights(tmp_path):
    source = build_model("resnet18", (3, 32, 32), 16)
    path = tmp_path / "w.pt"
    torch.save(source.state_dict(), path)
    loaded = build_model("resnet18", (3, 32, 32), 48, weights_path=str(path))
    assert torch.equal(loaded.conv1.weight, source.conv1.weight)
    assert loaded.fc.out_features == 48


def test_minibatches_cover_once_and_never_leave_a_single_sample():
    g = torch.Generator().manual_seed(0)
    batches = iterate_minibatches(129, 64, generator=g)
    assert sorted(torch.cat(batches).tolist()) == list(range(129))
    assert min(len(b) for b in batches) >= 2


def test_training_is_deterministic_and_reduces_loss():
    torch.manual_seed(0)
    x = torch.randn(96, 16)
    y = torch.arange(96) % 3
    x = x + 3 * torch.nn.functional.one_hot(y, 16).float()
    cfg = LocalTrainConfig(epochs=5, learning_rate=1e-2, batch_size=32)

    def run():
        torch.manual_seed(1)
        model = build_model("mlp", (16,), 16, hidden_dim=32)
        first = dpsh_loss(model(x), y, quantization_weight=0.1).item()
        stats = train_dpsh(
            model,
            x,
            y,
            config=cfg,
            device=torch.device("cpu"),
            generator=torch.Generator().manual_seed(2),
        )
        model.eval()
        return first, stats, dpsh_loss(model(x), y, quantization_weight=0.1).item()

    a, b = run(), run()
    assert a == b
    assert a[2] < a[0]

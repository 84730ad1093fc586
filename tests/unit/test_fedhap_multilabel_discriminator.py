"""FedHAP's discriminator on multi-label data: one one-hot pair per label (Eq. 5).

The attack the fix must defeat: a discriminator that looks at the label part of its
input only. With the old pairing (a multi-label sample as one (code, multi-hot) row)
the label vector alone gives the fakes away, since every prototype's label vector is
one-hot. With one (code, e_c) pair per label it has the same form for reals and
fakes. Single-label input must train exactly as before.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import hashing.fedhap.train as fedhap_train
from hashing.fedhap.discriminator import (
    Discriminator,
    discriminator_loss,
    generator_loss,
    label_pairs,
)
from hashing.fedhap.train import FedHAPTrainConfig, train_fedhap
from hashing.models import MLPHash

BITS = 8
C = 6


# --- the old pairing, reconstructed: every sample one row, multi-hot as it comes --


def _old_discriminator_loss(disc, codes, labels, protos, p_classes):
    fake = disc(codes, labels)  # forward scores a multi-hot row as one input
    real = disc(protos.to(codes.dtype), p_classes)
    return F.binary_cross_entropy_with_logits(
        fake, torch.zeros_like(fake)
    ) + F.binary_cross_entropy_with_logits(real, torch.ones_like(real))


def _old_generator_loss(disc, codes, labels):
    logits = disc(codes, labels)
    return F.binary_cross_entropy_with_logits(logits, torch.ones_like(logits))


def _old_fake_label_part(labels):
    """Label part of the old fake rows: the (n, C) multi-hot vector as float."""
    return labels.float()


# --- helpers -----------------------------------------------------------------------


def _prototypes(seed=0):
    g = torch.Generator().manual_seed(seed)
    codes = torch.where(torch.rand(C, BITS, generator=g) < 0.5, -1.0, 1.0)
    return codes, torch.arange(C)


def _cyclic_multilabel(n=60):
    """Every sample has two labels {j, j+1 mod C}: each class in n/C * 2 pairs."""
    y = torch.zeros(n, C, dtype=torch.int64)
    j = torch.arange(n)
    y[j, j % C] = 1
    y[j, (j + 1) % C] = 1
    return y


def _mixed_multilabel(n=64, seed=1):
    """Random multi-hot labels, 1 to 3 labels per sample, some single-label."""
    g = torch.Generator().manual_seed(seed)
    y = torch.zeros(n, C, dtype=torch.int64)
    for i in range(n):
        k = int(torch.randint(1, 4, (1,), generator=g))
        y[i, torch.randperm(C, generator=g)[:k]] = 1
    return y


def _discriminator_inputs(disc, codes, labels, protos, p_classes):
    """What D's first layer sees in ``discriminator_loss``: (fake rows, real rows)."""
    seen = []
    handle = disc.net.register_forward_pre_hook(
        lambda _m, args: seen.append(args[0].detach().clone())
    )
    try:
        discriminator_loss(disc, codes, labels, protos, p_classes)
    finally:
        handle.remove()
    assert len(seen) == 2  # fake call, then real call
    return seen[0], seen[1]


def _auc(score_real, score_fake):
    """P(score of a real > score of a fake), ties count one half."""
    gt = (score_real[:, None] > score_fake[None, :]).double().mean()
    eq = (score_real[:, None] == score_fake[None, :]).double().mean()
    return float(gt + 0.5 * eq)


def _fit_label_only_logreg(real_labels, fake_labels, steps=2000, lr=1.0):
    """Logistic regression on the label part only, with L_d's balanced loss.

    Plain full-batch gradient descent in float64 numpy (fast and deterministic)
    on ``mean_fake -log(1 - p) + mean_real -log p``. Returns the logits of reals
    and fakes and the final loss halved (log 2 = no information).
    """
    xr = np.hstack([real_labels.double().numpy(), np.ones((len(real_labels), 1))])
    xf = np.hstack([fake_labels.double().numpy(), np.ones((len(fake_labels), 1))])
    w = np.zeros(xr.shape[1])

    def sigmoid(z):
        return 1.0 / (1.0 + np.exp(-z))

    for _ in range(steps):
        # d/dz softplus(-z) = p - 1 for reals, d/dz softplus(z) = p for fakes
        grad = xr.T @ (sigmoid(xr @ w) - 1.0) / len(xr) + xf.T @ sigmoid(xf @ w) / len(
            xf
        )
        w -= lr * grad
    zr, zf = xr @ w, xf @ w
    loss = np.logaddexp(0.0, -zr).mean() + np.logaddexp(0.0, zf).mean()
    return torch.from_numpy(zr), torch.from_numpy(zf), float(loss) / 2.0


# --- the attack: a label-only discriminator ----------------------------------------


def test_label_sum_check_separates_old_pairing_perfectly_and_new_not_at_all():
    torch.manual_seed(0)
    disc = Discriminator(BITS, C, hidden_dim=8)
    protos, p_classes = _prototypes()
    y = _cyclic_multilabel()
    codes = torch.randn(len(y), BITS)
    fake_rows, real_rows = _discriminator_inputs(disc, codes, y, protos, p_classes)
    real_part = real_rows[:, BITS:]

    def flagged(label_part):  # the attack: "a label vector that is not one-hot"
        return label_part.sum(1) != 1

    # before: every fake flagged, no real flagged -- perfect separation
    old_fake = _old_fake_label_part(y)
    assert bool(flagged(old_fake).all()) and not bool(flagged(real_part).any())
    # after: nothing is flagged; both label parts are one-hot rows
    new_fake = fake_rows[:, BITS:]
    assert not bool(flagged(new_fake).any()) and not bool(flagged(real_part).any())
    for part in (new_fake, real_part):
        assert bool(((part == 0) | (part == 1)).all())
        assert torch.equal(part.sum(1), torch.ones(len(part)))


def test_label_only_logistic_regression_wins_before_and_is_at_chance_after():
    torch.manual_seed(0)
    disc = Discriminator(BITS, C, hidden_dim=8)
    protos, p_classes = _prototypes()
    y = _cyclic_multilabel()
    codes = torch.randn(len(y), BITS)
    fake_rows, real_rows = _discriminator_inputs(disc, codes, y, protos, p_classes)
    real_part = real_rows[:, BITS:]

    sr, sf, loss_before = _fit_label_only_logreg(real_part, _old_fake_label_part(y))
    assert _auc(sr, sf) == 1.0
    assert bool((sr > 0).all()) and bool((sf < 0).all())  # accuracy 1 at p = 0.5
    assert loss_before < 0.05

    sr, sf, loss_after = _fit_label_only_logreg(real_part, fake_rows[:, BITS:])
    # each class is in as many fake pairs as any other, one prototype per class:
    # the label parts have the same distribution, so no label-only score beats chance
    assert _auc(sr, sf) == pytest.approx(0.5, abs=1e-12)
    assert loss_after == pytest.approx(math.log(2), abs=1e-3)


def test_every_new_fake_label_row_is_a_real_label_row():
    """Mixed data: no label-only rule can flag a fake without flagging a real."""
    torch.manual_seed(0)
    disc = Discriminator(BITS, C, hidden_dim=8)
    protos, p_classes = _prototypes()
    y = _mixed_multilabel()
    assert int((y.sum(1) == 1).sum()) > 0 and int((y.sum(1) > 1).sum()) > 0
    codes = torch.randn(len(y), BITS)
    fake_rows, real_rows = _discriminator_inputs(disc, codes, y, protos, p_classes)
    real_set = {tuple(r.tolist()) for r in real_rows[:, BITS:]}
    old_unseen = [tuple(r.tolist()) not in real_set for r in _old_fake_label_part(y)]
    # before: exactly the multi-label samples have a label vector no real has
    assert old_unseen == (y.sum(1) > 1).tolist()
    assert all(tuple(r.tolist()) in real_set for r in fake_rows[:, BITS:])


# --- pairs -------------------------------------------------------------------------


def test_multilabel_input_gives_one_pair_per_label():
    codes = torch.arange(12.0).reshape(3, 4)
    y = torch.tensor([[0, 0, 1, 0, 0, 1], [0, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0]])
    pair_codes, pair_classes = label_pairs(codes, y)
    assert len(pair_codes) == int(y.sum()) == 6
    assert pair_classes.tolist() == [2, 5, 1, 0, 1, 2]
    assert torch.equal(pair_codes, codes[[0, 0, 1, 2, 2, 2]])


def test_discriminator_and_generator_see_sum_of_labels_pairs():
    torch.manual_seed(0)
    disc = Discriminator(BITS, C, hidden_dim=8)
    protos, p_classes = _prototypes()
    y = _mixed_multilabel()
    codes = torch.randn(len(y), BITS)
    fake_rows, real_rows = _discriminator_inputs(disc, codes, y, protos, p_classes)
    assert len(fake_rows) == int(y.sum()) > len(y)
    assert len(real_rows) == C
    seen = []
    handle = disc.net.register_forward_pre_hook(lambda _m, a: seen.append(len(a[0])))
    generator_loss(disc, codes, y)
    handle.remove()
    assert seen == [int(y.sum())]


def test_losses_average_per_pair():
    """A two-label sample weighs twice a one-label sample (Eq. 5's counting)."""
    torch.manual_seed(0)
    disc = Discriminator(BITS, C, hidden_dim=8)
    protos, p_classes = _prototypes()
    codes = torch.randn(2, BITS)
    y = torch.tensor([[0, 0, 1, 0, 0, 1], [0, 1, 0, 0, 0, 0]])
    d_pairs = torch.sigmoid(disc(codes[[0, 0, 1]], torch.tensor([2, 5, 1])))
    d_real = torch.sigmoid(disc(protos, p_classes))
    expected_d = -torch.log(1 - d_pairs).mean() - torch.log(d_real).mean()
    expected_g = -torch.log(d_pairs).mean()
    got_d = discriminator_loss(disc, codes, y, protos, p_classes)
    assert float(got_d) == pytest.approx(float(expected_d), rel=1e-5)
    assert float(generator_loss(disc, codes, y)) == pytest.approx(
        float(expected_g), rel=1e-5
    )


def test_rows_without_labels_give_no_pair_and_an_empty_batch_gives_zero():
    torch.manual_seed(0)
    disc = Discriminator(BITS, C, hidden_dim=8)
    protos, p_classes = _prototypes()
    codes = torch.randn(2, BITS, requires_grad=True)
    y = torch.zeros(2, C, dtype=torch.int64)
    g = generator_loss(disc, codes, y)
    assert float(g) == 0.0
    g.backward()  # keeps a graph
    real = disc(protos, p_classes)
    only_real = F.binary_cross_entropy_with_logits(real, torch.ones_like(real))
    assert torch.equal(discriminator_loss(disc, codes, y, protos, p_classes), only_real)
    y[1, 3] = 1
    assert len(label_pairs(codes, y)[0]) == 1


# --- single-label input: bit-identical to the old pairing ----------------------------


def _single_labels(fmt, n=20, seed=2):
    ids = torch.randint(0, C, (n,), generator=torch.Generator().manual_seed(seed))
    return ids if fmt == "ids" else F.one_hot(ids, C)


@pytest.mark.parametrize("fmt", ["ids", "one-hot"])
def test_single_label_losses_and_gradients_are_bit_identical(fmt):
    y = _single_labels(fmt)
    protos, p_classes = _prototypes()
    results = []
    for d_fn, g_fn in (
        (discriminator_loss, generator_loss),
        (_old_discriminator_loss, _old_generator_loss),
    ):
        torch.manual_seed(0)
        disc = Discriminator(BITS, C, hidden_dim=8)
        codes = torch.randn(len(y), BITS, generator=torch.Generator().manual_seed(3))
        codes.requires_grad_(True)
        d = d_fn(disc, codes, y, protos, p_classes)
        g = g_fn(disc, codes, y)
        (d + g).backward()
        grads = [codes.grad] + [p.grad for p in disc.parameters()]
        results.append((d.detach(), g.detach(), grads))
    (d1, g1, gr1), (d0, g0, gr0) = results
    assert torch.equal(d1, d0) and torch.equal(g1, g0)
    assert all(torch.equal(a, b) for a, b in zip(gr1, gr0, strict=True))


def _toy(seed=0, n=48, d=12):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % C
    centers = torch.randn(C, d, generator=g) * 3
    return centers[y] + torch.randn(n, d, generator=g), y


def _round(x, y, monkeypatch=None, old=False):
    if old:
        assert monkeypatch is not None
        monkeypatch.setattr(fedhap_train, "discriminator_loss", _old_discriminator_loss)
        monkeypatch.setattr(fedhap_train, "generator_loss", _old_generator_loss)
    torch.manual_seed(0)
    model = MLPHash(x.shape[1], BITS, hidden_dim=16)
    disc = Discriminator(BITS, C, hidden_dim=8)
    stats = train_fedhap(
        model,
        disc,
        x,
        y,
        prototypes=_prototypes(),
        config=FedHAPTrainConfig(
            epochs=2, learning_rate=1e-2, batch_size=16, num_classes=C
        ),
        device=torch.device("cpu"),
        generator=torch.Generator().manual_seed(1),
    )
    params = [p.detach().clone() for p in [*model.parameters(), *disc.parameters()]]
    if old:
        monkeypatch.undo()
    return stats, params


@pytest.mark.parametrize("fmt", ["ids", "one-hot"])
def test_single_label_training_round_is_bit_identical(fmt, monkeypatch):
    x, ids = _toy()
    y = ids if fmt == "ids" else F.one_hot(ids, C)
    new_stats, new_params = _round(x, y)
    old_stats, old_params = _round(x, y, monkeypatch, old=True)
    assert new_stats == old_stats
    assert new_stats["adversarial"] != 0 and new_stats["discriminator"] != 0
    assert all(torch.equal(a, b) for a, b in zip(new_params, old_params, strict=True))


def test_multilabel_training_round_runs_and_differs_from_old_pairing(monkeypatch):
    x, _ = _toy(n=64)
    y = _mixed_multilabel(n=64)
    y[0] = 0  # a sample without labels: no adversarial pair
    new_stats, new_params = _round(x, y)
    old_stats, old_params = _round(x, y, monkeypatch, old=True)
    assert all(math.isfinite(v) for v in new_stats.values())
    assert new_stats["steps"] == 8
    assert new_stats["adversarial"] != old_stats["adversarial"]
    assert not all(
        torch.equal(a, b) for a, b in zip(new_params, old_params, strict=True)
    )

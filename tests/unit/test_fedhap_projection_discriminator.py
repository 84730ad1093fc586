"""FedHAP's discriminator options: the projection form, sign input, class scores.

The audit these options answer: a trained concatenation D (the paper's) with
relaxed input scored prototypes of the right and of a wrong class alike and
relaxed codes low, their signs high -- it told binary from relaxed codes and
ignored the class. ``test_relaxed_input_learns_binarity_not_class`` reproduces that
on a toy problem; the other tests check the options' maths.
"""

import pytest
import torch

from hashing.fedhap.discriminator import (
    DISCRIMINATORS,
    Discriminator,
    ProjectionDiscriminator,
    build_discriminator,
    class_scores,
    discriminator_input,
    discriminator_loss,
    straight_through_sign,
)
from strategies.fedhap import config as fedhap_config

BITS, C = 16, 4


def _prototypes():
    g = torch.Generator().manual_seed(0)
    return torch.where(torch.rand(C, BITS, generator=g) < 0.5, -1.0, 1.0), torch.arange(
        C
    )


def _near_codes(protos, per_class=32, seed=1):
    """Relaxed codes close to their own class's prototype (sign = the prototype)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(C).repeat_interleave(per_class)
    noise = 0.1 * torch.randn(len(labels), BITS, generator=g)
    return 0.5 * protos[labels] + noise, labels


def _train(disc, codes, labels, protos, classes, *, kind="relaxed", steps=120):
    torch.manual_seed(0)
    opt = torch.optim.Adam(disc.parameters(), lr=1e-2)
    for _ in range(steps):
        loss = discriminator_loss(
            disc, discriminator_input(codes, kind).detach(), labels, protos, classes
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    return disc


def test_config_choices_match_the_implementations():
    assert fedhap_config.DISCRIMINATORS == tuple(DISCRIMINATORS)
    assert fedhap_config.DISCRIMINATOR_INPUTS == ("relaxed", "sign")


def test_projection_score_is_psi_plus_class_embedding_inner_product():
    torch.manual_seed(0)
    d = ProjectionDiscriminator(BITS, C, hidden_dim=8)
    h = torch.randn(3, BITS)
    feats = d.phi(h)
    for c in range(C):
        y = torch.full((3,), c)
        want = d.psi(feats)[:, 0] + feats @ d.embed.weight[:, c]
        torch.testing.assert_close(d(h, y), want)
    # the class changes the score of the same code
    scores = torch.stack([d(h, torch.full((3,), c)) for c in range(C)])
    assert (scores.max(0).values - scores.min(0).values).min() > 1e-3
    # a multi-hot row projects on the sum of its classes' vectors
    two = torch.zeros(1, C)
    two[0, [1, 3]] = 1
    want = d.psi(feats[:1])[:, 0] + feats[0] @ (
        d.embed.weight[:, 1] + d.embed.weight[:, 3]
    )
    torch.testing.assert_close(d(h[:1], two), want)


def test_build_discriminator_names_the_bad_kind():
    assert isinstance(build_discriminator("concat", BITS, C), Discriminator)
    assert isinstance(
        build_discriminator("projection", BITS, C), ProjectionDiscriminator
    )
    with pytest.raises(ValueError, match="'hinge'.*concat, projection"):
        build_discriminator("hinge", BITS, C)


def test_straight_through_sign_is_sign_forward_identity_backward():
    b = torch.tensor([-0.3, 0.2, 0.9], requires_grad=True)
    out = straight_through_sign(b)
    torch.testing.assert_close(out, torch.tensor([-1.0, 1.0, 1.0]))
    (out * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    torch.testing.assert_close(b.grad, torch.tensor([1.0, 2.0, 3.0]))
    assert discriminator_input(b, "relaxed") is b
    with pytest.raises(ValueError, match="'binary'"):
        discriminator_input(b, "binary")


def test_class_scores_on_a_hand_made_discriminator():
    class Stub(torch.nn.Module):
        """Logit = first bit * 10 if the class is even, else -10."""

        def forward(self, codes, labels):
            return torch.where(labels % 2 == 0, 10 * codes[:, 0], torch.tensor(-10.0))

    protos = torch.tensor([[1.0, 1.0], [1.0, -1.0]])
    codes = torch.tensor([[0.1, 0.0], [-0.2, 0.0]])
    s = class_scores(Stub(), protos, torch.tensor([0, 1]), codes, torch.tensor([0, 0]))
    sig = torch.sigmoid
    assert s["real"] == pytest.approx(
        float((sig(torch.tensor(10.0)) + sig(torch.tensor(-10.0))) / 2)
    )
    # wrong class: prototype 0 with class 1 (-10), prototype 1 with class 0 (+10)
    assert s["wrong_class"] == pytest.approx(s["real"])
    assert s["relaxed"] == pytest.approx(
        float((sig(torch.tensor(1.0)) + sig(torch.tensor(-2.0))) / 2)
    )
    assert s["sign"] == pytest.approx(
        float((sig(torch.tensor(10.0)) + sig(torch.tensor(-10.0))) / 2)
    )


def test_relaxed_input_learns_binarity_not_class():
    """The audit's pattern: relaxed fakes low, their signs and wrong classes high."""
    protos, classes = _prototypes()
    codes, labels = _near_codes(protos)
    d = _train(Discriminator(BITS, C, hidden_dim=16), codes, labels, protos, classes)
    s = class_scores(d, protos, classes, codes, labels)
    assert s["real"] > 0.9 and s["relaxed"] < 0.1
    assert s["sign"] > 0.5  # the sign of a fake passes as real
    # the class barely matters: a wrong class's prototype is still "real"
    assert s["wrong_class"] > 0.5


def test_sign_input_removes_the_binarity_cue():
    """Fakes whose signs are their class's prototypes: D cannot tell them apart."""
    protos, classes = _prototypes()
    codes, labels = _near_codes(protos)
    for kind in DISCRIMINATORS:
        d = build_discriminator(kind, BITS, C, hidden_dim=16)
        s = class_scores(
            _train(d, codes, labels, protos, classes, kind="sign"),
            protos,
            classes,
            codes,
            labels,
        )
        assert abs(s["real"] - s["sign"]) < 0.05, (kind, s)


def test_sign_input_projection_separates_wrong_class_codes():
    """Binary fakes at the previous class's prototype: only the class tells."""
    protos, classes = _prototypes()
    codes, labels = _near_codes(protos)
    wrong = (labels + 1) % C  # the code of class c, labelled c + 1
    d = _train(
        ProjectionDiscriminator(BITS, C, hidden_dim=16),
        codes,
        wrong,
        protos,
        classes,
        kind="sign",
    )
    s = class_scores(d, protos, classes, codes, labels)
    assert s["real"] > 0.9
    assert s["wrong_class"] < 0.1  # (h_c, c + 1) is what it learnt to call fake

"""PFMH's pure math: model shapes, prototypes (Eqs. 5-7), losses (Eqs. 9-12)."""

import math
import re
from dataclasses import fields

import numpy as np
import pytest
import torch

from hashing.pfmh.losses import (
    ABLATIONS,
    LOSS_PARTS,
    PFMHLossConfig,
    ablation_config,
    global_contrastive_loss,
    hash_loss,
    information_preservation_loss,
    local_contrastive_loss,
    pfmh_loss,
    prototype_contrastive_loss,
    similarity_matching_loss,
)
from hashing.pfmh.model import (
    MultiModalHash,
    binary_codes,
    build_multimodal_model,
    modality_order,
)
from hashing.pfmh.prototypes import (
    aggregate_and_enhance,
    centralized_prototypes,
    client_prototypes,
    complete_prototypes,
    require_valid_prototypes,
)
from hashing.pfmh.train import (
    embed_multimodal,
    encode_multimodal,
    local_prototypes,
    train_pfmh,
)
from hashing.prototypes import ClassPrototypes, PrototypeSet, prototype_problem

T = torch.tensor
CPU = torch.device("cpu")
R2 = 1 / math.sqrt(2)


def up(classes, vectors, counts=None):
    classes = np.asarray(classes, dtype=np.int64)
    counts = np.ones(len(classes)) if counts is None else counts
    return ClassPrototypes(
        classes=classes,
        vectors=np.asarray(vectors, dtype=np.float32),
        counts=np.asarray(counts, dtype=np.int64),
    )


# --- model ---------------------------------------------------------------------


def test_model_shapes_two_modalities():
    model = build_multimodal_model({"text": 5, "image": 7}, bits=6, k=8, seed=0)
    assert model.modalities == ("image", "text")
    x = {"text": torch.randn(4, 5), "image": torch.randn(4, 7)}
    h, b = model(x)
    assert h.shape == (4, 8) and b.shape == (4, 6)
    assert torch.allclose(h.norm(dim=1), torch.ones(4), atol=1e-5)
    assert (b.abs() < 1).all()
    assert set(binary_codes(b).unique().tolist()) <= {-1.0, 1.0}


def test_model_shapes_three_modalities_and_any_sample_shape():
    dims = {"audio": 4, "text": 3, "image": 4}
    model = build_multimodal_model(dims, bits=5, k=8, dropout=0.0, seed=1)
    assert model.modalities == ("image", "audio", "text")
    assert model.integrate.net[0].in_features == 3 * 8
    x = {
        "image": torch.randn(3, 1, 2, 2),  # flattened to 4
        "audio": torch.randn(3, 4),
        "text": torch.randn(3, 3),
    }
    h, b = model(x)
    assert h.shape == (3, 8) and b.shape == (3, 5)
    # Eq. 3: refined = f * C with C in (0, 1)
    refined = model.refined_features(x)
    f = model.extractors["text"](x["text"])
    c = model.refiners["text"](f)
    assert ((c > 0) & (c < 1)).all()
    assert torch.allclose(refined["text"], f * c)


def test_model_seed_reproducible_and_leaves_global_rng_alone():
    state = torch.get_rng_state()
    a = build_multimodal_model({"image": 3, "text": 2}, bits=4, k=4, seed=7)
    assert torch.equal(torch.get_rng_state(), state)
    b = build_multimodal_model({"text": 2, "image": 3}, bits=4, k=4, seed=7)
    for (ka, va), (kb, vb) in zip(
        a.state_dict().items(), b.state_dict().items(), strict=True
    ):
        assert ka == kb and torch.equal(va, vb)
    assert modality_order(["z", "image", "a"]) == ("image", "a", "z")


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"input_dims": {"image": 3}}, "at least two modalities"),
        ({"input_dims": {"image": 3, "text": 0}}, "must be >= 1"),
        ({"input_dims": {"image": 3, "text": 2}, "bits": 0}, "bits=0"),
        ({"input_dims": {"image": 3, "text": 2}, "dropout": 1.0}, "dropout=1.0"),
        ({"input_dims": {"image": 3, "text": 2}, "k": 0}, "k=0"),
    ],
)
def test_model_bad_arguments(kwargs, fragment):
    kwargs = {"bits": 4, **kwargs}
    with pytest.raises(ValueError, match=fragment):
        build_multimodal_model(kwargs.pop("input_dims"), **kwargs)


def test_model_bad_inputs():
    model = MultiModalHash({"image": 3, "text": 2}, 4, k=4)
    with pytest.raises(ValueError, match=r"expects exactly \['image', 'text'\]"):
        model({"image": torch.randn(2, 3)})
    with pytest.raises(ValueError, match="expects exactly"):
        model({"image": torch.randn(2, 3), "text": torch.randn(2, 2), "x": None})
    with pytest.raises(ValueError, match="different lengths"):
        model({"image": torch.randn(2, 3), "text": torch.randn(3, 2)})
    with pytest.raises(ValueError, match="dict of modality"):
        model([torch.randn(2, 3), torch.randn(2, 2)])


# --- prototypes: Eq. 5 ------------------------------------------------------------


def test_client_prototypes_multi_label_counts_each_label():
    h = T([[1.0, 0.0], [0.0, 1.0], [0.0, 2.0]])
    labels = T([[1, 1, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0]])
    p = client_prototypes(h, labels, num_classes=4)
    assert p.classes.tolist() == [0, 1] and p.counts.tolist() == [2, 2]
    # class 0: mean(h0, h2) = (0.5, 1); class 1: mean(h0, h1) = (0.5, 0.5)
    np.testing.assert_allclose(p.vectors[0], np.array([0.5, 1.0]) / math.sqrt(1.25))
    np.testing.assert_allclose(p.vectors[1], [R2, R2], rtol=1e-6)
    assert p.vectors.dtype == np.float32 and p.classes.dtype == np.int64
    assert prototype_problem(p, num_classes=4, dim=2, unit_norm=True) is None


def test_client_prototypes_single_label_and_degenerate_mean():
    h = T([[1.0, 0.0], [-1.0, 0.0], [0.0, 3.0]])
    p = client_prototypes(h, T([2, 2, 0]), num_classes=3)
    # class 2's mean is exactly 0: no direction, left out (completed by the server)
    assert p.classes.tolist() == [0] and p.counts.tolist() == [1]
    np.testing.assert_allclose(p.vectors, [[0.0, 1.0]])
    with pytest.raises(ValueError, match="0..2"):
        client_prototypes(h, T([0, 1, 3]), num_classes=3)
    with pytest.raises(ValueError, match="rows"):
        client_prototypes(h, T([0, 1]), num_classes=3)


# --- prototypes: Eqs. 6-7 ---------------------------------------------------------


@pytest.fixture
def two_clients():
    # 4 classes, dim 2. A holds {0, 1}, B holds {1, 2}; class 3 is held by nobody.
    a = up([0, 1], [[1.0, 0.0], [0.0, 1.0]], counts=[5, 3])
    b = up([1, 2], [[1.0, 0.0], [-1.0, 0.0]], counts=[1, 2])
    return a, b


def test_centralized_prototypes_mean_over_holders(two_clients):
    central = centralized_prototypes(two_clients, num_classes=4, dim=2)
    assert central.classes.tolist() == [0, 1, 2]  # class 3: absent, not zero
    np.testing.assert_allclose(central.vectors, [[1, 0], [R2, R2], [-1, 0]], rtol=1e-6)
    weighted = centralized_prototypes(
        two_clients, num_classes=4, dim=2, weighting="count"
    )
    # class 1: (3 * (0, 1) + 1 * (1, 0)) / 4, normalised -> (1, 3) / sqrt(10)
    np.testing.assert_allclose(
        weighted.vectors[1], np.array([1.0, 3.0]) / math.sqrt(10), rtol=1e-6
    )
    with pytest.raises(ValueError, match="weighting='median'"):
        centralized_prototypes(two_clients, num_classes=4, dim=2, weighting="median")


def test_centralized_prototypes_cancelling_and_empty():
    a = up([0], [[1.0, 0.0]])
    b = up([0, 1], [[-1.0, 0.0], [0.0, 1.0]])
    central = centralized_prototypes([a, b], num_classes=2, dim=2)
    assert central.classes.tolist() == [1]
    empty = centralized_prototypes([], num_classes=3, dim=2)
    assert empty.classes.shape == (0,) and empty.vectors.shape == (0, 2)


def test_completion_fills_missing_classes_and_keeps_own(two_clients):
    a, b = two_clients
    central, personal = aggregate_and_enhance([a, b], num_classes=4, dim=2)
    pa, pb = personal
    assert pa.classes.tolist() == [0, 1, 2] and pb.classes.tolist() == [0, 1, 2]
    # A keeps its own class-1 prototype (0, 1), not the centralized (R2, R2)
    np.testing.assert_allclose(pa.vectors, [[1, 0], [0, 1], [-1, 0]])
    np.testing.assert_allclose(pb.vectors, [[1, 0], [1, 0], [-1, 0]])
    assert 3 not in pa.classes and 3 not in central.classes
    assert prototype_problem(pa, num_classes=4, dim=2, unit_norm=True) is None
    # w/o-PE: centralized still computed, personal sets not completed
    central2, own = aggregate_and_enhance([a, b], num_classes=4, dim=2, complete=False)
    np.testing.assert_array_equal(central2.vectors, central.vectors)
    assert own[0].classes.tolist() == [0, 1] and own[1].classes.tolist() == [1, 2]
    np.testing.assert_array_equal(own[0].vectors, a.vectors)


def test_completion_of_a_client_missing_everything_and_dim_mismatch(two_clients):
    central = centralized_prototypes(two_clients, num_classes=4, dim=2)
    none = PrototypeSet(
        classes=np.zeros(0, np.int64), vectors=np.zeros((0, 2), np.float32)
    )
    full = complete_prototypes(none, central)
    np.testing.assert_array_equal(full.classes, central.classes)
    np.testing.assert_array_equal(full.vectors, central.vectors)
    with pytest.raises(ValueError, match="dimension mismatch"):
        complete_prototypes(up([0], [[1.0, 0.0, 0.0]]), central)


@pytest.mark.parametrize(
    ("protos", "fragment"),
    [
        (up([0, 1], [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), r"expected \(2, 2\)"),
        (up([0, 1], [[1.0, 0.0], [np.nan, 1.0]]), "non-finite"),
        (up([0, 4], [[1.0, 0.0], [0.0, 1.0]]), "class id 4 outside"),
        (up([-1, 0], [[1.0, 0.0], [0.0, 1.0]]), "class id -1 outside"),
        (up([1, 1], [[1.0, 0.0], [0.0, 1.0]]), "duplicate"),
        (up([0, 1], [[1.0, 0.0], [0.0, 2.0]]), "class 1 has L2 norm 2"),
        (up([0, 1], [[1.0, 0.0], [0.0, 1.0]], counts=[1, 0]), "counts must be >= 1"),
        (up([], np.zeros((0, 2))), "no class prototypes"),
        (
            PrototypeSet(
                classes=np.array([0.0, 1.0]),
                vectors=np.eye(2, dtype=np.float32),
            ),
            "1-D integers",
        ),
    ],
)
def test_prototype_problems_are_named(protos, fragment):
    problem = prototype_problem(protos, num_classes=4, dim=2, unit_norm=True)
    assert problem is not None and re.search(fragment, problem), problem
    with pytest.raises(ValueError, match="personal_prototypes: "):
        require_valid_prototypes(
            protos, num_classes=4, dim=2, name="personal_prototypes"
        )


# --- losses ---------------------------------------------------------------------


PROTOS = (T([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]), T([0, 1, 2]))


def test_contrastive_loss_hand_computed_excludes_positive_from_denominator():
    h = T([[1.0, 0.0]])
    # logits / tau=0.5: (2, 0, -2); -log(e^2 / (e^0 + e^-2))
    expected = -2.0 + math.log(1.0 + math.exp(-2.0))
    dec = {"tau": 0.5, "contrast": "decoupled"}
    got = prototype_contrastive_loss(h, T([0]), *PROTOS, **dec)
    assert float(got) == pytest.approx(expected, abs=1e-6)
    assert float(global_contrastive_loss(h, T([0]), PROTOS, **dec)) == float(got)
    assert float(local_contrastive_loss(h, T([0]), PROTOS, **dec)) == float(got)


def test_contrastive_loss_hand_computed_infonce_keeps_positive_in_denominator():
    h = T([[1.0, 0.0]])
    # logits / tau=0.5: (2, 0, -2); -log(e^2 / (e^2 + e^0 + e^-2))
    expected = -2.0 + math.log(math.exp(2.0) + 1.0 + math.exp(-2.0))
    got = prototype_contrastive_loss(h, T([0]), *PROTOS, tau=0.5, contrast="infonce")
    assert float(got) == pytest.approx(expected, abs=1e-6)
    with pytest.raises(ValueError, match="contrast='supcon'"):
        prototype_contrastive_loss(h, T([0]), *PROTOS, tau=0.5, contrast="supcon")


def test_at_cos_one_decoupled_keeps_pushing_and_infonce_is_done():
    # H on its own prototype (cos = 1), the other classes' prototypes orthogonal,
    # the paper's tau: the decoupled form is large and negative with a large
    # gradient; InfoNCE is ~0 with a ~0 gradient (nothing left to learn)
    protos = (T([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]), T([0, 1, 2]))
    out = {}
    for form in ("decoupled", "infonce"):
        h = T([[1.0, 0.0, 0.0]], requires_grad=True)
        loss = prototype_contrastive_loss(h, T([0]), *protos, tau=0.07, contrast=form)
        loss.backward()
        out[form] = (float(loss), float(h.grad.norm()))
    dec_loss, dec_grad = out["decoupled"]
    nce_loss, nce_grad = out["infonce"]
    assert dec_loss == pytest.approx(-1 / 0.07 + math.log(2.0), abs=1e-4)  # -13.59
    assert dec_grad > 10.0
    assert 0.0 <= nce_loss < 1e-5 and nce_grad < 1e-4


def test_contrastive_loss_mean_over_samples_and_skips():
    h = T([[1.0, 0.0], [0.0, 1.0], [R2, R2]], requires_grad=True)
    # sample 2's class 5 has no prototype: skipped
    l0 = -1.0 + math.log(math.exp(0.0) + math.exp(-1.0))
    l1 = -1.0 + math.log(math.exp(0.0) + math.exp(0.0))
    loss = prototype_contrastive_loss(
        h, T([0, 1, 5]), *PROTOS, tau=1.0, contrast="decoupled"
    )
    assert float(loss.detach()) == pytest.approx((l0 + l1) / 2, abs=1e-6)
    loss.backward()
    assert torch.isfinite(h.grad).all() and float(h.grad[2].abs().sum()) == 0.0


def test_contrastive_loss_multi_label_and_no_negative():
    h = T([[1.0, 0.0]])
    # positives 0 and 1, only negative 2: l(0) = -1 + (-1), l(1) = 0 + (-1)
    got = prototype_contrastive_loss(
        h, T([[1, 1, 0]]), *PROTOS, tau=1.0, contrast="decoupled"
    )
    assert float(got) == pytest.approx(-1.5, abs=1e-6)
    # a set with the sample's class only: no negative -> skipped, 0 with a graph
    hh = T([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    one = (T([[1.0, 0.0]]), T([0]))
    zero = prototype_contrastive_loss(hh, T([0, 0]), *one, tau=0.07)
    assert float(zero.detach()) == 0.0
    zero.backward()
    assert torch.isfinite(hh.grad).all()
    # mixed: sample 0 has no negative, sample 1 contributes; gradients finite
    mixed = prototype_contrastive_loss(hh, T([[1, 1, 1], [0, 1, 0]]), *PROTOS, tau=0.5)
    mixed.backward()
    assert torch.isfinite(hh.grad).all()


def test_similarity_matching_hand_computed():
    b = T([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    y = T([0, 0, 1])
    # pairs (0,1): cos R2, s 1; (0,2): cos 0, s 0; (1,2): cos R2, s 0; each pair is
    # in two samples' sums over partners j, and the mean is over the 3 samples i
    expected = 2 * ((R2 - 1) ** 2 + 0.0 + R2**2) / 3
    assert float(similarity_matching_loss(b, y)) == pytest.approx(expected, abs=1e-6)
    # per sample: i=0 sums (0,1) and (0,2); i=1 sums (1,0) and (1,2); i=2 (2,0), (2,1)
    per_sample = [(R2 - 1) ** 2, (R2 - 1) ** 2 + R2**2, R2**2]
    assert float(similarity_matching_loss(b, y)) == pytest.approx(
        sum(per_sample) / 3, abs=1e-6
    )
    # multi-label: s = 1 when sharing any label
    ym = T([[1, 0], [1, 1], [0, 1]])
    expected_m = 2 * ((R2 - 1) ** 2 + 0.0 + (R2 - 1) ** 2) / 3
    got_m = similarity_matching_loss(b, ym)
    assert float(got_m) == pytest.approx(expected_m, abs=1e-6)
    assert float(similarity_matching_loss(b[:1], y[:1])) == 0.0


def test_information_preservation_and_hash_loss_hand_computed():
    b = T([[0.5, -0.25], [0.0, -1.0]])
    # B = [[1, -1], [1, -1]] (sign(0) = +1); squared norms 0.8125 and 1 -> mean
    assert float(information_preservation_loss(b)) == pytest.approx(0.90625)
    y = T([0, 1])
    sim = float(similarity_matching_loss(b, y))
    got = hash_loss(b, y, alpha=0.01, beta=0.001)
    assert float(got) == pytest.approx(0.01 * sim + 0.001 * 0.90625, abs=1e-7)


def test_total_loss_is_the_sum_of_parts():
    h = T([[1.0, 0.0], [0.0, 1.0]])
    b = T([[0.5, -0.5], [0.2, 0.9]])
    y = T([0, 1])
    personal = (T([[1.0, 0.0], [R2, R2]]), T([0, 1]))
    cfg = PFMHLossConfig()
    total, parts = pfmh_loss(h, b, y, personal=personal, centralized=PROTOS, config=cfg)
    assert tuple(parts) == LOSS_PARTS
    assert float(total) == pytest.approx(sum(float(v) for v in parts.values()))
    tau = cfg.tau
    form = cfg.contrast
    assert float(parts["global"]) == pytest.approx(
        float(prototype_contrastive_loss(h, y, *PROTOS, tau=tau, contrast=form))
    )
    assert float(parts["local"]) == pytest.approx(
        float(prototype_contrastive_loss(h, y, *personal, tau=tau, contrast=form))
    )
    assert float(parts["hash_similarity"]) == pytest.approx(
        cfg.alpha * float(similarity_matching_loss(b, y))
    )
    assert float(parts["information_preservation"]) == pytest.approx(
        cfg.beta * float(information_preservation_loss(b))
    )
    # no prototypes yet (first round): only L_hash
    total0, parts0 = pfmh_loss(h, b, y, personal=None, centralized=None, config=cfg)
    assert float(parts0["global"]) == 0.0 and float(parts0["local"]) == 0.0
    assert float(total0) == pytest.approx(
        float(parts["hash_similarity"] + parts["information_preservation"])
    )


def test_prototype_weight_scales_only_the_prototype_terms():
    h = T([[1.0, 0.0], [0.0, 1.0]])
    b = T([[0.5, -0.5], [0.2, 0.9]])
    y = T([0, 1])
    personal = (T([[1.0, 0.0], [R2, R2]]), T([0, 1]))
    kw = {"personal": personal, "centralized": PROTOS}
    _, one = pfmh_loss(h, b, y, **kw, config=PFMHLossConfig())
    total, tenth = pfmh_loss(h, b, y, **kw, config=PFMHLossConfig(prototype_weight=0.1))
    assert float(one["global"]) != 0.0 and float(one["local"]) != 0.0
    for key in ("global", "local"):
        assert float(tenth[key]) == pytest.approx(0.1 * float(one[key]))
    for key in ("hash_similarity", "information_preservation"):
        assert float(tenth[key]) == float(one[key])
    assert float(total) == pytest.approx(sum(float(v) for v in tenth.values()))
    # weight 0 leaves exactly L_hash, as w/o-P (which also stops the exchange)
    _, zero = pfmh_loss(h, b, y, **kw, config=PFMHLossConfig(prototype_weight=0.0))
    _, wo_p = pfmh_loss(h, b, y, **kw, config=ablation_config("w/o-P"))
    assert {k: float(v) for k, v in zero.items()} == {
        k: float(v) for k, v in wo_p.items()
    }


def test_ablation_switches_change_exactly_the_intended_terms():
    h = T([[1.0, 0.0], [0.0, 1.0], [R2, -R2]])
    b = T([[0.5, -0.5], [0.2, 0.9], [-0.3, 0.1]])
    y = T([0, 1, 2])
    personal = (T([[1.0, 0.0], [R2, R2], [0.0, -1.0]]), T([0, 1, 2]))
    _, full = pfmh_loss(
        h, b, y, personal=personal, centralized=PROTOS, config=PFMHLossConfig()
    )
    assert all(float(v) != 0.0 for v in full.values())
    removed = {
        "full": set(),
        "w/o-P": {"global", "local"},
        "w/o-PE": set(),  # acts on the prototype sets, not on the loss formula
        "w/o-Ls": {"hash_similarity"},
        "w/o-Ll": {"information_preservation"},
    }
    assert set(ABLATIONS) == set(removed)
    defaults = PFMHLossConfig()
    for name, gone in removed.items():
        cfg = ablation_config(name)
        changed = {
            f.name
            for f in fields(cfg)
            if getattr(cfg, f.name) != getattr(defaults, f.name)
        }
        assert changed == set(ABLATIONS[name])
        _, parts = pfmh_loss(h, b, y, personal=personal, centralized=PROTOS, config=cfg)
        for key in LOSS_PARTS:
            want = 0.0 if key in gone else float(full[key])
            assert float(parts[key]) == pytest.approx(want), (name, key)
    assert ABLATIONS["w/o-PE"] == {"use_completion": False}
    assert ABLATIONS["w/o-Ll"] == {"use_information_preservation": False}
    assert not ablation_config("w/o-P").uses_prototypes
    assert ablation_config("w/o-Ls", tau=0.2).tau == 0.2
    with pytest.raises(ValueError, match="ablation='w/o-X'"):
        ablation_config("w/o-X")


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"tau": 0.0}, "tau=0.0"),
        ({"tau": -0.07}, "tau=-0.07"),
        ({"tau": float("nan")}, "tau=nan"),
        ({"alpha": -1e-2}, "alpha=-0.01"),
        ({"beta": -1e-3}, "beta=-0.001"),
        ({"beta": float("inf")}, "beta=inf"),
        ({"contrast": "supcon"}, "contrast='supcon'"),
        ({"prototype_weight": -0.1}, "prototype_weight=-0.1"),
        ({"prototype_weight": float("nan")}, "prototype_weight=nan"),
    ],
)
def test_loss_config_rejects_bad_values(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        PFMHLossConfig(**kwargs)


def test_loss_config_defaults_are_the_papers():
    cfg = PFMHLossConfig()
    assert (cfg.tau, cfg.alpha, cfg.beta) == (0.07, 1e-2, 1e-3)
    assert cfg.prototype_weight == 1.0  # Eq. 12 adds the prototype terms as they are
    assert PFMHLossConfig(alpha=0.0, beta=0.0).alpha == 0.0


# --- local training ----------------------------------------------------------------


def toy_client(n=48, classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % classes
    centers_a = torch.randn(classes, 6, generator=g) * 2
    centers_b = torch.randn(classes, 4, generator=g) * 2
    x = {
        "image": centers_a[y] + torch.randn(n, 6, generator=g),
        "text": centers_b[y] + torch.randn(n, 4, generator=g),
    }
    return x, y


def toy_model(seed=0):
    return build_multimodal_model(
        {"image": 6, "text": 4}, bits=8, k=16, dropout=0.1, seed=seed
    )


def eval_loss(model, x, y, personal, central, cfg):
    h, b = embed_multimodal(model, x, device=CPU)
    total, _ = pfmh_loss(
        h,
        b,
        y,
        personal=(T(personal.vectors), T(personal.classes)),
        centralized=(T(central.vectors), T(central.classes)),
        config=cfg,
    )
    return float(total)


def test_local_round_is_deterministic_and_decreases_the_loss():
    x, y = toy_client()
    cfg = PFMHLossConfig()
    model = toy_model()
    upload = local_prototypes(model, x, y, num_classes=4, device=CPU)
    assert upload.classes.tolist() == [0, 1, 2] and upload.counts.tolist() == [16] * 3
    central, (personal,) = aggregate_and_enhance([upload], num_classes=4, dim=16)
    before = eval_loss(model, x, y, personal, central, cfg)
    runs = []
    for _ in range(2):
        m = toy_model()
        rng_state = torch.get_rng_state()
        out = train_pfmh(
            m,
            x,
            y,
            personal_prototypes=personal,
            global_prototypes=central,
            config=cfg,
            num_classes=4,
            epochs=10,
            batch_size=16,
            learning_rate=1e-2,
            device=CPU,
            generator=torch.Generator().manual_seed(3),
        )
        assert torch.equal(torch.get_rng_state(), rng_state)
        runs.append((out, m.state_dict()))
    (out_a, state_a), (out_b, state_b) = runs
    assert out_a == out_b
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    assert out_a["steps"] == 30.0
    assert out_a["used_global"] == 1.0 and out_a["used_local"] == 1.0
    assert set(out_a) >= {"loss", *LOSS_PARTS}
    trained = toy_model()
    trained.load_state_dict(state_a)
    after = eval_loss(trained, x, y, personal, central, cfg)
    assert after < before - 0.5
    codes = encode_multimodal(trained, x, device=CPU)
    assert codes.shape == (48, 8) and codes.dtype == torch.float32


def test_first_round_without_prototypes_trains_only_the_hash_loss():
    x, y = toy_client(n=12)
    out = train_pfmh(
        toy_model(),
        x,
        y,
        personal_prototypes=None,
        global_prototypes=None,
        config=PFMHLossConfig(),
        num_classes=3,
        epochs=1,
        device=CPU,
        generator=torch.Generator().manual_seed(0),
    )
    assert out["used_global"] == 0.0 and out["used_local"] == 0.0
    assert out["global"] == 0.0 and out["local"] == 0.0 and out["steps"] == 1.0


def test_without_completion_the_trainer_uses_only_held_classes():
    # the client holds classes 0..2 of 4; the personal set also has class 3
    x, y = toy_client(n=24)
    upload = local_prototypes(toy_model(), x, y, num_classes=4, device=CPU)
    other = up([3], [[1.0] + [0.0] * 15])
    central, (completed, _) = aggregate_and_enhance(
        [upload, other], num_classes=4, dim=16
    )
    assert completed.classes.tolist() == [0, 1, 2, 3]
    own = PrototypeSet(classes=upload.classes, vectors=upload.vectors)

    def run(personal, cfg):
        m = toy_model()
        out = train_pfmh(
            m,
            x,
            y,
            personal_prototypes=personal,
            global_prototypes=central,
            config=cfg,
            num_classes=4,
            epochs=2,
            batch_size=8,
            learning_rate=1e-2,
            device=CPU,
            generator=torch.Generator().manual_seed(1),
        )
        return out, m.state_dict()

    out_pe, state_pe = run(completed, ablation_config("w/o-PE"))
    out_own, state_own = run(own, PFMHLossConfig())
    out_full, _ = run(completed, PFMHLossConfig())
    assert out_pe == out_own
    assert all(torch.equal(state_pe[k], state_own[k]) for k in state_pe)
    assert out_full["local"] != out_pe["local"]


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"personal_prototypes": "dim"}, r"personal_prototypes: .*expected \(3, 16\)"),
        ({"global_prototypes": "nan"}, "global_prototypes: non-finite"),
        ({"epochs": 0}, "epochs=0"),
        ({"batch_size": 1}, "batch_size=1"),
        ({"learning_rate": 0.0}, "learning_rate=0.0"),
        ({"labels": "short"}, "labels have 11 rows"),
    ],
)
def test_train_pfmh_bad_inputs(change, fragment):
    x, y = toy_client(n=12)
    good = PrototypeSet(classes=np.arange(3), vectors=np.eye(3, 16, dtype=np.float32))
    kwargs = {
        "personal_prototypes": good,
        "global_prototypes": good,
        "config": PFMHLossConfig(),
        "num_classes": 3,
        "epochs": 1,
        "device": CPU,
        "generator": torch.Generator().manual_seed(0),
    }
    labels = y
    for key, value in change.items():
        if value == "dim":
            kwargs[key] = PrototypeSet(
                classes=np.arange(3), vectors=np.eye(3, 8, dtype=np.float32)
            )
        elif value == "nan":
            bad = good.vectors.copy()
            bad[1, 0] = np.nan
            kwargs[key] = PrototypeSet(classes=good.classes, vectors=bad)
        elif value == "short":
            labels = y[:-1]
        else:
            kwargs[key] = value
    with pytest.raises(ValueError, match=fragment):
        train_pfmh(toy_model(), x, labels, **kwargs)

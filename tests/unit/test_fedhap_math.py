"""FedHAP's pure math: triplet losses, discriminator losses, prototypes."""

import math

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord

from hashing.fedhap.discriminator import (
    Discriminator,
    discriminator_loss,
    generator_loss,
    label_vector,
)
from hashing.fedhap.prototypes import aggregate_prototypes
from hashing.fedhap.train import FedHAPTrainConfig, quantization_loss, train_fedhap
from hashing.fedhap.triplet import (
    global_triplet_loss,
    local_triplet_loss,
    pairwise_distance,
)
from hashing.models import MLPHash
from hashing.prototypes import (
    ClassPrototypes,
    PrototypeSet,
    class_prototypes,
    prototype_problem,
)
from settings import keys as K
from settings.prototype_records import (
    FEDHAP_BROADCAST,
    FEDHAP_UPLOAD,
    PFMH_CENTRALIZED,
    PFMH_PERSONAL,
    PFMH_UPLOAD,
    prototype_record,
    read_prototype_record,
)

T = torch.tensor


# --- distances and triplet losses ------------------------------------------------


def test_distances_on_hand_computed_vectors():
    a = T([[1.0, 0.0], [1.0, 1.0]])
    b = T([[0.0, 2.0], [-1.0, 0.0]])
    cos = pairwise_distance(a, b, metric="cosine")
    assert cos.numpy() == pytest.approx(
        np.array([[1.0, 2.0], [1 - 1 / math.sqrt(2), 1 + 1 / math.sqrt(2)]]), abs=1e-6
    )
    euc = pairwise_distance(a, b, metric="euclidean")
    # ||a - b|| / sqrt(bits)
    assert euc.numpy() == pytest.approx(
        np.array([[math.sqrt(5), 2.0], [math.sqrt(2), math.sqrt(5)]]) / math.sqrt(2),
        abs=1e-5,
    )
    with pytest.raises(ValueError, match="manhattan"):
        pairwise_distance(a, b, metric="manhattan")


def test_local_triplet_loss_hand_computed():
    # anchors 0,1 are class 0, sample 2 is class 1; cosine distances:
    # d(0,1) = 1 - cos(45deg), d(0,2) = 1 (orthogonal), d(1,2) = 1 - cos(45deg)
    b = T([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]], requires_grad=True)
    y = T([0, 0, 1])
    c45 = 1 - 1 / math.sqrt(2)
    # valid triplets: (0,1,2): max(c45 - 1 + m, 0); (1,0,2): max(c45 - c45 + m, 0)
    m = 0.5
    expected = (max(c45 - 1 + m, 0) + max(m, 0)) / 2
    loss = local_triplet_loss(b, y, margin=m, metric="cosine")
    assert float(loss) == pytest.approx(expected, abs=1e-6)
    loss.backward()
    assert b.grad is not None and torch.isfinite(b.grad).all()


def test_local_triplet_loss_without_any_negative_is_zero_but_differentiable():
    b = T([[1.0, 0.0], [0.5, 0.5]], requires_grad=True)
    loss = local_triplet_loss(b, T([3, 3]), margin=0.5, metric="euclidean")
    assert float(loss) == 0.0
    loss.backward()  # no error: the graph is kept


def test_multi_label_triplets_share_any_label():
    # 0 and 1 share label 1 (positive); 2 shares nothing with 0 (negative)
    b = T([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    y = T([[1, 1, 0], [0, 1, 0], [0, 0, 1]])
    # triplets: (0,1,2): d01 - d02 + m = 1 - 0 + .1; (1,0,2): d10 - d12 + m = .1
    loss = local_triplet_loss(b, y, margin=0.1, metric="cosine")
    assert float(loss) == pytest.approx((1.1 + 0.1) / 2, abs=1e-6)


def test_global_triplet_loss_skips_missing_classes():
    b = T([[1.0, 0.0], [0.0, 1.0]])
    y = T([0, 2])  # class 2 has no prototype -> anchor 1 contributes nothing
    protos = T([[1.0, 1.0], [-1.0, 1.0]])
    classes = T([0, 1])
    m = 0.2
    d_pos = 1 - 1 / math.sqrt(2)  # anchor 0 vs prototype of class 0
    d_neg = 1 + 1 / math.sqrt(2)  # anchor 0 vs prototype of class 1
    loss = global_triplet_loss(
        b, y, protos, classes, num_classes=3, margin=m, metric="cosine"
    )
    assert float(loss) == pytest.approx(max(d_pos - d_neg + m, 0.0), abs=1e-6)
    # with a large margin the hinge is active
    loss = global_triplet_loss(
        b, y, protos, classes, num_classes=3, margin=2.0, metric="cosine"
    )
    assert float(loss) == pytest.approx(d_pos - d_neg + 2.0, abs=1e-6)


# --- discriminator -----------------------------------------------------------------


def test_discriminator_losses_are_the_cross_entropies():
    torch.manual_seed(0)
    disc = Discriminator(4, 3, hidden_dim=8)
    codes = torch.randn(5, 4)
    labels = T([0, 1, 2, 0, 1])
    protos = T([[1.0, -1, 1, 1], [-1.0, -1, 1, -1]])
    p_classes = T([0, 2])
    d_fake = torch.sigmoid(disc(codes, labels))
    d_real = torch.sigmoid(disc(protos, p_classes))
    expected = -torch.log(1 - d_fake).mean() - torch.log(d_real).mean()
    got = discriminator_loss(disc, codes, labels, protos, p_classes)
    assert float(got) == pytest.approx(float(expected), rel=1e-5)
    assert float(generator_loss(disc, codes, labels)) == pytest.approx(
        float(-torch.log(d_fake).mean()), rel=1e-5
    )
    assert label_vector(T([[1, 0, 1]]), 3).tolist() == [[1.0, 0.0, 1.0]]


def test_quantization_loss_is_mean_squared_distance_to_sign():
    b = T([[0.5, -2.0], [1.0, 0.0]])
    # (0.5-1)^2 + (-2+1)^2 + 0 + (0-0)^2 = 1.25, mean over 4
    assert float(quantization_loss(b)) == pytest.approx(1.25 / 4)


# --- prototypes --------------------------------------------------------------------


def test_class_prototypes_only_for_held_classes_and_multi_label():
    codes = T([[1.0, 3.0], [3.0, -1.0], [-2.0, 0.0]])
    protos = class_prototypes(codes, T([2, 2, 0]), num_classes=4)
    assert protos.classes.tolist() == [0, 2]
    assert protos.counts.tolist() == [1, 2]
    assert protos.vectors.tolist() == [[-2.0, 0.0], [2.0, 1.0]]
    # a multi-label sample counts for each of its labels
    multi = class_prototypes(codes, T([[1, 1, 0], [0, 1, 0], [0, 0, 0]]), num_classes=3)
    assert multi.classes.tolist() == [0, 1]
    assert multi.counts.tolist() == [1, 2]
    assert multi.vectors.tolist() == [[1.0, 3.0], [2.0, 1.0]]


def _up(classes, means, counts):
    return ClassPrototypes(
        classes=np.array(classes, dtype=np.int64),
        vectors=np.array(means, dtype=np.float32),
        counts=np.array(counts, dtype=np.int64),
    )


def test_aggregation_over_holders_plain_and_count_weighted_with_sign_ties():
    a = _up([0, 1], [[1.0, -1.0, 0.5], [0.25, 0.25, -0.25]], [1, 3])
    b = _up([1, 3], [[-0.75, 0.25, 0.25], [-1.0, 1.0, 0.0]], [1, 5])
    plain = aggregate_prototypes([a, b], num_classes=5, bits=3, weighting="mean")
    # class 2 and 4 held by nobody: absent, not zero-filled
    assert plain.classes.tolist() == [0, 1, 3]
    assert plain.relaxed == pytest.approx(
        np.array([[1.0, -1.0, 0.5], [-0.25, 0.25, 0.0], [-1.0, 1.0, 0.0]]), abs=1e-6
    )
    # sign with ties (exact 0) -> +1
    assert plain.codes.tolist() == [[1, -1, 1], [-1, 1, 1], [-1, 1, 1]]
    weighted = aggregate_prototypes([a, b], num_classes=5, bits=3, weighting="count")
    # class 1: (3 * [.25, .25, -.25] + 1 * [-.75, .25, .25]) / 4 = [0, .25, -.125]
    assert weighted.relaxed[1].tolist() == [0.0, 0.25, -0.125]
    assert weighted.codes[1].tolist() == [1, 1, -1]
    with pytest.raises(ValueError, match="weighting"):
        aggregate_prototypes([a], num_classes=5, bits=3, weighting="median")


@pytest.mark.parametrize(
    ("upload", "fragment"),
    [
        (_up([0, 1], [[1.0, 1.0, 1.0]] * 2, [1, 1]), "expected (2, 4)"),
        (_up([0, 7], [[1.0] * 4] * 2, [1, 1]), "class id 7 outside"),
        (_up([-1, 0], [[1.0] * 4] * 2, [1, 1]), "class id -1 outside"),
        (_up([1, 1], [[1.0] * 4] * 2, [1, 1]), "duplicate"),
        (_up([0, 1], [[1.0] * 4, [np.nan] * 4], [1, 1]), "non-finite"),
        (_up([0, 1], [[1.0] * 4] * 2, [1, 0]), "counts must be >= 1"),
        (_up([], np.zeros((0, 4)), []), "no class"),
    ],
)
def test_prototype_problems_are_named(upload, fragment):
    problem = prototype_problem(upload, num_classes=5, dim=4)
    assert problem is not None and fragment in problem
    assert (
        prototype_problem(_up([0, 4], [[0.5] * 4] * 2, [2, 1]), num_classes=5, dim=4)
        is None
    )


def test_records_round_trip():
    up = _up([1, 4], [[0.5, -0.5], [0.1, 0.2]], [3, 1])
    back = read_prototype_record(prototype_record(up, FEDHAP_UPLOAD), FEDHAP_UPLOAD)
    for f in ("classes", "vectors", "counts"):
        assert np.array_equal(getattr(back, f), getattr(up, f))
    glob = aggregate_prototypes([up], num_classes=5, bits=2)
    sent = prototype_record(
        PrototypeSet(classes=glob.classes, vectors=glob.codes), FEDHAP_BROADCAST
    )
    got = read_prototype_record(sent, FEDHAP_BROADCAST)
    assert got.classes.tolist() == [1, 4] and got.vectors.tolist() == [[1, -1], [1, 1]]
    with pytest.raises(KeyError):
        read_prototype_record(ArrayRecord({"x": Array(np.zeros(2))}), FEDHAP_UPLOAD)


def test_prototype_wire_format_per_record():
    up = _up([1, 4], [[0.5, -0.5], [0.1, 0.2]], [3, 1])
    down = PrototypeSet(classes=up.classes, vectors=up.vectors)
    names = {
        (K.PROTOTYPES, "up"): list(prototype_record(up, FEDHAP_UPLOAD)),
        (K.PROTOTYPES, "down"): list(prototype_record(down, FEDHAP_BROADCAST)),
        (K.PFMH_UPLOAD, "up"): list(prototype_record(up, PFMH_UPLOAD)),
        (K.PFMH_PERSONAL, "down"): list(prototype_record(down, PFMH_PERSONAL)),
        (K.PFMH_CENTRALIZED, "down"): list(prototype_record(down, PFMH_CENTRALIZED)),
    }
    assert names == {
        ("prototypes", "up"): ["classes", "codes", "counts"],
        ("prototypes", "down"): ["classes", "codes"],
        ("pfmh-prototypes", "up"): ["classes", "vectors", "counts"],
        ("pfmh-personal", "down"): ["classes", "vectors"],
        ("pfmh-centralized", "down"): ["classes", "vectors"],
    }
    assert (FEDHAP_UPLOAD.record, PFMH_UPLOAD.record) == (K.PROTOTYPES, K.PFMH_UPLOAD)
    with pytest.raises(TypeError, match="'pfmh-personal' is a"):
        read_prototype_record(down, PFMH_PERSONAL)


# --- one local round ---------------------------------------------------------------


def _toy(seed=0, n=48, d=12, classes=3):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % classes
    centers = torch.randn(classes, d, generator=g) * 3
    x = centers[y] + torch.randn(n, d, generator=g)
    return x, y


@pytest.mark.parametrize("variant", ["full", "fedhap-1", "fedhap-2", "fedhap-3"])
def test_local_round_runs_every_variant_and_is_deterministic(variant):
    x, y = _toy()
    protos = (T([[1.0] * 8, [-1.0] * 8, [1.0, -1] * 4]), T([0, 1, 2]))
    results = []
    for _ in range(2):
        torch.manual_seed(0)
        model = MLPHash(12, 8, hidden_dim=16)
        disc = (
            Discriminator(8, 3, hidden_dim=8)
            if variant in ("full", "fedhap-2")
            else None
        )
        stats = train_fedhap(
            model,
            disc,
            x,
            y,
            prototypes=None if variant == "fedhap-1" else protos,
            config=FedHAPTrainConfig(
                epochs=2,
                learning_rate=1e-2,
                batch_size=16,
                num_classes=3,
                global_triplet=variant in ("full", "fedhap-3"),
            ),
            device=torch.device("cpu"),
            generator=torch.Generator().manual_seed(1),
        )
        results.append((stats, [p.detach().clone() for p in model.parameters()]))
    (s1, p1), (s2, p2) = results
    assert s1 == s2 and all(torch.equal(a, b) for a, b in zip(p1, p2, strict=True))
    assert s1["steps"] == 6
    assert (s1["adversarial"] != 0) == (variant in ("full", "fedhap-2"))
    assert (s1["triplet_global"] != 0) == (variant in ("full", "fedhap-3"))


def test_training_pulls_codes_towards_their_class_prototype():
    x, y = _toy(seed=3, n=90)
    protos = (T([[1.0] * 8, [-1.0] * 8, [1.0, -1] * 4]), T([0, 1, 2]))
    torch.manual_seed(0)
    model = MLPHash(12, 8, hidden_dim=32)

    def agreement():
        with torch.no_grad():
            h = torch.sign(model.eval()(x))
        return float((h == protos[0][y]).float().mean())

    before = agreement()
    train_fedhap(
        model,
        Discriminator(8, 3, hidden_dim=16),
        x,
        y,
        prototypes=protos,
        config=FedHAPTrainConfig(
            epochs=30, learning_rate=5e-3, batch_size=30, num_classes=3
        ),
        device=torch.device("cpu"),
        generator=torch.Generator().manual_seed(0),
    )
    assert agreement() > max(before, 0.6) + 0.2

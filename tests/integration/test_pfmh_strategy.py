"""PFMH strategy, driven with hand-built Messages (no SuperLink)."""

import logging
import math

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from hashing.prototypes import ClassPrototypes, PrototypeSet
from settings import keys as K
from settings.prototype_records import (
    PFMH_CENTRALIZED,
    PFMH_PERSONAL,
    PFMH_UPLOAD,
    prototype_record,
    read_prototype_record,
)
from settings.run_settings import RunSettings
from strategies.pfmh.strategy import HashingPFMH
from strategies.server_side import build_strategy
from tests.integration.test_strategies import FakeGrid, arrays
from tests.messages import reply_from

pytestmark = pytest.mark.usefixtures("task_identity")

DIM = 2
R2 = 1 / math.sqrt(2)
NODES = [10, 20, 30]  # partitions 2, 1, 0


def up(classes, vectors, counts=None):
    classes = np.asarray(classes, dtype=np.int64)
    return ClassPrototypes(
        classes=classes,
        vectors=np.asarray(vectors, dtype=np.float32).reshape(len(classes), -1),
        counts=np.asarray(counts or [1] * len(classes), dtype=np.int64),
    )


def received(msg, fmt=PFMH_PERSONAL):
    return read_prototype_record(msg.content[fmt.record], fmt)


def reply(node, protos=None, *, model=None, n=10, loss=1.0, record=None):
    content = RecordDict(
        {
            K.ARRAYS: ArrayRecord() if model is None else model,
            K.METRICS: MetricRecord({K.NUM_EXAMPLES: n, K.TRAIN_LOSS: loss}),
        }
    )
    if record is not None:
        content[K.PFMH_UPLOAD] = record
    elif protos is not None:
        content[K.PFMH_UPLOAD] = prototype_record(protos, PFMH_UPLOAD)
    return reply_from(node, content)


def strategy(**kw):
    s = HashingPFMH(
        dim=DIM,
        fraction_evaluate=0.0,
        min_train_nodes=1,
        min_available_nodes=1,
        sampling_seed=3,
        **kw,
    )
    s.set_node_partitions({30: 0, 20: 1, 10: 2})
    s.set_label_space(4)
    return s


def round1(s, model=None):
    return list(
        s.configure_train(
            1,
            model if model is not None else ArrayRecord(),
            ConfigRecord(),
            FakeGrid(NODES),
        )
    )


def good_replies():
    return [
        reply(30, up([0, 1], [[1, 0], [0, 1]], [5, 2])),
        reply(20, up([1, 2], [[1, 0], [0, 1]], [1, 3])),
        reply(10, up([3], [[-1, 0]], [4])),
    ]


def by_node(messages):
    return {m.metadata.dst_node_id: m for m in messages}


def test_centralized_and_completed_sets_are_sent_per_client():
    s = strategy()
    first = round1(s)
    assert all(
        K.PFMH_PERSONAL not in m.content and K.PFMH_CENTRALIZED not in m.content
        for m in first
    )
    agg, metrics = s.aggregate_train(1, good_replies())
    assert agg is not None and len(agg) == 0  # personalized: nothing to average
    assert metrics[K.TRAIN_LOSS] == pytest.approx(1.0)
    c = s.centralized
    assert c.classes.tolist() == [0, 1, 2, 3]
    # Eq. 6: class 1 is held by partitions 0 and 1: mean of (0,1) and (1,0), unit norm
    np.testing.assert_allclose(c.vectors[1], [R2, R2], rtol=1e-6)
    np.testing.assert_allclose(c.vectors[3], [-1, 0])
    assert s.prototype_history[1] == {
        "classes": [0, 1, 2, 3],
        "clients": 3,
        "filled_mean": pytest.approx((2 + 2 + 3) / 3),
    }
    sent = by_node(s.configure_train(2, agg, ConfigRecord(), FakeGrid(NODES)))
    contents = [m.content for m in sent.values()]
    assert len({id(c) for c in contents}) == 3  # one RecordDict per client
    for msg in sent.values():
        central = received(msg, PFMH_CENTRALIZED)
        assert central.classes.tolist() == [0, 1, 2, 3]
        np.testing.assert_array_equal(central.vectors, c.vectors)
        assert len(msg.content[K.ARRAYS]) == 0  # no model travels
    # Eq. 7: own prototypes kept, missing classes filled from the centralized set
    p0 = received(sent[30])
    assert p0.classes.tolist() == [0, 1, 2, 3]
    np.testing.assert_array_equal(p0.vectors[:2], [[1, 0], [0, 1]])  # own
    np.testing.assert_array_equal(p0.vectors[2:], c.vectors[2:])  # filled
    p1 = received(sent[20])
    np.testing.assert_array_equal(p1.vectors[1], [1, 0])  # its own class 1, not P_bar
    p2 = received(sent[10])
    np.testing.assert_array_equal(p2.vectors[:3], c.vectors[:3])
    np.testing.assert_array_equal(p2.vectors[3], [-1, 0])


def test_class_held_by_nobody_stays_absent_and_count_weighting():
    s = strategy(weighting="count")
    round1(s)
    s.aggregate_train(
        1,
        [
            reply(30, up([1], [[1, 0]], [3])),
            reply(20, up([1], [[0, 1]], [1])),
        ],
    )
    assert s.centralized.classes.tolist() == [1]
    np.testing.assert_allclose(s.centralized.vectors[0], np.array([3, 1]) / 10**0.5)
    # node 10 never uploaded: it misses every class, so it gets the whole P_bar
    sent = by_node(s.configure_train(2, ArrayRecord(), ConfigRecord(), FakeGrid(NODES)))
    p = received(sent[10])
    assert p.classes.tolist() == [1]


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        (up([0], [[1, 0, 0]]), "expected (1, 2)"),  # wrong dimension
        (up([0], [[np.nan, 1]]), "non-finite"),
        (up([0], [[np.inf, 0]]), "non-finite"),
        (up([0], [[2, 0]]), "expected unit norm"),
        (up([7], [[1, 0]]), "class id 7 outside"),
        (up([0, 0], [[1, 0], [0, 1]]), "duplicate"),
        (up([0], [[1, 0]], [0]), "counts must be >= 1"),
        (None, "no 'pfmh-prototypes' record"),
        ("config-record", "malformed"),
    ],
)
def test_bad_upload_drops_the_reply_and_names_the_client(caplog, bad, fragment):
    s = strategy()
    round1(s)
    good = [
        reply(30, up([0], [[1, 0]]), loss=1.0),
        reply(20, up([0], [[0, 1]]), loss=3.0),
    ]
    if bad == "config-record":
        bad_reply = reply(10, record=ConfigRecord({"x": 1}), loss=100.0)
    else:
        bad_reply = reply(10, bad, loss=100.0)
    with caplog.at_level(logging.WARNING):
        _, metrics = s.aggregate_train(1, [*good, bad_reply])
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("partition 2 (node 10)" in m and fragment in m for m in warnings), (
        warnings
    )
    assert s.kept_nodes == [30, 20]
    assert metrics[K.TRAIN_LOSS] == pytest.approx(2.0)  # the round went on without it
    assert s.centralized.classes.tolist() == [0]
    np.testing.assert_allclose(s.centralized.vectors[0], [R2, R2], rtol=1e-6)
    assert 10 not in s.uploads


def test_personalized_sends_no_model_and_drops_replies_with_one(caplog):
    s = strategy()
    # even if handed a model, personalized mode sends an empty ArrayRecord
    sent = round1(s, model=arrays(1.0))
    assert all(len(m.content[K.ARRAYS]) == 0 for m in sent)
    with caplog.at_level(logging.WARNING):
        agg, _ = s.aggregate_train(
            1,
            [
                reply(30, up([0], [[1, 0]])),
                reply(20, up([0], [[0, 1]]), model=arrays(5.0)),
            ],
        )
    assert s.kept_nodes == [30]
    assert any(
        "partition 1 (node 20)" in r.getMessage() and "empty 'arrays'" in r.getMessage()
        for r in caplog.records
    )
    assert len(agg) == 0
    comm = s.comm_history[1]
    # only the (empty) arrays, the config and, up, metrics + prototypes travel
    assert comm["down_bytes_per_client"] < 64
    assert comm["up_bytes_per_client"] > 0


def test_fedavg_mode_averages_the_model_and_exchanges_prototypes():
    s = strategy(personalized=False)
    sent = round1(s, model=arrays(0.0))
    assert all(len(m.content[K.ARRAYS]) == 2 for m in sent)
    agg, _ = s.aggregate_train(
        1,
        [
            reply(30, up([0], [[1, 0]]), model=arrays(1.0), n=10),
            reply(20, up([1], [[0, 1]]), model=arrays(4.0), n=30),
        ],
    )
    np.testing.assert_allclose(agg["w"].numpy(), np.full((2, 3), 3.25))
    assert s.centralized.classes.tolist() == [0, 1]
    nxt = by_node(s.configure_train(2, agg, ConfigRecord(), FakeGrid(NODES)))
    np.testing.assert_allclose(nxt[30].content[K.ARRAYS]["w"].numpy(), 3.25)
    assert K.PFMH_PERSONAL in nxt[30].content and K.PFMH_CENTRALIZED in nxt[30].content
    # a model of the wrong shape is dropped by the mixin's screening
    s.configure_train(3, agg, ConfigRecord(), FakeGrid(NODES))
    s.aggregate_train(
        3,
        [
            reply(30, up([0], [[1, 0]]), model=arrays(1.0)),
            reply(20, up([0], [[1, 0]]), model=arrays(1.0, w=(3, 3))),
        ],
    )
    assert s.kept_nodes == [30]


def test_without_completion_each_client_gets_only_its_own_classes():
    s = strategy(complete=False)
    round1(s)
    s.aggregate_train(1, good_replies()[:2])  # node 10 does not upload
    sent = by_node(s.configure_train(2, ArrayRecord(), ConfigRecord(), FakeGrid(NODES)))
    assert received(sent[30]).classes.tolist() == [0, 1]
    assert received(sent[20]).classes.tolist() == [1, 2]
    assert K.PFMH_PERSONAL not in sent[10].content  # nothing known of its classes
    for msg in sent.values():  # the centralized set is still sent (L_global)
        assert received(msg, PFMH_CENTRALIZED).classes.tolist() == [
            0,
            1,
            2,
        ]


def test_without_prototypes_nothing_but_metrics_travels():
    s = strategy(uses_prototypes=False)
    round1(s)
    agg, metrics = s.aggregate_train(1, [reply(30), reply(20)])
    assert s.kept_nodes == [30, 20] and s.centralized is None
    sent = round1(s)
    assert all(set(m.content.keys()) == {K.ARRAYS, K.CONFIG} for m in sent)


@pytest.mark.parametrize(
    ("mode", "variant", "personalized", "protos", "complete"),
    [
        ("personalized", "full", True, True, True),
        ("fedavg", "full", False, True, True),
        ("personalized", "wo-pe", True, True, False),
        ("fedavg", "wo-p", False, False, False),
        ("personalized", "wo-ls", True, True, True),
        ("personalized", "wo-ll", True, True, True),
    ],
)
def test_registered_with_mode_and_variant(
    mode, variant, personalized, protos, complete
):
    settings = RunSettings.from_config(
        {
            "strategy": "pfmh",
            "dataset": "multiview-digits",
            "pfmh.mode": mode,
            "pfmh.variant": variant,
            "pfmh.k": 16,
        }
    )
    s = build_strategy(settings)
    assert isinstance(s, HashingPFMH)
    assert (s.personalized, s.uses_prototypes, s.complete) == (
        personalized,
        protos,
        complete,
    )
    assert s.dim == 16 and s.weighting == "mean"


def test_records_round_trip():
    u = up([1, 3], [[1, 0], [0, 1]], [2, 5])
    back = read_prototype_record(prototype_record(u, PFMH_UPLOAD), PFMH_UPLOAD)
    for name in ("classes", "vectors", "counts"):
        np.testing.assert_array_equal(getattr(back, name), getattr(u, name))
    p = PrototypeSet(classes=u.classes, vectors=u.vectors)
    back_p = read_prototype_record(prototype_record(p, PFMH_PERSONAL), PFMH_PERSONAL)
    np.testing.assert_array_equal(back_p.vectors, p.vectors)
    with pytest.raises(TypeError):
        read_prototype_record(ConfigRecord({"x": 1}), PFMH_UPLOAD)

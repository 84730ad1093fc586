"""FedHAP strategy, driven with hand-built Messages (no SuperLink)."""

import logging

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from hashing.prototypes import ClassPrototypes
from settings import keys as K
from settings.prototype_records import (
    FEDHAP_BROADCAST,
    FEDHAP_UPLOAD,
    prototype_record,
    read_prototype_record,
)
from settings.run_settings import RunSettings
from strategies.fedhap.strategy import HashingFedHAP
from strategies.server_side import build_strategy
from tests.integration.test_strategies import FakeGrid, arrays
from tests.messages import reply_from

pytestmark = pytest.mark.usefixtures("task_identity")

BITS = 4


def upload(classes, means, counts=None):
    classes = np.array(classes, dtype=np.int64)
    return ClassPrototypes(
        classes=classes,
        vectors=np.array(means, dtype=np.float32).reshape(len(classes), -1),
        counts=np.array(counts or [1] * len(classes), dtype=np.int64),
    )


def reply(node, protos=None, value=1.0, n=10, record=None):
    content = RecordDict(
        {
            K.ARRAYS: arrays(value),
            K.METRICS: MetricRecord({K.NUM_EXAMPLES: n, K.TRAIN_LOSS: value}),
        }
    )
    if record is not None:
        content[K.PROTOTYPES] = record
    elif protos is not None:
        content[K.PROTOTYPES] = prototype_record(protos, FEDHAP_UPLOAD)
    return reply_from(node, content)


def strategy(**kw):
    s = HashingFedHAP(
        bits=BITS,
        fraction_evaluate=0.0,
        min_train_nodes=1,
        min_available_nodes=1,
        sampling_seed=3,
        **kw,
    )
    s.set_node_partitions({30: 0, 10: 2, 20: 1})
    s.set_label_space(5)
    return s


def test_prototypes_aggregated_per_class_and_broadcast_next_round():
    s = strategy()
    first = list(
        s.configure_train(1, arrays(0.0), ConfigRecord(), FakeGrid([10, 20, 30]))
    )
    assert all(K.PROTOTYPES not in m.content for m in first)  # none yet in round 1
    replies = [
        reply(30, upload([0, 1], [[1, -1, 1, -1], [0.5, 0.5, -0.5, 0]])),
        reply(20, upload([1, 3], [[-1.5, 0.5, 0.5, 0], [-1, -1, 1, 1]])),
        reply(10, upload([3], [[0.5, 0.5, -2, 1]])),
    ]
    agg, _ = s.aggregate_train(1, replies)
    assert agg is not None
    g = s.global_prototypes
    assert g.classes.tolist() == [0, 1, 3]  # 2 and 4: nobody holds them
    assert g.relaxed[1].tolist() == [-0.5, 0.5, 0.0, 0.0]
    assert g.codes.tolist() == [[1, -1, 1, -1], [-1, 1, 1, 1], [-1, -1, -1, 1]]
    assert s.prototype_history[1] == {"classes": [0, 1, 3], "clients": 3}
    nxt = list(s.configure_train(2, agg, ConfigRecord(), FakeGrid([10, 20, 30])))
    assert len(nxt) == 3
    for msg in nxt:
        got = read_prototype_record(msg.content[K.PROTOTYPES], FEDHAP_BROADCAST)
        assert got.classes.tolist() == [0, 1, 3]
        assert got.vectors.tolist() == g.codes.tolist()
    comm = s.comm_history[1]
    assert comm["up_bytes_per_client"] > comm["down_bytes_per_client"] > 0


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        (upload([0], [[1, 1, 1]]), "expected (1, 4)"),  # wrong code length
        (upload([0, 9], [[1] * 4, [1] * 4]), "class id 9 outside"),
        (upload([0], [[np.nan, 1, 1, 1]]), "non-finite"),
        (None, "no 'prototypes' record"),
        ("not-an-array-record", "malformed"),
    ],
)
def test_bad_prototype_reply_is_dropped_and_named(caplog, bad, fragment):
    s = strategy()
    s.configure_train(1, arrays(0.0), ConfigRecord(), FakeGrid([10, 20, 30]))
    good = [
        reply(30, upload([0], [[1, 1, 1, 1]]), value=1.0),
        reply(20, upload([0], [[-3, 1, 1, 1]]), value=3.0),
    ]
    if bad == "not-an-array-record":
        bad_reply = reply(10, record=ConfigRecord({"x": 1}))
    else:
        bad_reply = reply(10, bad, value=100.0)
    with caplog.at_level(logging.WARNING):
        agg, _ = s.aggregate_train(1, [*good, bad_reply])
    assert any(
        "partition 2 (node 10)" in r.getMessage() and fragment in r.getMessage()
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]
    # the bad client's model is not averaged in and its prototypes are not used
    assert agg["w"].numpy() == pytest.approx(np.full((2, 3), 2.0))
    assert s.kept_nodes == [30, 20]
    assert s.global_prototypes.relaxed.tolist() == [[-1.0, 1.0, 1.0, 1.0]]


def test_fedavg_sees_one_array_record_even_with_prototypes():
    # the prototype record is taken out before Flower's FedAvg, which would
    # otherwise refuse replies with two ArrayRecords
    s = strategy()
    s.configure_train(1, arrays(0.0), ConfigRecord(), FakeGrid([10]))
    agg, metrics = s.aggregate_train(1, [reply(10, upload([2], [[1, 2, 3, 4]]))])
    assert agg is not None and metrics[K.TRAIN_LOSS] == 1.0


def test_count_weighting_option():
    s = strategy(weighting="count")
    s.configure_train(1, arrays(0.0), ConfigRecord(), FakeGrid([10, 20]))
    s.aggregate_train(
        1,
        [
            reply(10, upload([0], [[1, 1, 1, 1]], [3])),
            reply(20, upload([0], [[-1, -1, -1, -5]], [1])),
        ],
    )
    assert s.global_prototypes.relaxed.tolist() == [[0.5, 0.5, 0.5, -0.5]]


def test_fedhap1_exchanges_no_prototypes():
    settings = RunSettings.from_config(
        {"strategy": "fedhap", "fedhap.variant": "fedhap-1"}
    )
    assert not settings.uses_prototypes and not settings.fedhap.uses_discriminator
    s = build_strategy(settings)  # min-train-nodes = 2 by default
    s.set_node_partitions({10: 0, 20: 1})
    s.set_label_space(5)
    sent = list(s.configure_train(1, arrays(0.0), ConfigRecord(), FakeGrid([10, 20])))
    assert len(sent) == 2
    agg, _ = s.aggregate_train(1, [reply(10), reply(20)])  # no record needed
    assert agg is not None and s.global_prototypes is None


@pytest.mark.parametrize(
    ("variant", "disc", "triplet"),
    [
        ("full", True, True),
        ("fedhap-1", False, False),
        ("fedhap-2", True, False),
        ("fedhap-3", False, True),
    ],
)
def test_variant_switches(variant, disc, triplet):
    s = RunSettings.from_config({"strategy": "fedhap", "fedhap.variant": variant})
    assert (s.fedhap.uses_discriminator, s.fedhap.uses_global_triplet) == (
        disc,
        triplet,
    )
    assert not RunSettings.from_config({"fedhap.variant": variant}).uses_prototypes


def test_global_arrays_hold_the_discriminator_and_evaluation_strips_it():
    import torch

    from settings.run_model import build_run_model, split_global_state
    from strategies.fedhap.model import fedhap_initial_state as initial_global_state

    s = RunSettings.from_config({"strategy": "fedhap", "code-length": 16})
    model = build_run_model(s, (64,))
    state = initial_global_state(s, model, num_classes=10)
    m, d = split_global_state(state)
    assert set(m) == set(model.state_dict())
    assert d["net.0.weight"].shape == torch.Size([128, 16 + 10])
    no_disc = RunSettings.from_config(
        {"strategy": "fedhap", "fedhap.variant": "fedhap-3"}
    )
    assert set(initial_global_state(no_disc, model, 10)) == set(model.state_dict())
    assert isinstance(ArrayRecord(state)["net.0.weight"], Array)

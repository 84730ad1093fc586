"""Random Flipping at the publication seams, its reports, and the settings."""

import logging
import math

import numpy as np
import pytest
from flwr.app import ConfigRecord, MetricRecord, RecordDict

from clients.publish import (
    CODES_MECHANISM,
    PROTOTYPES_MECHANISM,
    publish_codes,
    publish_prototypes,
)
from hashing.prototypes import ClassPrototypes
from privacy.ledger import MechanismUse
from privacy.noise import NoiseSource
from settings import keys as K
from settings.privacy_records import privacy_record, read_privacy
from settings.run_settings import ConfigError, RunSettings
from tests.integration.test_strategies import FakeGrid, arrays, strategy
from tests.messages import reply_from


def settings(**kw):
    return RunSettings.from_config(kw)


def test_codes_published_unchanged_without_epsilon():
    codes = np.where(np.random.default_rng(0).random((20, 16)) < 0.5, 1, -1)
    out, uses = publish_codes(
        codes.astype(np.int8), settings=settings(), noise=NoiseSource.seeded(1)
    )
    assert uses == [] and np.array_equal(out, codes)


@pytest.mark.parametrize(("eps", "calibration"), [(1.0, "rr"), (2.0, "paper")])
def test_codes_flipped_at_the_calibrated_rate_with_true_epsilon(eps, calibration):
    codes = np.ones((2000, 32), dtype=np.int8)
    s = settings(
        **{"privacy.code-flip-epsilon": eps, "privacy.flip-calibration": calibration}
    )
    out, uses = publish_codes(codes, settings=s, noise=NoiseSource.seeded(3))
    beta = 1 / (1 + math.exp(eps)) if calibration == "rr" else math.exp(-eps)
    rate = float((out == -1).mean())
    assert abs(rate - beta) < 5 * math.sqrt(beta * (1 - beta) / out.size)
    assert uses == [
        MechanismUse(
            CODES_MECHANISM,
            pytest.approx(32 * math.log((1 - beta) / beta)),
            0.0,
            "per code",
        )
    ]
    if calibration == "rr":  # exactly eps per bit
        assert uses[0].epsilon == pytest.approx(32 * eps)
    else:  # the paper's eps = 2 is really ln(e^2 - 1) = 1.8546 per bit
        assert uses[0].epsilon == pytest.approx(32 * math.log(math.e**2 - 1))


def test_private_prototypes_are_binarised_flipped_and_hide_counts():
    protos = ClassPrototypes(
        classes=np.array([1, 4]),
        vectors=np.array([[0.3, -0.2, 0.0, 5.0], [-1.0, 2.0, -0.1, 0.2]], np.float32),
        counts=np.array([7, 2]),
    )
    plain, none = publish_prototypes(
        protos, settings=settings(), noise=NoiseSource.seeded(0)
    )
    assert none == [] and plain is protos
    s = settings(**{"strategy": "fedhap", "privacy.prototype-flip-epsilon": 20.0})
    out, uses = publish_prototypes(protos, settings=s, noise=NoiseSource.seeded(0))
    # eps = 20 per bit: beta ~ 2e-9, so (practically) the signs themselves
    assert out.vectors.tolist() == [[1, -1, 1, 1], [-1, 1, -1, 1]]
    assert out.counts.tolist() == [1, 1] and out.classes.tolist() == [1, 4]
    assert uses[0].mechanism == PROTOTYPES_MECHANISM
    assert uses[0].epsilon == pytest.approx(4 * 20.0)
    assert uses[0].unit == "per record"
    # a record with 3 labels moves 3 class means: charged 3 prototype codes
    _, multi = publish_prototypes(
        protos, settings=s, noise=NoiseSource.seeded(0), labels_per_record=3
    )
    assert multi[0].epsilon == pytest.approx(3 * 4 * 20.0)


@pytest.mark.parametrize(
    ("cfg", "fragment"),
    [
        ({"privacy.code-flip-epsilon": -1.0}, "privacy.code-flip-epsilon=-1.0"),
        (
            {"privacy.code-flip-epsilon": 0.5, "privacy.flip-calibration": "paper"},
            "ln 2",
        ),
        (
            {"privacy.code-flip-epsilon": 0.25, "privacy.flip-calibration": "paper"},
            "true per-bit eps",
        ),
        (
            {"privacy.code-flip-epsilon": 1.0, "privacy.flip-calibration": "exp"},
            "privacy.flip-calibration",
        ),
        ({"privacy.prototype-flip-epsilon": 1.0}, "needs strategy"),
        (
            {
                "strategy": "fedhap",
                "fedhap.variant": "fedhap-1",
                "privacy.prototype-flip-epsilon": 1.0,
            },
            "needs strategy",
        ),
    ],
)
def test_bad_flipping_settings_refused(cfg, fragment):
    with pytest.raises(ConfigError, match="flip") as err:
        settings(**cfg)
    assert fragment in str(err.value)


def test_privacy_record_round_trip_and_malformed():
    uses = [
        MechanismUse("a", 1.5, 0.0, "per code"),
        MechanismUse("b", 2.0, 1e-5, "per record"),
    ]
    assert read_privacy(privacy_record(uses)) == uses
    with pytest.raises(ValueError, match="malformed"):
        read_privacy(ConfigRecord({K.PRIV_MECHANISMS: ["a"]}))
    with pytest.raises(ValueError, match="length"):
        read_privacy(
            ConfigRecord(
                {
                    K.PRIV_MECHANISMS: ["a", "b"],
                    K.PRIV_EPSILONS: [1.0],
                    K.PRIV_DELTAS: [0.0],
                    K.PRIV_UNITS: ["per code"],
                }
            )
        )


@pytest.mark.usefixtures("task_identity")
def test_strategy_collects_privacy_reports_of_kept_replies_only(caplog):
    s = strategy()
    s.configure_train(1, arrays(0.0), ConfigRecord(), FakeGrid([10, 20, 30]))

    def reply(node, record, **shape):
        content = RecordDict(
            {
                K.ARRAYS: arrays(1.0, **shape),
                K.METRICS: MetricRecord({K.NUM_EXAMPLES: 5}),
            }
        )
        if record is not None:
            content[K.PRIVACY] = record
        return reply_from(node, content)

    use = MechanismUse("m", 3.0, 0.0, "per code")
    with caplog.at_level(logging.WARNING):
        s.aggregate_train(
            1,
            [
                reply(30, privacy_record([use])),
                reply(20, privacy_record([use]), w=(9, 9)),  # bad arrays: dropped
                reply(10, ConfigRecord({"x": 1})),  # malformed report: dropped
            ],
        )
    assert s.privacy_history[1] == [(0, [use])]
    assert any(
        "partition 2 (node 10)" in r.getMessage() and "malformed" in r.getMessage()
        for r in caplog.records
    )


@pytest.mark.usefixtures("task_identity")
def test_reply_without_a_required_mechanism_is_dropped(caplog):
    s = strategy()
    s.set_required_mechanisms((K.MECH_DP_SGD,))
    s.configure_train(1, arrays(0.0), ConfigRecord(), FakeGrid([10, 20, 30]))
    use = MechanismUse(K.MECH_DP_SGD, 1.0, 1e-5, "per record")

    def reply(node, uses):
        content = RecordDict(
            {K.ARRAYS: arrays(1.0), K.METRICS: MetricRecord({K.NUM_EXAMPLES: 5})}
        )
        if uses is not None:
            content[K.PRIVACY] = privacy_record(uses)
        return reply_from(node, content)

    with caplog.at_level(logging.WARNING):
        s.aggregate_train(1, [reply(30, [use]), reply(20, None), reply(10, [])])
    assert s.kept_nodes == [30]
    dropped = [
        r.getMessage() for r in caplog.records if "does not report" in r.getMessage()
    ]
    assert len(dropped) == 2 and all(K.MECH_DP_SGD in m for m in dropped)


@pytest.mark.usefixtures("task_identity")
def test_evaluator_rejects_codes_without_the_required_flipping(caplog):
    import torch
    from flwr.app import Array, ArrayRecord, MessageType

    from hashing.codes import pack_bytes
    from hashing.models import MLPHash
    from server.discovery import NodeInfo
    from server.evaluation import QuerySet, RetrievalEvaluator

    rng = np.random.default_rng(0)

    def codes_reply(node, uses):
        codes = np.where(rng.random((6, 16)) < 0.5, 1, -1).astype(np.int8)
        content = RecordDict(
            {
                K.CODES: ArrayRecord(
                    {
                        K.PACKED_CODES: Array(pack_bytes(codes)),
                        K.CODE_LABELS: Array(np.arange(6) % 3),
                    }
                ),
                K.CONFIG: ConfigRecord({K.CODE_BITS: 16}),
            }
        )
        if uses:
            content[K.PRIVACY] = privacy_record(uses)
        return reply_from(node, content, message_type=MessageType.QUERY)

    flip = MechanismUse(K.MECH_CODES_FLIP, 32.0, 0.0, "per code")

    class Grid:
        def send_and_receive(self, messages, timeout):
            return [codes_reply(1, [flip]), codes_reply(2, [])]

    nodes = {n: NodeInfo(n, n - 1, 2, 6, "cpu") for n in (1, 2)}
    torch.manual_seed(0)
    evaluator = RetrievalEvaluator(
        Grid(),
        nodes,
        QuerySet(torch.randn(4, 8), np.array([0, 1, 2, 0]), 3),
        lambda: MLPHash(8, 16, hidden_dim=8),
        bits=16,
        top_k=5,
        ks=(5,),
        device=torch.device("cpu"),
        required_mechanisms=(K.MECH_CODES_FLIP,),
    )
    state = MLPHash(8, 16, hidden_dim=8).state_dict()
    with caplog.at_level(logging.WARNING):
        ev = evaluator.evaluate(0, ArrayRecord(state))
    assert ev.clients == 1 and ev.disclosures == ((0, (flip,)),)
    assert any(
        "partition 1 (node 2)" in r.getMessage() and "does not report" in r.getMessage()
        for r in caplog.records
    )

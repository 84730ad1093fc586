import itertools
import logging

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from settings.run_settings import RunSettings
from strategies.fedavg.strategy import HashingFedAvg, HashingFedProx, fedprox
from tests.messages import reply_from

pytestmark = pytest.mark.usefixtures("task_identity")

SHAPES = {"w": (2, 3), "b": (3,)}


def arrays(value: float, **shape_over) -> ArrayRecord:
    shapes = {**SHAPES, **shape_over}
    return ArrayRecord(
        {k: Array(np.full(s, value, dtype=np.float32)) for k, s in shapes.items()}
    )


def train_reply(node, value, n=10, **shape_over):
    return reply_from(
        node,
        RecordDict(
            {
                "arrays": arrays(value, **shape_over),
                "metrics": MetricRecord({"num-examples": n, "train-loss": value}),
            }
        ),
    )


class FakeGrid:
    def __init__(self, nodes):
        self.nodes = list(nodes)

    def get_node_ids(self):
        return list(self.nodes)


def strategy(cls=HashingFedAvg, **kw):
    s = cls(
        fraction_evaluate=0.0,
        min_train_nodes=1,
        min_available_nodes=1,
        sampling_seed=7,
        **kw,
    )
    s.set_node_partitions({30: 0, 10: 2, 20: 1})
    return s


def test_weighted_average_by_num_examples():
    s = strategy()
    s.configure_train(1, arrays(0.0), ConfigRecord(), FakeGrid([10, 20, 30]))
    agg, metrics = s.aggregate_train(
        1, [train_reply(30, 1.0, n=10), train_reply(20, 4.0, n=30)]
    )
    assert agg["w"].numpy() == pytest.approx(np.full((2, 3), (10 + 120) / 40))
    assert metrics["train-loss"] == pytest.approx((10 + 120) / 40)
    assert s.train_history[1]["train-loss"] == metrics["train-loss"]


def test_aggregation_is_bitwise_independent_of_reply_order():
    s = strategy()
    s.configure_train(1, arrays(0.0), ConfigRecord(), FakeGrid([10, 20, 30]))
    values = {30: 0.1, 20: 1e8 / 3, 10: -7.3e-3}
    results = set()
    for order in itertools.permutations(values):
        agg, _ = s.aggregate_train(
            1, [train_reply(n, values[n], n=3 + n) for n in order]
        )
        results.add(agg["w"].numpy().tobytes())
    assert len(results) == 1


def test_bad_replies_are_dropped_with_a_log_line_naming_the_client(caplog):
    s = strategy()
    s.configure_train(2, arrays(0.0), ConfigRecord(), FakeGrid([10, 20, 30]))
    nan = train_reply(20, float("nan"))
    wrong_shape = train_reply(10, 1.0, w=(3, 3))
    no_examples = reply_from(
        30, RecordDict({"arrays": arrays(1.0), "metrics": MetricRecord({"x": 1.0})})
    )
    good = train_reply(30, 2.0)
    with caplog.at_level(logging.WARNING):
        agg, _ = s.aggregate_train(2, [nan, wrong_shape, no_examples])
        assert agg is None  # nothing usable: the global model stays
        agg, _ = s.aggregate_train(2, [nan, good, wrong_shape])
    assert agg["w"].numpy() == pytest.approx(np.full((2, 3), 2.0))
    text = caplog.text
    assert "partition 1 (node 20)" in text and "non-finite" in text
    assert "partition 2 (node 10)" in text and "wrong shape" in text
    assert "num-examples" in text


def test_error_replies_do_not_break_the_round():
    s = strategy()
    s.configure_train(1, arrays(0.0), ConfigRecord(), FakeGrid([10, 20, 30]))
    agg, _ = s.aggregate_train(
        1, [reply_from(10, error="client crashed"), train_reply(20, 5.0)]
    )
    assert agg["b"].numpy() == pytest.approx(np.full(3, 5.0))


def test_sampling_is_seeded_ordered_by_partition_and_skips_unknown_nodes():
    s = strategy()
    s.fraction_train = 0.5
    grid = FakeGrid([99, 20, 10, 30])  # 99 never answered discovery

    def picked(rnd):
        msgs = s.configure_train(rnd, arrays(0.0), ConfigRecord(), grid)
        return [m.metadata.dst_node_id for m in msgs]

    first = picked(3)
    assert 99 not in first
    assert first == picked(3)  # same seed and round -> same clients
    parts = [s.node_partitions[n] for n in first]
    assert parts == sorted(parts)
    assert len({tuple(picked(r)) for r in range(1, 30)}) > 1  # rounds differ


@pytest.mark.parametrize("name", ["fedavg", "fedprox", "fedhap", "pfmh"])
def test_every_strategy_implements_the_experiment_interface(name):
    from strategies.protocol import HashingStrategy
    from strategies.server_side import build_strategy, registered_strategies

    assert name in registered_strategies()
    config = {"strategy": name}
    if name == "pfmh":
        config["dataset"] = "multiview-digits"
    s = build_strategy(RunSettings.from_config(config))
    assert isinstance(s, HashingStrategy)
    assert s.prototype_history == {} and s.secure_aggregation is None
    s.set_label_space(10)
    assert s.num_classes == 10
    s.set_secure_prototypes(None)
    if name != "fedhap":  # only FedHAP's prototypes can travel as encrypted sums
        with pytest.raises(ValueError, match="exchanges no prototypes"):
            s.set_secure_prototypes(object())


def test_a_strategy_built_from_a_run_context_is_set_up_and_restored():
    from strategies.protocol import RunContext
    from strategies.server_side import build_strategy

    settings = RunSettings.from_config({"strategy": "fedhap"})
    first = build_strategy(settings)
    first.set_node_partitions({5: 0, 6: 1})
    first.train_history[1] = MetricRecord({"train-loss": 0.5})
    run = RunContext(
        node_partitions={7: 1, 8: 0},  # node ids change between runs
        num_classes=10,
        required_mechanisms=("dp-sgd",),
        checkpoint=first.state_dict(),
    )
    s = build_strategy(settings, run=run)
    assert s.node_partitions == {7: 1, 8: 0} and s.num_classes == 10
    assert s.required_mechanisms == ("dp-sgd",) and s.secure_aggregation is None
    assert s.train_history == first.train_history
    # a checkpoint of a partition no connected node holds is refused (PFMH keeps
    # each client's uploads by partition)
    pfmh = RunSettings.from_config({"strategy": "pfmh", "dataset": "multiview-digits"})
    before = build_strategy(pfmh)
    before.set_node_partitions({5: 0, 6: 1})
    before.uploads = {5: "upload of partition 0"}
    lost = RunContext({9: 1}, 10, checkpoint=before.state_dict())
    with pytest.raises(ValueError, match="partitions \\[0\\]"):
        build_strategy(pfmh, run=lost)


def test_fedprox_factory_sends_mu():
    s = fedprox(RunSettings.from_config({"strategy": "fedprox", "fedprox.mu": 0.3}))
    assert isinstance(s, HashingFedProx)
    s.set_node_partitions({5: 0, 6: 1})
    msgs = list(s.configure_train(1, arrays(0.0), ConfigRecord(), FakeGrid([5, 6])))
    assert [m.content["config"]["proximal-mu"] for m in msgs] == [0.3, 0.3]
    assert msgs[0].content["config"]["server-round"] == 1


def test_batchnorm_counters_keep_their_dtype_so_round_two_replies_are_kept(caplog):
    # found on the GPU with ResNet-18: FedAvg averaged BatchNorm's int64
    # num_batches_tracked into a float, and from round 2 every reply (int64 again)
    # "differed from the global model" and was dropped
    import torch

    def bn_state(steps: int, shift: float) -> ArrayRecord:
        bn = torch.nn.BatchNorm1d(3)
        bn.num_batches_tracked.fill_(steps)
        bn.running_mean.fill_(shift)
        return ArrayRecord(bn.state_dict())

    def bn_reply(node, steps, shift, n):
        content = {
            "arrays": bn_state(steps, shift),
            "metrics": MetricRecord({"num-examples": n, "train-loss": 1.0}),
        }
        return reply_from(node, RecordDict(content))

    s = strategy()
    s.configure_train(1, bn_state(0, 0.0), ConfigRecord(), FakeGrid([10, 20, 30]))
    agg, _ = s.aggregate_train(1, [bn_reply(30, 8, 1.0, 10), bn_reply(20, 9, 3.0, 30)])
    tracked = agg["num_batches_tracked"].numpy()
    assert tracked.dtype == np.int64 and tracked.shape == ()
    assert int(tracked) == 9  # rint of the weighted mean (8 * 10 + 9 * 30) / 40
    assert agg["running_mean"].numpy() == pytest.approx(np.full(3, 2.5))
    with caplog.at_level(logging.WARNING):
        s.configure_train(2, agg, ConfigRecord(), FakeGrid([10, 20, 30]))
        agg2, _ = s.aggregate_train(2, [bn_reply(30, 17, 1.0, 10)])
    assert "dropping reply" not in caplog.text
    assert agg2 is not None and int(agg2["num_batches_tracked"].numpy()) == 17

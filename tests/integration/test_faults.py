"""Fault injection: a grid wrapper marks k sampled train receivers, the client mod
acts it out, and the round goes on with the rest (or makes no update below
min-train-nodes)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

import clients.faults as faults
from server.experiment import run_experiment
from server.fault_grid import FaultGrid
from settings import keys as K
from settings.run_settings import ConfigError, RunSettings
from strategies.fedavg.strategy import HashingFedAvg
from tests.integration.attacks.inprocess_grid import InProcessGrid
from tests.integration.test_strategies import FakeGrid, arrays, train_reply
from tests.messages import reply_from, request_to

pytestmark = pytest.mark.usefixtures("task_identity")


def strategy(min_train_nodes=1):
    s = HashingFedAvg(
        fraction_evaluate=0.0,
        min_train_nodes=min_train_nodes,
        min_available_nodes=1,
        sampling_seed=7,
    )
    s.set_node_partitions({30: 0, 10: 2, 20: 1, 40: 3})
    return s


class RecordingGrid(FakeGrid):
    """What reached the grid under the FaultGrid."""

    def __init__(self, nodes):
        super().__init__(nodes)
        self.sent = []

    def send_and_receive(self, messages, *, timeout=None):
        self.sent = list(messages)
        return []


def sent(rnd, nodes, count=1, kind="raise", messages=None):
    """The round's train messages as they left a FaultGrid asked for ``count``."""
    inner = RecordingGrid(nodes)
    grid = FaultGrid(inner, clients=count, kind=kind, delay=3.0, seed=7)
    if messages is None:
        messages = strategy().configure_train(rnd, arrays(0.0), ConfigRecord(), grid)
    grid.send_and_receive(messages, timeout=1.0)
    return inner.sent


def marked(messages):
    return [
        m.metadata.dst_node_id
        for m in messages
        if K.FAULT in m.content[K.CONFIG]
    ]


def test_grid_marks_k_train_receivers_per_round_seeded_and_others_unchanged():
    picks = []
    for rnd in (1, 2, 3):
        msgs = sent(rnd, [10, 20, 30, 40], count=2)
        again = sent(rnd, [40, 30, 20, 10], count=2)
        assert marked(msgs) == marked(again)  # seeded, independent of node order
        assert len(marked(msgs)) == 2
        for m in msgs:
            cfg = m.content[K.CONFIG]
            if m.metadata.dst_node_id in marked(msgs):
                assert cfg[K.FAULT] == "raise" and cfg[K.FAULT_DELAY] == 3.0
            else:
                assert K.FAULT not in cfg and K.FAULT_DELAY not in cfg
        picks.append(tuple(marked(msgs)))
    assert len(set(picks)) > 1  # not the same clients every round
    assert marked(sent(1, [10, 20, 30, 40], count=0)) == []


def test_strategy_alone_marks_no_one_and_other_messages_pass_unchanged():
    # the strategy knows nothing of faults: without the FaultGrid nobody is told
    msgs = list(
        strategy().configure_train(
            1, arrays(0.0), ConfigRecord(), FakeGrid([10, 20, 30, 40])
        )
    )
    assert marked(msgs) == []
    # a message that is not a train message (code publication) passes as it is
    query = request_to(5, RecordDict({K.CONFIG: ConfigRecord({"a": 1})}), "query")
    out = sent(1, [5], count=3, messages=[query])
    assert out == [query] and dict(out[0].content[K.CONFIG]) == {"a": 1}


def test_round_below_min_train_nodes_makes_no_update(caplog):
    s = strategy(min_train_nodes=2)
    s.configure_train(1, arrays(0.0), ConfigRecord(), FakeGrid([10, 20, 30]))
    replies = [reply_from(10, error="boom"), train_reply(20, 1.0),
               train_reply(30, float("nan"))]
    with caplog.at_level(logging.WARNING):
        agg, metrics = s.aggregate_train(1, replies)
    assert agg is None and metrics is None
    assert "1 usable replies of 3 sent, fewer than min-train-nodes=2" in caplog.text
    assert "partition 2 (node 10): error reply (boom)" in caplog.text
    agg, _ = s.aggregate_train(1, [train_reply(20, 1.0), train_reply(30, 3.0)])
    assert agg["w"].numpy() == pytest.approx(np.full((2, 3), 2.0))


def _train_msg(kind, delay=0.0):
    return request_to(
        5,
        RecordDict({K.CONFIG: ConfigRecord({K.FAULT: kind, K.FAULT_DELAY: delay})}),
        "train",
    )


def _next(msg, context):
    return reply_from(
        5,
        RecordDict(
            {
                K.ARRAYS: ArrayRecord({"w": Array(np.ones((2, 3), np.float32))}),
                K.METRICS: MetricRecord({K.NUM_EXAMPLES: 3}),
            }
        ),
    )


def test_client_mod_acts_out_each_fault_in_simulation(monkeypatch):
    monkeypatch.setattr(faults, "client_in_simulation", lambda: True)
    with pytest.raises(faults.InjectedFault):
        faults.fault_mod(_train_msg("raise"), None, _next)
    nan = faults.fault_mod(_train_msg("nan"), None, _next)
    assert np.isnan(nan.content[K.ARRAYS]["w"].numpy()).all()
    big = faults.fault_mod(_train_msg("oversize"), None, _next)
    assert big.content[K.ARRAYS]["w"].numpy().shape == (12,)
    slept = []
    monkeypatch.setattr(faults.time, "sleep", slept.append)
    late = faults.fault_mod(_train_msg("timeout", 4.5), None, _next)
    assert slept == [4.5] and late.content[K.ARRAYS]["w"].numpy().shape == (2, 3)


def test_deployed_client_ignores_the_instruction(monkeypatch, caplog):
    monkeypatch.setattr(faults, "client_in_simulation", lambda: False)
    with caplog.at_level(logging.WARNING):
        reply = faults.fault_mod(_train_msg("raise"), None, _next)
    assert reply.content[K.ARRAYS]["w"].numpy().shape == (2, 3)
    assert "ignoring injected fault 'raise'" in caplog.text


def test_config_checks():
    with pytest.raises(ConfigError, match="faults.kind"):
        RunSettings.from_config({"faults.kind": "explode"})
    with pytest.raises(ConfigError, match="round-timeout"):
        RunSettings.from_config({"faults.clients": 1, "faults.kind": "timeout"})
    RunSettings.from_config(
        {"faults.clients": 1, "faults.kind": "timeout", "round-timeout": 5}
    )


def test_serverapp_refuses_fault_injection_outside_simulation():
    from flwr.app import Context

    from server.server_app import build_server_app
    from tests.integration.test_privacy_noise import FakeGrid as DeployedGrid

    app = build_server_app({"faults.clients": 1})
    context = Context(
        run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}
    )
    with pytest.raises(ConfigError, match="faults.clients=1: fault injection is for"):
        app._main(DeployedGrid({}), context)  # a deployment's grid


class _MarkCountingGrid(InProcessGrid):
    """The in-process nodes, counting the train messages that carry a fault."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.marked: list[int] = []

    def push_messages(self, messages):
        messages = list(messages)
        self.marked += [
            m.metadata.dst_node_id
            for m in messages
            if K.CONFIG in m.content and K.FAULT in m.content[K.CONFIG]
        ]
        return super().push_messages(messages)


@pytest.mark.parametrize("count", [0, 1])
def test_the_experiment_installs_the_fault_grid_only_when_asked(
    count, tmp_path, monkeypatch
):
    # the real loop and ClientApp; the client acts a fault out in simulation only
    monkeypatch.setattr(faults, "client_in_simulation", lambda: True)
    config = {
        "rounds": 1,
        "eval-every": 1,
        "local-epochs": 1,
        "train-size": 200,
        "code-length": 16,
        "model": "mlp",
        "map-top-k": 50,
        "precision-k": "10",
        "faults.clients": count,
        "faults.kind": "nan",
        "results-dir": str(tmp_path),
    }
    grid = _MarkCountingGrid(config, 3)
    results = run_experiment(grid, RunSettings.from_config(config))
    rows = [json.loads(line) for line in results.path("rounds.jsonl").open()]
    assert len(grid.marked) == count  # one train round
    assert len(rows[1]["clients"]) == 3 - count  # the NaN reply is dropped

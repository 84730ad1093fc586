"""A malicious server sends different models to the contributors of one DPHE sum.

The zero-model attack (issue 35, finding 1): the victim gets the real global model,
the other contributors an all-zero model, so their updates are exactly 0 (their
tags, MACs and ranges all pass) and the decrypted sum is the victim's update. Every
client binds a digest of the arrays it received into its tags and touch MAC; the
keyholder decrypts only when every contributor attests the same model. Real client
path (``finish_train_reply``), the FedAvg strategy with its DPHE component and an
in-process keyholder; 512-bit test keys.
"""

from __future__ import annotations

import numpy as np
import pytest

from crypto import generate_keys
from tests.integration.test_dphe_strategy import (
    NODES,
    SHAPES,
    client_reply,
    configure,
    model,
    record,
    settings_for,
    strategy_for,
)

pytestmark = pytest.mark.usefixtures("task_identity")


@pytest.fixture(scope="module")
def key_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("binding") / "keys"
    generate_keys(out, num_clients=5, key_bits=512, allow_test_keys=True)
    return out


def _round(settings, globals_by_node, locals_by_node):
    """One round where node ``k`` got ``globals_by_node[k]`` and trained to
    ``locals_by_node[k]``; returns the strategy and what aggregate_train gives."""
    s = strategy_for(settings)
    real = next(iter(globals_by_node.values()))
    configure(s, real)  # the config (session, round) every client gets
    replies = [
        client_reply(settings, node, globals_by_node[node], locals_by_node[node], 1)
        for node in globals_by_node
    ]
    return s, s.aggregate_train(1, replies)


def test_model_inconsistency_zero_model_attack_is_refused(key_dir):
    settings = settings_for(key_dir, **{"dphe.weighting": "uniform"})
    rng = np.random.default_rng(35)
    real = model(rng)
    victim_local = {k: v + model(rng, scale=0.05)[k] for k, v in real.items()}
    zeros = {k: np.zeros(s, dtype=np.float32) for k, s in SHAPES.items()}
    victim, *others = list(NODES)[:3]
    # the attack: zero models to the others, whose training leaves them at 0
    globals_ = {victim: record(real), **{n: record(zeros) for n in others}}
    locals_ = {victim: victim_local, **{n: zeros for n in others}}
    _, (arrays, metrics) = _round(settings, globals_, locals_)
    if arrays is not None:  # what the attack got on the old main
        leaked = {k: arrays[k].numpy() - real[k] for k in SHAPES}
        victim_update = {k: victim_local[k] - real[k] for k in SHAPES}
        differing = sum(
            int(np.sum(np.abs(3 * leaked[k] - victim_update[k]) > 1e-5)) for k in SHAPES
        )
        pytest.fail(
            "the keyholder decrypted a sum of contributors that got different "
            f"models: 3 x the average is the victim's update ({differing} of "
            f"{sum(v.size for v in real.values())} values differ)"
        )
    assert metrics is None


def test_model_inconsistency_control_one_model_for_all_is_decrypted(key_dir):
    """The honest round (everyone got the same model) still decrypts."""
    settings = settings_for(key_dir, **{"dphe.weighting": "uniform"})
    rng = np.random.default_rng(36)
    real = model(rng)
    nodes = list(NODES)[:3]
    locals_ = {n: {k: v + model(rng, 0.05)[k] for k, v in real.items()} for n in nodes}
    s, (arrays, _) = _round(settings, {n: record(real) for n in nodes}, locals_)
    assert arrays is not None
    expected = {k: np.mean([locals_[n][k] for n in nodes], axis=0) for k in SHAPES}
    for k in SHAPES:
        np.testing.assert_allclose(arrays[k].numpy(), expected[k], atol=1e-6)
    assert s.secure_aggregation.history[1]["contributors"] == 3


def test_model_inconsistency_one_client_attesting_another_model_is_dropped(
    key_dir, monkeypatch, caplog
):
    """A client that lies about its model is named and left out; it blocks nothing."""
    import clients.dphe_updates as transport

    settings = settings_for(key_dir, **{"dphe.weighting": "uniform"})
    rng = np.random.default_rng(37)
    real = model(rng)
    nodes = list(NODES)[:4]
    liar = nodes[1]
    locals_ = {n: {k: v + model(rng, 0.05)[k] for k, v in real.items()} for n in nodes}
    s = strategy_for(settings)
    configure(s, record(real))
    replies = []
    for node in nodes:
        with monkeypatch.context() as m:
            if node == liar:
                m.setattr(transport, "model_digest", lambda arrays: bytes(32))
            replies.append(client_reply(settings, node, record(real), locals_[node], 1))
    arrays, _ = s.aggregate_train(1, replies)
    assert arrays is not None
    expected = {
        k: np.mean([locals_[n][k] for n in nodes if n != liar], axis=0) for k in SHAPES
    }
    for k in SHAPES:
        np.testing.assert_allclose(arrays[k].numpy(), expected[k], atol=1e-6)
    assert f"partition {NODES[liar]}" in caplog.text


def test_model_inconsistency_victim_is_left_out_of_a_larger_zero_model_group(key_dir):
    """Victim + 3 zero-model clients: the 3 are summed (0), the victim left out."""
    settings = settings_for(key_dir, **{"dphe.weighting": "uniform"})
    rng = np.random.default_rng(38)
    real = model(rng)
    victim_local = {k: v + model(rng, scale=0.05)[k] for k, v in real.items()}
    zeros = {k: np.zeros(s, dtype=np.float32) for k, s in SHAPES.items()}
    victim, *others = list(NODES)[:4]
    globals_ = {victim: record(real), **{n: record(zeros) for n in others}}
    locals_ = {victim: victim_local, **{n: zeros for n in others}}
    s, (arrays, _) = _round(settings, globals_, locals_)
    assert arrays is not None and s.secure_aggregation.history[1]["contributors"] == 3
    for k in SHAPES:  # nothing of the victim's update: the zero group's average is 0
        np.testing.assert_array_equal(arrays[k].numpy(), real[k])

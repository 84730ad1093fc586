"""Malicious clients under DPHE: weights above max-weight, unquantized values, bad tags.

Issue 35: a client that skips quantization encoded up to S * B per coordinate (the
average moved to about 30 with clip 1.0), a weight of 12,191 above max-weight 4,096
was accepted, and one client's wrong tag made every round refused with no culprit
named. Each test plays the malicious client through the real client path
(``finish_train_reply``, with the client's own checks bypassed by monkeypatching, as
a modified client would) against the FedAvg strategy with its DPHE component and
an in-process keyholder; 512-bit test keys.
"""

from __future__ import annotations

import numpy as np
import pytest

import clients.dphe_updates as transport
import crypto.dphe as dphe
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

HONEST_WEIGHT = 180
EXAMPLES = {"dphe.weighting": "num-examples", "dphe.max-weight": 4096}


@pytest.fixture(scope="module")
def key_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("malicious") / "keys"
    generate_keys(out, num_clients=5, key_bits=512, allow_test_keys=True)
    return out


def _round(settings, monkeypatch, malicious, nodes, weights, patch):
    """One round; ``patch(monkeypatch)`` is active while the malicious node encrypts."""
    s = strategy_for(settings)
    rng = np.random.default_rng(7)
    zeros = record({k: np.zeros(v, np.float32) for k, v in SHAPES.items()})
    configure(s, zeros)
    locals_ = {n: model(rng, scale=0.01) for n in nodes}
    replies = []
    for node, weight in zip(nodes, weights, strict=True):
        with monkeypatch.context() as m:
            if node == malicious:
                patch(m)
            replies.append(client_reply(settings, node, zeros, locals_[node], weight))
    arrays, _ = s.aggregate_train(1, replies)
    return s, arrays, locals_


def test_malicious_client_weight_above_max_weight_is_named_and_dropped(
    key_dir, monkeypatch, caplog
):
    settings = settings_for(key_dir, **EXAMPLES)
    nodes = list(NODES)[:4]
    malicious = nodes[0]

    def skip_weight_checks(m):  # a modified client: no check of its own weight
        def quantize(values, *, weight, params):
            scaled = np.clip(values, -params.clip, params.clip) * 2.0**params.scale_bits
            return np.append(np.rint(scaled * weight), weight).astype(np.int64)

        m.setattr(transport, "update_weight", lambda _settings, n: int(n))
        m.setattr(dphe, "quantize", quantize)

    weights = [12_191] + [HONEST_WEIGHT] * 3
    s, arrays, locals_ = _round(
        settings, monkeypatch, malicious, nodes, weights, skip_weight_checks
    )
    assert arrays is not None, "one client's weight blocked the round"
    history = s.secure_aggregation.history[1]
    # old main: total weight 12,191 + 3 x 180 was accepted
    assert history["total-weight"] == 3 * HONEST_WEIGHT, history
    assert history["contributors"] == 3
    expected = {k: np.mean([locals_[n][k] for n in nodes[1:]], axis=0) for k in SHAPES}
    for k in SHAPES:
        np.testing.assert_allclose(arrays[k].numpy(), expected[k], atol=1e-6)
    assert f"partition {NODES[malicious]}" in caplog.text


def test_malicious_client_skipping_quantization_moves_the_average_by_at_most_clip(
    key_dir, monkeypatch
):
    settings = settings_for(key_dir, **EXAMPLES)
    nodes = list(NODES)[:5]
    summands = len(nodes)
    real_quantize = dphe.quantize

    def unquantized(m):  # (S - 1) * B on every coordinate, weight 1
        def quantize(values, *, weight, params):
            q = real_quantize(values, weight=1, params=params)
            q[:-1] = (summands - 1) * params.bound
            return q

        m.setattr(dphe, "quantize", quantize)

    weights = [1] + [HONEST_WEIGHT] * (summands - 1)
    _, arrays, locals_ = _round(
        settings, monkeypatch, nodes[0], nodes, weights, unquantized
    )
    assert arrays is not None
    clip = settings.dphe.clip
    shift = max(float(np.max(np.abs(arrays[k].numpy()))) for k in SHAPES)
    # old main: about (S - 1) * max_weight / W_total * clip = 22.7; now the keyholder
    # keeps every coordinate sum within W_total * clip: one client moves the
    # average by at most the clip range
    assert shift <= 2 * clip + 1e-6, f"the average moved to {shift:.2f}"
    print(f"one unquantized client moved the average by {shift:.3f}")


@pytest.mark.parametrize("what", ["tag", "mac"])
def test_malicious_client_with_a_wrong_tag_is_named_and_dropped(
    key_dir, monkeypatch, caplog, what
):
    settings = settings_for(key_dir, **{"dphe.weighting": "uniform"})
    nodes = list(NODES)[:4]
    malicious = nodes[2]
    real_tags = dphe.block_tags

    def wrong_tags(m):
        if what == "tag":
            # tags of other blocks: wrong by about 2**63 in every block
            m.setattr(dphe, "block_tags", lambda *a, **k: real_tags(*a, **k)[::-1])
        else:
            m.setattr(dphe, "touch_mac", lambda *a, **k: bytes(32))

    s, arrays, locals_ = _round(
        settings, monkeypatch, malicious, nodes, [1, 1, 1, 1], wrong_tags
    )
    assert arrays is not None, "one client's wrong tag blocked the round"
    expected = {
        k: np.mean([locals_[n][k] for n in nodes if n != malicious], axis=0)
        for k in SHAPES
    }
    for k in SHAPES:
        np.testing.assert_allclose(arrays[k].numpy(), expected[k], atol=1e-6)
    assert s.secure_aggregation.history[1]["contributors"] == 3
    assert f"partition {NODES[malicious]}" in caplog.text

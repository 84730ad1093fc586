"""What a passive or malicious aggregator could learn under DPHE (findings 5, 7, 10).

phi is fresh per round and stream, padding hides the touched-block count, the
secret key never loads into a deployed ServerApp, and no client's loss (nor its
number of examples) travels in clear.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import MetricRecord, RecordDict

from clients.train_reply import finish_train_reply
from crypto import AggregationContext, encrypt_update, generate_keys, load_client_bundle
from settings import keys as K
from settings.run_settings import ConfigError, RunSettings
from strategies.dphe.server_setup import build_secure_aggregation
from strategies.dphe.setup import dphe_params, load_server_bundles
from tests.integration.test_dphe_strategy import (
    RUN_ID,
    SHAPES,
    configure,
    model,
    record,
    strategy_for,
)
from tests.messages import reply_from

pytestmark = pytest.mark.usefixtures("task_identity")


@pytest.fixture(scope="module")
def key_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("leaks") / "keys"
    generate_keys(out, num_clients=5, key_bits=512, allow_test_keys=True)
    return out


def settings_for(key_dir, **over):
    return RunSettings.from_config(
        {
            "secure-aggregation": "dphe",
            "min-train-nodes": 3,
            "dphe.key-dir": str(key_dir),
            "dphe.weighting": "num-examples",
            **over,
        }
    )


def test_phi_differs_across_rounds_streams_and_sessions(key_dir):
    client = load_client_bundle(key_dir / "client-0.json")
    session = bytes(range(16))
    phis = {
        (s, stream, r): client.phi(1000, AggregationContext(s, stream, r).phi_context)
        for s in (session, bytes(16))
        for stream in ("model", "prototypes")
        for r in (1, 2)
    }
    values = [p.tobytes() for p in phis.values()]
    assert len(set(values)) == len(values)  # every (session, stream, round) differs
    assert not np.array_equal(phis[(session, "model", 1)], client.phi(1000))


def test_padding_is_on_by_default_and_hides_sparsity(key_dir):
    settings = settings_for(key_dir, **{"dphe.packing": 1})
    assert settings.dphe.pad and settings.dphe.capacity == 0
    params = dphe_params(settings.dphe_run, dimension=99, key_bits=512)
    assert params.pad and params.num_blocks == 100 and params.capacity == 25
    client = load_client_bundle(key_dir / "client-0.json")
    context = AggregationContext(bytes(16), "model", 1)
    rng = np.random.default_rng(0)
    sent = []
    for nonzero in (3, 10, 20):  # very different sparsity, same quarter
        update = np.zeros(99)
        update[rng.choice(99, nonzero, replace=False)] = 0.1
        encrypted = encrypt_update(
            update, weight=1, bundle=client, params=params, context=context, rng=rng
        )
        sent.append(encrypted.num_blocks)
    assert sent == [25, 25, 25]


def test_keyholder_json_is_refused_outside_simulation(key_dir):
    settings = settings_for(key_dir)
    assert (key_dir / "keyholder.json").is_file()
    with pytest.raises(ConfigError, match="dphe.keyholder-url"):
        load_server_bundles(settings.dphe, simulation=False)
    with pytest.raises(ConfigError, match="dphe.keyholder-url"):
        build_secure_aggregation(
            settings.dphe_run,
            dimension=25,
            partition_ids=[0, 1, 2],
            simulation=False,
            run_id=RUN_ID,
        )
    _, bundle = load_server_bundles(settings.dphe, simulation=True)
    assert bundle is not None  # the in-process keyholder: simulation only


def test_loss_and_num_examples_do_not_travel_in_clear(key_dir):
    settings = settings_for(key_dir, **{"dphe.scale-bits": 24})
    strategy = strategy_for(settings)
    zeros = {k: np.zeros(v, dtype=np.float32) for k, v in SHAPES.items()}
    global_arrays = record(zeros)
    config = configure(strategy, global_arrays)[0].content[K.CONFIG]
    rng = np.random.default_rng(3)
    losses = {100: 1.2345678, 101: 2.3456789, 102: 3.4567891}
    examples = {100: 7, 101: 11, 102: 13}
    replies = []
    for node, loss in losses.items():
        content = RecordDict(
            {
                K.ARRAYS: record(model(rng)),
                K.METRICS: MetricRecord(
                    {K.NUM_EXAMPLES: examples[node], K.TRAIN_LOSS: loss}
                ),
            }
        )
        finish_train_reply(
            content,
            global_arrays=global_arrays,
            settings=settings,
            partition_id=node - 100,
            rng=rng,
            train_config=config,
            run_id=RUN_ID,
        )
        # what the server receives in clear: an empty MetricRecord
        assert len(content[K.METRICS]) == 0
        assert set(content) == {K.DPHE, K.METRICS}
        replies.append(reply_from(node, content))
    _, metrics = strategy.aggregate_train(1, replies)
    weights = np.array(list(examples.values()))
    expected = float(np.dot(weights, list(losses.values())) / weights.sum())
    assert metrics[K.TRAIN_LOSS] == pytest.approx(expected, abs=1e-4)
    assert set(metrics) == {K.TRAIN_LOSS}


def test_a_client_without_the_session_refuses_to_encrypt(key_dir):
    settings = settings_for(key_dir)
    zeros = record({k: np.zeros(v, dtype=np.float32) for k, v in SHAPES.items()})
    content = RecordDict(
        {
            K.ARRAYS: zeros,
            K.METRICS: MetricRecord({K.NUM_EXAMPLES: 3, K.TRAIN_LOSS: 1.0}),
        }
    )
    with pytest.raises(ValueError, match="dphe-session"):
        finish_train_reply(
            content,
            global_arrays=zeros,
            settings=settings,
            partition_id=0,
            rng=np.random.default_rng(0),
        )

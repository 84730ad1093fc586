"""DPHE inside the FedAvg strategy, with hand-built Messages (no SuperLink).

Replies are produced by the real client path (``finish_train_reply``) with small
test keys; the server side is the strategy with its SecureAggregation component
and an in-process keyholder.
"""

import logging
import pickle

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

import clients.dphe_updates as dphe_updates
from clients.train_reply import finish_train_reply
from crypto import generate_keys, load_client_bundle
from crypto.binding import session_proof
from settings import keys as K
from settings.run_settings import ConfigError, RunSettings
from strategies.dphe.server_setup import build_secure_aggregation
from strategies.fedavg.strategy import HashingFedAvg
from tests.integration.test_strategies import FakeGrid
from tests.messages import reply_from

pytestmark = pytest.mark.usefixtures("task_identity")

SHAPES = {"w": (4, 5), "b": (5,)}
NODES = {100 + pid: pid for pid in range(5)}  # node id -> partition id
DIM = 25
SCALE_BITS = 24
RUN_ID = 4242  # the Flower run the keyholder session is bound to


@pytest.fixture(scope="module")
def key_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("dphe") / "keys"
    generate_keys(out, num_clients=5, key_bits=512, allow_test_keys=True)
    return out


def settings_for(key_dir, **over):
    return RunSettings.from_config(
        {
            "secure-aggregation": "dphe",
            "min-train-nodes": 3,
            "dphe.key-dir": str(key_dir),
            "dphe.weighting": "num-examples",
            "dphe.scale-bits": SCALE_BITS,
            **over,
        }
    )


def model(rng, scale=0.1):
    return {
        k: (rng.normal(size=s) * scale).astype(np.float32) for k, s in SHAPES.items()
    }


def record(arrays):
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def strategy_for(settings):
    s = HashingFedAvg(
        fraction_evaluate=0.0,
        min_train_nodes=1,
        min_available_nodes=1,
        sampling_seed=1,
    )
    s.set_node_partitions(NODES)
    s.set_secure_aggregation(
        build_secure_aggregation(
            settings.dphe_run,
            dimension=DIM,
            partition_ids=NODES.values(),
            simulation=True,
            run_id=RUN_ID,
        )
    )
    return s


_SENT = {}


def configure(s, global_arrays, server_round=1):
    """The strategy's train messages; their config is what every client gets."""
    messages = list(
        s.configure_train(
            server_round, global_arrays, ConfigRecord(), FakeGrid(list(NODES))
        )
    )
    _SENT["config"] = messages[0].content[K.CONFIG]
    assert K.DPHE_SESSION in _SENT["config"]
    return messages


def client_reply(settings, node, global_arrays, local, n, config=None):
    content = RecordDict(
        {
            K.ARRAYS: record(local),
            K.METRICS: MetricRecord({K.NUM_EXAMPLES: n, K.TRAIN_LOSS: float(n)}),
        }
    )
    pid = NODES[node]
    finish_train_reply(
        content,
        global_arrays=global_arrays,
        settings=settings,
        partition_id=pid,
        rng=np.random.default_rng(pid),
        train_config=_SENT["config"] if config is None else config,
        run_id=RUN_ID,
    )
    return reply_from(node, content)


def plain_average(global_arrays, locals_, weights):
    total = sum(weights)
    return {
        k: sum(
            w * loc[k].astype(np.float64)
            for loc, w in zip(locals_, weights, strict=False)
        )
        / total
        for k in SHAPES
    }


def run_round(settings, locals_, weights, nodes, *, strategy=None, extra=()):
    s = strategy or strategy_for(settings)
    global_arrays = record(
        {k: np.zeros(v, dtype=np.float32) for k, v in SHAPES.items()}
    )
    configure(s, global_arrays)
    replies = [
        client_reply(settings, node, global_arrays, loc, w)
        for node, loc, w in zip(nodes, locals_, weights, strict=False)
    ]
    return s, s.aggregate_train(1, [*replies, *extra])


@pytest.mark.parametrize("weighting", ["num-examples", "uniform"])
@pytest.mark.parametrize("packing", [1, 0])
def test_secure_average_equals_plaintext_average(key_dir, weighting, packing):
    settings = settings_for(
        key_dir, **{"dphe.weighting": weighting, "dphe.packing": packing}
    )
    rng = np.random.default_rng(0)
    locals_ = [model(rng) for _ in range(4)]
    weights = [10, 30, 7, 21]
    _, (agg, metrics) = run_round(settings, locals_, weights, list(NODES)[:4])
    used = weights if weighting == "num-examples" else [1] * 4
    expected = plain_average(None, locals_, used)
    # each client's coordinate is off by at most half a unit of 2^-24 (weighted),
    # then the float32 cast of the new global model
    bound = 4 * 0.5 * 2.0**-SCALE_BITS * max(used) / sum(used) + 1e-7
    for k in SHAPES:
        np.testing.assert_allclose(agg[k].numpy(), expected[k], rtol=0, atol=bound)
    # weights and losses are secret: the loss (= n here) is decrypted as the
    # weighted average only, no num-examples
    losses = weights
    mean_loss = sum(w * x for w, x in zip(used, losses, strict=True)) / sum(used)
    assert metrics[K.TRAIN_LOSS] == pytest.approx(mean_loss, abs=1e-4)
    assert set(metrics) == {K.TRAIN_LOSS}


def test_sparse_updates_and_padded_shards(key_dir):
    # 90% sparse: the average equals the plaintext average of the sparse updates
    settings = settings_for(
        key_dir,
        **{
            "updates.sparsity": 0.6,
            "dphe.packing": 1,
            "dphe.pad": False,
            "dphe.sparsity-layout": "block",  # each client its own top-k
        },
    )
    from crypto import DPHEParams

    # capacity must divide the number of blocks when padding (27 blocks at packing
    # 1: 25 values, the loss and the weight)
    assert DPHEParams(dimension=DIM + 1, packing=1).num_blocks == 27
    padded = settings_for(
        key_dir,
        **{
            "updates.sparsity": 0.6,
            "dphe.packing": 1,
            "dphe.capacity": 9,
            "dphe.pad": True,
            "dphe.sparsity-layout": "block",
        },
    )
    rng = np.random.default_rng(1)
    locals_ = [model(rng) for _ in range(3)]
    _, (agg, _) = run_round(settings, locals_, [5, 5, 5], list(NODES)[:3])
    _, (agg_pad, _) = run_round(padded, locals_, [5, 5, 5], list(NODES)[:3])
    for k in SHAPES:
        np.testing.assert_allclose(agg[k].numpy(), agg_pad[k].numpy(), atol=1e-7)
    # exactly 10 of 25 values per client survive top-k: the average has <= 30 non-zeros
    nonzero = sum(np.count_nonzero(agg[k].numpy()) for k in SHAPES)
    assert 10 <= nonzero <= 30


def test_a_dropped_client_is_simply_not_in_the_average(key_dir):
    settings = settings_for(key_dir)
    rng = np.random.default_rng(2)
    locals_ = [model(rng) for _ in range(3)]
    # 5 clients were asked, 3 answered: the average is over the survivors
    s, (agg, _) = run_round(settings, locals_, [4, 8, 12], [101, 103, 104])
    expected = plain_average(None, locals_, [4, 8, 12])
    for k in SHAPES:
        np.testing.assert_allclose(agg[k].numpy(), expected[k], atol=1e-6)
    assert s.secure_aggregation.history[1]["contributors"] == 3
    assert s.secure_aggregation.history[1]["total-weight"] == 24


def test_fewer_than_three_contributors_means_no_update(key_dir, caplog):
    settings = settings_for(key_dir)
    rng = np.random.default_rng(3)
    with caplog.at_level(logging.WARNING):
        _, (agg, metrics) = run_round(
            settings, [model(rng), model(rng)], [3, 3], [100, 101]
        )
    assert agg is None and metrics is None
    assert "fewer than 3" in caplog.text


def _corrupt(msg, name, fn):
    rec = msg.content[K.DPHE]
    arrays = {k: a.numpy() for k, a in rec.items()}
    arrays[name] = fn(arrays[name])
    msg.content[K.DPHE] = record(arrays)
    return msg


def test_bad_replies_are_dropped_naming_the_client_and_the_round_goes_on(
    key_dir, tmp_path, caplog
):
    settings = settings_for(key_dir)
    other_keys = tmp_path / "other"
    generate_keys(other_keys, num_clients=5, key_bits=512, allow_test_keys=True)
    rng = np.random.default_rng(4)
    global_arrays = record(
        {k: np.zeros(v, dtype=np.float32) for k, v in SHAPES.items()}
    )
    good = [model(rng) for _ in range(3)]
    s = strategy_for(settings)
    configure(s, global_arrays)
    replies = [
        client_reply(settings, n, global_arrays, loc, 5)
        for n, loc in zip((100, 101, 102), good, strict=False)
    ]
    # partition 3: ciphertext bytes cut short; partition 4: another key pair
    bad_width = _corrupt(
        client_reply(settings, 103, global_arrays, model(rng), 5),
        "ciphertexts",
        lambda c: c[:, :-1],
    )
    # a client of another key set (its keyholder's proof for the same session)
    other_phi = load_client_bundle(other_keys / "client-4.json").phi_seed
    session = bytes.fromhex(_SENT["config"][K.DPHE_SESSION])
    other_config = ConfigRecord(
        {
            **dict(_SENT["config"]),
            K.DPHE_SESSION_PROOF: session_proof(other_phi, session, RUN_ID).hex(),
        }
    )
    wrong_key = client_reply(
        settings_for(other_keys), 104, global_arrays, model(rng), 5, other_config
    )
    with caplog.at_level(logging.WARNING):
        agg, _ = s.aggregate_train(1, [*replies, bad_width, wrong_key])
    assert "partition 3 (node 103)" in caplog.text
    assert "partition 4 (node 104)" in caplog.text
    assert "key" in caplog.text
    expected = plain_average(None, good, [5, 5, 5])
    for k in SHAPES:
        np.testing.assert_allclose(agg[k].numpy(), expected[k], atol=1e-6)
    assert s.kept_nodes == [100, 101, 102]


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda m: _corrupt(m, "block-ids", lambda b: b * 0), "more than once"),
        (lambda m: _corrupt(m, "block-ids", lambda b: b + 10_000), "outside [0, "),
        (lambda m: m.content.pop(K.DPHE) and m, "no 'dphe' record"),
        (
            lambda m: m.content.__setitem__(K.ARRAYS, record({"w": np.zeros(2)})) or m,
            "expected only",
        ),
    ],
)
def test_each_malformed_reply_is_refused_with_its_reason(
    key_dir, caplog, mutate, fragment
):
    settings = settings_for(key_dir)
    rng = np.random.default_rng(5)
    global_arrays = record(
        {k: np.zeros(v, dtype=np.float32) for k, v in SHAPES.items()}
    )
    s = strategy_for(settings)
    configure(s, global_arrays)
    replies = [
        client_reply(settings, n, global_arrays, model(rng), 5) for n in (100, 101, 102)
    ]
    bad = mutate(client_reply(settings, 103, global_arrays, model(rng), 5))
    with caplog.at_level(logging.WARNING):
        agg, _ = s.aggregate_train(1, [*replies, bad])
    assert agg is not None
    assert fragment in caplog.text
    assert "partition 3 (node 103)" in caplog.text


def test_the_aggregator_holds_no_secret_key_and_no_user_shared_permutation(key_dir):
    from crypto import load_keyholder_bundle

    settings = settings_for(key_dir)
    rng = np.random.default_rng(6)
    s, _ = run_round(
        settings, [model(rng) for _ in range(3)], [1, 2, 3], [100, 101, 102]
    )
    secure = s.secure_aggregation
    keyholder = load_keyholder_bundle(key_dir / "keyholder.json")
    # the strategy without its keyholder handle: what the aggregator itself holds
    secure.keyholder = None
    blob = pickle.dumps(s)
    for secret in (keyholder.p, keyholder.q):
        assert str(secret).encode() not in blob
        assert format(secret, "x").encode() not in blob
        assert secret.to_bytes((secret.bit_length() + 7) // 8, "big") not in blob
    assert keyholder.phi_seed not in blob
    assert keyholder.phi_seed.hex().encode() not in blob


def test_packing_that_does_not_fit_the_key_is_a_config_error(key_dir):
    settings = settings_for(key_dir, **{"dphe.packing": 500})
    with pytest.raises(ConfigError, match="dphe.packing=500"):
        build_secure_aggregation(
            settings.dphe_run,
            dimension=DIM,
            partition_ids=[0, 1, 2],
            simulation=True,
            run_id=RUN_ID,
        )


def test_partitions_without_a_permutation_are_a_config_error(key_dir):
    with pytest.raises(ConfigError, match=r"partitions \[7\]"):
        build_secure_aggregation(
            settings_for(key_dir).dphe_run,
            dimension=DIM,
            partition_ids=[0, 1, 7],
            simulation=True,
            run_id=RUN_ID,
        )


def test_prototype_sum_layout_reproduces_the_plain_mean_aggregation():
    from hashing.fedhap.prototypes import (
        aggregate_prototypes,
        prototype_sum_vector,
        prototypes_from_sums,
    )
    from hashing.prototypes import ClassPrototypes

    rng = np.random.default_rng(7)
    uploads = [
        ClassPrototypes(
            classes=np.array(c, dtype=np.int64),
            vectors=rng.uniform(-1, 1, size=(len(c), 4)).astype(np.float32),
            counts=np.arange(1, len(c) + 1, dtype=np.int64),
        )
        for c in ([0, 2], [2, 3], [0, 3, 4])
    ]
    plain = aggregate_prototypes(uploads, num_classes=6, bits=4, weighting="mean")
    total = sum(prototype_sum_vector(u, num_classes=6, bits=4) for u in uploads)
    secure = prototypes_from_sums(total, num_classes=6, bits=4)
    assert secure.classes.tolist() == plain.classes.tolist() == [0, 2, 3, 4]
    np.testing.assert_allclose(secure.relaxed, plain.relaxed, atol=1e-6)
    np.testing.assert_array_equal(secure.codes, plain.codes)


def secure_fedhap(settings, *, bits, classes, nodes=NODES, dim=DIM):
    """FedHAP with DPHE model and prototype sums (in-process keyholder), set up."""
    from strategies.dphe.server_setup import build_secure_components
    from strategies.fedhap.strategy import HashingFedHAP

    s = HashingFedHAP(
        bits=bits,
        fraction_evaluate=0.0,
        min_train_nodes=1,
        min_available_nodes=1,
        sampling_seed=1,
    )
    s.set_node_partitions(nodes)
    s.set_label_space(classes)
    model_sum, proto_sum = build_secure_components(
        settings.dphe_run,
        dimension=dim,
        partition_ids=nodes.values(),
        num_classes=classes,
        simulation=True,
        run_id=RUN_ID,
    )
    s.set_secure_aggregation(model_sum)
    s.set_secure_prototypes(proto_sum)
    return s


def test_fedhap_with_encrypted_prototype_sums(key_dir, caplog):
    from hashing.prototypes import ClassPrototypes
    from settings.prototype_records import FEDHAP_UPLOAD, prototype_record

    settings = settings_for(
        key_dir, strategy="fedhap", **{"dphe.prototypes": True, "code-length": 8}
    )
    bits, classes = 8, 5
    s = secure_fedhap(settings, bits=bits, classes=classes)
    rng = np.random.default_rng(8)
    global_arrays = record(
        {k: np.zeros(v, dtype=np.float32) for k, v in SHAPES.items()}
    )
    configure(s, global_arrays)
    held = {100: [0, 1], 101: [1, 2], 102: [0, 2], 103: [3]}
    means = {n: rng.uniform(-1, 1, size=(len(c), bits)) for n, c in held.items()}
    replies = []
    for node, cls in held.items():
        content = RecordDict(
            {
                K.ARRAYS: record(model(rng)),
                K.METRICS: MetricRecord({K.NUM_EXAMPLES: 5, K.TRAIN_LOSS: 0.0}),
                K.PROTOTYPES: prototype_record(
                    ClassPrototypes(
                        classes=np.array(cls, dtype=np.int64),
                        vectors=means[node].astype(np.float32),
                        counts=np.ones(len(cls), dtype=np.int64),
                    ),
                    FEDHAP_UPLOAD,
                ),
            }
        )
        finish_train_reply(
            content,
            global_arrays=global_arrays,
            settings=settings,
            partition_id=NODES[node],
            rng=np.random.default_rng(node),
            num_classes=classes,
            train_config=_SENT["config"],
            run_id=RUN_ID,
        )
        assert K.PROTOTYPES not in content and K.DPHE_PROTOS in content
        replies.append(reply_from(node, content))
    # partition 3's encrypted prototypes are corrupted: its whole reply is dropped
    replies[3] = _corrupt(replies[3], "block-ids", lambda b: b + 10_000)
    replies[3].content[K.DPHE_PROTOS] = replies[3].content.pop(K.DPHE)
    dphe_updates._ENCRYPTED.clear()  # a client that encrypts round 1 twice
    replies[3].content[K.DPHE] = client_reply(
        settings, 103, global_arrays, model(rng), 5
    ).content[K.DPHE]
    with caplog.at_level(logging.WARNING):
        agg, _ = s.aggregate_train(1, replies)
    assert agg is not None and s.kept_nodes == [100, 101, 102]
    assert "encrypted prototypes refused" in caplog.text
    got = s.global_prototypes
    assert got.classes.tolist() == [0, 1, 2]  # class 3 only held by the dropped one
    expected = {
        0: (means[100][0] + means[102][0]) / 2,
        1: (means[100][1] + means[101][0]) / 2,
        2: (means[101][1] + means[102][1]) / 2,
    }
    for row, c in enumerate(got.classes.tolist()):
        np.testing.assert_allclose(got.relaxed[row], expected[c], atol=1e-5)
    assert s.prototype_history[1]["clients"] == 3

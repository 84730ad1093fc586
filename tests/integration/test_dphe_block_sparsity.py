"""DPHE's block layouts (``"shared"``, the default, and ``"block"``) and ``"djn"``
obfuscators through the strategy.

The real client path (``finish_train_reply``) and the strategy with its in-process
keyholder (every check on), small test keys: each client sends one padded shard of
exactly the kept blocks, and the decrypted average equals the plaintext average of
the block-sparsified updates, the loss included.
"""

import logging

import numpy as np
import pytest
from flwr.app import MetricRecord, RecordDict
from gmpy2 import invert, mpz

from clients.dphe_updates import round_ciphertexts
from clients.train_reply import finish_train_reply
from crypto import (
    STREAM_MODEL,
    AggregationContext,
    FullObfuscators,
    coordinate_blocks,
    kept_blocks,
    load_client_bundle,
)
from crypto.obfuscator_store import ObfuscatorStore
from hashing.update_sparsity import block_top_k_sparsify, keep_blocks, shared_blocks
from settings import keys as K
from strategies.dphe.setup import dphe_params, read_dphe_record, with_loss
from tests.integration.test_dphe_strategy import (  # noqa: F401  (key_dir is a fixture)
    _SENT,
    NODES,
    RUN_ID,
    SCALE_BITS,
    SHAPES,
    client_reply,
    configure,
    key_dir,
    model,
    record,
    settings_for,
    strategy_for,
)

pytestmark = pytest.mark.usefixtures("task_identity")


def _configured(settings):
    """The strategy for ``settings`` after round 1's configure; the global arrays."""
    strategy = strategy_for(settings)
    global_arrays = record(
        {k: np.zeros(v, dtype=np.float32) for k, v in SHAPES.items()}
    )
    configure(strategy, global_arrays)
    return strategy, global_arrays


def test_block_sparse_djn_round_equals_plaintext_of_the_kept_blocks(key_dir):  # noqa: F811
    settings = settings_for(
        key_dir,
        **{
            "updates.sparsity": 0.6,
            "dphe.packing": 2,
            "dphe.sparsity-layout": "block",
            "dphe.obfuscators": "djn",
            "dphe.weighting": "uniform",
        },
    )
    # 25 values + loss
    params = dphe_params(settings.dphe_run, dimension=26, key_bits=512)
    keep = kept_blocks(params.num_blocks, 0.6)
    assert params.single_shard and params.capacity == keep
    strategy, global_arrays = _configured(settings)
    session = bytes.fromhex(_SENT["config"][K.DPHE_SESSION])
    context = AggregationContext(session, STREAM_MODEL, 1)
    rng = np.random.default_rng(4)
    nodes = list(NODES)[:3]
    replies, expected = [], []
    for node in nodes:
        local = model(rng)
        reply = client_reply(settings, node, global_arrays, local, 2)
        update = read_dphe_record(reply.content[K.DPHE], key_bits=512)
        assert update.shard_sizes == [keep]  # one shard, always the same size
        replies.append(reply)
        bundle = load_client_bundle(key_dir / f"client-{NODES[node]}.json")
        blocks = coordinate_blocks(bundle, params, context)
        flat = np.concatenate([local[k].astype(np.float64).ravel() for k in SHAPES])
        expected.append(
            block_top_k_sparsify(
                with_loss(flat, 2.0),
                sparsity=0.6,
                blocks=blocks,
                num_blocks=params.num_blocks,
                always=blocks[-2:],
            )
        )
    agg, metrics = strategy.aggregate_train(1, replies)
    mean = np.mean(expected, axis=0)
    got = np.concatenate([agg[k].numpy().astype(np.float64).ravel() for k in SHAPES])
    np.testing.assert_allclose(got, mean[:-1], atol=2 * 2.0**-SCALE_BITS + 1e-7)
    assert metrics[K.TRAIN_LOSS] == pytest.approx(2.0, abs=1e-4)  # never dropped


def test_shared_layout_every_client_sends_one_set_and_the_keyholder_decrypts_it(
    key_dir,  # noqa: F811
):
    # dphe.sparsity-layout = "shared": the clients' different updates keep the same
    # blocks (the loss's and weight's, then the lowest phi-space ids), so the
    # keyholder decrypts exactly k blocks, not the union of three top-k sets, and
    # the average is the plaintext mean of the updates on those blocks
    settings = settings_for(
        key_dir,
        **{
            "updates.sparsity": 0.6,
            "dphe.packing": 2,
            "dphe.sparsity-layout": "shared",
            "dphe.weighting": "uniform",
        },
    )
    params = dphe_params(settings.dphe_run, dimension=26, key_bits=512)
    keep = kept_blocks(params.num_blocks, 0.6)
    strategy, global_arrays = _configured(settings)
    session = bytes.fromhex(_SENT["config"][K.DPHE_SESSION])
    context = AggregationContext(session, STREAM_MODEL, 1)
    rng = np.random.default_rng(5)
    replies, expected, top_sets = [], [], []
    for node in list(NODES)[:3]:
        local = model(rng)
        reply = client_reply(settings, node, global_arrays, local, 2)
        assert read_dphe_record(reply.content[K.DPHE], key_bits=512).shard_sizes == [
            keep
        ]
        replies.append(reply)
        bundle = load_client_bundle(key_dir / f"client-{NODES[node]}.json")
        blocks = coordinate_blocks(bundle, params, context)
        flat = with_loss(
            np.concatenate([local[k].astype(np.float64).ravel() for k in SHAPES]), 2.0
        )
        kept = shared_blocks(params.num_blocks, 0.6, always=blocks[-2:])
        assert kept.size == keep
        expected.append(keep_blocks(flat, blocks=blocks, kept=kept))
        top = block_top_k_sparsify(
            flat, sparsity=0.6, blocks=blocks, num_blocks=params.num_blocks,
            always=blocks[-2:],
        )  # fmt: skip
        top_sets.append(frozenset(np.unique(blocks[:-1][top != 0]).tolist()))
    assert len(set(top_sets)) > 1  # the "block" layout would send different sets
    agg, metrics = strategy.aggregate_train(1, replies)
    assert strategy.secure_aggregation.history[1]["blocks"] == keep  # one set decrypted
    mean = np.mean(expected, axis=0)
    got = np.concatenate([agg[k].numpy().astype(np.float64).ravel() for k in SHAPES])
    np.testing.assert_allclose(got, mean[:-1], atol=2 * 2.0**-SCALE_BITS + 1e-7)
    assert metrics[K.TRAIN_LOSS] == pytest.approx(2.0, abs=1e-4)


class _Recording:
    """Full obfuscators, remembering every value drawn (to find them later)."""

    def __init__(self, n):
        self.source = FullObfuscators(n)
        self.n = self.source.n
        self.drawn = []

    def draw(self):
        self.drawn.append(self.source.draw())
        return self.drawn[-1]


def _blinded_by(c, values, n):
    # c = (1 + n*m) * r mod n^2: c / r is 1 mod n for the r that blinded it
    nsq = n * n
    return [r for r in values if (mpz(c) * invert(r, nsq) % nsq) % n == 1]


def _pooled_reply(keys, tmp_path, node, seed, make_source, stocked=None):
    """One client's round-1 reply, encrypted with its node's obfuscator pool.

    The pool is filled with ``stocked`` values (default: a round's worth) drawn from
    ``make_source(n)`` (``n``: the client's key). Returns the reply's content, the
    pool, the client's bundle, the source and the ciphertexts a round takes.
    """
    settings = settings_for(keys, **{"updates.sparsity": 0.6, "dphe.packing": 2})
    _, global_arrays = _configured(settings)
    pid = NODES[node]
    bundle = load_client_bundle(keys / f"client-{pid}.json")
    per_round = round_ciphertexts(settings, dimension=25, key_bits=512)
    assert (
        per_round == dphe_params(settings.dphe_run, dimension=26, key_bits=512).capacity
    )
    store = ObfuscatorStore(tmp_path / "pool", bundle.n)
    source = make_source(bundle.n)
    store.fill(per_round if stocked is None else stocked, source)
    rng = np.random.default_rng(seed)
    content = RecordDict(
        {
            K.ARRAYS: record(model(rng)),
            K.METRICS: MetricRecord({K.NUM_EXAMPLES: 3, K.TRAIN_LOSS: 0.5}),
        }
    )
    finish_train_reply(
        content,
        global_arrays=global_arrays,
        settings=settings,
        partition_id=pid,
        rng=rng,
        train_config=_SENT["config"],
        run_id=RUN_ID,
        pool=store,
    )
    return content, store, bundle, source, per_round


def test_the_node_pool_supplies_the_rounds_obfuscators_once(
    key_dir,  # noqa: F811
    tmp_path,
    caplog,
):
    with caplog.at_level(logging.INFO, logger="clients.dphe_updates"):
        content, store, bundle, source, per_round = _pooled_reply(
            key_dir, tmp_path, list(NODES)[0], 5, _Recording
        )
    assert len(store) == 0  # every pooled value taken off the disk
    assert "none drawn online" in caplog.text
    update = read_dphe_record(content[K.DPHE], key_bits=512)
    cts = [c for shard in update.shards for c in shard.ciphertexts]
    assert len(cts) == per_round
    used = [_blinded_by(c, source.drawn, bundle.n) for c in cts]
    # each ciphertext is blinded by its own pooled value, none by the same one
    assert all(len(u) == 1 for u in used)
    assert len({int(u[0]) for u in used}) == per_round


def test_a_short_pool_draws_the_rest_online_and_says_so(
    key_dir,  # noqa: F811
    tmp_path,
    caplog,
):
    with caplog.at_level(logging.INFO, logger="clients.dphe_updates"):
        _, store, _, _, per_round = _pooled_reply(
            key_dir, tmp_path, list(NODES)[1], 6, FullObfuscators, stocked=2
        )
    assert f"pool short: 2 precomputed, {per_round - 2} drawn online" in caplog.text
    assert len(store) == 0

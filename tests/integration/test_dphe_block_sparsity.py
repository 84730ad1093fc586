"""DPHE with ``dphe.block-sparsity`` and ``"djn"`` obfuscators through the strategy.

The real client path (``finish_train_reply``) and the strategy with its in-process
keyholder (every check on), small test keys: each client sends one padded shard of
exactly the kept blocks, and the decrypted average equals the plaintext average of
the block-sparsified updates, the loss included.
"""

import numpy as np
import pytest

from crypto import (
    STREAM_MODEL,
    AggregationContext,
    coordinate_blocks,
    kept_blocks,
    load_client_bundle,
)
from hashing.update_sparsity import block_top_k_sparsify
from settings import keys as K
from strategies.dphe.setup import dphe_params, read_dphe_record, with_loss
from tests.integration.test_dphe_strategy import (  # noqa: F401  (key_dir is a fixture)
    _SENT,
    NODES,
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


def test_block_sparse_djn_round_equals_plaintext_of_the_kept_blocks(key_dir):  # noqa: F811
    settings = settings_for(
        key_dir,
        **{
            "updates.sparsity": 0.6,
            "dphe.packing": 2,
            "dphe.block-sparsity": True,
            "dphe.obfuscators": "djn",
            "dphe.weighting": "uniform",
        },
    )
    params = dphe_params(settings, dimension=26, key_bits=512)  # 25 values + loss
    keep = kept_blocks(params.num_blocks, 0.6)
    assert params.single_shard and params.capacity == keep
    strategy = strategy_for(settings)
    zeros = {k: np.zeros(v, dtype=np.float32) for k, v in SHAPES.items()}
    global_arrays = record(zeros)
    configure(strategy, global_arrays)
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

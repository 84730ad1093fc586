"""Error feedback: what top-k drops stays on the node and is sent in later rounds."""

import numpy as np
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict

from clients.sparse_updates import RESIDUAL_RECORD, residual_of, sparsify_reply
from settings import keys as K
from settings.run_settings import RunSettings


def _reply(values):
    return RecordDict(
        {
            K.ARRAYS: ArrayRecord({"w": Array(np.asarray(values, dtype=np.float32))}),
            K.METRICS: MetricRecord({K.NUM_EXAMPLES: 4}),
        }
    )


def _sent(reply):
    return reply[K.ARRAYS]["w"].numpy().astype(np.float64)


ZERO = ArrayRecord({"w": Array(np.zeros(4, dtype=np.float32))})


def test_dropped_mass_is_carried_and_sent_next_round():
    settings = RunSettings.from_config(
        {"updates.sparsity": 0.75, "updates.error-feedback": "on"}
    )
    state = RecordDict()
    first = sparsify_reply(
        _reply([1.0, 0.5, 0.0, 0.0]),
        global_arrays=ZERO,
        settings=settings,
        node_state=state,
    )
    np.testing.assert_array_equal(_sent(first), [1.0, 0, 0, 0])
    np.testing.assert_array_equal(residual_of(state, 4), [0, 0.5, 0, 0])
    # next round the update is small on coordinate 1: the residual makes it win
    second = sparsify_reply(
        _reply([0.0, 0.25, 0.0, 0.0]),
        global_arrays=ZERO,
        settings=settings,
        node_state=state,
    )
    np.testing.assert_array_equal(_sent(second), [0, 0.75, 0, 0])
    np.testing.assert_array_equal(residual_of(state, 4), [0, 0, 0, 0])


def test_plaintext_auto_keeps_no_residual_and_matches_plain_top_k():
    settings = RunSettings.from_config({"updates.sparsity": 0.75})
    assert settings.updates.error_feedback == "auto"
    state = RecordDict()
    reply = sparsify_reply(
        _reply([1.0, 0.5, 0.0, 0.0]),
        global_arrays=ZERO,
        settings=settings,
        node_state=state,
    )
    np.testing.assert_array_equal(_sent(reply), [1.0, 0, 0, 0])
    assert RESIDUAL_RECORD not in state


def test_auto_is_on_under_dphe_and_off_in_plaintext():
    on = RunSettings.from_config({"updates.sparsity": 0.9})
    assert not on.updates.feeds_back(on.secure_aggregation)
    assert on.updates.feeds_back("dphe")


def test_block_layout_keeps_whole_blocks_and_the_residual_holds_the_rest():
    settings = RunSettings.from_config(
        {"updates.sparsity": 0.5, "updates.error-feedback": "on"}
    )
    state = RecordDict()
    # 4 values + the loss coordinate + the weight coordinate; 3 blocks
    ids = np.array([0, 1, 0, 1, 2, 2])
    reply = sparsify_reply(
        _reply([0.5, 0.25, 0.5, 0.0]),
        global_arrays=ZERO,
        settings=settings,
        blocks=(ids, 3),
        node_state=state,
    )
    # keep 3 - floor(1.5) = 2 blocks: block 2 (loss, weight) always, then block 0
    np.testing.assert_array_equal(_sent(reply), [0.5, 0, 0.5, 0])
    np.testing.assert_array_equal(residual_of(state, 4), [0, 0.25, 0, 0])

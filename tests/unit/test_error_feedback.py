"""Error feedback: what top-k drops stays on the node and is sent in later rounds."""

import numpy as np
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict

from clients.sparse_updates import RESIDUAL_RECORD, residual_of, sparsify_reply
from settings import keys as K
from settings.run_settings import RunSettings

ZERO = ArrayRecord({"w": Array(np.zeros(4, dtype=np.float32))})


def _settings(sparsity, feedback=None):
    config = {"updates.sparsity": sparsity}
    if feedback is not None:
        config["updates.error-feedback"] = feedback
    return RunSettings.from_config(config)


def _sent(settings, state, values, blocks=None):
    """What the node sends for the trained ``values`` (global model 0), as float64."""
    reply = RecordDict(
        {
            K.ARRAYS: ArrayRecord({"w": Array(np.asarray(values, dtype=np.float32))}),
            K.METRICS: MetricRecord({K.NUM_EXAMPLES: 4}),
        }
    )
    sparsify_reply(
        reply, global_arrays=ZERO, settings=settings, blocks=blocks, node_state=state
    )
    return reply[K.ARRAYS]["w"].numpy().astype(np.float64)


def test_dropped_mass_is_carried_and_sent_next_round():
    settings, state = _settings(0.75, "on"), RecordDict()
    first = _sent(settings, state, [1.0, 0.5, 0.0, 0.0])
    np.testing.assert_array_equal(first, [1.0, 0, 0, 0])
    np.testing.assert_array_equal(residual_of(state, 4), [0, 0.5, 0, 0])
    # next round the update is small on coordinate 1: the residual makes it win
    second = _sent(settings, state, [0.0, 0.25, 0.0, 0.0])
    np.testing.assert_array_equal(second, [0, 0.75, 0, 0])
    np.testing.assert_array_equal(residual_of(state, 4), [0, 0, 0, 0])


def test_plaintext_auto_keeps_no_residual_and_matches_plain_top_k():
    settings, state = _settings(0.75), RecordDict()
    assert settings.updates.error_feedback == "auto"
    np.testing.assert_array_equal(
        _sent(settings, state, [1.0, 0.5, 0.0, 0.0]), [1.0, 0, 0, 0]
    )
    assert RESIDUAL_RECORD not in state


def test_auto_is_on_under_dphe_and_off_in_plaintext():
    on = _settings(0.9)
    assert not on.updates.feeds_back(on.secure_aggregation)
    assert on.updates.feeds_back("dphe")


def test_block_layout_keeps_whole_blocks_and_the_residual_holds_the_rest():
    settings, state = _settings(0.5, "on"), RecordDict()
    # 4 values + the loss coordinate + the weight coordinate; 3 blocks
    ids = np.array([0, 1, 0, 1, 2, 2])
    sent = _sent(settings, state, [0.5, 0.25, 0.5, 0.0], blocks=(ids, 3))
    # keep 3 - floor(1.5) = 2 blocks: block 2 (loss, weight) always, then block 0
    np.testing.assert_array_equal(sent, [0.5, 0, 0.5, 0])
    np.testing.assert_array_equal(residual_of(state, 4), [0, 0.25, 0, 0])

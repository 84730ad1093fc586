import numpy as np
import pytest

from hashing.update_sparsity import (
    elastic_net_prox,
    flatten_arrays,
    sparsify_update,
    top_k_sparsify,
    unflatten_arrays,
)


def test_flatten_unflatten_round_trip_keeps_order_shapes_and_dtypes():
    arrays = {
        "w": np.arange(6, dtype=np.float32).reshape(2, 3),
        "steps": np.array(7, dtype=np.int64),
        "b": np.array([-1.5, 2.5], dtype=np.float32),
    }
    vector, layout = flatten_arrays(arrays)
    assert vector.dtype == np.float64
    assert vector.tolist() == [0, 1, 2, 3, 4, 5, 7, -1.5, 2.5]
    assert layout.size == 9
    back = unflatten_arrays(vector + 0.4, layout)
    assert list(back) == ["w", "steps", "b"]
    assert back["steps"].dtype == np.int64 and int(back["steps"]) == 7  # rounded
    assert back["w"].dtype == np.float32 and back["w"].shape == (2, 3)
    np.testing.assert_allclose(back["b"], [-1.1, 2.9], rtol=1e-6)
    with pytest.raises(ValueError, match="layout needs"):
        unflatten_arrays(vector[:-1], layout)


def test_top_k_keeps_the_largest_magnitudes_ties_by_index():
    d = np.array([0.1, -3.0, 2.0, -2.0, 0.5, 0.0, 1.0, -0.2, 0.3, 2.0])
    out = top_k_sparsify(d, sparsity=0.7)  # keep ceil(0.3 * 10) = 3
    assert np.count_nonzero(out) == 3
    # |-3| first, then the three 2.0-magnitudes tie: indices 2 and 3 win over 9
    assert np.flatnonzero(out).tolist() == [1, 2, 3]
    np.testing.assert_array_equal(out[[1, 2, 3]], d[[1, 2, 3]])
    np.testing.assert_array_equal(top_k_sparsify(d, sparsity=0.0), d)
    assert np.count_nonzero(top_k_sparsify(d, sparsity=0.99)) == 1
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="sparsity"):
            top_k_sparsify(d, sparsity=bad)


def test_elastic_net_prox_soft_thresholds_then_shrinks():
    d = np.array([0.5, -0.05, -0.3, 0.1])
    out = elastic_net_prox(d, l1=0.1, l2=1.0)
    np.testing.assert_allclose(out, [0.2, 0.0, -0.1, 0.0])
    with pytest.raises(ValueError, match="elastic-net"):
        elastic_net_prox(d, l1=-1.0, l2=0.0)


def test_sparsify_update_applies_elastic_net_then_top_k():
    d = np.array([0.5, -0.05, -0.3, 0.1, 0.25])
    out = sparsify_update(d, sparsity=0.5, l1=0.1, l2=0.0)  # keep 3 of 5
    np.testing.assert_allclose(out, [0.4, 0.0, -0.2, 0.0, 0.15])
    np.testing.assert_array_equal(sparsify_update(d, sparsity=0.0), d)


def test_shared_blocks_are_the_forced_then_the_lowest_ids_and_depend_on_nothing_else():
    from crypto import kept_blocks
    from hashing.update_sparsity import keep_blocks, kept_block_count, shared_blocks

    assert shared_blocks(20, 0.9, always=np.array([17, 17])).tolist() == [0, 17]
    assert shared_blocks(20, 0.9, always=np.array([0, 5])).tolist() == [0, 5]
    assert shared_blocks(20, 0.5, always=np.array([19, 3])).tolist() == [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 19
    ]  # fmt: skip
    assert shared_blocks(10, 0.95).tolist() == [0]  # at least one block
    for num_blocks in range(1, 40):  # the count the padded DPHE shard is sized by
        for sparsity in (0.0, 0.1, 0.5, 0.9, 0.99):
            assert kept_block_count(num_blocks, sparsity) == kept_blocks(
                num_blocks, sparsity
            )
    with pytest.raises(ValueError, match="sparsity=1.0"):
        shared_blocks(10, 1.0)
    with pytest.raises(ValueError, match="outside"):
        shared_blocks(10, 0.5, always=np.array([10]))
    ids = np.array([0, 1, 2, 0, 1, 2])
    kept = keep_blocks(np.arange(1.0, 7.0), blocks=ids, kept=np.array([1]))
    assert kept.tolist() == [0.0, 2.0, 0.0, 0.0, 5.0, 0.0]

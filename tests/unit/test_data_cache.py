"""The per-process cache of clients' local data (``clients/data.py``).

A cached partition must hold exactly the arrays a fresh process computes, and two
settings that give different data must never share an entry.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from clients import data as client_data
from clients.data import clear_cache, data_key, load_local_data, source_stamp
from hashdata import ProtocolSplit, load_split, partition_indices
from settings.run_settings import RunSettings
from tests.fixtures import write_npz


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


def settings(**overrides: object) -> RunSettings:
    return RunSettings.from_config(dict(overrides))


def fresh(
    s: RunSettings, pid: int, num: int, split: ProtocolSplit | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, labels) of a partition computed from scratch, no client cache."""
    split = split or fresh_split(s)
    db = split.database_index
    rows = db[
        partition_indices(
            split.dataset.labels[db],
            scheme=s.partitioning,
            num_partitions=num,
            partition_id=pid,
            seed=s.seed,
            alpha=s.dirichlet_alpha,
            classes_per_client=s.classes_per_client,
        )
    ]
    return split.inputs[rows], split.dataset.labels[rows]


def fresh_split(s: RunSettings) -> ProtocolSplit:
    return load_split(
        s.dataset,
        data_path=s.data_path,
        query_fraction=s.query_fraction,
        seed=s.seed,
        feature_scaling=s.feature_scaling,
        image_shape=s.image_hwc(),
    )


def as_arrays(local: client_data.LocalData) -> tuple[np.ndarray, np.ndarray]:
    assert isinstance(local.inputs, torch.Tensor)
    return local.inputs.numpy(), local.labels.numpy()


def assert_same(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def test_every_partition_equals_a_fresh_load_and_hits_after() -> None:
    s = settings(partitioning="pathological")
    first = [load_local_data(s, partition_id=i, num_partitions=40) for i in range(40)]
    split = fresh_split(s)
    for i, local in enumerate(first):
        assert_same(as_arrays(local), fresh(s, i, 40, split))
        # a second call is served from the cache: the same object
        assert load_local_data(s, partition_id=i, num_partitions=40) is local
    # the partitions are disjoint (no entry served for another partition id)
    rows = np.concatenate([p.database_index.numpy() for p in first])
    assert len(np.unique(rows)) == len(rows)


def test_partition_count_is_part_of_the_key() -> None:
    s = settings()
    of2 = load_local_data(s, partition_id=0, num_partitions=2)
    of3 = load_local_data(s, partition_id=0, num_partitions=3)
    assert of2.num_samples != of3.num_samples
    assert_same(as_arrays(of3), fresh(s, 0, 3))


@pytest.mark.parametrize(
    "change",
    [
        {"seed": 7},
        {"partitioning": "dirichlet"},
        {"partitioning": "pathological", "classes-per-client": 2},
        {"query-fraction": 0.2},
        {"feature-scaling": "l2"},
    ],
)
def test_settings_that_change_the_data_never_share_an_entry(change: dict) -> None:
    base, other = settings(), settings(**change)
    assert data_key(base) != data_key(other)
    a = load_local_data(base, partition_id=1, num_partitions=5)
    b = load_local_data(other, partition_id=1, num_partitions=5)
    assert_same(as_arrays(a), fresh(base, 1, 5))
    assert_same(as_arrays(b), fresh(other, 1, 5))
    assert not (
        np.array_equal(a.database_index.numpy(), b.database_index.numpy())
        and np.array_equal(a.inputs.numpy(), b.inputs.numpy())
    )
    # and the first key's entry is still its own after the second was loaded
    assert load_local_data(base, partition_id=1, num_partitions=5) is a


def test_settings_that_do_not_touch_the_data_share_it() -> None:
    a = load_local_data(settings(), partition_id=2, num_partitions=4)
    b = load_local_data(
        settings(**{"learning-rate": 0.01, "code-length": 64, "rounds": 2}),
        partition_id=2,
        num_partitions=4,
    )
    assert a is b


def test_a_rewritten_npz_file_is_loaded_again(tmp_path: Path) -> None:
    path = tmp_path / "data.npz"
    labels = np.arange(40, dtype=np.int64) % 4
    rng = np.random.default_rng(0)
    write_npz(path, x_feat=rng.random((40, 6)).astype(np.float32), labels=labels)
    s = settings(dataset="npz", **{"data-path": str(path)})
    before = load_local_data(s, partition_id=0, num_partitions=2)
    stamp = source_stamp(str(path))
    write_npz(path, x_feat=rng.random((40, 6)).astype(np.float32), labels=labels)
    st = path.stat()  # same second on a coarse clock: force a different mtime
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert source_stamp(str(path)) != stamp
    after = load_local_data(s, partition_id=0, num_partitions=2)
    assert after is not before
    assert_same(as_arrays(after), fresh(s, 0, 2))
    assert not np.array_equal(after.inputs.numpy(), before.inputs.numpy())


def test_the_cache_keeps_a_bounded_number_of_datasets() -> None:
    for seed in range(client_data.CACHED_KEYS + 3):
        load_local_data(settings(seed=seed), partition_id=0, num_partitions=2)
    assert len(client_data._CACHE) == client_data.CACHED_KEYS


def test_pfmh_local_queries_are_the_fresh_ones() -> None:
    s = settings(strategy="pfmh", dataset="multiview-digits")
    got = load_local_data(s, partition_id=3, num_partitions=6)
    clear_cache()
    again = load_local_data(s, partition_id=3, num_partitions=6)
    assert got is not again
    assert isinstance(got.inputs, dict) and isinstance(again.inputs, dict)
    assert got.inputs.keys() == again.inputs.keys()
    for m in got.inputs:
        np.testing.assert_array_equal(got.inputs[m].numpy(), again.inputs[m].numpy())
    assert got.local_queries is not None and again.local_queries is not None
    np.testing.assert_array_equal(
        got.local_queries.numpy(), again.local_queries.numpy()
    )
    np.testing.assert_array_equal(got.labels.numpy(), again.labels.numpy())


def test_a_fresh_process_maps_the_partition_from_the_nodes_disk(
    tmp_path, monkeypatch
):
    """clients/partition_cache.py: the first load writes the node's partition, a
    later process (here: after clear_cache) maps it without loading the dataset,
    with the same arrays; a rewritten file, another partition or
    FEDHASH_DATA_CACHE=off never gets the cached entry."""
    labels = np.arange(240) % 4

    def data(seed: int) -> dict:
        rng = np.random.default_rng(seed)
        return {"x_feat": rng.random((240, 12)).astype(np.float32), "labels": labels}

    path = write_npz(tmp_path / "d.npz", **data(0))
    monkeypatch.setenv("FEDHASH_DATA_CACHE", str(tmp_path / "cache"))
    s = settings(dataset="npz", **{"data-path": str(path)})
    first = load_local_data(s, partition_id=1, num_partitions=3)
    assert len(list((tmp_path / "cache").iterdir())) == 1
    clear_cache()
    loads = []
    real = client_data.load_key_split
    monkeypatch.setattr(
        client_data, "load_key_split", lambda key: loads.append(key) or real(key)
    )
    again = load_local_data(s, partition_id=1, num_partitions=3)
    assert loads == []  # mapped from disk, the dataset was not loaded
    assert torch.equal(again.inputs, first.inputs)
    assert torch.equal(again.labels, first.labels)
    assert torch.equal(again.database_index, first.database_index)
    assert (again.num_classes, again.publishes) == (first.num_classes, first.publishes)
    expected_x, expected_y = fresh(s, 1, 3)
    np.testing.assert_array_equal(again.inputs.numpy(), expected_x)
    np.testing.assert_array_equal(again.labels.numpy(), expected_y)
    # another partition of the same process: loaded (and cached) normally
    load_local_data(s, partition_id=2, num_partitions=3)
    assert len(loads) == 1
    # the file rewritten under the same path: a new key, never the old entry
    clear_cache()
    write_npz(path, **data(5))
    os.utime(path, ns=(1, 1))
    rewritten = load_local_data(s, partition_id=1, num_partitions=3)
    assert len(loads) == 2
    assert not torch.equal(rewritten.inputs, first.inputs)
    # switched off
    clear_cache()
    monkeypatch.setenv("FEDHASH_DATA_CACHE", "off")
    load_local_data(s, partition_id=1, num_partitions=3)
    assert len(loads) == 3

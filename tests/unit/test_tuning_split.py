"""Validation splits for tuning (experiments/lib/tuning.py): drawn from the database."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.lib.tuning import (
    Grid,
    choice_on_edge,
    grid_extension,
    validation_rows,
    write_validation_file,
)


def _file(tmp_path, n: int = 200):
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), n // 4)
    split = np.zeros(n, dtype=np.int8)
    split[::5] = 1  # every 5th row is a reported query
    path = tmp_path / "toy.npz"
    np.savez(
        path,
        x_text=rng.normal(size=(n, 6)).astype(np.float32),
        labels=labels,
        split=split,
        meta=np.array([1, 2, 3]),  # not per row: copied as is
    )
    return path, labels, split.astype(bool)


def test_validation_rows_keep_clear_of_the_reported_queries(tmp_path) -> None:
    _, labels, mask = _file(tmp_path)
    q, db = validation_rows(labels, mask, fraction=0.1, seed=99)
    assert not mask[q].any() and not mask[db].any()
    assert len(np.intersect1d(q, db)) == 0
    assert len(q) + len(db) == int((~mask).sum())
    assert len(q) == 16  # 10% of the 160 database rows, stratified
    assert sorted(np.bincount(labels[q])) == [4, 4, 4, 4]
    q2, _ = validation_rows(labels, mask, fraction=0.1, seed=99)
    q3, _ = validation_rows(labels, mask, fraction=0.1, seed=7)
    assert (q == q2).all() and not np.array_equal(q, q3)


def test_the_validation_file_is_the_database_with_its_own_split(tmp_path) -> None:
    path, labels, mask = _file(tmp_path)
    rec = write_validation_file(path, tmp_path / "val", fraction=0.1, seed=99)
    out = np.load(rec.path)
    assert set(out.files) == {"x_text", "labels", "split", "meta"}
    assert len(out["labels"]) == int((~mask).sum()) == rec.queries + rec.database
    assert int(out["split"].sum()) == rec.queries == 16
    assert rec.left_out == int(mask.sum()) == 40
    src = np.load(path)
    # the rows are the source's database rows, in order; no reported query is in
    np.testing.assert_array_equal(out["x_text"], src["x_text"][~mask])
    np.testing.assert_array_equal(out["meta"], src["meta"])
    assert rec.to_dict()["source"] == "toy.npz"
    assert "40 queries are in no tuning run" in rec.text()
    # the same split again: the same record (the file is reused)
    assert write_validation_file(path, tmp_path / "val", fraction=0.1, seed=99) == rec


def test_a_file_without_a_fixed_split_is_refused(tmp_path) -> None:
    path = tmp_path / "nosplit.npz"
    np.savez(path, x_a=np.zeros((4, 2)), labels=np.arange(4))
    with pytest.raises(ValueError, match="no `split` array"):
        write_validation_file(path, tmp_path, seed=1)
    with pytest.raises(ValueError, match="an .npz file"):
        write_validation_file(tmp_path / "x.mat", tmp_path, seed=1)


def test_grid_extension_beyond_the_edge_only() -> None:
    grid = [5e-4, 2e-3, 5e-3]
    assert grid_extension(grid, 5e-3, geometric=True) == 0.0125
    assert grid_extension(grid, 5e-4, geometric=True) == 0.000125
    assert grid_extension(grid, 2e-3, geometric=True) is None
    assert grid_extension([3, 5], 5, geometric=False) == 7
    assert grid_extension([1, 3], 1, geometric=False, lowest=0) is None  # 1 - 2 < 1
    assert grid_extension([3], 3, geometric=False) is None  # one value: no edge step


def test_one_epoch_at_the_bottom_is_not_an_edge_three_is() -> None:
    grid = Grid([5e-3, 1e-2, 2e-2], [1, 3, 7])
    assert not choice_on_edge(grid, 1e-2, 1)  # no count below one epoch to try
    assert not choice_on_edge(grid, 1e-2, 3)
    assert choice_on_edge(grid, 1e-2, 7)
    assert choice_on_edge(grid, 5e-3, 3)  # a rate at the grid's end
    assert choice_on_edge(Grid([1e-2, 2e-2], [3, 7]), 2e-2, 3)
    assert choice_on_edge(Grid([1e-2], [3, 7]), 1e-2, 3)  # 1 and 2 epochs untried
    assert not choice_on_edge(Grid([1e-2], [1]), 1e-2, 1)  # one setting: no edge

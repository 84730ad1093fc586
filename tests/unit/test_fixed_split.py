"""A data file's own fixed query / database split (the ``.npz`` array ``split``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hashdata import load_dataset, load_split
from hashdata.protocol import fixed_split_mask
from tests.fixtures import write_npz

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
SPLIT = {"query_fraction": 0.1, "seed": 42}


def _file(tmp_path: Path, split: np.ndarray, *, n: int = 40, raw: bool = False):
    rng = np.random.default_rng(0)
    x = rng.random((n, 6)).astype(np.float32)
    if raw:  # non-negative beyond 1: feature-scaling = auto standardises it
        x = np.round(x * 255).astype(np.float32)
    return write_npz(
        tmp_path / "fixed.npz", x_image=x, labels=np.arange(n) % 4, split=split
    )


@pytest.mark.parametrize(
    "encode",
    [
        lambda q: q.astype(np.int8),
        lambda q: q.astype(np.int64),
        lambda q: q,  # bool
        lambda q: np.where(q, "query", "database"),
        lambda q: np.where(q, " Test", "TRAIN "),
        lambda q: np.where(q, b"query", b"retrieval"),
    ],
    ids=["int8", "int64", "bool", "str", "test-train", "bytes"],
)
def test_split_array_gives_exactly_that_partition(tmp_path: Path, encode) -> None:
    n = 40
    query = np.zeros(n, dtype=bool)
    query[[0, 3, 4, 17, 18, 30, 39]] = True  # 7 queries, not a 10% stratified draw
    path = _file(tmp_path, encode(query), n=n)
    split = load_split("npz", data_path=str(path), **SPLIT)
    np.testing.assert_array_equal(split.query_index, np.flatnonzero(query))
    np.testing.assert_array_equal(split.database_index, np.flatnonzero(~query))
    assert split.query_index.dtype == split.database_index.dtype == np.int64
    assert split.fixed
    assert split.query_text == (
        "the file's fixed split: 7 queries, 33 database (array `split` of fixed.npz)"
    )
    # query-fraction and seed do not move it
    other = load_split("npz", data_path=str(path), query_fraction=0.5, seed=3)
    np.testing.assert_array_equal(other.query_index, split.query_index)


def test_without_a_split_array_the_seeded_split_is_unchanged(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    path = write_npz(
        tmp_path / "plain.npz",
        x_image=rng.random((40, 6)).astype(np.float32),
        labels=np.arange(40) % 4,
    )
    split = load_split("npz", data_path=str(path), **SPLIT)
    assert (
        not split.fixed and load_dataset("npz", data_path=str(path)).fixed_split is None
    )
    assert split.query_text == "stratified 10% of npz (seed 42)"
    assert len(split.query_index) == 4
    # and the opt-out gives the seeded split for a file that has one
    query = np.arange(40) < 20
    fixed_path = _file(tmp_path, query.astype(np.int8))
    seeded = load_split("npz", data_path=str(fixed_path), use_file_split=False, **SPLIT)
    assert not seeded.fixed and len(seeded.query_index) == 4


def test_scaling_statistics_come_from_the_fixed_database(tmp_path: Path) -> None:
    n = 40
    query = np.arange(n) >= 30  # the last 10 rows are queries
    path = _file(tmp_path, query.astype(np.int8), n=n, raw=True)
    raw = load_dataset("npz", data_path=str(path)).inputs["image"]
    # queries far away: had they counted, the database would not be standardised
    x = raw.copy()
    x[query] += 1000.0
    write_npz(path, x_image=x, labels=np.arange(n) % 4, split=query.astype(np.int8))
    split = load_split("npz", data_path=str(path), **SPLIT)
    assert split.scaling and split.scaling[0].startswith("image: standard per feature")
    assert "30 database samples" in split.scaling[0]
    db = split.inputs[split.database_index]
    np.testing.assert_allclose(db.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(db.std(axis=0), 1, atol=1e-4)
    mean, std = raw[~query].mean(axis=0), raw[~query].std(axis=0)
    np.testing.assert_allclose(
        split.inputs[split.query_index], (x[query] - mean) / std, rtol=1e-4
    )


@pytest.mark.parametrize(
    ("split", "message"),
    [
        (np.zeros(39, dtype=np.int8), r"one value per sample, shape \(40,\), got"),
        (np.zeros((40, 1), dtype=np.int8), r"shape \(40,\), got shape \(40, 1\)"),
        (np.full(40, 2, dtype=np.int8), r"1 \(query\) or 0 \(database\).*\[2\]"),
        (np.where(np.arange(40) < 5, "query", "holdout"), r"unknown values.*holdout"),
        (np.zeros(40, dtype=np.int8), "marks no sample as a query"),
        (np.full(40, "database"), "marks no sample as a query"),
        (np.ones(40, dtype=np.int8), "the database needs at least one"),
        (np.linspace(0, 1, 40), "must be integers 0/1"),
    ],
    ids=[
        "short",
        "2-d",
        "value-2",
        "unknown-str",
        "no-query",
        "no-query-str",
        "all-query",
        "float",
    ],
)
def test_bad_split_arrays_are_refused(tmp_path: Path, split, message: str) -> None:
    path = _file(tmp_path, split)
    with pytest.raises(ValueError, match=message) as info:
        load_split("npz", data_path=str(path), **SPLIT)
    text = str(info.value)
    assert "fixed.npz" in text and "array `split`" in text, text


def test_fixed_split_mask_is_pure() -> None:
    got = fixed_split_mask(np.array([1, 0, 0]), n=3, where="x")
    assert got.dtype == np.bool_ and got.tolist() == [True, False, False]
    with pytest.raises(ValueError, match=r"^x: array `split`"):
        fixed_split_mask(np.array([0, 0, 0]), n=3, where="x")


def test_dataset_select_keeps_the_split_rows(tmp_path: Path) -> None:
    query = np.arange(40) % 5 == 0
    data = load_dataset("npz", data_path=str(_file(tmp_path, query.astype(np.int8))))
    assert data.select([0, 1, 5]).fixed_split.tolist() == [True, False, True]


def test_wiki_fixed_split_is_the_papers() -> None:
    path = SHARED / "wiki.npz"
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared/data is only on the project box)")
    split = load_split("npz", data_path=str(path), **SPLIT)
    assert split.fixed
    assert (len(split.query_index), len(split.database_index)) == (693, 2173)
    assert split.query_text.startswith("the file's fixed split: 693 queries, 2173 ")
    # every class is in both parts; wiki's features need no scaling under auto
    labels = split.dataset.labels
    assert set(labels[split.query_index]) == set(labels[split.database_index])
    assert split.scaling == ()

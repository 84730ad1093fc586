"""Tests for ``hashdata``: loaders, query/database protocol, partitioning."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import hashdata
from hashdata import (
    DATASETS,
    PARTITION_SCHEMES,
    HashDataset,
    load_dataset,
    partition_indices,
    primary_labels,
    split_query_database,
    validate_partitioning,
)
from hashdata.partition import _all_partitions

try:
    from tests.fixtures import (
        cifar10_fixture_md5,
        make_features,
        read_cifar10_fixture,
        write_cifar10_fixture,
        write_feature_npz,
        write_npz,
    )
except ImportError:  # tests/ on sys.path instead of the repository root
    from fixtures import (  # type: ignore[no-redef]
        cifar10_fixture_md5,
        make_features,
        read_cifar10_fixture,
        write_cifar10_fixture,
        write_feature_npz,
        write_npz,
    )


@pytest.fixture(scope="module")
def digits() -> HashDataset:
    return load_dataset("digits")


@pytest.fixture(scope="module")
def db_labels(digits: HashDataset) -> np.ndarray:
    _, db = split_query_database(digits.labels, query_fraction=0.1, seed=0)
    return digits.labels[db]


def all_parts(labels: np.ndarray, scheme: str, k: int, **kw: object) -> list:
    return [
        partition_indices(labels, scheme=scheme, num_partitions=k, partition_id=i, **kw)
        for i in range(k)
    ]


# --------------------------------------------------------------------------------
# loaders
# --------------------------------------------------------------------------------
def test_public_api() -> None:
    assert DATASETS == ("digits", "npz", "cifar10", "multiview-digits")
    assert PARTITION_SCHEMES == ("iid", "dirichlet", "pathological")
    for name in hashdata.__all__:
        assert hasattr(hashdata, name)


def test_digits_shape_and_range(digits: HashDataset) -> None:
    x = digits.inputs["image"]
    assert digits.name == "digits" and digits.kind == "image"
    assert x.shape == (1797, 1, 8, 8) and x.dtype == np.float32
    assert x.min() == 0.0 and x.max() == 1.0
    assert digits.labels.shape == (1797,) and digits.labels.dtype == np.int64
    assert digits.num_classes == 10 and not digits.multi_label
    assert set(np.unique(digits.labels).tolist()) == set(range(10))
    assert digits.n == 1797 and digits.modalities == ["image"]
    assert "\n" not in digits.description and "1797" in digits.description


def test_npz_single_label_round_trip(tmp_path: Path) -> None:
    arrays = make_features(n=30, num_classes=3, dims={"text": 5, "image": 7})
    path = write_npz(tmp_path / "feats.npz", **arrays)
    ds = load_dataset("npz", data_path=str(path))
    assert ds.name == "npz:feats" and ds.kind == "features" and not ds.multi_label
    assert ds.modalities == ["image", "text"]
    for m in ("image", "text"):
        assert ds.inputs[m].dtype == np.float32
        np.testing.assert_array_equal(ds.inputs[m], arrays[f"x_{m}"])
    assert ds.labels.dtype == np.int64
    np.testing.assert_array_equal(ds.labels, arrays["labels"])
    assert ds.num_classes == 3 and ds.n == 30


def test_npz_labels_are_not_remapped(tmp_path: Path) -> None:
    labels = np.array([2, 5, 5, 2], dtype=np.int32)
    path = write_npz(tmp_path / "gap.npz", x_a=np.ones((4, 2)), labels=labels)
    ds = load_dataset("npz", data_path=str(path))
    assert ds.num_classes == 6
    np.testing.assert_array_equal(ds.labels, labels)


def test_npz_multi_label_round_trip(tmp_path: Path) -> None:
    path = write_feature_npz(tmp_path / "ml.npz", n=40, num_classes=5, multi_label=True)
    ds = load_dataset("npz", data_path=str(path))
    assert ds.multi_label and ds.num_classes == 5
    assert ds.labels.shape == (40, 5) and ds.labels.dtype == np.uint8
    np.testing.assert_array_equal(ds.labels, np.load(path)["labels"])
    assert ds.inputs["image"].shape == (40, 16)


def _npz_case(case: str) -> dict[str, np.ndarray]:
    x = np.zeros((6, 3), dtype=np.float32)
    y = np.arange(6) % 2
    hot = np.eye(3, dtype=np.uint8)[np.arange(6) % 3]
    if case == "no-labels":
        return {"x_image": x}
    if case == "no-x":
        return {"features": x, "labels": y}
    if case == "lengths":
        return {"x_image": np.zeros((5, 3)), "labels": y}
    if case == "not-2d":
        return {"x_image": np.zeros((6, 3, 2)), "labels": y}
    if case == "non-finite":
        bad = x.copy()
        bad[2, 1] = np.nan
        return {"x_image": bad, "labels": y}
    if case == "multi-hot-values":
        odd = hot.copy()
        odd[0, 0] = 2
        return {"x_image": x, "labels": odd}
    if case == "no-positive":
        empty = hot.copy()
        empty[[1, 4]] = 0
        return {"x_image": x, "labels": empty}
    if case == "float-labels":
        return {"x_image": x, "labels": y.astype(np.float64)}
    if case == "negative-labels":
        return {"x_image": x, "labels": y - 1}
    raise AssertionError(case)


@pytest.mark.parametrize(
    ("case", "match"),
    [
        ("no-labels", r"no `labels` array.*x_image"),
        ("no-x", r"no `x_<modality>` array"),
        ("lengths", r"`x_image` has 5 rows but `labels` has 6"),
        ("not-2d", r"`x_image` must be 2-D"),
        ("non-finite", r"non-finite values .* in 1 of 6 rows"),
        ("multi-hot-values", r"values 0 or 1 only"),
        ("no-positive", r"2 of 6 samples have no positive label.*drop them"),
        ("float-labels", r"integer dtype"),
        ("negative-labels", r"non-negative"),
    ],
)
def test_npz_errors(tmp_path: Path, case: str, match: str) -> None:
    path = write_npz(tmp_path / f"{case}.npz", **_npz_case(case))
    with pytest.raises(ValueError, match=match) as info:
        load_dataset("npz", data_path=str(path))
    assert "data-path" in str(info.value)


def test_npz_missing_file_and_empty_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="data-path"):
        load_dataset("npz", data_path=str(tmp_path / "nope.npz"))
    with pytest.raises(ValueError, match="data-path"):
        load_dataset("npz", data_path="")
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="data-path"):
        load_dataset("npz", data_path=str(garbage))


@pytest.mark.parametrize("bytes_keys", [True, False])
def test_cifar10_fixture_loads(
    tmp_path: Path, bytes_keys: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_cifar10_fixture(tmp_path, images_per_file=3, bytes_keys=bytes_keys)
    with pytest.raises(ValueError, match="data_batch_1.*not the official"):
        load_dataset("cifar10", data_path=str(root))
    sums = cifar10_fixture_md5(root)  # the fixture stands in for the archive
    monkeypatch.setattr("hashdata.loaders.official_cifar10_md5", lambda: sums)
    ds = load_dataset("cifar10", data_path=str(root))
    raw, labels = read_cifar10_fixture(root)
    assert ds.name == "cifar10" and ds.kind == "image" and ds.num_classes == 10
    assert ds.inputs["image"].shape == (18, 3, 32, 32)
    assert ds.inputs["image"].dtype == np.float32
    np.testing.assert_array_equal(ds.labels, labels)
    assert ds.labels.dtype == np.int64
    mean = np.asarray(hashdata.CIFAR10_MEAN, dtype=np.float32)[None, :, None, None]
    std = np.asarray(hashdata.CIFAR10_STD, dtype=np.float32)[None, :, None, None]
    np.testing.assert_allclose(
        ds.inputs["image"], (raw / 255.0 - mean) / std, atol=1e-5
    )
    assert "15 train + 3 test" in ds.description


def test_cifar10_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"data-path.*download=true"):
        load_dataset("cifar10", data_path=str(tmp_path / "empty"))
    root = write_cifar10_fixture(tmp_path / "partial", images_per_file=1)
    (root / "cifar-10-batches-py" / "test_batch").unlink()
    with pytest.raises(FileNotFoundError, match="test_batch"):
        load_dataset("cifar10", data_path=str(root))
    with pytest.raises(ValueError, match="data-path"):
        load_dataset("cifar10", data_path="")


def test_unknown_dataset() -> None:
    with pytest.raises(ValueError, match=r"`dataset`.*digits, npz, cifar10"):
        load_dataset("mnist")


def test_select_and_modalities() -> None:
    ds = HashDataset(
        name="t",
        inputs={
            "text": np.zeros((4, 2)),
            "audio": np.ones((4, 3)),
            "image": np.ones((4, 1)),
        },
        labels=np.arange(4),
        num_classes=4,
        multi_label=False,
        kind="features",
        description="t",
    )
    assert ds.modalities == ["image", "audio", "text"]
    sub = ds.select([3, 1])
    assert sub.n == 2 and sub.labels.tolist() == [3, 1]
    assert sub.inputs["audio"].shape == (2, 3)
    with pytest.raises(ValueError, match="rows"):
        HashDataset(
            name="bad",
            inputs={"x": np.zeros((3, 2))},
            labels=np.arange(4),
            num_classes=4,
            multi_label=False,
            kind="features",
            description="",
        )


# --------------------------------------------------------------------------------
# protocol
# --------------------------------------------------------------------------------
def test_primary_label_rule() -> None:
    single = np.array([3, 0, 2], dtype=np.int32)
    assert primary_labels(single).tolist() == [3, 0, 2]
    assert primary_labels(single).dtype == np.int64
    hot = np.array([[0, 1, 1], [1, 0, 1], [0, 0, 1]], dtype=np.uint8)
    out = primary_labels(hot)
    assert out.tolist() == [1, 0, 2] and out.dtype == np.int64  # lowest positive
    with pytest.raises(ValueError, match="1 of 2 multi-hot label rows"):
        primary_labels(np.array([[0, 1], [0, 0]]))


def test_split_is_stratified_disjoint_and_deterministic(digits: HashDataset) -> None:
    labels = digits.labels
    q, db = split_query_database(labels, query_fraction=0.2, seed=7)
    assert q.dtype == np.int64 and db.dtype == np.int64
    assert np.all(np.diff(q) > 0) and np.all(np.diff(db) > 0)
    assert len(q) == int(np.ceil(0.2 * len(labels)))
    assert np.intersect1d(q, db).size == 0
    np.testing.assert_array_equal(np.union1d(q, db), np.arange(len(labels)))
    for c in range(10):
        total = np.count_nonzero(labels == c)
        assert abs(np.count_nonzero(labels[q] == c) - 0.2 * total) <= 1.5
    q2, db2 = split_query_database(labels, query_fraction=0.2, seed=7)
    np.testing.assert_array_equal(q, q2)
    np.testing.assert_array_equal(db, db2)
    q3, _ = split_query_database(labels, query_fraction=0.2, seed=8)
    assert not np.array_equal(q, q3)


def test_split_multi_label_and_rare_classes() -> None:
    hot = make_features(n=50, num_classes=5, multi_label=True)["labels"]
    q, db = split_query_database(hot, query_fraction=0.2, seed=0)
    assert len(q) == 10 and len(db) == 40
    prim = primary_labels(hot)
    classes, counts = np.unique(prim, return_counts=True)
    assert set(classes[counts >= 5].tolist()) <= set(prim[q].tolist())
    # one singleton class and a class with one sample more: still splits
    labels = np.array([0] * 10 + [1] * 10 + [2])
    q, db = split_query_database(labels, query_fraction=0.3, seed=0)
    assert len(q) + len(db) == 21 and np.intersect1d(q, db).size == 0
    # more classes than queries: falls back to a random split with a warning
    with pytest.warns(UserWarning, match="plain random split"):
        q, db = split_query_database(np.arange(20) % 10, query_fraction=0.1, seed=0)
    assert len(q) == 2


@pytest.mark.parametrize("fraction", [0.0, -0.1, 0.6, 1.0, float("nan"), "0.1", True])
def test_query_fraction_validation(fraction: object) -> None:
    with pytest.raises(ValueError, match=r"`query-fraction`.*\(0, 0\.5\]"):
        split_query_database(np.arange(10) % 2, query_fraction=fraction, seed=0)


def test_query_fraction_upper_bound_accepted() -> None:
    q, db = split_query_database(np.arange(10) % 2, query_fraction=0.5, seed=0)
    assert len(q) == 5 and len(db) == 5


# --------------------------------------------------------------------------------
# partitioning
# --------------------------------------------------------------------------------
@pytest.mark.parametrize("scheme", ["iid", "dirichlet"])
def test_partitions_disjoint_and_covering(db_labels: np.ndarray, scheme: str) -> None:
    parts = all_parts(db_labels, scheme, 10, seed=3, alpha=0.3)
    joined = np.concatenate(parts)
    assert len(joined) == len(db_labels) == len(np.unique(joined))
    np.testing.assert_array_equal(np.sort(joined), np.arange(len(db_labels)))
    for p in parts:
        assert p.dtype == np.int64 and len(p) >= 1 and np.all(np.diff(p) > 0)
    if scheme == "iid":
        sizes = [len(p) for p in parts]
        assert max(sizes) - min(sizes) <= 1
        # iid shards are shuffled: every client sees (almost) every class
        assert all(len(np.unique(db_labels[p])) >= 8 for p in parts)
    else:
        min_size = hashdata.dirichlet_min_partition_size(len(db_labels), 10)
        assert min(len(p) for p in parts) >= min_size


@pytest.mark.filterwarnings("ignore:pathological partitioning")
@pytest.mark.parametrize("scheme", PARTITION_SCHEMES)
def test_partitions_deterministic_per_seed(db_labels: np.ndarray, scheme: str) -> None:
    first = all_parts(db_labels, scheme, 5, seed=11)
    _all_partitions.cache_clear()  # as if every client were a fresh process
    again = [
        partition_indices(
            db_labels, scheme=scheme, num_partitions=5, partition_id=i, seed=11
        )
        for i in reversed(range(5))
    ][::-1]
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    other = all_parts(db_labels, scheme, 5, seed=12)
    assert any(not np.array_equal(a, b) for a, b in zip(first, other, strict=True))


def test_partition_cache_reused(db_labels: np.ndarray) -> None:
    _all_partitions.cache_clear()
    parts = all_parts(db_labels, "dirichlet", 10, seed=0)
    info = _all_partitions.cache_info()
    assert info.misses == 1 and info.hits == 9
    parts[0][:] = -1  # callers get copies; the cache is untouched
    again = partition_indices(
        db_labels, scheme="dirichlet", num_partitions=10, partition_id=0, seed=0
    )
    assert again.min() >= 0


def test_pathological_at_most_k_classes(db_labels: np.ndarray) -> None:
    parts = all_parts(db_labels, "pathological", 10, seed=5, classes_per_client=3)
    for p in parts:
        assert 1 <= len(np.unique(db_labels[p])) <= 3
    joined = np.concatenate(parts)
    assert len(joined) == len(np.unique(joined))  # disjoint
    # as many clients as classes: every class is used, the database is covered
    np.testing.assert_array_equal(np.sort(joined), np.arange(len(db_labels)))


def test_pathological_leftover_classes_warn(db_labels: np.ndarray) -> None:
    _all_partitions.cache_clear()
    with pytest.warns(UserWarning, match="drawn by no client"):
        parts = all_parts(db_labels, "pathological", 3, seed=1, classes_per_client=2)
    held = np.unique(db_labels[np.concatenate(parts)])
    assert len(held) <= 6 and len(held) < 10
    for p in parts:
        assert len(np.unique(db_labels[p])) <= 2


def test_partition_multi_label_uses_primary_label() -> None:
    hot = make_features(n=60, num_classes=4, multi_label=True, seed=2)["labels"]
    prim = primary_labels(hot)
    parts = all_parts(hot, "pathological", 4, seed=0, classes_per_client=1)
    for p in parts:
        assert len(np.unique(prim[p])) == 1
    joined = np.concatenate(parts)
    np.testing.assert_array_equal(np.sort(joined), np.arange(60))


def test_dirichlet_impossible_names_alpha() -> None:
    labels = np.arange(40) % 4
    with pytest.raises(ValueError, match=r"`dirichlet-alpha`=0\.001.*20 clients"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            partition_indices(
                labels,
                scheme="dirichlet",
                num_partitions=20,
                partition_id=0,
                seed=0,
                alpha=0.001,
            )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"scheme": "shards"}, r"`partitioning`.*iid, dirichlet, pathological"),
        ({"scheme": "dirichlet", "alpha": 0.0}, r"`dirichlet-alpha`.*> 0"),
        ({"scheme": "dirichlet", "alpha": -1.0}, r"`dirichlet-alpha`"),
        ({"scheme": "pathological", "classes_per_client": 0}, r"`classes-per-client`"),
        (
            {"scheme": "pathological", "classes_per_client": 11},
            r"`classes-per-client` must be an integer in 1\.\.10",
        ),
        ({"num_partitions": 0}, r"`num-partitions`.*>= 1"),
        ({"num_partitions": 101}, r"more clients than samples.*100 samples"),
    ],
)
def test_partition_validation(kwargs: dict, match: str) -> None:
    labels = np.arange(100) % 10
    args = {"scheme": "iid", "num_partitions": 5, "alpha": 0.5, "classes_per_client": 3}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        validate_partitioning(labels, **args)
    with pytest.raises(ValueError, match=match):
        partition_indices(labels, partition_id=0, seed=0, **args)


def test_partition_id_and_seed_validation() -> None:
    labels = np.arange(20) % 2
    with pytest.raises(ValueError, match=r"`partition-id`.*0\.\.3"):
        partition_indices(
            labels, scheme="iid", num_partitions=4, partition_id=4, seed=0
        )
    with pytest.raises(ValueError, match="`seed`"):
        partition_indices(
            labels, scheme="iid", num_partitions=4, partition_id=0, seed=-1
        )
    # keys unused by the scheme are not checked
    validate_partitioning(
        labels, scheme="iid", num_partitions=4, alpha=-1.0, classes_per_client=99
    )

"""``feature-scaling`` and images in ``.npz`` (hashdata/scaling.py, loaders.py).

The default (``auto``) must leave every existing dataset bit-identical: the built-in
datasets and ``.npz`` features already in [0, 1] or with unit-norm rows.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from hashdata import load_dataset, load_split, scale_inputs
from hashdata.scaling import looks_scaled, validate_feature_scaling
from settings.run_settings import ConfigError, RunSettings

try:
    from tests.fixtures import cifar10_fixture_md5, write_cifar10_fixture, write_npz
except ImportError:  # tests/ on sys.path instead of the repository root
    from fixtures import (  # type: ignore[no-redef]
        cifar10_fixture_md5,
        write_cifar10_fixture,
        write_npz,
    )

SPLIT = {"query_fraction": 0.2, "seed": 3}


def _labels(n: int, classes: int = 3) -> np.ndarray:
    return np.arange(n, dtype=np.int64) % classes


def _assert_identical(before: dict, after: dict) -> None:
    assert before.keys() == after.keys()
    for m in before:
        assert after[m].dtype == before[m].dtype and after[m].shape == before[m].shape
        assert np.array_equal(after[m], before[m]), m  # bit-identical, not close
        assert after[m].tobytes() == before[m].tobytes(), m


# --------------------------------------------------------------------------------
# the default leaves existing data unchanged
# --------------------------------------------------------------------------------
def test_default_is_auto_everywhere() -> None:
    assert RunSettings().feature_scaling == "auto"
    assert RunSettings().image_shape == "" and RunSettings().image_hwc() is None


@pytest.mark.parametrize("name", ["digits", "multiview-digits"])
def test_builtin_datasets_are_bit_identical_under_the_default(name: str) -> None:
    raw = load_dataset(name)
    split = load_split(name, **SPLIT)  # feature_scaling defaults to "auto"
    assert split.scaling == ()
    _assert_identical(raw.inputs, split.dataset.inputs)


def test_cifar10_is_bit_identical_under_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_cifar10_fixture(tmp_path / "c", images_per_file=10)
    sums = cifar10_fixture_md5(root)  # the fixture stands in for the archive
    monkeypatch.setattr("hashdata.loaders.official_cifar10_md5", lambda: sums)
    raw = load_dataset("cifar10", data_path=str(root))
    split = load_split("cifar10", data_path=str(root), **SPLIT)
    assert raw.scaled and split.scaling == ()
    _assert_identical(raw.inputs, split.dataset.inputs)


def test_scaled_npz_features_are_bit_identical_under_the_default(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(0)
    n = 50
    unit = rng.normal(size=(n, 6)).astype(np.float32)  # negative values
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    unit[4] = 0.0  # an empty row stays allowed
    arrays = {
        "x_image": rng.random((n, 7)).astype(np.float32),  # in [0, 1]
        "x_text": unit,  # unit-norm rows
        "x_tags": (rng.random((n, 5)) < 0.3).astype(np.float32),  # binary
        "labels": _labels(n),
    }
    path = write_npz(tmp_path / "scaled.npz", **arrays)
    raw = load_dataset("npz", data_path=str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and nothing warns
        split = load_split("npz", data_path=str(path), **SPLIT)
        none = load_split("npz", data_path=str(path), feature_scaling="none", **SPLIT)
    assert split.scaling == () and none.scaling == ()
    _assert_identical(raw.inputs, split.dataset.inputs)
    _assert_identical(raw.inputs, none.dataset.inputs)
    for m in ("image", "text", "tags"):
        assert looks_scaled(raw.inputs[m])


def test_centred_npz_features_are_left_as_given(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    x = (rng.normal(size=(40, 6)) * 4.0).astype(np.float32)  # negative values
    path = write_npz(tmp_path / "centred.npz", x_f=x, labels=_labels(40))
    raw = load_dataset("npz", data_path=str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        split = load_split("npz", data_path=str(path), **SPLIT)
        load_split("npz", data_path=str(path), feature_scaling="none", **SPLIT)
    assert split.scaling == ()
    _assert_identical(raw.inputs, split.dataset.inputs)


# --------------------------------------------------------------------------------
# raw features: auto scales them, statistics from the database part only
# --------------------------------------------------------------------------------
def _raw_pixels(tmp_path: Path, name: str = "raw.npz", **extra: np.ndarray) -> Path:
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, size=(60, 16)).astype(np.float32)
    x[0, 0], x[1, 1] = 0.0, 255.0
    return write_npz(tmp_path / name, x_image=x, labels=_labels(60), **extra)


def test_auto_standardises_raw_features_with_database_statistics(
    tmp_path: Path,
) -> None:
    path = _raw_pixels(tmp_path)
    raw = load_dataset("npz", data_path=str(path)).inputs["image"].astype(np.float64)
    split = load_split("npz", data_path=str(path), **SPLIT)
    x = split.dataset.inputs["image"]
    db = split.database_index
    want = (raw - raw[db].mean(axis=0)) / raw[db].std(axis=0)
    np.testing.assert_allclose(x, want, rtol=1e-5, atol=1e-5)
    assert x.dtype == np.float32
    np.testing.assert_allclose(x[db].mean(axis=0), 0.0, atol=1e-5)
    assert len(split.scaling) == 1
    assert split.scaling[0].startswith("image: standard per feature")
    explicit = load_split(
        "npz", data_path=str(path), feature_scaling="standard", **SPLIT
    )
    np.testing.assert_array_equal(explicit.dataset.inputs["image"], x)


def test_minmax_is_one_database_range_per_modality(tmp_path: Path) -> None:
    path = _raw_pixels(tmp_path)
    raw = load_dataset("npz", data_path=str(path)).inputs["image"]
    split = load_split("npz", data_path=str(path), feature_scaling="minmax", **SPLIT)
    x = split.dataset.inputs["image"]
    db = split.database_index
    lo, hi = raw[db].min(), raw[db].max()
    assert (lo, hi) == (0.0, 255.0)
    np.testing.assert_array_equal(x, (raw.astype(np.float64) / 255.0).astype("f4"))
    assert x[db].min() == 0.0 and x[db].max() == 1.0
    assert split.scaling[0].startswith("image: minmax")


@pytest.mark.parametrize("mode", ["auto", "minmax", "standard", "l2"])
def test_queries_do_not_shape_the_statistics(tmp_path: Path, mode: str) -> None:
    # nor, under auto, the decision whether to scale (the wild queries are negative)
    a = load_split("npz", data_path=str(_raw_pixels(tmp_path)), **SPLIT)
    q = a.query_index
    x = load_dataset("npz", data_path=str(_raw_pixels(tmp_path))).inputs["image"]
    x[q] = x[q] * 40.0 - 999.0  # wild queries
    path = write_npz(tmp_path / "wild.npz", x_image=x, labels=_labels(60))
    base = load_split("npz", data_path=str(_raw_pixels(tmp_path)), feature_scaling=mode,
                      **SPLIT)
    wild = load_split("npz", data_path=str(path), feature_scaling=mode, **SPLIT)
    np.testing.assert_array_equal(wild.query_index, q)
    db = wild.database_index
    np.testing.assert_array_equal(
        wild.dataset.inputs["image"][db], base.dataset.inputs["image"][db]
    )


def test_standard_is_per_feature_and_centres_constant_columns(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(loc=50.0, scale=[1.0, 10.0, 100.0, 0.0], size=(80, 4))
    path = write_npz(tmp_path / "s.npz", x_f=x.astype(np.float32), labels=_labels(80))
    split = load_split("npz", data_path=str(path), feature_scaling="standard", **SPLIT)
    z = split.dataset.inputs["f"][split.database_index].astype(np.float64)
    np.testing.assert_allclose(z.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(z[:, :3].std(axis=0), 1.0, atol=1e-5)
    assert np.all(z[:, 3] == 0.0)
    assert "1 constant columns only centred" in split.scaling[0]


def test_l2_is_per_sample(tmp_path: Path) -> None:
    x = np.arange(40, dtype=np.float32).reshape(10, 4) - 7.0
    x[3] = 0.0
    path = write_npz(tmp_path / "l2.npz", x_f=x, labels=_labels(10, 2))
    split = load_split("npz", data_path=str(path), feature_scaling="l2",
                       query_fraction=0.2, seed=0)
    out = split.dataset.inputs["f"]
    norms = np.linalg.norm(out, axis=1)
    np.testing.assert_allclose(np.delete(norms, 3), 1.0, rtol=1e-6)
    assert np.all(out[3] == 0.0)
    assert "no statistics" in split.scaling[0]


def test_none_warns_on_raw_features_naming_file_and_range(tmp_path: Path) -> None:
    path = _raw_pixels(tmp_path)
    with pytest.warns(UserWarning, match=r"raw\.npz.*\[0, 255\]") as record:
        split = load_split("npz", data_path=str(path), feature_scaling="none", **SPLIT)
    assert "feature-scaling='none'" in str(record[0].message)
    assert split.scaling == ()
    raw = load_dataset("npz", data_path=str(path))
    _assert_identical(raw.inputs, split.dataset.inputs)


def test_explicit_modes_apply_to_builtin_datasets() -> None:
    split = load_split("digits", feature_scaling="l2", **SPLIT)
    x = split.inputs.reshape(len(split.inputs), -1)
    nonzero = np.linalg.norm(x, axis=1) > 0
    np.testing.assert_allclose(np.linalg.norm(x[nonzero], axis=1), 1.0, rtol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none on a built-in: as loaded, no warning
        load_split("digits", feature_scaling="none", **SPLIT)


def test_bad_scaling_values_name_the_key() -> None:
    with pytest.raises(ValueError, match=r"feature-scaling='zscore'.*auto, none"):
        validate_feature_scaling("zscore")
    with pytest.raises(ValueError, match="feature-scaling"):
        load_split("digits", feature_scaling="zscore", **SPLIT)
    with pytest.raises(ConfigError, match=r"feature-scaling='zscore': accepted are"):
        RunSettings.from_config({"feature-scaling": "zscore"})
    for bad in ("32,32", "a,b,c", "32,32,0", "32,32,3,1"):
        with pytest.raises(ConfigError, match=r"image-shape=.*H,W,C"):
            RunSettings.from_config(
                {"dataset": "npz", "data-path": "x.npz", "image-shape": bad}
            )
    with pytest.raises(ConfigError, match=r"image-shape='32,32,3' applies to .*npz"):
        RunSettings.from_config({"image-shape": "32,32,3"})
    ok = RunSettings.from_config(
        {"dataset": "npz", "data-path": "x.npz", "image-shape": " 32, 32, 3 "}
    )
    assert ok.image_hwc() == (32, 32, 3)


# --------------------------------------------------------------------------------
# images in .npz
# --------------------------------------------------------------------------------
def _images(n: int = 12, h: int = 6, w: int = 5, c: int = 3) -> np.ndarray:
    rng = np.random.default_rng(4)
    return rng.integers(0, 256, size=(n, h, w, c), dtype=np.uint8)  # NHWC


def test_image_layouts_load_to_the_same_nchw(tmp_path: Path) -> None:
    nhwc = _images()
    expect = nhwc.transpose(0, 3, 1, 2).astype(np.float32)
    y = _labels(len(nhwc))
    cases = {
        "nhwc": {"x_image": nhwc},
        "nchw": {"x_image": np.ascontiguousarray(nhwc.transpose(0, 3, 1, 2))},
        "float": {"x_image": nhwc.astype(np.float64) / 255.0},
        "flat-file": {
            "x_image": nhwc.reshape(len(nhwc), -1),
            "image_shape": np.array([6, 5, 3]),
        },
    }
    for name, arrays in cases.items():
        path = write_npz(tmp_path / f"{name}.npz", labels=y, **arrays)
        ds = load_dataset("npz", data_path=str(path))
        assert ds.kind == "image" and ds.inputs["image"].dtype == np.float32, name
        assert ds.inputs["image"].flags.c_contiguous
        want = expect / 255.0 if name == "float" else expect
        np.testing.assert_allclose(ds.inputs["image"], want, rtol=1e-6, err_msg=name)
        assert "image 3x6x5 images" in ds.description
    flat = write_npz(tmp_path / "flat.npz", x_image=nhwc.reshape(12, -1), labels=y)
    ds = load_dataset("npz", data_path=str(flat), image_shape=(6, 5, 3))
    np.testing.assert_array_equal(ds.inputs["image"], expect)


def test_flat_rows_are_never_reshaped_on_a_guess(tmp_path: Path) -> None:
    flat = _images(h=4, w=4).reshape(12, -1)  # 48 = 4*4*3
    path = write_npz(tmp_path / "flat.npz", x_image=flat, labels=_labels(12))
    with pytest.warns(UserWarning, match=r"48-d feature vectors.*image-shape='4,4,3'"):
        ds = load_dataset("npz", data_path=str(path))
    assert ds.kind == "features" and ds.inputs["image"].shape == (12, 48)


@pytest.mark.parametrize(
    ("arrays", "shape", "match"),
    [
        ({"x_image": np.zeros((12, 47), np.uint8)}, (4, 4, 3), r"47 values.*needs 48"),
        ({"x_text": np.zeros((12, 48))}, (4, 4, 3), r"no `x_image`"),
        (
            {"x_image": np.zeros((12, 48)), "image_shape": np.array([4, 3, 4])},
            (4, 4, 3),
            r"disagrees with the array `image_shape`",
        ),
        (
            {"x_image": np.zeros((12, 48)), "image_shape": np.array([4.0, 4, 3])},
            None,
            r"`image_shape` must hold three positive integers",
        ),
        ({"x_image": np.zeros((12, 3, 4, 3))}, None, r"cannot tell the channel axis"),
        ({"x_image": np.zeros((12, 8, 8, 9))}, None, r"cannot tell the channel axis"),
        ({"x_image": np.zeros((12, 5, 4, 3))}, (5, 5, 3), r"neither \(n, H, W, C\)"),
        ({"x_image": np.zeros((12, 3, 2))}, None, r"must be 2-D .* or 4-D images"),
    ],
)
def test_image_errors_name_the_problem(
    tmp_path: Path, arrays: dict, shape: tuple | None, match: str
) -> None:
    path = write_npz(tmp_path / "bad.npz", labels=_labels(12), **arrays)
    with pytest.raises(ValueError, match=match):
        load_dataset("npz", data_path=str(path), image_shape=shape)


def test_image_shape_is_npz_only() -> None:
    with pytest.raises(ValueError, match=r"image-shape=.*dataset='npz' only"):
        load_dataset("digits", image_shape=(8, 8, 1))


def test_auto_standardises_images_per_channel(tmp_path: Path) -> None:
    nhwc = _images(n=40)
    path = write_npz(tmp_path / "img.npz", x_image=nhwc, labels=_labels(40))
    split = load_split("npz", data_path=str(path), **SPLIT)
    x = split.inputs
    db = split.database_index
    # uint8 -> [0, 1], then the database part's per-channel mean / std
    unit = nhwc.transpose(0, 3, 1, 2).astype(np.float64) / 255.0
    mean = unit[db].mean(axis=(0, 2, 3), keepdims=True)
    std = unit[db].std(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(x, (unit - mean) / std, rtol=1e-4, atol=1e-5)
    assert split.scaling[0].startswith("image: standard per channel")
    minmax = load_split("npz", data_path=str(path), feature_scaling="minmax", **SPLIT)
    assert minmax.inputs[db].min() == 0.0 and minmax.inputs[db].max() == 1.0
    with pytest.warns(UserWarning, match=r"img\.npz.*\[0, 255\]"):
        none = load_split("npz", data_path=str(path), feature_scaling="none", **SPLIT)
    assert none.inputs.max() == 255.0


def test_scale_inputs_returns_the_same_object_when_nothing_changes() -> None:
    digits = load_dataset("digits")
    out, applied = scale_inputs(digits, np.arange(100), mode="auto")
    assert out is digits and applied == ()

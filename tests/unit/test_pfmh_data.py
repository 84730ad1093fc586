"""Multi-modal data for PFMH: multi-view digits, .npz modalities, validation."""

from __future__ import annotations

import numpy as np
import pytest

from hashdata import (
    DATASETS,
    HashDataset,
    load_dataset,
    load_multiview_digits,
    modality_dims,
    require_multimodal,
)
from hashdata.multiview import gradient_orientation_histograms

try:
    from tests.fixtures import write_feature_npz
except ImportError:  # tests/ on sys.path instead of the repository root
    from fixtures import write_feature_npz  # type: ignore[no-redef]


@pytest.fixture(scope="module")
def mv() -> HashDataset:
    return load_dataset("multiview-digits")


def test_multiview_digits_views(mv: HashDataset) -> None:
    assert "multiview-digits" in DATASETS
    assert mv.name == "multiview-digits" and mv.kind == "features"
    assert mv.modalities == ["image", "hog"]
    assert modality_dims(mv) == {"image": 64, "hog": 32}
    img, hog = mv.inputs["image"], mv.inputs["hog"]
    assert img.shape == (1797, 64) and hog.shape == (1797, 32)
    assert img.dtype == np.float32 and hog.dtype == np.float32
    assert img.min() == 0.0 and img.max() == 1.0
    assert mv.labels.shape == (1797,) and mv.num_classes == 10
    assert not mv.multi_label
    # every cell histogram is unit norm or blank
    norms = np.linalg.norm(hog.reshape(-1, 4, 8), axis=2)
    assert np.all((np.abs(norms - 1) < 1e-5) | (norms == 0))
    # the image view is the plain digits image, flattened
    digits = load_dataset("digits")
    np.testing.assert_array_equal(img, digits.inputs["image"].reshape(1797, 64))
    np.testing.assert_array_equal(mv.labels, digits.labels)
    require_multimodal(mv)


def test_multiview_digits_is_deterministic(mv: HashDataset) -> None:
    again = load_multiview_digits()
    for m in mv.modalities:
        np.testing.assert_array_equal(mv.inputs[m], again.inputs[m])


def test_gradient_orientation_histograms_hand_computed() -> None:
    ramp = np.tile(np.arange(8, dtype=np.float64), (8, 1))  # d/dx = 1, d/dy = 0
    blank = np.zeros((8, 8))
    hist = gradient_orientation_histograms(np.stack([ramp, ramp.T, blank]))
    assert hist.shape == (3, 32)
    cells = hist.reshape(3, 4, 8)
    expected = np.zeros((4, 8))
    expected[:, 0] = 1.0  # horizontal gradient: orientation 0 -> bin 0
    np.testing.assert_allclose(cells[0], expected, atol=1e-6)
    expected_v = np.zeros((4, 8))
    expected_v[:, 4] = 1.0  # vertical gradient: orientation pi/2 -> bin 4
    np.testing.assert_allclose(cells[1], expected_v, atol=1e-6)
    assert not cells[2].any()
    with pytest.raises(ValueError, match="cells"):
        gradient_orientation_histograms(np.zeros((1, 7, 8)))


def test_require_multimodal_names_the_modalities_present() -> None:
    digits = load_dataset("digits")
    with pytest.raises(ValueError, match=r"1 modality \(image\).*at least two"):
        require_multimodal(digits)


def test_npz_with_two_or_three_modalities(tmp_path) -> None:
    path = write_feature_npz(
        tmp_path / "tri.npz",
        dims={"image": 6, "text": 4, "audio": 3},
        multi_label=True,
    )
    ds = load_dataset("npz", data_path=str(path))
    require_multimodal(ds)
    assert modality_dims(ds) == {"image": 6, "audio": 3, "text": 4}
    one = write_feature_npz(tmp_path / "one.npz", dims={"text": 4})
    with pytest.raises(ValueError, match=r"npz:one.*1 modality \(text\)"):
        require_multimodal(load_dataset("npz", data_path=str(one)))


def test_modalities_key_selects_npz_arrays(tmp_path) -> None:
    from settings.check import ConfigError
    from settings.run_settings import RunSettings

    path = write_feature_npz(
        tmp_path / "tri.npz", dims={"image": 6, "text": 4, "tfidf": 3}
    )
    ds = load_dataset("npz", data_path=str(path), modalities=("text", "image"))
    assert modality_dims(ds) == {"image": 6, "text": 4}
    with pytest.raises(ValueError, match=r"no array x_audio.*image, text, tfidf"):
        load_dataset("npz", data_path=str(path), modalities=("image", "audio"))
    with pytest.raises(ValueError, match="dataset='npz' only"):
        load_dataset("digits", modalities=("image",))
    base = {"dataset": "npz", "data-path": str(path)}
    settings = RunSettings.from_config({**base, "modalities": " image , text"})
    assert settings.split_options()["modalities"] == ("image", "text")
    assert RunSettings.from_config(base).split_options()["modalities"] is None
    for bad in ("image,,text", "image,image"):
        with pytest.raises(ConfigError, match="modalities"):
            RunSettings.from_config({**base, "modalities": bad})
    with pytest.raises(ConfigError, match="modalities.*'npz' only"):
        RunSettings.from_config({"modalities": "image"})


def test_modalities_of_different_lengths_are_rejected() -> None:
    inputs = {"image": np.zeros((3, 2), np.float32), "text": np.zeros((2, 2))}
    with pytest.raises(ValueError, match="'text' has 2 rows but there are 3 labels"):
        HashDataset(
            name="bad",
            inputs=inputs,
            labels=np.zeros(3, np.int64),
            num_classes=1,
            multi_label=False,
            kind="features",
            description="",
        )
    ok = HashDataset(
        name="later",
        inputs={"image": np.zeros((3, 2), np.float32)},
        labels=np.zeros(3, np.int64),
        num_classes=1,
        multi_label=False,
        kind="features",
        description="",
    )
    ok.inputs["text"] = np.zeros((2, 2), np.float32)  # mutated after the check
    with pytest.raises(ValueError, match="different|lengths"):
        require_multimodal(ok)

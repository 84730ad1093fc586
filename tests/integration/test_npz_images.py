"""Images in ``.npz`` through the app's data path: server, clients, model routing.

A small synthetic fixture (flat uint8 HWC rows, as ``cifar10_jpeg.npz`` stores them)
always runs; the real ``../shared/data`` files are used when present (a user's
machine will not have them, so those tests skip with the reason).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from clients.data import data_key, load_local_data
from hashdata import load_dataset, load_split
from hashing.models import resolve_model_name
from server.experiment import prepare_data, protocol_text
from settings.check import app_config_defaults, parse_run_config
from settings.run_model import build_run_model
from settings.run_settings import RunSettings
from tests.fixtures import write_npz

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
CIFAR_JPEG = SHARED / "cifar10_jpeg.npz"
PRESET = ROOT / "conf" / "cifar10-jpeg.toml"


def settings_for(**overrides: object) -> RunSettings:
    return RunSettings.from_config({**app_config_defaults(ROOT), **overrides})


def write_flat_images(path: Path, *, n: int = 48, side: int = 8) -> Path:
    """Flat (n, side*side*3) uint8 rows in HWC order; class = dominant channel."""
    rng = np.random.default_rng(0)
    labels = np.arange(n, dtype=np.int64) % 3
    images = rng.integers(0, 120, size=(n, side, side, 3), dtype=np.uint8)
    images[np.arange(n), :, :, labels] += 120  # class c is brighter in channel c
    return write_npz(path, x_image=images.reshape(n, -1), labels=labels)


def test_flat_hwc_fixture_runs_through_the_image_path(tmp_path: Path) -> None:
    path = write_flat_images(tmp_path / "flat.npz")
    s = settings_for(
        **{"dataset": "npz", "data-path": str(path), "image-shape": "8,8,3"}
    )
    data = prepare_data(s)
    assert data.input_shape == (3, 8, 8)
    assert tuple(data.queries.inputs.shape[1:]) == (3, 8, 8)
    assert resolve_model_name(s.model, data.input_shape) == "cnn"
    assert resolve_model_name("auto", (3, 32, 32)) == "resnet18"
    model = build_run_model(s, data.input_shape)
    assert tuple(model(data.queries.inputs).shape) == (len(data.queries.labels), 32)
    text = protocol_text(s, data, clients=2)
    assert "inputs scaled (feature-scaling=auto" in text
    assert "image: standard per channel" in text

    # every client applies the server's map: its rows equal the split's rows
    split = load_split(
        "npz", data_path=str(path), query_fraction=s.query_fraction, seed=s.seed,
        image_shape=(8, 8, 3),
    )
    local = load_local_data(s, partition_id=1, num_partitions=2)
    rows = local.database_index.numpy()
    np.testing.assert_array_equal(local.inputs.numpy(), split.inputs[rows])
    db = split.database_index
    np.testing.assert_allclose(split.inputs[db].mean(axis=(0, 2, 3)), 0, atol=1e-5)
    np.testing.assert_allclose(split.inputs[db].std(axis=(0, 2, 3)), 1, atol=1e-4)

    # the data-affecting keys are part of the clients' cache key
    assert data_key(s) != data_key(settings_for(**{
        "dataset": "npz", "data-path": str(path), "image-shape": "8,8,3",
        "feature-scaling": "minmax",
    }))
    with pytest.warns(UserWarning, match="image-shape='8,8,3'"):
        flat = settings_for(**{"dataset": "npz", "data-path": str(path)})
        assert data_key(flat) != data_key(s)
        assert prepare_data(flat).input_shape == (192,)  # features, never guessed


def test_protocol_text_has_no_scaling_clause_when_nothing_is_scaled() -> None:
    s = settings_for()
    text = protocol_text(s, prepare_data(s), clients=3)
    assert "scaled" not in text and "feature-scaling" not in text


@pytest.mark.parametrize("name", ["wiki.npz", "mirflickr25k_tags.npz"])
def test_shared_feature_files_are_bit_identical_under_the_default(name: str) -> None:
    path = SHARED / name
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared/data is only on the project box)")
    raw = load_dataset("npz", data_path=str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        split = load_split("npz", data_path=str(path), query_fraction=0.1, seed=42)
    assert split.scaling == ()
    for m, x in raw.inputs.items():
        assert split.dataset.inputs[m].tobytes() == x.tobytes(), m


@pytest.mark.skipif(
    not CIFAR_JPEG.is_file(),
    reason=f"{CIFAR_JPEG} is absent (../shared/data is only on the project box)",
)
def test_cifar10_jpeg_loads_as_images_with_the_preset() -> None:
    overrides = parse_run_config([str(PRESET)])
    overrides["data-path"] = str(ROOT / overrides["data-path"])
    s = settings_for(**overrides)
    assert Path(s.data_path).resolve() == CIFAR_JPEG.resolve()
    split = load_split(
        s.dataset, data_path=s.data_path, query_fraction=s.query_fraction,
        seed=s.seed, feature_scaling=s.feature_scaling, image_shape=s.image_hwc(),
    )
    data = split.dataset
    assert data.kind == "image" and data.num_classes == 10
    assert split.inputs.shape == (60000, 3, 32, 32)
    assert len(split.query_index) == 10000 and len(split.database_index) == 50000
    assert resolve_model_name("auto", split.inputs.shape[1:]) == "resnet18"
    # per-channel standardisation from the database part; JPEG means match CIFAR's
    line = split.scaling[0]
    assert line.startswith("image: standard per channel")
    means = [float(v) / 255 for v in line.split("mean (")[1].split(")")[0].split(",")]
    np.testing.assert_allclose(means, (0.4914, 0.4822, 0.4465), atol=0.005)
    # layout: row 0 of the file, HWC -> CHW, is an increasing affine map per channel
    with np.load(CIFAR_JPEG) as f:
        row = f["x_image"][0].reshape(32, 32, 3).transpose(2, 0, 1).astype(np.float64)
    for c in range(3):
        slope, icpt = np.polyfit(row[c].ravel(), split.inputs[0, c].ravel(), 1)
        fitted = slope * row[c] + icpt
        assert slope > 0
        np.testing.assert_allclose(split.inputs[0, c], fitted, atol=1e-4)

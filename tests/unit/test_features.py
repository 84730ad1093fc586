"""``python -m hashdata.features``: frozen-backbone features of an image ``.npz``.

A tiny synthetic file (flat uint8 HWC rows, as ``cifar10_jpeg.npz`` stores them)
at a 32 px input: the output's format and provenance, the class-balanced seeded
subset, a run interrupted after one chunk that resumes to the same file, and one
error line (exit 2) for bad input.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from hashdata import features as F
from hashdata import load_split
from hashing.efficientnet_lite import efficientnet_lite0, hwc_uint8_to_pixels
from tests.fixtures import write_npz

N, SIDE = 30, 8


def image_npz(path: Path, **extra: np.ndarray) -> Path:
    rng = np.random.default_rng(0)
    labels = np.arange(N, dtype=np.int64) % 3
    x = rng.integers(0, 256, size=(N, SIDE * SIDE * 3), dtype=np.uint8)
    split = (np.arange(N) >= 18).astype(np.int8)  # 18 database, 12 queries
    arrays = {"x_image": x, "labels": labels, "split": split, **extra}
    return write_npz(path, **arrays)


def args(data: Path, out: Path, *more: str) -> list[str]:
    return [
        "--backbone", "efficientnet-lite0", "--data", str(data), "--out", str(out),
        "--image-size", "32", "--device", "cpu", "--quiet", *more,
    ]  # fmt: skip


def test_writes_features_in_the_project_format(tmp_path: Path) -> None:
    data = image_npz(tmp_path / "img.npz")
    out = tmp_path / "feat.npz"
    assert F.main(args(data, out, "--batch-size", "7")) == 0
    got = np.load(out)
    src = np.load(data)
    assert got["x_image"].shape == (N, 1280) and got["x_image"].dtype == np.float32
    np.testing.assert_array_equal(got["labels"], src["labels"])
    np.testing.assert_array_equal(got["split"], src["split"])
    np.testing.assert_array_equal(got["source_index"], np.arange(N))
    assert str(got["backbone"]) == "efficientnet-lite0"
    assert int(got["image_size"]) == 32
    assert str(got["source_sha256"]) == F.file_sha256(data)
    assert "image_shape" not in got.files  # loads as feature vectors
    # the rows are the network's pooled features of those images
    net = efficientnet_lite0().eval()
    pixels = hwc_uint8_to_pixels(torch.from_numpy(src["x_image"][:3]), (8, 8, 3))
    from hashing.efficientnet_lite import pooled_features

    want = pooled_features(net, pixels, image_size=32).numpy()
    np.testing.assert_allclose(got["x_image"][:3], want, rtol=1e-4, atol=1e-5)
    split = load_split("npz", data_path=str(out), query_fraction=0.1, seed=0)
    assert split.inputs.shape == (N, 1280) and len(split.query_index) == 12
    assert not list(tmp_path.glob("*.partial")) and not list(tmp_path.glob("*.tmp*"))


def test_subset_is_class_balanced_and_seeded(tmp_path: Path) -> None:
    data = image_npz(tmp_path / "img.npz")
    rows = {}
    for seed in (0, 0, 1):
        out = tmp_path / f"s{seed}.npz"
        assert F.main(args(data, out, "--subset", "6,9", "--seed", str(seed))) == 0
        got = np.load(out)
        assert got["x_image"].shape == (15, 1280)
        split, labels, idx = got["split"], got["labels"], got["source_index"]
        assert (split == 0).sum() == 9 and (split == 1).sum() == 6
        assert np.bincount(labels[split == 0]).tolist() == [3, 3, 3]
        assert np.bincount(labels[split == 1]).tolist() == [2, 2, 2]
        np.testing.assert_array_equal(np.load(data)["split"][idx], split)
        rows.setdefault(seed, []).append(idx.tolist())
    assert rows[0][0] == rows[0][1] and rows[0][0] != rows[1][0]


def test_interrupted_run_resumes_from_its_chunks(tmp_path, monkeypatch) -> None:
    data = image_npz(tmp_path / "img.npz")
    out = tmp_path / "feat.npz"
    real_save = F._atomic_save_npy
    saved: list[str] = []

    def stop_after_first(path, arr):
        if saved:
            raise KeyboardInterrupt  # the user stops it during chunk 2
        saved.append(path.name)
        real_save(path, arr)

    monkeypatch.setattr(F, "_atomic_save_npy", stop_after_first)
    with pytest.raises(KeyboardInterrupt):
        F.main(args(data, out, "--chunk-rows", "8"))
    assert not out.exists()  # never half-written
    partial = tmp_path / "feat.npz.partial"
    assert sorted(p.name for p in partial.glob("chunk_*.npy")) == ["chunk_00000.npy"]
    assert json.loads((partial / "manifest.json").read_text())["image_size"] == 32

    # other arguments on the same partial folder: one error line, nothing lost
    monkeypatch.setattr(F, "_atomic_save_npy", real_save)
    assert F.main(args(data, out, "--chunk-rows", "8", "--image-size", "48")) == 2
    assert (partial / "chunk_00000.npy").is_file()

    saved.clear()

    def record(path, arr):
        saved.append(path.name)
        real_save(path, arr)

    monkeypatch.setattr(F, "_atomic_save_npy", record)
    assert F.main(args(data, out, "--chunk-rows", "8")) == 0
    assert saved == ["chunk_00001.npy", "chunk_00002.npy", "chunk_00003.npy"]
    assert not partial.exists()
    fresh = tmp_path / "fresh.npz"
    assert F.main(args(data, fresh)) == 0
    # chunks of 8 rows against one batch: other BLAS blockings, so equal only to
    # float32 rounding (a chunk out of order would differ by ~0.1)
    np.testing.assert_allclose(
        np.load(out)["x_image"], np.load(fresh)["x_image"], rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize(
    ("arrays", "more", "message"),
    [
        ({"labels": None}, (), "has no `labels` array"),
        ({"x_image": np.zeros((N, 100), np.uint8)}, (), "--image-shape H,W,C"),
        ({"x_image": np.full((N, 192), 2.0, np.float32)}, (), "floats in [0, 1]"),
        ({}, ("--image-shape", "8,8,1"), "does not fit"),
        ({}, ("--subset", "6,30"), "ask for fewer"),
        ({}, ("--subset", "6"), "--subset '6'"),
        ({}, ("--backbone", "vgg16"), "--backbone 'vgg16'"),
        ({}, ("--image-size", "8"), "--image-size 8"),
    ],
)
def test_bad_input_is_one_error_line(tmp_path, capsys, arrays, more, message):
    base = {
        "x_image": np.zeros((N, 192), np.uint8),
        "labels": np.arange(N) % 3,
        "split": (np.arange(N) >= 18).astype(np.int8),
    }
    base.update(arrays)
    data = write_npz(
        tmp_path / "img.npz", **{k: v for k, v in base.items() if v is not None}
    )
    out = tmp_path / "out.npz"
    assert F.main(args(data, out, *more)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    assert not out.exists() and not (tmp_path / "out.npz.partial").exists()


def test_subset_command_refuses_bad_input_in_one_line(tmp_path, capsys) -> None:
    from hashdata import subset

    src = tmp_path / "f.npz"
    np.savez(src, x_image=np.zeros((4, 2)), labels=np.arange(4))
    out = tmp_path / "o.npz"
    assert subset.main(["--data", str(src), "--out", str(out), "--subset", "5"]) == 2
    assert "accepted is Q,D" in capsys.readouterr().err
    assert subset.main(["--data", str(src), "--out", str(out), "--subset", "1,1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no `split` array" in err and len(err.splitlines()) == 1
    assert not out.exists()

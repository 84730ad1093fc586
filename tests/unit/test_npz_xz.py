"""The lossless .npz packing the GPU machine's data travels in."""

import lzma
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import npz_xz  # noqa: E402


def test_pack_then_unpack_gives_every_array_back_equal(tmp_path) -> None:
    rng = np.random.default_rng(0)
    arrays = {
        "x_image": rng.integers(0, 256, (20, 3072), dtype=np.uint8),
        "labels": np.arange(20, dtype=np.int64),
        "split": (np.arange(20) % 2).astype(np.int8),
    }
    np.savez_compressed(tmp_path / "d.npz", **arrays)
    npz_xz.pack(tmp_path / "d.npz", tmp_path / "d.npz.xz")
    npz_xz.unpack(tmp_path / "d.npz.xz", tmp_path / "back.npz")
    with np.load(tmp_path / "back.npz") as back:
        assert sorted(back.files) == sorted(arrays)
        for k, v in arrays.items():
            assert back[k].dtype == v.dtype
            np.testing.assert_array_equal(back[k], v)


def test_unpack_refuses_a_damaged_stream_and_writes_nothing(tmp_path) -> None:
    bad = lzma.compress(b"not an npz", format=lzma.FORMAT_XZ)
    (tmp_path / "bad.xz").write_bytes(bad)
    with pytest.raises(ValueError):
        npz_xz.unpack(tmp_path / "bad.xz", tmp_path / "out.npz")
    assert not (tmp_path / "out.npz").exists()


def test_cli_names_a_missing_file(tmp_path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "npz_xz.py"), "pack"]
        + [str(tmp_path / "none.npz"), str(tmp_path / "x.xz")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2
    assert "none.npz: no such file" in out.stderr

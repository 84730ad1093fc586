"""`python -m settings check` reads the data: each bad input is one line, exit 2.

Every case here passed the check before it read the data (exit 0; the loader's
error came only after the SuperLink and Ray had started). The npz cases also show
that the check and the loader say the same words: one implementation.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from settings.check import main

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
CIFAR = Path("/work/shared/data/cifar10_jpeg.npz")
if not CIFAR.is_file():
    CIFAR = SHARED / "cifar10_jpeg.npz"


def _run(capsys, override: str) -> tuple[int, list[str]]:
    code = main(["check", "--quiet", "--run-config", override])
    captured = capsys.readouterr()
    assert captured.out == ""
    return code, captured.err.strip().splitlines()


def _refused(capsys, override: str, *needles: str) -> str:
    code, lines = _run(capsys, override)
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: run config: "), lines
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _npz(path: Path, **arrays: np.ndarray) -> str:
    np.savez(path, **arrays)
    return f"dataset='npz' data-path='{path}'"


def _same_as_loader(line: str, path: Path) -> None:
    """The loader (what the ServerApp runs) refuses the file in the same words."""
    from hashdata import load_dataset

    with pytest.raises((ValueError, FileNotFoundError)) as err:
        load_dataset("npz", data_path=str(path))
    assert line == f"error: run config: {err.value}"


def test_nan_features(tmp_path, capsys):
    x = np.ones((4, 3), np.float32)
    x[2, 1] = np.nan
    x[3, 0] = np.inf
    over = _npz(tmp_path / "d.npz", x_image=x, labels=np.arange(4))
    line = _refused(capsys, over, "`x_image` has non-finite values", "in 2 of 4 rows")
    _same_as_loader(line, tmp_path / "d.npz")


def test_nan_in_a_compressed_array_past_the_first_chunk(tmp_path, capsys, monkeypatch):
    """The scan streams row chunks: a NaN in the last chunk is still found."""
    import hashdata.npz_file as npz_file

    monkeypatch.setattr(npz_file, "CHUNK_BYTES", 64)
    x = np.zeros((50, 8), np.float64)
    x[-1, -1] = np.nan
    path = tmp_path / "d.npz"
    np.savez_compressed(path, x_text=x, labels=np.zeros(50, np.int64))
    _refused(capsys, f"dataset='npz' data-path='{path}'", "in 1 of 50 rows")


def test_labels_shorter_than_features(tmp_path, capsys):
    over = _npz(tmp_path / "d.npz", x_image=np.zeros((5, 2)), labels=np.arange(3))
    line = _refused(capsys, over, "`x_image` has 5 rows but `labels` has 3")
    _same_as_loader(line, tmp_path / "d.npz")


def test_string_labels(tmp_path, capsys):
    labels = np.array(["cat", "dog", "cat"])
    over = _npz(tmp_path / "d.npz", x_image=np.zeros((3, 2)), labels=labels)
    line = _refused(capsys, over, "`labels` must have an integer dtype", "got <U3")
    _same_as_loader(line, tmp_path / "d.npz")


def test_no_arrays(tmp_path, capsys):
    over = _npz(tmp_path / "d.npz")
    line = _refused(capsys, over, "has no `labels` array (arrays present: none)")
    _same_as_loader(line, tmp_path / "d.npz")


def test_zero_rows(tmp_path, capsys):
    over = _npz(
        tmp_path / "d.npz", x_image=np.zeros((0, 2)), labels=np.zeros(0, np.int64)
    )
    line = _refused(capsys, over, "`labels` must be", "n >= 1, got shape (0,)")
    _same_as_loader(line, tmp_path / "d.npz")


def test_a_text_file_named_npz(tmp_path, capsys):
    path = tmp_path / "d.npz"
    path.write_text("x_image,labels\n1,0\n")
    line = _refused(
        capsys,
        f"dataset='npz' data-path='{path}'",
        "could not be read as a .npz archive",
    )
    _same_as_loader(line, path)


def test_resume_folder_that_does_not_exist(tmp_path, capsys):
    gone = tmp_path / "results" / "fedavg-digits-32b-iid-s42"
    _refused(capsys, f"resume='{gone}'", f"resume='{gone}': no such run directory")


def test_resume_folder_without_a_checkpoint(tmp_path, capsys):
    run = tmp_path / "r1.incomplete"
    run.mkdir()
    _refused(capsys, f"resume='{run}'", "no checkpoint.json there")


def test_classes_per_client_above_the_class_count(capsys):
    _refused(
        capsys,
        "partitioning='pathological' classes-per-client=50",
        "`classes-per-client` must be an integer in 1..10",
        "got 50",
    )


def test_classes_per_client_counts_the_npz_files_classes(tmp_path, capsys):
    labels = np.arange(30) % 3
    over = _npz(tmp_path / "d.npz", x_text=np.zeros((30, 2)), labels=labels)
    _refused(
        capsys,
        over + " partitioning='pathological' classes-per-client=4",
        "integer in 1..3 (the database has 3 distinct classes), got 4",
    )
    code, lines = _run(capsys, over + " partitioning='pathological'")
    assert code == 0, lines  # 3 of 3 classes is fine


def test_data_path_that_is_a_folder(tmp_path, capsys):
    line = _refused(capsys, f"dataset='npz' data-path='{tmp_path}'", "is a folder")
    assert "does not exist" not in line and "accepted: a file" in line


def test_more_clients_than_database_rows(tmp_path, capsys):
    """With --num-clients (make run passes NUM_CLIENTS) the partitioning of the
    database rows is checked with the ServerApp's rule."""
    split = (np.arange(12) < 2).astype(np.int8)  # 2 queries, 10 database rows
    over = _npz(
        tmp_path / "d.npz", x_text=np.zeros((12, 2)), labels=np.arange(12) % 3,
        split=split,
    )
    code = main(["check", "--quiet", "--num-clients", "20", "--run-config", over])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "20 clients" in err[0] and "the database has only 10 samples" in err[0]
    assert main(["check", "--quiet", "--num-clients", "10", "--run-config", over]) == 0
    code = main(
        ["check", "--quiet", "--num-clients", "4", "--run-config",
         over + " partition-repeats=3"]
    )
    assert code == 2
    assert "`partition-repeats`=3 does not divide the 4 clients" in (
        capsys.readouterr().err
    )


def test_a_missing_shared_file_names_the_recipe_that_makes_it(tmp_path, capsys):
    gone = tmp_path / "mirflickr25k_tags.npz"
    _refused(
        capsys,
        f"dataset='npz' data-path='{gone}'",
        "does not exist; make it from its public source with `python -m "
        f"hashdata.prepare mirflickr --source DIR --out {gone}`",
    )


def test_a_valid_file_passes(tmp_path, capsys):
    rng = np.random.default_rng(0)
    over = _npz(
        tmp_path / "d.npz",
        x_image=rng.integers(0, 255, (12, 48), dtype=np.uint8),
        x_text=rng.random((12, 5), dtype=np.float32),
        labels=np.arange(12) % 4,
        split=(np.arange(12) < 3).astype(np.int8),
    )
    code, lines = _run(capsys, over + " image-shape='4,4,3'")
    assert code == 0, lines


@pytest.mark.skipif(not CIFAR.is_file(), reason=f"{CIFAR} absent (shared data)")
def test_cifar10_copy_is_checked_without_reading_its_images(capsys, monkeypatch):
    """170 MB: headers, labels and split only; the uint8 images are never read."""
    import hashdata.loaders as loaders

    read: list[str] = []
    real_read, real_iter = loaders.read_array, loaders.iter_rows

    def spy_read(path, member):
        read.append(member.name)
        return real_read(path, member)

    def spy_iter(path, member, *args):
        read.append(member.name)
        return real_iter(path, member, *args)

    monkeypatch.setattr(loaders, "read_array", spy_read)
    monkeypatch.setattr(loaders, "iter_rows", spy_iter)
    over = f"dataset='npz' data-path='{CIFAR}' image-shape='32,32,3'"
    code, lines = _run(capsys, over)
    assert code == 0, lines
    assert sorted(read) == ["labels", "split"]
    _refused(
        capsys,
        over + " partitioning='pathological' classes-per-client=50",
        "integer in 1..10",
    )


def test_check_stays_off_flower_and_torch():
    """The check runs before anything starts: no flwr, ray or torch import."""
    import subprocess

    code = (
        "import sys; from settings.check import main; "
        "main(['check', '--quiet', '--run-config', \"resume='/nonexistent'\"]); "
        "print(sorted(m for m in ('flwr', 'ray', 'torch') if m in sys.modules))"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
        timeout=60, check=False,
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr

"""Helpers that write tiny, offline data files for tests.

* :func:`write_cifar10_fixture` - a CIFAR-10-format folder (``cifar-10-batches-py/``
  with pickled ``data_batch_1..5``, ``test_batch`` and ``batches.meta``) holding a
  few random images per file. The md5 sums do not match the official archive, so
  :func:`hashdata.load_dataset` loads it with a warning.
* :func:`write_npz` - save arbitrary arrays as a ``.npz`` file.
* :func:`write_feature_npz` - a small, class-separable feature dataset in the layout
  :func:`hashdata.load_dataset` expects for ``dataset="npz"``.
* :func:`modules_after_import` - the modules a fresh interpreter holds after
  importing one module of this repository (what an import pulls in).
* :func:`run_benchmark` - run ``benchmarks/<script>`` with ``--out`` in a fresh
  interpreter and return the JSON it wrote (a smoke test's run).
"""

from __future__ import annotations

import hashlib
import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np

CIFAR10_LABEL_NAMES = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
]
CIFAR10_TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]
CIFAR10_TEST_FILE = "test_batch"


def write_cifar10_fixture(
    root: str | Path,
    *,
    images_per_file: int = 4,
    seed: int = 0,
    bytes_keys: bool = True,
) -> Path:
    """Write a tiny CIFAR-10 folder under ``root``.

    Each of the six batch files holds ``images_per_file`` random images, in the
    official dict format: ``data`` uint8 ``(m, 3072)`` (1024 red, then green, then
    blue values per row), ``labels`` a list of ints in ``0..9``, plus
    ``batch_label`` and ``filenames``. Labels cycle through the classes starting
    at a file-dependent offset so every class appears when there are enough images.

    Parameters
    ----------
    root : str or pathlib.Path
        Folder to hold ``cifar-10-batches-py/`` (created if needed).
    images_per_file : int, optional
        Images per batch file; the fixture holds ``6 * images_per_file`` images
        (``5 * images_per_file`` train first, then the test ones).
    seed : int, optional
        Seed for the random pixels.
    bytes_keys : bool, optional
        Use ``bytes`` dict keys (``b"data"``, as the official files read with
        ``encoding="bytes"``) or ``str`` keys (as they read with
        ``encoding="latin1"``, torchvision's choice).

    Returns
    -------
    pathlib.Path
        ``root`` (pass it as ``data_path``).

    """
    root = Path(root)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)

    def key(name: str) -> str | bytes:
        return name.encode() if bytes_keys else name

    for offset, file_name in enumerate([*CIFAR10_TRAIN_FILES, CIFAR10_TEST_FILE]):
        data = rng.integers(0, 256, size=(images_per_file, 3072), dtype=np.uint8)
        labels = [(offset + i) % 10 for i in range(images_per_file)]
        entry = {
            key("batch_label"): f"fixture batch {offset}".encode(),
            key("labels"): labels,
            key("data"): data,
            key("filenames"): [f"img_{offset}_{i}.png".encode() for i in labels],
        }
        with open(folder / file_name, "wb") as f:
            pickle.dump(entry, f, protocol=2)
    meta = {
        key("num_cases_per_batch"): images_per_file,
        key("label_names"): list(CIFAR10_LABEL_NAMES),
        key("num_vis"): 3072,
    }
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump(meta, f, protocol=2)
    return root


def cifar10_fixture_md5(root: str | Path) -> dict[str, str]:
    """Return ``{file name: md5}`` of a :func:`write_cifar10_fixture` folder.

    The loader unpickles only files with the official archive's md5
    (``hashdata.loaders.official_cifar10_md5``); a test that loads the fixture
    patches that function to return these sums instead (the fixture stands in for
    the official archive; the refusal of any other file is tested on its own).
    """
    folder = Path(root) / "cifar-10-batches-py"
    names = [*CIFAR10_TRAIN_FILES, CIFAR10_TEST_FILE, "batches.meta"]
    return {
        n: hashlib.md5((folder / n).read_bytes(), usedforsecurity=False).hexdigest()
        for n in names
    }


def read_cifar10_fixture(root: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read back a fixture written by :func:`write_cifar10_fixture`.

    Returns
    -------
    images : numpy.ndarray
        ``(n, 3, 32, 32)`` uint8, train files first, then the test file.
    labels : numpy.ndarray
        ``(n,)`` int64.

    """
    folder = Path(root) / "cifar-10-batches-py"
    images, labels = [], []
    for file_name in [*CIFAR10_TRAIN_FILES, CIFAR10_TEST_FILE]:
        with open(folder / file_name, "rb") as f:
            entry = pickle.load(f, encoding="latin1")
        entry = {
            (k.decode() if isinstance(k, bytes) else k): v for k, v in entry.items()
        }
        images.append(entry["data"].reshape(-1, 3, 32, 32))
        labels.extend(entry["labels"])
    return np.concatenate(images), np.asarray(labels, dtype=np.int64)


def write_npz(path: str | Path, **arrays: np.ndarray) -> Path:
    """Save ``arrays`` (name -> array) uncompressed to ``path`` and return it.

    Parameters
    ----------
    path : str or pathlib.Path
        Target file; should end in ``.npz``.
    **arrays : numpy.ndarray
        Arrays to store, e.g. ``x_image=..., labels=...``.

    Returns
    -------
    pathlib.Path
        ``path``.

    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


def make_features(
    *,
    n: int = 60,
    num_classes: int = 4,
    dims: dict[str, int] | None = None,
    multi_label: bool = False,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Build class-separable features and labels in memory.

    Parameters
    ----------
    n : int, optional
        Number of samples.
    num_classes : int, optional
        Number of classes ``C``.
    dims : dict[str, int], optional
        Modality -> feature dimension; default ``{"image": 16, "text": 8}``.
    multi_label : bool, optional
        ``False``: ``labels`` is ``(n,)`` int64, every class present (cyclic).
        ``True``: ``labels`` is ``(n, C)`` uint8 multi-hot with 1-2 positives per row.
    seed : int, optional
        Seed for the noise and the extra positive classes.

    Returns
    -------
    dict[str, numpy.ndarray]
        ``{"x_<modality>": (n, d) float32, ..., "labels": ...}``, ready for
        :func:`write_npz`.

    """
    dims = {"image": 16, "text": 8} if dims is None else dims
    rng = np.random.default_rng(seed)
    primary = np.arange(n, dtype=np.int64) % num_classes
    arrays: dict[str, np.ndarray] = {}
    for modality, d in dims.items():
        centers = rng.normal(size=(num_classes, d)).astype(np.float32) * 3
        noise = rng.normal(size=(n, d)).astype(np.float32)
        arrays[f"x_{modality}"] = centers[primary] + noise
    if multi_label:
        hot = np.zeros((n, num_classes), dtype=np.uint8)
        hot[np.arange(n), primary] = 1
        extra = rng.integers(0, num_classes, size=n)
        hot[np.arange(n), extra] = 1
        arrays["labels"] = hot
    else:
        arrays["labels"] = primary
    return arrays


def write_feature_npz(
    path: str | Path,
    *,
    n: int = 60,
    num_classes: int = 4,
    dims: dict[str, int] | None = None,
    multi_label: bool = False,
    seed: int = 0,
) -> Path:
    """Write :func:`make_features` output to ``path`` (a ``.npz``) and return it."""
    return write_npz(
        path,
        **make_features(
            n=n, num_classes=num_classes, dims=dims, multi_label=multi_label, seed=seed
        ),
    )


def modules_after_import(module: str) -> set[str]:
    """Names in ``sys.modules`` of a fresh interpreter after ``import module``.

    Run from the repository root, so the import sees this checkout.
    """
    code = f"import json, sys; import {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def run_benchmark(script: str, out: Path, *args: str) -> dict:
    """Run ``python benchmarks/<script> *args --out out``; return the JSON it wrote.

    Fails the test with the tail of its stderr when the script exits non-zero.
    """
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, str(root / "benchmarks" / script), *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(Path(out).read_text())

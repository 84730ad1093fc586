"""Dataset loaders: every dataset becomes one in-memory :class:`HashDataset`.

Four sources are supported (``DATASETS``), selected by the ``dataset`` config key:

``digits``
    scikit-learn's embedded ``load_digits()`` (offline): 1,797 grey 8x8 images of
    10 classes, scaled to ``[0, 1]``.
``multiview-digits``
    The same digits as two feature views, ``image`` (64 pixels) and ``hog``
    (gradient-orientation histograms); see :mod:`hashdata.multiview`.
``npz``
    A ``.npz`` file (``data-path``) of pre-extracted features: one or more
    ``x_<modality>`` arrays of shape ``(n, d)`` and ``labels`` that are either
    ``(n,)`` non-negative integers (single-label; class ``c`` is used as is and
    ``num_classes = labels.max() + 1``, nothing is remapped) or ``(n, C)`` multi-hot
    ``{0, 1}`` (multi-label; every sample needs at least one positive class).
``cifar10``
    torchvision's CIFAR-10 under ``data-path`` (``cifar-10-batches-py/``); the
    50,000 training and 10,000 test images are pooled (train first, then test) and
    the retrieval protocol (:func:`hashdata.split_query_database`) draws the query
    set from the pool. Held as float32 this is about 740 MB.

Nothing here downloads anything unless ``download=True`` is passed for ``cifar10``.
"""

from __future__ import annotations

import os
import pickle
import warnings
from pathlib import Path

import numpy as np

from hashdata.dataset import HashDataset
from hashdata.multiview import load_multiview_digits

DATASETS: tuple[str, ...] = ("digits", "npz", "cifar10", "multiview-digits")

#: Per-channel mean / std of the CIFAR-10 training images (RGB, pixel values in
#: ``[0, 1]``), the usual normalisation constants.
CIFAR10_MEAN: tuple[float, float, float] = (0.4914, 0.4822, 0.4465)
CIFAR10_STD: tuple[float, float, float] = (0.2470, 0.2435, 0.2616)

_CIFAR_FOLDER = "cifar-10-batches-py"


def load_dataset(
    name: str, *, data_path: str = "", download: bool = False
) -> HashDataset:
    """Load a dataset by name (the ``dataset`` config key).

    Parameters
    ----------
    name : str
        One of ``DATASETS``: ``"digits"``, ``"npz"``, ``"cifar10"`` or
        ``"multiview-digits"``.
    data_path : str, optional
        ``npz``: path of the ``.npz`` file. ``cifar10``: the folder that holds (or,
        with ``download=True``, will receive) ``cifar-10-batches-py/``. Ignored for
        ``digits``.
    download : bool, optional
        ``cifar10`` only: fetch the official archive when any expected file is
        missing under ``data_path`` (needs network access). Files that are all
        present are never re-downloaded or overwritten; if their md5 differs from
        the official archive they are loaded with a ``UserWarning``. Default
        ``False``.

    Returns
    -------
    HashDataset
        The whole dataset; split it with :func:`hashdata.split_query_database`.

    Raises
    ------
    ValueError
        Unknown ``name`` or malformed data (the message names the config key).
    FileNotFoundError
        The file or folder given by ``data-path`` does not exist / is incomplete.

    """
    key = str(name).strip().lower()
    if key == "digits":
        return _load_digits()
    if key == "npz":
        return _load_npz(data_path)
    if key == "cifar10":
        return _load_cifar10(data_path, download=download)
    if key == "multiview-digits":
        return load_multiview_digits()
    raise ValueError(
        f"Unknown dataset {name!r} (config key `dataset`); accepted: "
        f"{', '.join(DATASETS)}"
    )


# ---------------------------------------------------------------------------------
# digits
# ---------------------------------------------------------------------------------
def _load_digits() -> HashDataset:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = np.asarray(bunch.images, dtype=np.float32) / np.float32(16.0)
    images = images[:, None, :, :]  # (n, 1, 8, 8)
    labels = np.asarray(bunch.target, dtype=np.int64)
    return HashDataset(
        name="digits",
        inputs={"image": np.ascontiguousarray(images)},
        labels=labels,
        num_classes=10,
        multi_label=False,
        kind="image",
        description=(
            f"digits: scikit-learn load_digits, {len(labels)} grey 1x8x8 images in "
            "[0,1], 10 classes, single-label"
        ),
    )


# ---------------------------------------------------------------------------------
# npz
# ---------------------------------------------------------------------------------
def _require_data_path(data_path: str, dataset: str, what: str) -> Path:
    if not str(data_path).strip():
        raise ValueError(
            f"dataset={dataset!r} needs the config key `data-path` set to {what}; "
            "it is empty"
        )
    return Path(str(data_path)).expanduser()


def _load_npz(data_path: str) -> HashDataset:
    path = _require_data_path(data_path, "npz", "a .npz file")
    if not path.is_file():
        raise FileNotFoundError(
            f"`data-path` {str(path)!r} is not a file; dataset='npz' needs a .npz "
            "file with `x_<modality>` arrays (n x d) and `labels`"
        )
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {k: archive[k] for k in archive.files}
    except Exception as err:  # zipfile.BadZipFile, ValueError (pickled objects), ...
        raise ValueError(
            f"`data-path` {str(path)!r} could not be read as a .npz archive of "
            f"numeric arrays (pickled objects are not accepted): {err}"
        ) from err

    present = ", ".join(sorted(arrays)) or "none"
    if "labels" not in arrays:
        raise ValueError(
            f"`data-path` {str(path)!r} has no `labels` array (arrays present: "
            f"{present}); add labels as (n,) non-negative integers or (n, C) "
            "multi-hot {0,1}"
        )
    x_keys = sorted(k for k in arrays if k.startswith("x_"))
    if not x_keys:
        raise ValueError(
            f"`data-path` {str(path)!r} has no `x_<modality>` array (arrays present: "
            f"{present}); add at least one, e.g. `x_image` of shape (n, d)"
        )

    labels_raw = arrays["labels"]
    n = len(labels_raw) if labels_raw.ndim >= 1 else 0
    if labels_raw.ndim not in (1, 2) or n == 0:
        raise ValueError(
            f"`data-path` {str(path)!r}: `labels` must be (n,) integers or (n, C) "
            f"multi-hot with n >= 1, got shape {labels_raw.shape}"
        )

    inputs: dict[str, np.ndarray] = {}
    for key in x_keys:
        modality = key[2:]
        x = arrays[key]
        if not modality:
            raise ValueError(
                f"`data-path` {str(path)!r}: array `x_` has no modality name; name "
                "it `x_<modality>`, e.g. `x_image`"
            )
        if x.ndim != 2:
            raise ValueError(
                f"`data-path` {str(path)!r}: `{key}` must be 2-D (n x d), got shape "
                f"{x.shape}"
            )
        if len(x) != n:
            raise ValueError(
                f"`data-path` {str(path)!r}: `{key}` has {len(x)} rows but `labels` "
                f"has {n}; every array needs one row per sample"
            )
        if not (np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_):
            raise ValueError(
                f"`data-path` {str(path)!r}: `{key}` must be numeric, got dtype "
                f"{x.dtype}"
            )
        if np.iscomplexobj(x):
            raise ValueError(
                f"`data-path` {str(path)!r}: `{key}` must be real-valued, got dtype "
                f"{x.dtype}"
            )
        with np.errstate(over="ignore"):
            x32 = np.ascontiguousarray(x, dtype=np.float32)
        bad = int(np.count_nonzero(~np.isfinite(x32).all(axis=1)))
        if bad:
            raise ValueError(
                f"`data-path` {str(path)!r}: `{key}` has non-finite values (NaN/inf, "
                f"or too large for float32) in {bad} of {n} rows; clean or drop them"
            )
        inputs[modality] = x32

    if labels_raw.ndim == 1:
        labels, num_classes, multi = _single_labels(labels_raw, path)
    else:
        labels, num_classes, multi = _multi_hot_labels(labels_raw, path)

    dims = ", ".join(f"{m} {inputs[m].shape[1]}-d" for m in sorted(inputs))
    kind_txt = "multi-label" if multi else "single-label"
    return HashDataset(
        name=f"npz:{path.stem}",
        inputs=inputs,
        labels=labels,
        num_classes=num_classes,
        multi_label=multi,
        kind="features",
        description=(
            f"npz:{path.stem}: {n} samples, features ({dims}), {num_classes} classes, "
            f"{kind_txt}"
        ),
    )


def _single_labels(raw: np.ndarray, path: Path) -> tuple[np.ndarray, int, bool]:
    if not np.issubdtype(raw.dtype, np.integer):
        raise ValueError(
            f"`data-path` {str(path)!r}: 1-D `labels` must have an integer dtype "
            f"(class indices 0..C-1), got {raw.dtype}; for multi-label data store "
            "(n, C) multi-hot rows"
        )
    if raw.min() < 0:
        raise ValueError(
            f"`data-path` {str(path)!r}: `labels` must be non-negative class indices, "
            f"found {int(raw.min())}"
        )
    labels = raw.astype(np.int64)
    return labels, int(labels.max()) + 1, False


def _multi_hot_labels(raw: np.ndarray, path: Path) -> tuple[np.ndarray, int, bool]:
    if not (np.issubdtype(raw.dtype, np.number) or raw.dtype == np.bool_):
        raise ValueError(
            f"`data-path` {str(path)!r}: 2-D `labels` must be numeric multi-hot "
            f"{{0,1}}, got dtype {raw.dtype}"
        )
    if raw.shape[1] < 1:
        raise ValueError(
            f"`data-path` {str(path)!r}: 2-D `labels` needs at least one class "
            f"column, got shape {raw.shape}"
        )
    if not np.isin(raw, (0, 1)).all():
        odd = np.unique(raw[~np.isin(raw, (0, 1))])[:5].tolist()
        raise ValueError(
            f"`data-path` {str(path)!r}: 2-D `labels` must be multi-hot with values "
            f"0 or 1 only, found e.g. {odd}"
        )
    labels = raw.astype(np.uint8)
    empty = int(np.count_nonzero(labels.sum(axis=1) == 0))
    if empty:
        raise ValueError(
            f"`data-path` {str(path)!r}: {empty} of {len(labels)} samples have no "
            "positive label (all-zero multi-hot row); drop them from the file "
            "(they cannot be relevant to any query)"
        )
    return labels, int(labels.shape[1]), True


# ---------------------------------------------------------------------------------
# cifar10
# ---------------------------------------------------------------------------------
def _cifar_missing_files(root: Path) -> list[str]:
    """Return the expected CIFAR-10 file names that are absent under ``root``."""
    from torchvision.datasets import CIFAR10

    names = [f for f, _ in CIFAR10.train_list + CIFAR10.test_list]
    names.append(CIFAR10.meta["filename"])
    return [f for f in names if not (root / CIFAR10.base_folder / f).is_file()]


def _cifar_class() -> type:
    """Build the lenient CIFAR-10 subclass (imports torchvision lazily)."""
    from torchvision.datasets import CIFAR10
    from torchvision.datasets.utils import check_integrity
    from torchvision.datasets.vision import VisionDataset

    class LenientCIFAR10(CIFAR10):
        """torchvision ``CIFAR10`` that accepts complete but unofficial files.

        torchvision refuses files whose md5 differs from the official archive. This
        subclass still loads them when every expected file is present (a small test
        fixture, a re-pickled copy) and warns that they are not the official
        archive. Pickles with ``bytes`` keys (``b"data"``) and ``str`` keys
        (``"data"``) are both accepted. ``download=True`` only downloads when files
        are missing, so present files are never overwritten. ``data`` is kept as
        stored: ``(n, 3, 32, 32)`` uint8 (CHW, not torchvision's HWC).
        """

        def __init__(
            self, root: str, *, train: bool, download: bool, warn: bool = True
        ) -> None:
            VisionDataset.__init__(self, root)
            self.train = train
            self._warn = warn
            if download:
                self.download()
            if not self._check_integrity():
                raise FileNotFoundError(
                    "CIFAR-10 files missing under "
                    f"{os.path.join(self.root, self.base_folder)!r}: "
                    + ", ".join(_cifar_missing_files(Path(self.root)))
                )
            parts = self.train_list if train else self.test_list
            data: list[np.ndarray] = []
            targets: list[int] = []
            for file_name, _ in parts:
                entry = _unpickle(os.path.join(self.root, self.base_folder, file_name))
                data.append(np.asarray(entry["data"], dtype=np.uint8))
                targets.extend(int(t) for t in entry["labels"])
            self.data = np.vstack(data).reshape(-1, 3, 32, 32)
            self.targets = targets
            meta = _unpickle(
                os.path.join(self.root, self.base_folder, self.meta["filename"])
            )
            self.classes = [str(c) for c in meta[self.meta["key"]]]
            self.class_to_idx = {c: i for i, c in enumerate(self.classes)}

        def official_integrity(self) -> bool:
            """Return whether all files match the official md5 sums."""
            meta_path = os.path.join(self.root, self.base_folder, self.meta["filename"])
            return super()._check_integrity() and check_integrity(
                meta_path, self.meta["md5"]
            )

        def _check_integrity(self) -> bool:
            if _cifar_missing_files(Path(self.root)):
                return False
            if self.official_integrity():
                return True
            if self._warn:
                warnings.warn(
                    "CIFAR-10 files under "
                    f"{os.path.join(self.root, self.base_folder)!r} are not the "
                    "official archive (md5 mismatch); loading them anyway",
                    UserWarning,
                    stacklevel=5,
                )
            return True

        def download(self) -> None:
            """Download and extract the official archive if any file is missing."""
            if not _cifar_missing_files(Path(self.root)):
                return
            super().download()

        def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
            """Return ``(image (3, 32, 32) uint8, label)``."""
            return self.data[index], self.targets[index]

    return LenientCIFAR10


def _unpickle(file_path: str) -> dict:
    """Load a CIFAR pickle; ``bytes`` keys are decoded to ``str``."""
    with open(file_path, "rb") as f:
        entry = pickle.load(f, encoding="latin1")
    return {
        (k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in entry.items()
    }


def _load_cifar10(data_path: str, *, download: bool) -> HashDataset:
    root = _require_data_path(
        data_path,
        "cifar10",
        f"a folder that holds (or, with download=true, will receive) {_CIFAR_FOLDER}/",
    )
    missing = _cifar_missing_files(root)
    if missing and not download:
        raise FileNotFoundError(
            f"CIFAR-10 not found under `data-path` {str(root)!r} (missing "
            f"{_CIFAR_FOLDER}/ files: {', '.join(missing)}). Set `download=true` "
            f"while online, or place the extracted {_CIFAR_FOLDER}/ folder there"
        )
    if missing:
        root.mkdir(parents=True, exist_ok=True)
    cls = _cifar_class()
    train = cls(str(root), train=True, download=download)
    test = cls(str(root), train=False, download=False, warn=False)
    images_u8 = np.concatenate([train.data, test.data], axis=0)
    labels = np.asarray(train.targets + test.targets, dtype=np.int64)
    if labels.min() < 0 or labels.max() > 9:
        raise ValueError(
            f"CIFAR-10 files under `data-path` {str(root)!r} have labels outside 0..9"
        )
    mean = np.asarray(CIFAR10_MEAN, dtype=np.float32)[None, :, None, None]
    std = np.asarray(CIFAR10_STD, dtype=np.float32)[None, :, None, None]
    images = images_u8.astype(np.float32)
    images /= np.float32(255.0)
    images -= mean
    images /= std
    n_train = len(train.targets)
    return HashDataset(
        name="cifar10",
        inputs={"image": images},
        labels=labels,
        num_classes=10,
        multi_label=False,
        kind="image",
        description=(
            f"cifar10: torchvision CIFAR-10, {len(labels)} RGB 3x32x32 images "
            f"({n_train} train + {len(labels) - n_train} test pooled), normalised "
            "with channel mean/std, 10 classes, single-label"
        ),
    )

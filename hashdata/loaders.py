"""Dataset loaders: every dataset becomes one in-memory :class:`HashDataset`.

Four sources are supported (``DATASETS``), selected by the ``dataset`` config key:

``digits``
    scikit-learn's embedded ``load_digits()`` (offline): 1,797 grey 8x8 images of
    10 classes, scaled to ``[0, 1]``.
``multiview-digits``
    The same digits as two feature views, ``image`` (64 pixels) and ``hog``
    (gradient-orientation histograms); see :mod:`hashdata.multiview`.
``npz``
    A ``.npz`` file (``data-path``): one or more ``x_<modality>`` arrays and
    ``labels`` that are either ``(n,)`` non-negative integers (single-label; class
    ``c`` is used as is and ``num_classes = labels.max() + 1``, nothing is remapped)
    or ``(n, C)`` multi-hot ``{0, 1}`` (multi-label; every sample needs at least one
    positive class). An ``x_<modality>`` array is either ``(n, d)`` feature vectors
    or images: 4-D ``(n, H, W, C)`` or ``(n, C, H, W)`` (the channel axis is the one
    of axes 1 and 3 that alone has at most ``MAX_CHANNELS`` entries), or, for
    ``x_image`` only, flat ``(n, H*W*C)`` rows in HWC order when the image shape is
    given (``image_shape`` argument / ``image-shape`` config key, or an
    ``image_shape`` array of three integers in the file; a 2-D array is never
    reshaped on a guess). Images become ``(n, C, H, W)`` float32, uint8 or float,
    values as stored: scaling is :mod:`hashdata.scaling`'s job, after the split.
    An optional ``split`` array (one value per sample: 1 / 0, or ``"query"`` /
    ``"database"``; :func:`hashdata.protocol.fixed_split_mask`) fixes the query /
    database split; :func:`hashdata.load_split` then uses it instead of the seeded
    ``query-fraction`` draw (:attr:`HashDataset.fixed_split`).
``cifar10``
    torchvision's CIFAR-10 under ``data-path`` (``cifar-10-batches-py/``); the
    50,000 training and 10,000 test images are pooled (train first, then test) and
    the retrieval protocol (:func:`hashdata.split_query_database`) draws the query
    set from the pool. Held as float32 this is about 740 MB.

Nothing here downloads anything unless ``download=True`` is passed for ``cifar10``.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hashdata.dataset import HashDataset
from hashdata.multiview import load_multiview_digits
from hashdata.npz_file import NpzMember, iter_rows, npz_path, read_array, read_headers
from hashdata.protocol import SPLIT_ARRAY, fixed_split_mask, primary_labels

DATASETS: tuple[str, ...] = ("digits", "npz", "cifar10", "multiview-digits")
#: class counts known without reading a file (an ``npz`` file's are its own)
FIXED_NUM_CLASSES: dict[str, int] = {
    "digits": 10,
    "multiview-digits": 10,
    "cifar10": 10,
}

#: Per-channel mean / std of the CIFAR-10 training images (RGB, pixel values in
#: ``[0, 1]``), the usual normalisation constants.
CIFAR10_MEAN: tuple[float, float, float] = (0.4914, 0.4822, 0.4465)
CIFAR10_STD: tuple[float, float, float] = (0.2470, 0.2435, 0.2616)

_CIFAR_FOLDER = "cifar-10-batches-py"

#: Optional ``.npz`` array: the (H, W, C) of each flat ``x_image`` row (HWC order).
IMAGE_SHAPE_ARRAY = "image_shape"
#: Most channels an ``(n, H, W, C)`` / ``(n, C, H, W)`` image array may have.
MAX_CHANNELS = 4


def load_dataset(
    name: str,
    *,
    data_path: str = "",
    download: bool = False,
    image_shape: tuple[int, int, int] | None = None,
    modalities: tuple[str, ...] | None = None,
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
        present are never re-downloaded or overwritten. Every file must have the
        official archive's md5; one that does not is refused before it is
        unpickled (a pickle can run code). Default ``False``.
    image_shape : tuple of int (H, W, C), optional
        ``npz`` only (the ``image-shape`` config key): each row of a 2-D ``x_image``
        is one H x W x C image stored in HWC order (CIFAR-style flat pixels); it is
        reshaped to ``(n, C, H, W)``. ``None`` (default): a 2-D ``x_image`` is
        feature vectors, unless the file has an ``image_shape`` array (three
        integers H, W, C); both given must agree.
    modalities : tuple of str, optional
        ``npz`` only (the ``modalities`` config key): load only the arrays
        ``x_<name>`` for these names, each of which must exist. ``None`` (default):
        every ``x_<modality>`` array.

    Returns
    -------
    HashDataset
        The whole dataset; split it with :func:`hashdata.split_query_database`.

    Raises
    ------
    ValueError
        Unknown ``name`` or malformed data (the message names the config key); a
        CIFAR-10 file whose md5 is not the official one (the message names the
        file and the md5 expected).
    FileNotFoundError
        The file or folder given by ``data-path`` does not exist / is incomplete.

    """
    key = str(name).strip().lower()
    if image_shape is not None and key != "npz":
        raise ValueError(
            f"image-shape={image_shape!r} applies to dataset='npz' only (flat image "
            f"rows of `x_image`); dataset={name!r} has its own shape"
        )
    if modalities is not None and key != "npz":
        raise ValueError(
            f"modalities={modalities!r} applies to dataset='npz' only (its "
            f"`x_<modality>` arrays); dataset={name!r} has fixed inputs"
        )
    if key == "digits":
        return _load_digits()
    if key == "npz":
        return _load_npz(data_path, image_shape, modalities)
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
        scaled=True,
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


_NPZ_WHAT = "a .npz file with `x_<modality>` arrays (n x d) and `labels`"


@dataclass(frozen=True)
class NpzSummary:
    """What :func:`check_npz` found in a valid ``.npz`` (nothing large is held)."""

    path: Path
    num_samples: int
    num_classes: int
    multi_label: bool
    #: distinct primary labels (:func:`hashdata.protocol.primary_labels`)
    primary_classes: int
    #: ``{modality: shape of one sample as the loader returns it}``
    inputs: dict[str, tuple[int, ...]]
    labels: np.ndarray
    #: the file's query mask (``split`` array), if it has one
    fixed_split: np.ndarray | None


@dataclass(frozen=True)
class _NpzLayout:
    path: Path
    members: dict[str, NpzMember]
    x_keys: list[str]
    n: int
    hwc: tuple[int, int, int] | None


def check_npz(
    data_path: str,
    image_shape: tuple[int, int, int] | None = None,
    modalities: tuple[str, ...] | None = None,
) -> NpzSummary:
    """Check a ``.npz`` against every rule of the loader, without loading it.

    The same checks, in the same words, as :func:`load_dataset` ``("npz", ...)``
    (one implementation): the shapes, dtypes and row counts from the ``.npy``
    headers; ``labels``, ``split`` and ``image_shape`` in full (small); each float
    ``x_<modality>`` array streamed in row chunks for non-finite values (integer
    arrays, e.g. uint8 images, are finite by type and not read).

    Raises
    ------
    ValueError, FileNotFoundError
        As :func:`load_dataset` does, naming ``data-path`` and what is accepted.
    """
    layout = _npz_layout(data_path, image_shape, modalities)
    labels, num_classes, multi, fixed = _npz_labels(layout)
    shapes: dict[str, tuple[int, ...]] = {}
    for key in layout.x_keys:
        member = layout.members[key]
        hwc = layout.hwc if key == "x_image" else None
        shapes[key[2:]] = _sample_shape(member, hwc)
        if _may_be_nonfinite(member.dtype):
            chunks = iter_rows(layout.path, member)
            bad = sum(_nonfinite_rows(rows) for rows in chunks)
            if bad:
                raise _nonfinite_error(key, bad, layout.n, layout.path)
    return NpzSummary(
        path=layout.path,
        num_samples=layout.n,
        num_classes=num_classes,
        multi_label=multi,
        primary_classes=len(np.unique(primary_labels(labels))),
        inputs=shapes,
        labels=labels,
        fixed_split=fixed,
    )


def _load_npz(
    data_path: str,
    image_shape: tuple[int, int, int] | None,
    modalities: tuple[str, ...] | None = None,
) -> HashDataset:
    layout = _npz_layout(data_path, image_shape, modalities)
    path, n, hwc = layout.path, layout.n, layout.hwc
    labels, num_classes, multi, fixed = _npz_labels(layout)
    inputs: dict[str, np.ndarray] = {}
    for key in layout.x_keys:
        modality = key[2:]
        x = read_array(path, layout.members[key])
        if key == "x_image" and x.ndim == 2 and hwc is not None:
            x = x.reshape(len(x), *hwc)
        elif key == "x_image" and x.ndim == 2:
            _hint_flat_images(x, path)
        image_hwc = hwc if key == "x_image" else None
        if x.ndim == 4 and _channels_last(x.shape, key, image_hwc, path):
            x = x.transpose(0, 3, 1, 2)
        with np.errstate(over="ignore"):
            x32 = np.ascontiguousarray(x, dtype=np.float32)
        if not x32.flags.writeable:  # a memory-mapped member already float32
            x32 = x32.copy()
        if _may_be_nonfinite(x.dtype):
            bad = _nonfinite_rows(x32)
            if bad:
                raise _nonfinite_error(key, bad, n, path)
        inputs[modality] = x32

    dims = ", ".join(_describe_input(m, inputs[m]) for m in sorted(inputs))
    kind_txt = "multi-label" if multi else "single-label"
    primary = inputs[min(inputs, key=lambda m: (m != "image", m))]
    return HashDataset(
        name=f"npz:{path.stem}",
        inputs=inputs,
        labels=labels,
        num_classes=num_classes,
        multi_label=multi,
        kind="image" if primary.ndim == 4 else "features",
        description=(
            f"npz:{path.stem}: {n} samples, inputs ({dims}), {num_classes} classes, "
            f"{kind_txt}"
        ),
        fixed_split=fixed,
    )


def _npz_layout(
    data_path: str,
    image_shape: tuple[int, int, int] | None,
    modalities: tuple[str, ...] | None,
) -> _NpzLayout:
    """Every rule that the ``.npy`` headers decide (no array data is read)."""
    path = npz_path(data_path, what=_NPZ_WHAT)
    members = read_headers(path)
    present = ", ".join(sorted(members)) or "none"
    if "labels" not in members:
        raise ValueError(
            f"`data-path` {str(path)!r} has no `labels` array (arrays present: "
            f"{present}); add labels as (n,) non-negative integers or (n, C) "
            "multi-hot {0,1}"
        )
    x_keys = sorted(k for k in members if k.startswith("x_"))
    if not x_keys:
        raise ValueError(
            f"`data-path` {str(path)!r} has no `x_<modality>` array (arrays present: "
            f"{present}); add at least one, e.g. `x_image` of shape (n, d)"
        )
    if modalities is not None:
        missing = [m for m in modalities if f"x_{m}" not in members]
        if missing or not modalities:
            raise ValueError(
                f"`modalities` {','.join(modalities)!r}: `data-path` {str(path)!r} "
                f"has no array {', '.join(f'x_{m}' for m in missing) or '(none named)'}"
                f"; accepted names: {', '.join(k[2:] for k in x_keys)}"
            )
        x_keys = sorted(f"x_{m}" for m in modalities)

    labels = members["labels"]
    n = labels.rows
    if labels.ndim not in (1, 2) or n == 0:
        raise ValueError(
            f"`data-path` {str(path)!r}: `labels` must be (n,) integers or (n, C) "
            f"multi-hot with n >= 1, got shape {labels.shape}"
        )
    stored = members.get(IMAGE_SHAPE_ARRAY)
    hwc = _resolve_image_shape(
        image_shape, None if stored is None else read_array(path, stored), path
    )
    if hwc is not None and "x_image" not in x_keys:
        raise ValueError(
            f"`data-path` {str(path)!r}: an image shape {hwc} is given (config key "
            f"`image-shape` or array `{IMAGE_SHAPE_ARRAY}`) but the file has no "
            f"`x_image` array (arrays present: {present})"
        )
    for key in x_keys:
        x = members[key]
        if not key[2:]:
            raise ValueError(
                f"`data-path` {str(path)!r}: array `x_` has no modality name; name "
                "it `x_<modality>`, e.g. `x_image`"
            )
        if x.ndim not in (2, 4):
            raise ValueError(
                f"`data-path` {str(path)!r}: `{key}` must be 2-D (n x d) feature "
                "vectors (or flat images with `image-shape`) or 4-D images (n, H, W, "
                f"C) / (n, C, H, W), got shape {x.shape}"
            )
        if x.rows != n:
            raise ValueError(
                f"`data-path` {str(path)!r}: `{key}` has {x.rows} rows but `labels` "
                f"has {n}; every array needs one row per sample"
            )
        if not (np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_):
            raise ValueError(
                f"`data-path` {str(path)!r}: `{key}` must be numeric, got dtype "
                f"{x.dtype}"
            )
        if np.issubdtype(x.dtype, np.complexfloating):
            raise ValueError(
                f"`data-path` {str(path)!r}: `{key}` must be real-valued, got dtype "
                f"{x.dtype}"
            )
        if key == "x_image" and x.ndim == 2 and hwc is not None:
            h, w, c = hwc
            if x.shape[1] != h * w * c:
                raise ValueError(
                    f"`data-path` {str(path)!r}: `x_image` rows have {x.shape[1]} "
                    f"values but the image shape {h},{w},{c} (H,W,C) needs {h * w * c}"
                )
        if x.ndim == 4:
            _channels_last(x.shape, key, hwc if key == "x_image" else None, path)
    return _NpzLayout(path=path, members=members, x_keys=x_keys, n=n, hwc=hwc)


def _npz_labels(
    layout: _NpzLayout,
) -> tuple[np.ndarray, int, bool, np.ndarray | None]:
    """``labels`` and ``split`` read and checked: labels, classes, multi, split."""
    path, members = layout.path, layout.members
    raw = np.asarray(read_array(path, members["labels"]))
    if raw.ndim == 1:
        labels, num_classes, multi = _single_labels(raw, path)
    else:
        labels, num_classes, multi = _multi_hot_labels(raw, path)
    fixed = None
    if SPLIT_ARRAY in members:
        fixed = fixed_split_mask(
            np.asarray(read_array(path, members[SPLIT_ARRAY])),
            n=layout.n,
            where=f"`data-path` {str(path)!r}",
        )
    return labels, num_classes, multi, fixed


def _may_be_nonfinite(dtype: np.dtype) -> bool:
    """Integers and booleans are finite by type (and fit float32's range)."""
    return not (np.issubdtype(dtype, np.integer) or dtype == np.bool_)


def _nonfinite_rows(x: np.ndarray) -> int:
    """Rows of ``x`` with a NaN / inf value, or one too large for float32."""
    with np.errstate(over="ignore"):
        x32 = np.asarray(x, dtype=np.float32)
    return int(np.count_nonzero(~np.isfinite(x32).reshape(len(x32), -1).all(axis=1)))


def _nonfinite_error(key: str, bad: int, n: int, path: Path) -> ValueError:
    return ValueError(
        f"`data-path` {str(path)!r}: `{key}` has non-finite values (NaN/inf, or too "
        f"large for float32) in {bad} of {n} rows; clean or drop them"
    )


def _sample_shape(
    member: NpzMember, hwc: tuple[int, int, int] | None
) -> tuple[int, ...]:
    """One sample's shape as the loader returns it: ``(d,)`` or ``(C, H, W)``."""
    if member.ndim == 2 and hwc is not None:
        h, w, c = hwc
        return (c, h, w)
    if member.ndim == 4:
        _, a, b, d = member.shape
        last = _channels_last(member.shape, member.name, hwc, Path("."))
        return (d, a, b) if last else (a, b, d)
    return tuple(member.shape[1:])


def _describe_input(modality: str, x: np.ndarray) -> str:
    if x.ndim == 4:
        c, h, w = x.shape[1:]
        return f"{modality} {c}x{h}x{w} images"
    return f"{modality} {x.shape[1]}-d"


def _resolve_image_shape(
    configured: tuple[int, int, int] | None,
    stored: np.ndarray | None,
    path: Path,
) -> tuple[int, int, int] | None:
    """Return the (H, W, C) of flat `x_image` rows from the config key / file array."""
    from_file: tuple[int, int, int] | None = None
    if stored is not None:
        arr = np.asarray(stored)
        if (
            arr.shape != (3,)
            or not np.issubdtype(arr.dtype, np.integer)
            or int(arr.min()) < 1
        ):
            raise ValueError(
                f"`data-path` {str(path)!r}: `{IMAGE_SHAPE_ARRAY}` must hold three "
                f"positive integers (H, W, C), got {arr.tolist()!r} with dtype "
                f"{arr.dtype}"
            )
        h, w, c = (int(v) for v in arr)
        from_file = (h, w, c)
    if configured is not None:
        h, w, c = (int(v) for v in configured)
        if min(h, w, c) < 1:
            raise ValueError(
                f"image-shape={configured!r}: accepted are three positive integers "
                "H,W,C"
            )
        if from_file is not None and from_file != (h, w, c):
            raise ValueError(
                f"image-shape={h},{w},{c} disagrees with the array "
                f"`{IMAGE_SHAPE_ARRAY}` {list(from_file)} in `data-path` "
                f"{str(path)!r}; leave image-shape empty to use the file's"
            )
        return (h, w, c)
    return from_file


def _channels_last(
    shape: tuple[int, ...], key: str, hwc: tuple[int, int, int] | None, path: Path
) -> bool:
    """Whether a 4-D ``shape`` is (n, H, W, C) (True) or (n, C, H, W) (False).

    With ``hwc`` known the layout is the one that matches it; otherwise the channel
    axis is axis 3 or axis 1, whichever alone has at most ``MAX_CHANNELS`` entries.
    """
    _, a, b, d = shape
    if hwc is not None:
        h, w, c = hwc
        if (a, b, d) == (h, w, c):
            return True
        if (a, b, d) == (c, h, w):
            return False
        raise ValueError(
            f"`data-path` {str(path)!r}: `{key}` has shape {tuple(shape)}, which is "
            f"neither (n, H, W, C) nor (n, C, H, W) for the image shape {h},{w},{c}"
        )
    last, first = d <= MAX_CHANNELS, a <= MAX_CHANNELS
    if last and not first:
        return True
    if first and not last:
        return False
    raise ValueError(
        f"`data-path` {str(path)!r}: cannot tell the channel axis of `{key}` with "
        f"shape {tuple(shape)}: exactly one of axis 1 (n, C, H, W) and axis 3 (n, H, "
        f"W, C) must have at most {MAX_CHANNELS} entries; set `image-shape` = 'H,W,C' "
        f"(or store an `{IMAGE_SHAPE_ARRAY}` array) to say which"
    )


def _hint_flat_images(x: np.ndarray, path: Path) -> None:
    """Warn when 2-D uint8 `x_image` rows could be flat images (never reshaped)."""
    if x.dtype != np.uint8:
        return
    d = int(x.shape[1])
    for c in (3, 1):
        side = int(round((d / c) ** 0.5))
        if side >= 2 and side * side * c == d:
            warnings.warn(
                f"`x_image` of `data-path` {str(path)!r} is uint8 with {d} values per "
                f"row and no image shape: it is used as {d}-d feature vectors. If each "
                f"row is an image in HWC order, set image-shape='{side},{side},{c}' "
                f"(or store an `{IMAGE_SHAPE_ARRAY}` array) to train an image model",
                UserWarning,
                stacklevel=4,
            )
            return


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


def official_cifar10_md5() -> dict[str, str]:
    """Return ``{file name: md5}`` of the official ``cifar-10-python.tar.gz``.

    The sums are torchvision's (``CIFAR10.train_list``, ``test_list``, ``meta``).
    """
    from torchvision.datasets import CIFAR10

    sums = dict(CIFAR10.train_list + CIFAR10.test_list)
    sums[CIFAR10.meta["filename"]] = CIFAR10.meta["md5"]
    return sums


def _cifar_class() -> type:
    """Build the checked CIFAR-10 subclass (imports torchvision lazily)."""
    from torchvision.datasets import CIFAR10
    from torchvision.datasets.vision import VisionDataset

    class CheckedCIFAR10(CIFAR10):
        """torchvision ``CIFAR10`` that unpickles only the official files.

        Each file is read once, its md5 compared with the official archive's
        (:func:`official_cifar10_md5`), and only then unpickled from the bytes
        read (no second read that could see another file). A file with another
        md5 (a re-pickled copy, anything written into the data folder) is refused
        before ``pickle`` sees it: a pickle can run code. Keys are decoded from
        ``bytes`` to ``str``. ``download=True`` only downloads when files are
        missing, so present files are never overwritten. ``data`` is kept as
        stored: ``(n, 3, 32, 32)`` uint8 (CHW, not torchvision's HWC).
        """

        def __init__(self, root: str, *, train: bool, download: bool) -> None:
            VisionDataset.__init__(self, root)
            self.train = train
            if download:
                self.download()
            if _cifar_missing_files(Path(self.root)):
                raise FileNotFoundError(
                    "CIFAR-10 files missing under "
                    f"{os.path.join(self.root, self.base_folder)!r}: "
                    + ", ".join(_cifar_missing_files(Path(self.root)))
                )
            parts = self.train_list if train else self.test_list
            data: list[np.ndarray] = []
            targets: list[int] = []
            official = official_cifar10_md5()
            folder = os.path.join(self.root, self.base_folder)
            for file_name, _ in parts:
                entry = _unpickle(os.path.join(folder, file_name), official[file_name])
                data.append(np.asarray(entry["data"], dtype=np.uint8))
                targets.extend(int(t) for t in entry["labels"])
            self.data = np.vstack(data).reshape(-1, 3, 32, 32)
            self.targets = targets
            name = self.meta["filename"]
            meta = _unpickle(os.path.join(folder, name), official[name])
            self.classes = [str(c) for c in meta[self.meta["key"]]]
            self.class_to_idx = {c: i for i, c in enumerate(self.classes)}

        def download(self) -> None:
            """Download and extract the official archive if any file is missing."""
            if not _cifar_missing_files(Path(self.root)):
                return
            super().download()

        def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
            """Return ``(image (3, 32, 32) uint8, label)``."""
            return self.data[index], self.targets[index]

    return CheckedCIFAR10


def _unpickle(file_path: str, md5: str) -> dict:
    """Load a CIFAR pickle whose bytes have md5 ``md5``; keys decoded to ``str``.

    Raises
    ------
    ValueError
        Before unpickling, naming the file and the md5 expected, if it differs.
    """
    with open(file_path, "rb") as f:
        raw = f.read()
    got = hashlib.md5(raw, usedforsecurity=False).hexdigest()
    if got != md5:
        raise ValueError(
            f"CIFAR-10 file {file_path!r} has md5 {got}, not the official {md5}: "
            "refused before unpickling (a pickle can run code); accepted: the files "
            "of the official cifar-10-python.tar.gz, or the data as dataset='npz'"
        )
    entry = pickle.loads(raw, encoding="latin1")  # noqa: S301 (official bytes only)
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
    test = cls(str(root), train=False, download=False)
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
        scaled=True,
        description=(
            f"cifar10: torchvision CIFAR-10, {len(labels)} RGB 3x32x32 images "
            f"({n_train} train + {len(labels) - n_train} test pooled), normalised "
            "with channel mean/std, 10 classes, single-label"
        ),
    )

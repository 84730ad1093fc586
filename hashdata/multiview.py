"""Multi-view digits: two fixed views of scikit-learn's embedded digits, and checks.

``multiview-digits`` is built from ``sklearn.datasets.load_digits()`` (offline, no
download): 1,797 grey 8x8 images of 10 classes, single-label. It is *not* a
natural multi-modal dataset (image + text); it is two hand-made views of the same
images, for exercising multi-modal code paths without external data:

``image`` (64-d)
    The raw pixels, row-major, scaled from 0..16 to [0, 1].
``hog`` (32-d)
    A HOG-style histogram of gradient orientations: gradients of the [0, 1] image
    by ``numpy.gradient`` (central differences inside, one-sided at the border);
    unsigned orientation ``atan2(gy, gx) mod pi`` in 8 bins of width pi/8 (hard
    assignment, no interpolation), each pixel voting with its gradient magnitude;
    2 x 2 cells of 4 x 4 pixels; each cell's 8-bin histogram scaled to unit L2 norm
    (``v / sqrt(||v||^2 + 1e-12)``, so a blank cell stays 0; no block
    normalisation). Layout: cell-major (top-left, top-right, bottom-left,
    bottom-right), then bin.

Both views are deterministic functions of the image. :func:`require_multimodal`
checks that any :class:`~hashdata.dataset.HashDataset` (this one or an ``.npz`` with
several ``x_<modality>`` arrays) has what PFMH needs.
"""

from __future__ import annotations

import numpy as np

from hashdata.dataset import HashDataset

#: Name of the dataset (``dataset`` config key).
MULTIVIEW_DIGITS = "multiview-digits"
#: Orientation bins and cells per side of the ``hog`` view.
HOG_BINS = 8
HOG_CELLS = 2


def gradient_orientation_histograms(
    images: np.ndarray, *, bins: int = HOG_BINS, cells: int = HOG_CELLS
) -> np.ndarray:
    """Compute the ``hog`` view: per-cell, L2-normalised orientation histograms.

    Parameters
    ----------
    images : np.ndarray
        (n, H, W) grey images, H and W divisible by ``cells``.
    bins : int
        Orientation bins over [0, pi).
    cells : int
        Cells per side (``cells x cells`` cells).

    Returns
    -------
    np.ndarray
        (n, cells * cells * bins) float32, each cell's histogram of unit L2 norm
        (or all zero for a cell without gradient).
    """
    x = np.asarray(images, dtype=np.float64)
    if x.ndim != 3:
        raise ValueError(f"images must be (n, H, W), got shape {x.shape}")
    n, height, width = x.shape
    if height % cells or width % cells or height < 2 or width < 2:
        raise ValueError(
            f"images of {height}x{width} cannot be split into {cells}x{cells} cells"
        )
    gy, gx = np.gradient(x, axis=(1, 2))
    magnitude = np.hypot(gx, gy)
    angle = np.mod(np.arctan2(gy, gx), np.pi)
    index = np.minimum((angle / (np.pi / bins)).astype(np.int64), bins - 1)
    votes = (index[..., None] == np.arange(bins)) * magnitude[..., None]
    ch, cw = height // cells, width // cells
    hist = votes.reshape(n, cells, ch, cells, cw, bins).sum(axis=(2, 4))
    hist = hist / np.sqrt((hist**2).sum(axis=-1, keepdims=True) + 1e-12)
    return hist.reshape(n, cells * cells * bins).astype(np.float32)


def load_multiview_digits() -> HashDataset:
    """Load ``multiview-digits``: views ``image`` (64-d) and ``hog`` (32-d).

    Returns
    -------
    HashDataset
        ``kind="features"``, 1,797 samples, labels (n,) int64 in 0..9.
    """
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = np.asarray(bunch.images, dtype=np.float64) / 16.0  # (n, 8, 8)
    labels = np.asarray(bunch.target, dtype=np.int64)
    pixels = np.ascontiguousarray(images.reshape(len(images), -1), dtype=np.float32)
    hog = gradient_orientation_histograms(images)
    return HashDataset(
        name=MULTIVIEW_DIGITS,
        inputs={"image": pixels, "hog": hog},
        labels=labels,
        num_classes=10,
        multi_label=False,
        kind="features",
        scaled=True,
        description=(
            f"{MULTIVIEW_DIGITS}: scikit-learn load_digits, {len(labels)} samples, "
            "two views of each 8x8 image: image (64 raw pixels in [0,1]) and hog "
            f"({HOG_CELLS}x{HOG_CELLS} cells x {HOG_BINS} gradient-orientation "
            "bins, 32-d); 10 classes, single-label"
        ),
    )


def require_multimodal(ds: HashDataset) -> None:
    """Raise ``ValueError`` unless ``ds`` has >= 2 modalities of equal length.

    Parameters
    ----------
    ds : HashDataset
        A loaded dataset.

    Raises
    ------
    ValueError
        Fewer than two modalities (the message names those present), or
        modality arrays whose lengths differ from each other or from the labels.
    """
    present = ds.modalities
    if len(present) < 2:
        raise ValueError(
            f"dataset {ds.name!r} has {len(present)} "
            f"{'modality' if len(present) == 1 else 'modalities'} "
            f"({', '.join(present) or 'none'}); PFMH needs at least two, e.g. "
            "dataset='multiview-digits' or an .npz with x_image and x_text arrays"
        )
    lengths = {m: len(ds.inputs[m]) for m in present}
    if len(set(lengths.values())) != 1 or len(ds.labels) not in lengths.values():
        raise ValueError(
            f"dataset {ds.name!r}: modality arrays have lengths {lengths} and there "
            f"are {len(ds.labels)} labels; every modality needs one row per sample"
        )


def modality_dims(ds: HashDataset) -> dict[str, int]:
    """Flattened per-sample size of every modality, in ``ds.modalities`` order.

    Use as ``input_dims`` of :func:`hashing.pfmh.model.build_multimodal_model`.
    """
    return {m: int(np.prod(ds.inputs[m].shape[1:])) for m in ds.modalities}

"""Input scaling (the ``feature-scaling`` config key), applied after the split.

Users bring features as they are: raw 8-bit pixels (0..255), counts, unit-norm
embeddings, probabilities. Hash networks trained on raw 0..255 inputs do much worse
(FedHAP most of all) than on scaled ones, so the inputs are scaled once the
query/database split is known, with statistics from the **database part only**:

``auto`` (default)
    Datasets whose loader already normalises them (``digits``, ``multiview-digits``,
    ``cifar10``: :attr:`HashDataset.scaled`) are left exactly as loaded. For
    ``.npz`` data, per modality: a feature array whose values all lie in [0, 1],
    whose rows all have unit L2 norm, or that has negative values (centred
    features) is left exactly as given; a non-negative array beyond 1 (raw pixels,
    counts) is scaled like ``standard``, and so are image arrays ``(n, C, H, W)``
    (per channel, which for 8-bit pixels equals "divide by 255, then subtract the
    channel mean and divide by the channel std"). What looks scaled is judged on
    the database part. ``standard`` rather than ``minmax`` because on raw 0..255
    digits it trained better codes than [0, 1] in every one of 3 seeds, for FedAvg
    and FedHAP (docs/data.md).
``none``
    As given (built-in datasets: as their loader normalises them). A ``.npz``
    modality that ``auto`` would have scaled gets a ``UserWarning`` naming the file
    and its observed range.
``minmax``
    One range per modality (not per column): ``(x - lo) / (hi - lo)`` with ``lo``,
    ``hi`` the smallest and largest value in the database part, so the database
    lies in [0, 1]. A single affine map keeps the relative scale of the features
    and the order of Euclidean distances. Queries may fall slightly outside [0, 1];
    they are not clipped.
``standard``
    Per feature column (per channel for images): subtract the database part's mean,
    divide by its standard deviation (``ddof=0``; a constant column is only
    centred).
``l2``
    Per sample: each row (each image, all pixels) divided by its L2 norm; an
    all-zero row stays zero. Needs no statistics.

Why database statistics: the query set plays the role of unseen data and must not
shape the preprocessing; and every client and the server's queries must share one
input map, or a model averaged over clients sees differently scaled inputs on each
and the published codes are not comparable. Per-client statistics would give each
client its own map (and the server none for its queries), so they are not offered.
Every node computes the same statistics because each one runs the same seeded
protocol on its copy of the data file (``clients/data.py``); they summarise the whole
database (per modality two numbers for ``minmax``, a mean and a std per column for
``standard``), which is a property of the simulation protocol, not something a
client would learn from the others in a deployment where each holds only its part.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Sequence

import numpy as np

from hashdata.dataset import HashDataset

#: Accepted values of ``feature-scaling`` (``settings/run_settings.py`` repeats them
#: so that ``python -m settings check`` need not import this package; a test keeps
#: the two equal).
FEATURE_SCALINGS: tuple[str, ...] = ("auto", "none", "minmax", "standard", "l2")

#: Largest deviation of a row norm from 1 for a feature array to count as unit-norm.
UNIT_NORM_TOLERANCE = 1e-3

#: Rows per chunk when statistics are accumulated (bounds temporary memory).
_CHUNK_ROWS = 4096

_log = logging.getLogger(__name__)


def validate_feature_scaling(mode: str) -> str:
    """Return ``mode`` if it is one of :data:`FEATURE_SCALINGS`, else raise.

    Raises
    ------
    ValueError
        Naming the config key ``feature-scaling`` and the accepted values.
    """
    if mode not in FEATURE_SCALINGS:
        raise ValueError(
            f"feature-scaling={mode!r}: accepted are {', '.join(FEATURE_SCALINGS)}"
        )
    return mode


def value_range(x: np.ndarray) -> tuple[float, float]:
    """Smallest and largest value of ``x`` (``(0.0, 0.0)`` when empty)."""
    if x.size == 0:
        return 0.0, 0.0
    return float(x.min()), float(x.max())


def looks_scaled(x: np.ndarray) -> bool:
    """Whether a feature array needs no scaling.

    Values in [0, 1], unit-norm rows, or any negative value (centred features:
    embeddings, standardised or PCA features are left as given; what ``auto``
    rescales is non-negative data beyond 1, such as raw 0..255 pixels or counts).

    Parameters
    ----------
    x : numpy.ndarray
        ``(n, ...)`` samples; a row is one flattened sample.

    Returns
    -------
    bool
        ``True`` when every value lies in [0, 1], some value is negative, or every
        row has L2 norm within :data:`UNIT_NORM_TOLERANCE` of 1 (all-zero rows are
        allowed, as long as at least one row is non-zero).
    """
    lo, hi = value_range(x)
    if hi <= 1.0 or lo < 0.0:
        return True
    norms = _row_norms(x)
    nonzero = norms > 0
    return bool(
        nonzero.any() and np.all(np.abs(norms[nonzero] - 1.0) <= UNIT_NORM_TOLERANCE)
    )


def _looks_scaled_database(x: np.ndarray, rows: np.ndarray) -> bool:
    """:func:`looks_scaled` judged on the database rows only (queries never decide)."""
    return looks_scaled(x[rows] if len(rows) else x)


def _row_norms(x: np.ndarray) -> np.ndarray:
    flat = x.reshape(len(x), -1)
    out = np.empty(len(flat), dtype=np.float64)
    for start in range(0, len(flat), _CHUNK_ROWS):
        block = flat[start : start + _CHUNK_ROWS].astype(np.float64)
        out[start : start + len(block)] = np.sqrt(np.einsum("ij,ij->i", block, block))
    return out


def _is_image(x: np.ndarray) -> bool:
    return x.ndim == 4


def _moments(
    x: np.ndarray, rows: np.ndarray, axes: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std (``ddof=0``, float64) of ``x[rows]`` over ``axes``, chunked."""
    count = 0
    total: np.ndarray | float = 0.0
    for start in range(0, len(rows), _CHUNK_ROWS):
        block = x[rows[start : start + _CHUNK_ROWS]].astype(np.float64)
        total = total + block.sum(axis=axes)
        count += int(np.prod([block.shape[a] for a in axes]))
    mean = np.asarray(total) / max(count, 1)
    shape = [1] * x.ndim
    if x.ndim == 4:
        shape[1] = -1
    else:
        shape[1:] = list(x.shape[1:])
    mean_b = mean.reshape(shape)
    sq: np.ndarray | float = 0.0
    for start in range(0, len(rows), _CHUNK_ROWS):
        block = x[rows[start : start + _CHUNK_ROWS]].astype(np.float64) - mean_b
        sq = sq + (block * block).sum(axis=axes)
    std = np.sqrt(np.asarray(sq) / max(count, 1))
    return mean_b, std.reshape(shape)


def _affine(
    x: np.ndarray, shift: np.ndarray | float, scale: np.ndarray | float
) -> np.ndarray:
    """``(x - shift) / scale`` in float64, stored as float32, chunked by rows."""
    out = np.empty(x.shape, dtype=np.float32)
    for start in range(0, len(x), _CHUNK_ROWS):
        block = x[start : start + _CHUNK_ROWS].astype(np.float64)
        out[start : start + len(block)] = (block - shift) / scale
    return out


def _rows_range(x: np.ndarray, rows: np.ndarray) -> tuple[float, float]:
    lo, hi = np.inf, -np.inf
    for start in range(0, len(rows), _CHUNK_ROWS):
        b_lo, b_hi = value_range(x[rows[start : start + _CHUNK_ROWS]])
        lo, hi = min(lo, b_lo), max(hi, b_hi)
    return (float(lo), float(hi)) if len(rows) else (0.0, 0.0)


def _minmax(x: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, str]:
    lo, hi = _rows_range(x, rows)
    span = hi - lo
    out = _affine(x, lo, span if span > 0 else 1.0)
    text = (
        f"minmax: (x - {lo:g}) / {span:g}, one range over all values of the "
        f"{len(rows)} database samples"
    )
    return out, text


def _standard(x: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, str]:
    image = _is_image(x)
    axes = (0, 2, 3) if image else (0,)
    mean, std = _moments(x, rows, axes)
    constant = std == 0
    std = np.where(constant, 1.0, std)
    out = _affine(x, mean, std)
    if image:
        means = ", ".join(f"{m:.4g}" for m in mean.ravel())
        stds = ", ".join(f"{s:.4g}" for s in std.ravel())
        text = (
            f"standard per channel: mean ({means}), std ({stds}) of the "
            f"{len(rows)} database samples"
        )
    else:
        text = (
            f"standard per feature: mean and std of each of the {x.shape[1]} "
            f"columns over the {len(rows)} database samples"
            + (f" ({int(constant.sum())} constant columns only centred)"
               if constant.any() else "")
        )
    return out, text


def _l2(x: np.ndarray) -> tuple[np.ndarray, str]:
    norms = _row_norms(x)
    norms = np.where(norms > 0, norms, 1.0).reshape((-1,) + (1,) * (x.ndim - 1))
    out = np.empty(x.shape, dtype=np.float32)
    for start in range(0, len(x), _CHUNK_ROWS):
        stop = start + _CHUNK_ROWS
        out[start:stop] = x[start:stop].astype(np.float64) / norms[start:stop]
    return out, "l2: each sample divided by its L2 norm (no statistics)"


def scale_inputs(
    data: HashDataset,
    database_index: Sequence[int] | np.ndarray,
    *,
    mode: str = "auto",
    source: str = "",
) -> tuple[HashDataset, tuple[str, ...]]:
    """Scale every modality of ``data`` as ``feature-scaling = mode`` says.

    Parameters
    ----------
    data : HashDataset
        The whole dataset, as loaded.
    database_index : array-like of int, shape (n_database,)
        Rows of the database part; statistics come from these rows only.
    mode : str
        One of :data:`FEATURE_SCALINGS` (see the module docstring).
    source : str
        The data file, named in warnings (``data-path``).

    Returns
    -------
    scaled : HashDataset
        ``data`` itself when nothing changes (so its arrays stay bit-identical),
        otherwise a new dataset whose changed modalities are float32 copies.
    applied : tuple of str
        One ``"<modality>: <what was done>"`` line per changed modality; empty when
        nothing changed.

    Raises
    ------
    ValueError
        Unknown ``mode``.
    """
    validate_feature_scaling(mode)
    rows = np.asarray(database_index, dtype=np.int64)
    where = source or data.name
    inputs = dict(data.inputs)
    applied: list[str] = []
    for modality in data.modalities:
        x = data.inputs[modality]
        how = mode
        if mode == "auto":
            if data.scaled:
                continue
            if _is_image(x):
                how = "standard"
            elif _looks_scaled_database(x, rows):
                continue
            else:
                how = "standard"
        if how == "none":
            if not data.scaled and not _looks_scaled_database(x, rows):
                lo, hi = value_range(x)
                warnings.warn(
                    f"feature-scaling='none': `x_{modality}` of {where!r} has "
                    f"values in [{lo:g}, {hi:g}] (non-negative beyond 1, rows not "
                    "unit-norm); "
                    "it looks unscaled, and raw ranges such as 0..255 train much "
                    "worse hash codes. Use feature-scaling='auto' (or 'minmax', "
                    "'standard', 'l2') unless this range is intended",
                    UserWarning,
                    stacklevel=3,
                )
            continue
        if how == "minmax":
            out, text = _minmax(x, rows)
        elif how == "standard":
            out, text = _standard(x, rows)
        else:
            out, text = _l2(x)
        inputs[modality] = out
        line = f"{modality}: {text}"
        applied.append(line)
        if mode == "auto":
            lo, hi = value_range(x)
            _log.info(
                "feature-scaling='auto': `x_%s` of %r has values in [%g, %g]; %s",
                modality,
                where,
                lo,
                hi,
                text,
            )
    if not applied:
        return data, ()
    return dataclasses.replace(data, inputs=inputs), tuple(applied)

"""Sparse model updates after training: flatten/unflatten, soft threshold, top-k.

A client's update is ``w_local - w_global`` over every array of the model, flattened
in the order of the global model's arrays. DPHE (``crypto/``) encrypts only the
non-zeros of that vector, so its cost falls with the update's sparsity; the same
sparsification also runs without encryption, which is the plaintext baseline that
DPHE must match.

The sparsifiers that act on the finished update, applied in this order when both
are on (``updates.sparsifier``; the DPHE paper's own, a training-time elastic-net
penalty, is :mod:`hashing.elastic_net`):

* **soft threshold** (``updates.sparsifier = "soft-threshold"``): the proximal
  operator of ``l1 * ||d||_1 + (l2 / 2) * ||d||_2^2`` (:func:`elastic_net_prox`)
  applied once to the update, with ``l1 = updates.soft-threshold`` and ``l2 = 0``:
  ``d <- sign(d) * max(|d| - l1, 0)``. Its sparsity depends on the data. It is not
  the paper's elastic net, which penalises the local objective during training.
* **top-k by magnitude**: zero all but the ``D - floor(sparsity * D)`` largest ``|d_i|``
  (ties broken by index, stable), zero the rest. Its sparsity is fixed.
* **block top-k** (:func:`block_top_k_sparsify`, DPHE with ``dphe.sparsity-layout =
  "block"``):
  the coordinates are grouped into the packed blocks of DPHE's phi-permuted space
  (``crypto.coordinate_blocks``: ``P`` pseudo-random coordinates per block, fresh
  every round), and all but the ``B - floor(sparsity * B)`` blocks of largest L2 norm
  are zeroed. Packed DPHE encrypts one ciphertext per touched block, so its cost
  then falls with the sparsity; element-wise top-k at 90% still touches nearly every
  block of 68 coordinates.
* **shared blocks** (:func:`shared_blocks` + :func:`keep_blocks`, DPHE with
  ``dphe.sparsity-layout = "shared"``): every client keeps the same ``B - floor(sparsity
  * B)`` blocks of the round's phi-space (random-k with one set for all), so the
  keyholder decrypts that many ciphertexts a round, not the union of the clients'
  top-k sets.

Mass that is zeroed here is dropped; error feedback (``clients/sparse_updates.py``)
carries it into the client's next update.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ArrayLayout:
    """Names, shapes and dtypes of the arrays a flat vector was built from."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]

    @property
    def size(self) -> int:
        """Total number of values (D)."""
        return int(sum(math.prod(s) for s in self.shapes))


def flatten_arrays(arrays: Mapping[str, np.ndarray]) -> tuple[np.ndarray, ArrayLayout]:
    """Concatenate ``arrays`` (in mapping order) into one float64 vector.

    Returns
    -------
    vector : numpy.ndarray
        ``(D,)`` float64.
    layout : ArrayLayout
        What :func:`unflatten_arrays` needs to rebuild the mapping.
    """
    names = tuple(arrays)
    parts = [np.asarray(arrays[n], dtype=np.float64).ravel() for n in names]
    layout = ArrayLayout(
        names=names,
        shapes=tuple(tuple(np.shape(arrays[n])) for n in names),
        dtypes=tuple(str(np.asarray(arrays[n]).dtype) for n in names),
    )
    vector = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float64)
    return vector, layout


def unflatten_arrays(vector: np.ndarray, layout: ArrayLayout) -> dict[str, np.ndarray]:
    """Inverse of :func:`flatten_arrays`; integer arrays are rounded back.

    Raises
    ------
    ValueError
        If ``vector`` does not have ``layout.size`` values.
    """
    if vector.shape != (layout.size,):
        raise ValueError(
            f"flat vector has shape {vector.shape}, the layout needs ({layout.size},)"
        )
    out: dict[str, np.ndarray] = {}
    start = 0
    for name, shape, dtype in zip(
        layout.names, layout.shapes, layout.dtypes, strict=True
    ):
        size = math.prod(shape)
        chunk = vector[start : start + size].reshape(shape)
        if np.issubdtype(np.dtype(dtype), np.integer):
            chunk = np.rint(chunk)
        out[name] = np.array(chunk, dtype=dtype, order="C")
        start += size
    return out


def elastic_net_prox(update: np.ndarray, *, l1: float, l2: float) -> np.ndarray:
    """Proximal step of ``l1*||d||_1 + (l2/2)*||d||^2``: soft-threshold, shrink.

    Parameters
    ----------
    update : numpy.ndarray
        ``(D,)`` float update.
    l1, l2 : float
        Non-negative penalty weights (0 and 0 return a copy).
    """
    if l1 < 0 or l2 < 0:
        raise ValueError(f"elastic-net weights must be >= 0, got l1={l1}, l2={l2}")
    shrunk = np.sign(update) * np.maximum(np.abs(update) - l1, 0.0)
    return shrunk / (1.0 + l2)


def top_k_sparsify(update: np.ndarray, *, sparsity: float) -> np.ndarray:
    """Zero all but the ``D - floor(sparsity * D)`` largest-magnitude values.

    Parameters
    ----------
    update : numpy.ndarray
        ``(D,)`` float update.
    sparsity : float
        Fraction of values zeroed, in ``[0, 1)``; 0 returns a copy.
    """
    if not 0 <= sparsity < 1:
        raise ValueError(f"sparsity={sparsity}: accepted is 0 <= sparsity < 1")
    out = np.array(update, dtype=np.float64, copy=True)
    # zero floor(sparsity * D) values (the epsilon absorbs float error: 0.7 * 10)
    keep = out.size - math.floor(sparsity * out.size + 1e-9)
    if keep >= out.size:
        return out
    # stable sort on -|d|: equal magnitudes keep the lower index
    order = np.argsort(-np.abs(out), kind="stable")
    out[order[keep:]] = 0.0
    return out


def sparsify_update(
    update: np.ndarray, *, sparsity: float, l1: float = 0.0, l2: float = 0.0
) -> np.ndarray:
    """Elastic-net proximal step (soft threshold; ``l1`` or ``l2`` > 0), then top-k.

    Top-k only when ``sparsity`` > 0. The clients pass ``l1 =
    updates.soft-threshold`` and ``l2 = 0``.
    """
    out = np.asarray(update, dtype=np.float64)
    if l1 > 0 or l2 > 0:
        out = elastic_net_prox(out, l1=l1, l2=l2)
    return top_k_sparsify(out, sparsity=sparsity)


def kept_block_count(num_blocks: int, sparsity: float) -> int:
    """Blocks a block-sparse client keeps: ``max(1, B - floor(sparsity * B))``.

    The same count as ``crypto.kept_blocks`` (which sizes DPHE's padded shard; a
    test keeps the two equal: the crypto package imports nothing from here).
    """
    if not 0 <= sparsity < 1:
        raise ValueError(f"sparsity={sparsity}: accepted is 0 <= sparsity < 1")
    return max(1, num_blocks - math.floor(sparsity * num_blocks + 1e-9))


def shared_blocks(
    num_blocks: int, sparsity: float, always: np.ndarray | None = None
) -> np.ndarray:
    """Return the blocks every client keeps under the shared layout (one set).

    ``always`` (sorted, deduplicated), then the lowest other block ids until
    ``keep = kept_block_count(num_blocks, sparsity)`` blocks are chosen. In DPHE's
    phi-permuted space (fresh and keyed every round, so
    the lowest phi-space blocks are a uniformly random coordinate subset no one
    without the users' phi seed can name) this is random-k sparsification with a
    set shared by every client: the keyholder decrypts ``keep`` ciphertexts instead
    of the union of every client's top-k, and which blocks a client sends depends on
    nothing it holds.

    Parameters
    ----------
    num_blocks : int
        Number of blocks ``B``.
    sparsity : float
        Fraction of blocks zeroed, in ``[0, 1)``.
    always : numpy.ndarray, optional
        Block ids that must be kept (DPHE's weight and loss coordinates).

    Returns
    -------
    numpy.ndarray
        Sorted int64 block ids, ``max(keep, len(always))`` of them.
    """
    keep = kept_block_count(num_blocks, sparsity)
    forced = np.unique(np.asarray([] if always is None else always, dtype=np.int64))
    if forced.size and (forced[0] < 0 or forced[-1] >= num_blocks):
        raise ValueError(f"always holds block ids outside [0, {num_blocks})")
    rest = np.setdiff1d(np.arange(num_blocks, dtype=np.int64), forced)
    extra = max(0, keep - forced.size)
    return np.sort(np.concatenate([forced, rest[:extra]]))


def keep_blocks(
    update: np.ndarray, *, blocks: np.ndarray, kept: np.ndarray
) -> np.ndarray:
    """Zero every coordinate of ``update`` outside the blocks ``kept``.

    ``blocks`` is the ``(>= D,)`` block id of each coordinate (extra trailing
    entries are ignored); returns a float64 copy.
    """
    out = np.array(update, dtype=np.float64, copy=True)
    ids = np.asarray(blocks, dtype=np.int64)[: out.size]
    if ids.shape != out.shape:
        raise ValueError(f"blocks has {ids.size} entries for {out.size} coordinates")
    kept = np.asarray(kept, dtype=np.int64)
    size = max(int(ids.max(initial=-1)), int(kept.max(initial=-1))) + 1
    mask = np.zeros(size, dtype=bool)
    mask[kept] = True
    out[~mask[ids]] = 0.0
    return out


def block_top_k_sparsify(
    update: np.ndarray,
    *,
    sparsity: float,
    blocks: np.ndarray,
    num_blocks: int,
    always: np.ndarray | None = None,
) -> np.ndarray:
    """Zero all but the ``num_blocks - floor(sparsity * num_blocks)`` largest blocks.

    Parameters
    ----------
    update : numpy.ndarray
        ``(D,)`` float update.
    sparsity : float
        Fraction of blocks zeroed, in ``[0, 1)``; 0 returns a copy.
    blocks : numpy.ndarray
        ``(>= D,)`` int block id in ``[0, num_blocks)`` of each coordinate (extra
        trailing entries, e.g. DPHE's weight coordinate, are ignored).
    num_blocks : int
        Number of blocks ``B``.
    always : numpy.ndarray, optional
        Block ids kept whatever their norm (they count towards the kept blocks):
        DPHE's weight and loss coordinates must never be dropped.

    Returns
    -------
    numpy.ndarray
        ``(D,)`` float64 with every coordinate outside the kept blocks zeroed; ties
        in block norm keep the lower block id (stable).
    """
    keep = kept_block_count(num_blocks, sparsity)
    out = np.array(update, dtype=np.float64, copy=True)
    ids = np.asarray(blocks, dtype=np.int64)[: out.size]
    if ids.shape != out.shape:
        raise ValueError(f"blocks has {ids.size} entries for {out.size} coordinates")
    if keep >= num_blocks:
        return out
    norms = np.bincount(ids, weights=out * out, minlength=num_blocks)
    forced = np.unique(np.asarray([] if always is None else always, dtype=np.int64))
    norms[forced] = np.inf
    order = np.argsort(-norms, kind="stable")
    mask = np.zeros(num_blocks, dtype=bool)
    mask[order[:keep]] = True
    out[~mask[ids]] = 0.0
    return out

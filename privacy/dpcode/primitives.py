"""Frames, visual primitives, a public codebook and the transactions they give.

A *frame* is one image; its *visual primitives* are local descriptors of it, one
``d``-vector each. A *codebook* maps a descriptor to a visual *word*; a frame's
*transaction* is the set of words of its primitives. Patterns are sets of words.

* :func:`patch_descriptors` makes primitives from small grey images (8x8 digits):
  overlapping ``patch x patch`` windows, each centred (its mean removed) and scaled
  to unit norm; a window with almost no contrast (norm below ``flat_norm``) is the
  zero vector, the "flat" primitive.
* :class:`HadamardCodebook` is data independent, as the paper requires (its
  codebook is public): the ``2 d`` centres are the rows of a Sylvester Hadamard
  matrix and their negatives, scaled to unit norm, and a descriptor's word is its
  nearest centre (largest ``|<v, h_j>|`` with its sign). Nothing about the data
  enters it, so the words leak nothing by themselves. The zero (flat) descriptor
  gets word 0, the all-ones row, which a centred descriptor is orthogonal to.
* :func:`code_transactions` is the hashing connection: an ``m``-bit chunk of a
  published ``{-1, +1}`` code is a word (``chunk index * 2^m + chunk value``), so
  frequent patterns are chunk values that co-occur, e.g. a collapsed code or an
  overloaded bucket.
* Feature-vector or tag datasets without primitives enter as word sets through
  :func:`transactions_from_sets` (MIRFlickr: a frame's tags are its words).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class Transactions:
    """One client's word sets: ``matrix[i, w]`` is True if frame ``i`` has word ``w``.

    Attributes
    ----------
    matrix : ndarray of bool, shape (frames, n_words)
    vocabulary : str
        Name of the public codebook the words come from (merging releases of
        different vocabularies is refused).
    """

    matrix: NDArray[np.bool_]
    vocabulary: str
    _cache: dict[str, Any] = field(
        default_factory=dict, compare=False, repr=False, hash=False
    )

    def __post_init__(self) -> None:
        m = np.asarray(self.matrix)
        if m.ndim != 2:
            raise ValueError(
                f"transaction matrix of shape {m.shape}: accepted is (frames, words)"
            )
        object.__setattr__(self, "matrix", m.astype(bool, copy=False))

    @property
    def n_frames(self) -> int:
        """Number of frames (private: never part of a release)."""
        return int(self.matrix.shape[0])

    @property
    def n_words(self) -> int:
        """Codebook size M (public)."""
        return int(self.matrix.shape[1])

    def truncated(self, max_words: int) -> NDArray[np.bool_]:
        """Return the matrix with at most ``max_words`` words per frame (lowest ids).

        A per-frame, data-independent rule (cached): afterwards every frame has at
        most ``max_words`` words, which bounds what one frame adds to any count.
        """
        key = f"truncated-{max_words}"
        if key not in self._cache:
            x = self.matrix
            if x.shape[1] > max_words:
                x = x & (np.cumsum(x, axis=1) <= max_words)
            self._cache[key] = x
        out: NDArray[np.bool_] = self._cache[key]
        return out

    def gram(self, max_words: int) -> NDArray[np.int64]:
        """Pair supports ``X^T X`` of :meth:`truncated` (cached)."""
        key = f"gram-{max_words}"
        if key not in self._cache:
            x = self.truncated(max_words).astype(np.float32)
            self._cache[key] = np.rint(x.T @ x).astype(np.int64)
        out: NDArray[np.int64] = self._cache[key]
        return out


@dataclass(frozen=True)
class Frames:
    """Primitives of a client's frames, padded to one array.

    Attributes
    ----------
    descriptors : ndarray of float64, shape (frames, n_max, d)
    mask : ndarray of bool, shape (frames, n_max)
        True where a primitive exists (frames may have different counts).
    """

    descriptors: NDArray[np.float64]
    mask: NDArray[np.bool_]

    @classmethod
    def from_arrays(
        cls, frames: Sequence[NDArray[np.floating]] | NDArray[Any]
    ) -> Frames:
        """Build from a ``(frames, n, d)`` array or a list of ``(n_i, d)`` arrays."""
        if isinstance(frames, np.ndarray) and frames.ndim == 3:
            arr = frames.astype(np.float64)
            return cls(arr, np.ones(arr.shape[:2], dtype=bool))
        items = [np.asarray(f, dtype=np.float64) for f in frames]
        if not items:
            raise ValueError("no frames: accepted is at least one frame")
        dims = {f.shape[1] for f in items if f.ndim == 2}
        if len(dims) != 1 or any(f.ndim != 2 for f in items):
            raise ValueError(
                "frames: accepted are arrays of shape (n_i, d) with one common d, "
                f"got shapes {sorted({f.shape for f in items})[:3]}"
            )
        d = dims.pop()
        n_max = max(1, max(f.shape[0] for f in items))
        desc = np.zeros((len(items), n_max, d))
        mask = np.zeros((len(items), n_max), dtype=bool)
        for i, f in enumerate(items):
            desc[i, : f.shape[0]] = f
            mask[i, : f.shape[0]] = True
        return cls(desc, mask)

    @property
    def n_frames(self) -> int:
        """Number of frames."""
        return int(self.descriptors.shape[0])

    @property
    def dim(self) -> int:
        """Descriptor dimension d."""
        return int(self.descriptors.shape[2])


def _hadamard(n: int) -> NDArray[np.float64]:
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


@dataclass(frozen=True)
class HadamardCodebook:
    """Data-independent codebook: ``2 d`` Hadamard centres on the unit sphere.

    Word ``j`` (``0 <= j < d``) is centre ``+h_j / sqrt(d)``, word ``d + j`` is
    ``-h_j / sqrt(d)``; a descriptor maps to the centre with the largest inner
    product, and a descriptor of norm below ``flat_norm`` to word 0.

    Attributes
    ----------
    dim : int
        Descriptor dimension d, a power of two.
    flat_norm : float
        Norm below which a descriptor is flat (word 0).
    """

    dim: int
    flat_norm: float = 1e-9

    def __post_init__(self) -> None:
        d = self.dim
        if isinstance(d, bool) or not isinstance(d, int) or d < 2 or d & (d - 1):
            raise ValueError(
                f"Hadamard codebook dim {d!r}: accepted are powers of two >= 2"
            )

    @property
    def n_words(self) -> int:
        """Codebook size M = 2 d."""
        return 2 * self.dim

    @property
    def name(self) -> str:
        """Vocabulary name, e.g. ``hadamard-16``."""
        return f"hadamard-{self.dim}"

    @property
    def centres(self) -> NDArray[np.float64]:
        """The ``(2 d, d)`` unit-norm centres ``w_j``."""
        h = _hadamard(self.dim) / np.sqrt(self.dim)
        return np.vstack([h, -h])

    @property
    def cell_radius(self) -> float:
        """``r_max`` for unit-norm descriptors: ``sqrt(2 - 2 / sqrt(d))`` (a bound).

        ``||H v||_2 = sqrt(d)`` for a unit ``v``, so the largest ``|<v, h_j>| /
        sqrt(d)`` is at least ``1 / sqrt(d)`` and the distance to the nearest
        centre at most this value.
        """
        return float(np.sqrt(2.0 - 2.0 / np.sqrt(self.dim)))

    def check_dim(self, dim: int) -> None:
        """Raise ``ValueError`` unless descriptors of size ``dim`` fit this codebook."""
        if dim != self.dim:
            raise ValueError(
                f"codebook {self.name} takes descriptors of size {self.dim}, "
                f"got size {dim}: accepted is a codebook whose dim equals the "
                "descriptor size"
            )

    def quantise(self, descriptors: NDArray[np.floating]) -> NDArray[np.int64]:
        """Map descriptors ``(..., d)`` to words ``(...)``, ints in ``[0, 2 d)``."""
        v = np.asarray(descriptors, dtype=np.float64)
        self.check_dim(v.shape[-1])
        proj = v @ _hadamard(self.dim).T
        j = np.argmax(np.abs(proj), axis=-1)
        sign = np.take_along_axis(proj, j[..., None], axis=-1)[..., 0]
        words = np.where(sign >= 0, j, j + self.dim)
        flat = np.linalg.norm(v, axis=-1) < self.flat_norm
        return np.where(flat, 0, words).astype(np.int64)


def patch_descriptors(
    images: NDArray[np.floating],
    *,
    patch: int = 4,
    stride: int = 2,
    flat_norm: float = 0.25,
) -> NDArray[np.float64]:
    """Overlapping patches of grey images as centred, unit-norm primitives.

    Parameters
    ----------
    images : ndarray, shape (frames, h, w)
        Pixel values in ``[0, 1]`` (divide 8x8 digits by 16).
    patch, stride : int
        Window side and step (4 and 2 give 9 primitives of size 16 per 8x8 image).
    flat_norm : float
        A centred window with norm below this is flat: returned as zeros.

    Returns
    -------
    ndarray of float64, shape (frames, n_patches, patch * patch)
    """
    x = np.asarray(images, dtype=np.float64)
    if x.ndim != 3:
        raise ValueError(f"images of shape {x.shape}: accepted is (frames, h, w)")
    if patch < 1 or stride < 1 or patch > min(x.shape[1:]):
        raise ValueError(
            f"patch {patch}, stride {stride}: accepted are 1 <= patch <= image side "
            "and stride >= 1"
        )
    rows = range(0, x.shape[1] - patch + 1, stride)
    cols = range(0, x.shape[2] - patch + 1, stride)
    windows = [
        x[:, r : r + patch, c : c + patch].reshape(len(x), -1)
        for r in rows
        for c in cols
    ]
    p = np.stack(windows, axis=1)
    p = p - p.mean(axis=2, keepdims=True)
    norm = np.linalg.norm(p, axis=2, keepdims=True)
    flat = norm < flat_norm
    return np.where(flat, 0.0, p / np.where(flat, 1.0, norm))


def frames_to_transactions(frames: Frames, codebook: HadamardCodebook) -> Transactions:
    """Map every primitive to its word; a frame's transaction is its set of words."""
    codebook.check_dim(frames.dim)
    words = codebook.quantise(frames.descriptors)
    matrix = np.zeros((frames.n_frames, codebook.n_words), dtype=bool)
    rows = np.broadcast_to(np.arange(frames.n_frames)[:, None], words.shape)
    matrix[rows[frames.mask], words[frames.mask]] = True
    return Transactions(matrix, codebook.name)


def transactions_from_sets(
    sets: Iterable[Iterable[int]], *, n_words: int, vocabulary: str
) -> Transactions:
    """Transactions from word-id sets (tags, items), ids in ``[0, n_words)``."""
    rows = [sorted({int(w) for w in s}) for s in sets]
    matrix = np.zeros((len(rows), n_words), dtype=bool)
    for i, r in enumerate(rows):
        if r and (r[0] < 0 or r[-1] >= n_words):
            raise ValueError(
                f"frame {i} has word ids {r[0]}..{r[-1]}: accepted are 0..{n_words - 1}"
            )
        matrix[i, r] = True
    return Transactions(matrix, vocabulary)


def code_transactions(codes: NDArray[np.integer], *, chunk_bits: int) -> Transactions:
    """Transactions of m-bit code chunks: the hashing connection.

    Parameters
    ----------
    codes : ndarray, shape (n, bits), values in {-1, +1}
        Published hash codes, one per frame (item).
    chunk_bits : int
        Chunk size m; ``bits`` must be a multiple of it.

    Returns
    -------
    Transactions
        ``n_words = (bits / m) * 2^m``; frame ``i`` holds exactly ``bits / m``
        words, word ``c * 2^m + value`` for chunk ``c`` (bit +1 -> 1, first bit most
        significant). A frequent pattern is a set of chunk values that many codes
        share: a collapsed region of the code space, or an overloaded bucket.
    """
    c = np.asarray(codes)
    if c.ndim != 2 or c.shape[0] == 0:
        raise ValueError(f"codes of shape {c.shape}: accepted is (n >= 1, bits)")
    if not np.isin(c, (-1, 1)).all():
        raise ValueError("codes: accepted values are -1 and +1")
    if chunk_bits < 1 or c.shape[1] % chunk_bits:
        raise ValueError(
            f"chunk_bits {chunk_bits} for {c.shape[1]}-bit codes: accepted are "
            "divisors of the code length"
        )
    chunks = c.shape[1] // chunk_bits
    bits = (c > 0).astype(np.int64).reshape(len(c), chunks, chunk_bits)
    value = bits @ (1 << np.arange(chunk_bits - 1, -1, -1))
    words = np.arange(chunks) * (1 << chunk_bits) + value
    matrix = np.zeros((len(c), chunks << chunk_bits), dtype=bool)
    matrix[np.arange(len(c))[:, None], words] = True
    return Transactions(matrix, f"code-chunks-{c.shape[1]}x{chunk_bits}")

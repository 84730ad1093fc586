"""Exact (non-private) itemset statistics: candidates, supports, ground truth.

A *pattern* is a sorted tuple of word ids; its *support* is the number of frames
whose transaction contains all of them. The candidate universe ``C`` is every
pattern of length ``1..max_length`` over the public codebook, so ``|C| =
sum_j C(M, j)`` is public. Top-k ties are broken by (support descending, length
ascending, word ids ascending), the same order everywhere in this package.

The ground truth :func:`exact_top_k` runs mlxtend's FP-growth (a maintained
implementation). The mechanisms count with :func:`occurring_supports` and
:func:`count_supports` (numpy, vectorised; the tests check both against brute
force and against each other).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
from numpy.typing import NDArray

from privacy.dpcode.primitives import Transactions

Pattern = tuple[int, ...]

CANDIDATE_LIMIT = 5_000_000
"""Most candidates a mechanism enumerates explicitly (ValueError above)."""


def pattern_order(pattern: Pattern, support: float) -> tuple[float, int, Pattern]:
    """Sort key: support descending, then length, then word ids (tie-stable)."""
    return (-support, len(pattern), pattern)


def n_candidates(n_words: int, max_length: int) -> int:
    """``|C| = sum_{j=1..max_length} C(n_words, j)``."""
    return sum(math.comb(n_words, j) for j in range(1, max_length + 1))


def frame_patterns(max_words: int, max_length: int, *, min_length: int = 1) -> int:
    """Most candidates one frame of at most ``max_words`` words contains."""
    return sum(math.comb(max_words, j) for j in range(min_length, max_length + 1))


def combinations(words: NDArray[np.int64], length: int) -> NDArray[np.int64]:
    """All ``length``-subsets of ``words`` (sorted ids), shape ``(q, length)``."""
    w = np.sort(np.asarray(words, dtype=np.int64))
    if length == 1:
        return w[:, None]
    if length == 2:
        a, b = np.triu_indices(len(w), k=1)
        return np.stack([w[a], w[b]], axis=1)
    flat = np.fromiter(
        itertools.chain.from_iterable(itertools.combinations(w.tolist(), length)),
        dtype=np.int64,
    )
    return flat.reshape(-1, length)


def truncate(matrix: NDArray[np.bool_], max_words: int) -> NDArray[np.bool_]:
    """Keep at most ``max_words`` words per frame (the lowest word ids)."""
    x = np.asarray(matrix, dtype=bool)
    if x.shape[1] <= max_words:
        return x
    return x & (np.cumsum(x, axis=1) <= max_words)


def count_supports(
    matrix: NDArray[np.bool_],
    candidates: NDArray[np.int64],
    *,
    gram: NDArray[np.int64] | None = None,
) -> NDArray[np.int64]:
    """Support of each candidate (rows of ``candidates``, one length) in ``matrix``."""
    cand = np.asarray(candidates, dtype=np.int64)
    if cand.size == 0:
        return np.zeros(len(cand), dtype=np.int64)
    x = np.asarray(matrix, dtype=bool)
    if cand.shape[1] == 1:
        return x.sum(axis=0).astype(np.int64)[cand[:, 0]]
    if cand.shape[1] == 2:
        if gram is None:
            xf = x.astype(np.float32)
            gram = np.rint(xf.T @ xf).astype(np.int64)
        return gram[cand[:, 0], cand[:, 1]]
    out = np.empty(len(cand), dtype=np.int64)
    step = max(1, 4_000_000 // max(1, x.shape[0] * cand.shape[1]))
    for start in range(0, len(cand), step):
        block = cand[start : start + step]
        out[start : start + step] = x[:, block].all(axis=2).sum(axis=0)
    return out


def occurring_supports(
    tx: Transactions, max_length: int, max_words: int | None = None
) -> dict[Pattern, int]:
    """Support of every pattern (length <= max_length) that occurs at least once.

    Cached on ``tx`` per ``(max_length, max_words)``; with ``max_words`` the
    transactions are first truncated by :func:`truncate`.
    """
    key = f"occurring-{max_length}-{max_words}"
    if key not in tx._cache:
        x = tx.matrix if max_words is None else tx.truncated(max_words)
        counter: Counter[Pattern] = Counter()
        for row in x:
            words = np.flatnonzero(row).tolist()
            for j in range(1, min(max_length, len(words)) + 1):
                counter.update(itertools.combinations(words, j))
        tx._cache[key] = dict(counter)
    out: dict[Pattern, int] = tx._cache[key]
    return out


def kth_support(
    tx: Transactions, k: int, max_length: int, max_words: int | None = None
) -> int:
    """``rho_k``: the k-th largest support over all of ``C`` (zeros included)."""
    supports = sorted(
        occurring_supports(tx, max_length, max_words).values(), reverse=True
    )
    return int(supports[k - 1]) if k <= len(supports) else 0


def exact_top_k(
    tx: Transactions, *, k: int, max_length: int
) -> tuple[list[Pattern], list[int]]:
    """Ground truth: the k most frequent patterns (length <= max_length), by FP-growth.

    Runs mlxtend's ``fpgrowth`` with a minimum support lowered until at least ``k``
    patterns qualify, then sorts by :func:`pattern_order` and keeps ``k`` (fewer
    if fewer patterns occur at all). Non-private.

    Returns
    -------
    patterns : list of tuple of int
    supports : list of int
    """
    # only the ground truth needs them; neither ships type information
    import pandas as pd  # type: ignore[import-untyped]
    from mlxtend.frequent_patterns import fpgrowth  # type: ignore[import-untyped]

    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise ValueError(f"k {k!r}: accepted are integers >= 1")
    s = tx.n_frames
    if s == 0:
        raise ValueError("no frames: accepted is at least one frame")
    frame = pd.DataFrame(tx.matrix, columns=list(range(tx.n_words)))
    min_count = max(1, int(tx.matrix.sum(axis=0).max()))
    while True:
        found = fpgrowth(
            frame, min_support=min_count / s, use_colnames=True, max_len=max_length
        )
        if len(found) >= k or min_count == 1:
            break
        min_count = max(1, min_count // 2)
    rows = [
        (tuple(sorted(int(w) for w in items)), int(round(sup * s)))
        for sup, items in zip(found["support"], found["itemsets"], strict=True)
    ]
    rows.sort(key=lambda r: pattern_order(r[0], r[1]))
    rows = rows[:k]
    return [r[0] for r in rows], [r[1] for r in rows]


def supports_of(tx: Transactions, patterns: list[Pattern]) -> list[int]:
    """Exact support of each given pattern (any length)."""
    x = tx.matrix
    return [
        int(x[:, list(p)].all(axis=1).sum()) if p else tx.n_frames for p in patterns
    ]

"""Utility metrics of a published top-k pattern list (the paper's Defs. 3 and 4).

Both are pure functions of sets and supports.

* :func:`f_score` (Def. 3): ``2 P R / (P + R)`` with precision ``|F & F^| / |F^|``
  and recall ``|F & F^| / |F|``, ``F`` the true top-k and ``F^`` the published set.
  When both have k elements it equals precision = recall. An empty publication
  scores 0.
* :func:`relative_error` (Def. 4): the median over published patterns of
  ``|rho^(P) - rho(P)| / rho(P)``. Deviations from the paper's Eq. 9, which writes
  the signed difference and divides by ``rho(P)`` as is: we take the absolute
  value (a signed median of unbiased noise is near 0 whatever its size; the
  metric's source, Lee and Clifton 2014, uses the absolute error), and divide by
  ``max(rho(P), 1)`` so that a published pattern that never occurs (a false
  positive with true support 0) has a finite error.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from privacy.dpcode.itemsets import Pattern


def f_score(truth: Collection[Pattern], published: Collection[Pattern]) -> float:
    """Def. 3: harmonic mean of precision and recall of the published patterns."""
    true_set = {tuple(sorted(p)) for p in truth}
    pub_set = {tuple(sorted(p)) for p in published}
    if not true_set:
        raise ValueError("truth is empty: accepted is at least one true pattern")
    hits = len(true_set & pub_set)
    if not pub_set or hits == 0:
        return 0.0
    precision = hits / len(pub_set)
    recall = hits / len(true_set)
    return 2 * precision * recall / (precision + recall)


def relative_error(
    noisy_supports: Sequence[float], true_supports: Sequence[int]
) -> float:
    """Def. 4: median of ``|noisy - true| / max(true, 1)`` over published patterns.

    Parameters
    ----------
    noisy_supports : sequence of float
        The published supports ``rho^(P)``.
    true_supports : sequence of int
        The exact supports ``rho(P)`` of the same patterns, in the same order.

    Returns
    -------
    float
        ``nan`` for an empty publication.
    """
    noisy = np.asarray(noisy_supports, dtype=np.float64)
    true = np.asarray(true_supports, dtype=np.float64)
    if noisy.shape != true.shape:
        raise ValueError(
            f"{noisy.size} noisy and {true.size} true supports: accepted are equal "
            "lengths (one each per published pattern)"
        )
    if noisy.size == 0:
        return float("nan")
    return float(np.median(np.abs(noisy - true) / np.maximum(true, 1.0)))

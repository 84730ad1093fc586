"""Baselines at the same unit (per frame, add/remove) and the same inputs as DPcode.

* :func:`direct_release` -- the direct approach: every candidate pattern (length
  ``<= l`` over the codebook; the candidate set is public) gets its exact
  support plus ``Lap(D / eps)``, ``D = sum_{j=1..l} C(L, j)`` the most candidates
  one frame can contain (the full L1 sensitivity), and the k largest noisy
  supports are published as they are. One Laplace mechanism, then
  post-processing.
* :func:`noisycut_release` -- NoisyCut, the DPcode paper's "NC" (Lee and Clifton,
  KDD 2014) as we read it: a sparse-vector cut selects at most k candidates
  whose noisy support passes a noisy k-th support threshold, then the noisy
  FP-trees of phase 2 (which DPcode takes from the same paper) give the
  supports. The cut uses the standard sparse vector technique with its noise
  scaled to the number of positives (Lyu, Su and Li, VLDB 2017, Alg. 1: threshold
  ``Lap(2 / eps_cut)``, each query ``Lap(4 k / eps_cut)``; the queries
  ``rho(P) - rho_k`` have sensitivity 1), so that the epsilon we print holds;
  Lyu et al. show that the variant published by Lee and Clifton, whose query
  noise does not grow with the number of positives, does not satisfy the claimed
  epsilon. Candidates are streamed in a public order: by length, then word ids.
"""

from __future__ import annotations

import numpy as np

from privacy.dpcode.itemsets import (
    CANDIDATE_LIMIT,
    Pattern,
    combinations,
    count_supports,
    frame_patterns,
    kth_support,
    n_candidates,
)
from privacy.dpcode.laplace import laplace
from privacy.dpcode.primitives import HadamardCodebook, Transactions
from privacy.dpcode.release import (
    ClientData,
    Release,
    check_common,
    check_split,
    phase2,
    prepare,
    top_k_release,
)
from privacy.noise import NoiseSource


def _all_candidates(
    tx: Transactions, max_length: int, max_words: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Every candidate (by length) and its exact support on truncated frames."""
    total = n_candidates(tx.n_words, max_length)
    if total > CANDIDATE_LIMIT:
        raise ValueError(
            f"{total:,} candidate patterns ({tx.n_words} words, max_length "
            f"{max_length}): accepted are at most {CANDIDATE_LIMIT:,}; use a smaller "
            "max_length"
        )
    matrix = tx.truncated(max_words)
    gram = tx.gram(max_words) if max_length >= 2 else None
    cands, counts = [], []
    for j in range(1, max_length + 1):
        cand = combinations(np.arange(tx.n_words), j)
        cands.append(cand)
        counts.append(count_supports(matrix, cand, gram=gram))
    return cands, counts


def direct_release(
    data: ClientData,
    *,
    k: int,
    epsilon: float,
    noise: NoiseSource,
    codebook: HadamardCodebook | None = None,
    max_length: int = 3,
    max_words: int | None = None,
) -> Release:
    """Publish the k largest of every candidate's Laplace-noised support (direct).

    Same inputs and validation as :func:`privacy.dpcode.dpcode_release`.
    """
    tx, _ = prepare(data, codebook)
    k_, eps, length, words = check_common(
        k=k,
        epsilon=epsilon,
        max_length=max_length,
        max_words=max_words,
        n_words=tx.n_words,
    )
    cands, counts = _all_candidates(tx, length, words)
    scale = frame_patterns(words, length) / eps
    noisy: dict[Pattern, float] = {}
    for cand, count in zip(cands, counts, strict=True):
        values = count + laplace(scale, len(cand), noise)
        top = np.argsort(-values, kind="stable")[:k_]
        noisy.update({tuple(int(w) for w in cand[i]): float(values[i]) for i in top})
    patterns, supports = top_k_release(noisy, k_)
    return Release.per_frame(
        "direct",
        patterns,
        supports,
        components={"supports": eps},
        vocabulary=tx.vocabulary,
        k=k_,
        max_length=length,
    )


def noisycut_release(
    data: ClientData,
    *,
    k: int,
    epsilon: float,
    noise: NoiseSource,
    split: float = 0.5,
    codebook: HadamardCodebook | None = None,
    max_length: int = 3,
    max_words: int | None = None,
) -> Release:
    """NoisyCut: sparse-vector selection of <= k patterns, then noisy FP-trees.

    ``split`` is the share of epsilon for the cut (the rest counts supports).
    Same inputs and validation as :func:`privacy.dpcode.dpcode_release`.
    """
    split_ = check_split(split)
    tx, _ = prepare(data, codebook)
    k_, eps, length, words = check_common(
        k=k,
        epsilon=epsilon,
        max_length=max_length,
        max_words=max_words,
        n_words=tx.n_words,
    )
    eps_cut = split_ * eps
    rho_k = kth_support(tx, k_, length, words)
    threshold = rho_k + float(laplace(2.0 / eps_cut, 1, noise)[0])
    cands, counts = _all_candidates(tx, length, words)
    selected: dict[Pattern, float] = {}
    for cand, count in zip(cands, counts, strict=True):
        if len(selected) >= k_:
            break
        values = count + laplace(4.0 * k_ / eps_cut, len(cand), noise)
        for i in np.flatnonzero(values >= threshold)[: k_ - len(selected)]:
            selected[tuple(int(w) for w in cand[i])] = float(values[i])
    order = sorted({w for p in selected for w in p})
    patterns, supports, eps2 = phase2(
        tx.truncated(words),
        selected,
        order=order,
        k=k_,
        epsilon=eps - eps_cut,
        noise=noise,
    )
    components = {"cut": eps_cut}
    if eps2 > 0:
        components["supports"] = eps2
    return Release.per_frame(
        "noisycut",
        patterns,
        supports,
        components=components,
        vocabulary=tx.vocabulary,
        k=k_,
        max_length=length,
    )

"""Noise scales of the noisy threshold and FP-tree counts; sensitivities as coded."""

import numpy as np
import pytest
from scipy import stats

from privacy.dpcode.fptree import NoisyFPTree, noisy_supports
from privacy.dpcode.itemsets import (
    combinations,
    count_supports,
    frame_patterns,
    kth_support,
)
from privacy.dpcode.phase1 import noisy_threshold
from privacy.dpcode.primitives import Transactions
from privacy.dpcode.release import dpcode_budget
from privacy.noise import NoiseSource

P_MIN = 1e-3


def test_noisy_threshold_is_lap_2_over_eps1() -> None:
    eps, split = 2.0, 0.6
    eps_thr = dpcode_budget(eps, split)["threshold"]
    assert eps_thr == pytest.approx(split * eps / 2)
    noise = NoiseSource.seeded(10)
    draws = np.array(
        [noisy_threshold(40, epsilon=eps_thr, noise=noise) for _ in range(5000)]
    )
    lap = stats.laplace(loc=40, scale=2 / (split * eps))
    assert stats.kstest(draws, lap.cdf).pvalue > P_MIN


def test_tree_nodes_start_at_laplace_of_the_given_scale() -> None:
    noise = NoiseSource.seeded(11)
    starts = []
    for _ in range(800):
        tree = NoisyFPTree((0, 1, 2), [0, 1, 2], scale=5.0, noise=noise)
        starts += [n.end for n in tree.nodes()]
    assert stats.kstest(starts, stats.laplace(scale=5.0).cdf).pvalue > P_MIN


def test_phase2_scale_is_trees_over_epsilon() -> None:
    """m maximal singletons, no frames: each support is pure Lap(m / eps)."""
    empty = np.zeros((0, 6), dtype=bool)
    maximal = [(0,), (1,), (2,), (3,)]
    noise = NoiseSource.seeded(12)
    values = []
    for _ in range(1500):
        values += list(
            noisy_supports(
                empty, maximal, order=range(6), epsilon=0.5, noise=noise
            ).values()
        )
    assert stats.kstest(values, stats.laplace(scale=4 / 0.5).cdf).pvalue > P_MIN


def _neighbours(seed: int, words: int = 8, max_words: int = 4):
    rng = np.random.default_rng(seed)
    base = rng.random((25, words)) < 0.5
    extra = rng.random((1, words)) < 0.9
    d = Transactions(base, "t")
    d2 = Transactions(np.vstack([base, extra]), "t")
    return d, d2, max_words


@pytest.mark.parametrize("seed", range(5))
def test_sensitivities_used_by_the_code_hold(seed: int) -> None:
    d, d2, max_words = _neighbours(seed)
    x, x2 = d.truncated(max_words), d2.truncated(max_words)
    # threshold: rho_k moves by at most 1
    for k in (1, 5, 30):
        assert (
            abs(kth_support(d2, k, 3, max_words) - kth_support(d, k, 3, max_words)) <= 1
        )
    # word counts: L1 change <= max_words (the frequent-words step)
    assert np.abs(x2.sum(0) - x.sum(0)).sum() <= max_words
    # pattern counts, length 2..3: L1 change <= frame_patterns(L, 3, min_length=2)
    change = 0
    for j in (2, 3):
        cand = combinations(np.arange(d.n_words), j)
        change += np.abs(count_supports(x2, cand) - count_supports(x, cand)).sum()
    assert change <= frame_patterns(max_words, 3, min_length=2)
    # FP-tree end counts: exactly one node moves by 1 per tree (sensitivity 1)
    zero = NoiseSource.seeded(seed)
    t1 = NoisyFPTree((0, 2, 5), [0, 2, 5], scale=1e-12, noise=zero)
    t2 = NoisyFPTree((0, 2, 5), [0, 2, 5], scale=1e-12, noise=NoiseSource.seeded(seed))
    t1.count_frames(x)
    t2.count_frames(x2)
    diff = sum(abs(a.end - b.end) for a, b in zip(t1.nodes(), t2.nodes(), strict=True))
    assert diff == pytest.approx(float(x2[-1, [0, 2, 5]].any()), abs=1e-9)

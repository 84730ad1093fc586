"""Exact FP-growth (mlxtend ground truth), our counters and FP-trees vs brute force."""

import itertools

import numpy as np
import pytest

from privacy.dpcode.fptree import FPTree, NoisyFPTree
from privacy.dpcode.itemsets import (
    combinations,
    count_supports,
    exact_top_k,
    kth_support,
    occurring_supports,
    pattern_order,
)
from privacy.dpcode.primitives import Transactions
from privacy.noise import NoiseSource


def _random_tx(seed: int, frames: int = 30, words: int = 7) -> Transactions:
    rng = np.random.default_rng(seed)
    return Transactions(rng.random((frames, words)) < 0.45, "toy")


def _brute(tx: Transactions, max_length: int) -> dict[tuple[int, ...], int]:
    out = {}
    for j in range(1, max_length + 1):
        for p in itertools.combinations(range(tx.n_words), j):
            sup = int(tx.matrix[:, list(p)].all(axis=1).sum())
            if sup:
                out[p] = sup
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_top_k_matches_brute_force(seed: int) -> None:
    tx = _random_tx(seed)
    brute = _brute(tx, 3)
    ranked = sorted(brute.items(), key=lambda kv: pattern_order(kv[0], kv[1]))
    for k in (1, 5, 17):
        patterns, supports = exact_top_k(tx, k=k, max_length=3)
        assert list(zip(patterns, supports, strict=True)) == ranked[:k]
        assert kth_support(tx, k, 3) == ranked[k - 1][1]


def test_counters_match_brute_force() -> None:
    tx = _random_tx(3)
    brute = _brute(tx, 3)
    assert occurring_supports(tx, 3) == brute
    for j in (1, 2, 3):
        cand = combinations(np.arange(tx.n_words), j)
        counts = count_supports(tx.matrix, cand)
        assert [brute.get(tuple(c), 0) for c in cand.tolist()] == counts.tolist()


def test_fp_growth_on_an_exact_tree_matches_brute_force() -> None:
    tx = _random_tx(4, frames=40, words=5)
    tree = FPTree(order=[2, 0, 4, 1, 3])
    for row in tx.matrix:
        if row.any():
            tree.insert(np.flatnonzero(row).tolist())
    got = tree.growth()
    assert got == pytest.approx({p: float(v) for p, v in _brute(tx, 5).items()})


def test_noisy_tree_without_noise_gives_exact_supports() -> None:
    tx = _random_tx(5)
    pattern = (1, 3, 6)
    tree = NoisyFPTree(pattern, [3, 1, 6], scale=1e-12, noise=NoiseSource.seeded(1))
    assert len(list(tree.nodes())) == 7  # every non-empty subset, used or not
    tree.count_frames(tx.matrix)
    # each frame adds 1 to one node only (the end of its path)
    assert sum(n.end for n in tree.nodes()) == pytest.approx(
        int(tx.matrix[:, list(pattern)].any(axis=1).sum())
    )
    tree.aggregate()
    brute = _brute(Transactions(tx.matrix[:, list(pattern)], "sub"), 3)
    expect = {tuple(pattern[i] for i in p): float(v) for p, v in brute.items()}
    assert tree.growth() == pytest.approx(expect, abs=1e-6)

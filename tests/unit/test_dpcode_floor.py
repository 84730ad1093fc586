"""The DPcode tables' floor: k patterns that read no data."""

from __future__ import annotations

from collections import Counter
from math import comb

import numpy as np
import pytest

from experiments.tables.dpcode_table import FLOOR, Job, random_patterns, run_job


def test_random_patterns_are_distinct_short_and_uniform_over_the_universe() -> None:
    rng = np.random.default_rng(0)
    n_words, max_length = 6, 2  # 6 singletons + 15 pairs
    sizes: Counter[int] = Counter()
    for _ in range(400):
        pats = random_patterns(n_words, 5, max_length, rng)
        assert len(set(pats)) == 5
        assert all(
            1 <= len(p) <= max_length and list(p) == sorted(set(p)) for p in pats
        )
        assert all(0 <= w < n_words for p in pats for w in p)
        sizes.update(len(p) for p in pats)
    # uniform over the 21 patterns: a pair 15/21 of the time
    assert sizes[2] / sum(sizes.values()) == pytest.approx(15 / 21, abs=0.04)
    whole = random_patterns(n_words, comb(6, 1) + comb(6, 2), max_length, rng)
    assert len(set(whole)) == 21
    with pytest.raises(ValueError, match="k=22: only 21 patterns"):
        random_patterns(n_words, 22, max_length, rng)


def test_floor_job_spends_no_epsilon_and_scores_near_chance_on_digits() -> None:
    row = run_job(Job("eps", "digits", FLOOR, 4.0, 100, 0.5, 0), data_dir="")
    assert row["epsilon_spent"] == 0.0 and row["published"] == 100
    assert row["re"] != row["re"]  # no supports, no relative error
    # 100 of the 5,488 patterns of <= 3 of 32 words: about 100 / 5488 expected
    assert row["f_score"] < 0.1

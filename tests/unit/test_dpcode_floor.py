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


def test_federated_table_has_a_floor_per_source_read_from_the_pooled_data() -> None:
    """The Flower DPcode table's floor: offline, no epsilon, no RE, one per source."""
    import argparse

    from experiments.tables import dpcode_federated as fed

    jobs = fed._jobs(argparse.Namespace(quick=False, codes_model="m.pt"))
    floors = [j for j in jobs if j["variant"] == fed.FLOOR]
    assert {(j["source"], j["seed"]) for j in floors} == {
        (s, seed) for s in ("frames", "codes") for seed in (0, 1, 2)
    }
    row = fed._floor(
        {"source": "frames", "variant": fed.FLOOR, "eps": 0.0, "seed": 0}, ""
    )
    assert row["epsilon_per_frame"] == 0.0 and row["relative_error"] is None
    assert row["vocabulary"] == 32  # 4x4 patches: the Hadamard codebook's 32 words
    assert 0.0 <= row["f_score"] < 0.2  # 20 of the 5,488 patterns of <= 3 words
    assert fed.describe(row) == f"F {row['f_score']:.3f}"  # the progress line
    assert fed.describe({"f_score": 0.5, "relative_error": 0.25}) == "F 0.500 RE 0.25"
    text, summary = fed._table(
        [
            row,
            {**row, "seed": 1, "f_score": 0.05},
            {
                "source": "frames",
                "variant": "pruned",
                "eps": 8.0,
                "seed": 0,
                "f_score": 0.8,
                "relative_error": 0.4,
            },
        ]
    )
    line = next(x for x in text.splitlines() if fed.FLOOR in x)
    assert line.startswith(f"| frames | {fed.FLOOR} | - | 2 |") and line.endswith(
        "| - |"
    )
    assert "re_mean" not in summary["frames/floor"]
    assert summary["frames/pruned/eps8"]["re_mean"] == 0.4

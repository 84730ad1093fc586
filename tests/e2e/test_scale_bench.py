"""Smoke test of ``benchmarks/scale.py`` at its smallest (2 and 3 clients, 2 sampled,
2 rounds), each point a fresh child process joining this pytest process's Ray head:
the fields of the docs' table and the largest-over-smallest round-time ratio."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import scale


def test_scale_benchmark_runs_tiny(tmp_path: Path, ray_head: str):
    out = tmp_path / "scale.json"
    scale.main(
        [
            "--clients",
            "2,3",
            "--sampled",
            "2",
            "--rounds",
            "2",
            "--sample-s",
            "0.2",
            "--out",
            str(out),
            "--ray-address",
            ray_head,
        ]
    )
    report = json.loads(out.read_text())
    assert report["benchmark"] == "scale"
    assert report["ray_address"] == ray_head
    small, large = report["results"]
    assert (small["clients"], large["clients"]) == (2, 3)
    for row in (small, large):
        assert row["sampled_per_round"] == 2
        assert len(row["train_round_s"]) == 2
        assert row["seconds_per_round"] == row["train_round_s"][1]  # round 2
        assert len(row["eval_s"]) == 2  # round 0 and the last
        assert row["discovery_s"] > 0
        # joined Ray: the tree is the child driver (its Ray workers are the head's)
        assert row["peak_processes"] >= 1
        assert row["peak_rss_mib"] >= row["peak_driver_rss_mib"] > 0
        assert row["peak_pss_mib"] > 0
        assert row["memory_samples"] >= 1
    assert report["ratio_round_s_largest_over_smallest"] == pytest.approx(
        large["seconds_per_round"] / small["seconds_per_round"]
    )
    table = out.with_suffix(".md").read_text()
    rows = table.splitlines()[2:]  # after the header and its rule
    assert [r.split("|")[1].strip() for r in rows] == ["2", "3"]

"""Smoke test of ``benchmarks/round_time.py`` at its smallest (2 clients, 3 rounds)
on this pytest process's Ray head: the simulation's seconds per round against the
sequential local-training baseline timed before and after it in the same run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks import round_time


@pytest.fixture
def torch_threads():
    """The baseline sets torch to one thread; give the process its count back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_round_time_benchmark_runs_tiny(tmp_path: Path, ray_head: str, torch_threads):
    out = tmp_path / "round_time.json"
    argv = ["--clients", "2", "--rounds", "3", "--out", str(out)]
    round_time.main([*argv, "--ray-address", ray_head])
    report = json.loads(out.read_text())
    assert report["benchmark"] == "round_time"
    assert report["command"].endswith(" ".join(argv) + f" --ray-address {ray_head}")
    (row,) = report["results"]
    assert row["clients"] == 2
    assert row["rounds_measured"] == 1  # round 2 of 3
    assert row["seconds_per_round"] > 0
    before, after = row["sequential_before_after_seconds"]
    assert before > 0 < after
    assert row["sequential_local_training_seconds"] == pytest.approx(
        (before + after) / 2
    )
    assert row["ratio_round_over_sequential"] == pytest.approx(
        row["seconds_per_round"] / row["sequential_local_training_seconds"]
    )
    assert "before" not in report

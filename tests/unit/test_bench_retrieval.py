"""Smoke test of ``benchmarks/retrieval.py``: a tiny run checks itself, writes JSON."""

import pytest

from tests.fixtures import run_benchmark

pytest.importorskip("numba")


def test_retrieval_benchmark_tiny_checks_pass(tmp_path):
    out = tmp_path / "retrieval.json"
    args = ["--n-db", "3000", "--n-query", "40", "--baseline-queries", "5"]
    data = run_benchmark("retrieval.py", out, *args, "--repeats", "1")
    assert data["targets"]["all_checks_pass"] is True
    assert data["map_all"]["ours_seconds"] > 0

"""Smoke test of ``benchmarks/retrieval.py``: a tiny run checks itself, writes JSON."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("numba")


def test_retrieval_benchmark_tiny_checks_pass(tmp_path):
    out = tmp_path / "retrieval.json"
    args = ["--n-db", "3000", "--n-query", "40", "--baseline-queries", "5"]
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks/retrieval.py"),
            *args,
            "--repeats",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["targets"]["all_checks_pass"] is True
    assert data["map_all"]["ours_seconds"] > 0

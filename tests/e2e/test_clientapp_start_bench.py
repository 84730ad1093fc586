"""Smoke test of benchmarks/clientapp_start.py (tiny: one repeat, digits), so the
benchmark cannot rot unseen: its JSON has every field the docs quote, the cold
first message is measured apart, and the goal field is computed from the medians."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_clientapp_start_benchmark_runs_tiny(tmp_path: Path):
    out = tmp_path / "start.json"
    proc = subprocess.run(
        [sys.executable, "benchmarks/clientapp_start.py", "--repeats", "1",
         "--clients", "2", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    this = report["results"]["this"]
    for field in ("torch_s", "app_s", "data_s", "cold_data_s", "beyond_torch_s"):
        assert this[field] > 0, field
    assert this["beyond_torch_s"] == this["app_s"] + this["data_s"] - this["torch_s"]
    goal = report["goal_beyond_torch_s"]
    assert this["meets_goal"] == (this["beyond_torch_s"] <= goal)
    assert "beyond torch" in proc.stdout

"""The GPU runbook rehearsed on the CPU (``bash benchmarks/gpu_run.sh --device cpu
--tiny``), so that the script a lent GPU window depends on cannot rot.

One test runs each kind of step once: the backbone's features, the fine-tune
protocol in a Ray simulation (FedAvg) and one round of the loopback deployment on the
features; the three other simulations differ from the one run only by their data and
strategy options. A second test gives it no time: every step is reported as skipped,
with the reason.
"""

from __future__ import annotations

import json
import math
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def _run(
    tmp_path: Path, *extra: str, timeout: float = 600
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            "bash",
            str(ROOT / "benchmarks" / "gpu_run.sh"),
            "--out",
            str(tmp_path / "out"),
            "--work",
            str(tmp_path / "work"),
            "--device",
            "cpu",
            "--tiny",
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_rehearsal_runs_every_kind_of_step(tmp_path):
    proc = _run(
        tmp_path,
        "--budget",
        "540",
        "--steps",
        "features,finetune-fedavg,loopback",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "out"
    report = json.loads((out / "summary.json").read_text())
    steps = report["steps"]
    assert list(steps) == ["features", "finetune-fedavg", "loopback"]
    assert {s["status"] for s in steps.values()} == {"ok"}
    assert steps["features"]["images"] == 240
    for name in ("finetune-fedavg", "loopback"):
        assert steps[name]["rounds"] == 1
        assert math.isfinite(steps[name]["map_all"]) and steps[name]["map_all"] > 0
        assert steps[name]["client_devices"] == ["cpu"]
    assert report["gpu_sampled"] is False
    assert "| finetune-fedavg | ok |" in (out / "REPORT.md").read_text()
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = tar.getnames()
    assert "logs/loopback.log" in names
    assert any(n.endswith("rounds.jsonl") for n in names)


def test_a_budget_too_short_skips_every_step_and_says_why(tmp_path):
    proc = _run(tmp_path, "--budget", "1", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    steps = json.loads((tmp_path / "out" / "summary.json").read_text())["steps"]
    assert steps["features"]["status"] == "skipped"
    assert steps["features"]["reason"].startswith("budget:")
    assert steps["loopback"] == {"status": "skipped", "reason": "no features file"}
    assert len(steps) == 8 and all(s["status"] == "skipped" for s in steps.values())
    # the deterministic pair runs in a CPU rehearsal too (the setting is a no-op
    # there); here it has no features to run on
    assert steps["features-fedavg-deterministic-repeat"] == {
        "status": "skipped",
        "reason": "no features file",
    }

"""Checkpoint/resume through Flower: SIGKILL the simulation mid-run, resume, and get
the same rounds, final metrics and privacy ledger as an uninterrupted run.

The ServerApp of an in-process simulation (``experiments/simulate.py``) lives in the
process the test starts (its Ray workers in the same process group): the test kills
that group with SIGKILL once the round-2 checkpoint is on disk, then resumes with
``resume = <run dir>``. Seeded noise, so that the uninterrupted run is a fixed
target; FedHAP with flipped prototype uploads, so that the strategy state (global
prototypes) and the ledger (one charge per client and round) both matter.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMING = {"train_round_s", "elapsed_s", "eval_seconds"}
CONFIG = {
    "strategy": "fedhap",
    "rounds": 4,
    "eval-every": 2,
    "local-epochs": 1,
    "privacy.noise": "seeded",
    "privacy.prototype-flip-epsilon": 2.0,
}


def _cmd(results: Path, **extra: str) -> list[str]:
    sets = {**CONFIG, "results-dir": str(results), **extra}
    cmd = [sys.executable, "-m", "experiments.simulate", "--clients", "3"]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    return cmd


def _rows(run: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run / "rounds.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def _run(cmd: list[str]) -> Path:
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


def test_sigkill_mid_run_then_resume_gives_the_uninterrupted_result(tmp_path):
    full = _run(_cmd(tmp_path / "full"))

    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        _cmd(killed), cwd=ROOT, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        at = None
        while time.monotonic() < deadline and proc.poll() is None:
            found = list(killed.glob("*.incomplete/checkpoint.json"))
            if found:
                at = json.loads(found[0].read_text())["round"]
                if at >= 2:
                    break
            time.sleep(0.1)
        assert proc.poll() is None, "the run ended before it could be killed"
        assert at is not None and at >= 2, "no round-2 checkpoint in time"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the ServerApp and its Ray workers
        proc.wait()
    run_dir = found[0].parent
    assert not (run_dir / "summary.json").exists()

    resumed = _run(_cmd(killed, resume=str(run_dir)))
    assert resumed == killed / run_dir.name.removesuffix(".incomplete")
    assert _rows(resumed) == _rows(full)
    a = json.loads((full / "summary.json").read_text())
    b = json.loads((resumed / "summary.json").read_text())
    for key in ("final", "initial_map_all", "best_round", "best_map_all", "privacy"):
        assert a[key] == b[key], key
    ledger = json.loads((resumed / "privacy_ledger.json").read_text())
    charged = sorted((c["client"], c["round"]) for c in ledger)
    assert charged == sorted((c, r) for c in range(3) for r in range(1, 5))
    assert ledger == json.loads((full / "privacy_ledger.json").read_text())
    assert not list(resumed.glob("checkpoint*"))  # a finished run keeps none

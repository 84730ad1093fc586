"""Kill a simulation mid-run with SIGKILL, then resume it (``resume = <run dir>``).

The ServerApp of an in-process simulation (``experiments/simulate.py``) lives in the
process this starts, its own Ray instance (if it starts one) in the same process group;
on a joined cluster Ray ends a dead driver's actors. The group is killed with SIGKILL
once the checkpoint of round ``kill_after`` is on disk, then the run is started again
with ``resume``. Used by ``test_privacy_end_to_end.py``, which compares the resumed
run with an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from server.run_files import read_rounds, without_timing

ROOT = Path(__file__).resolve().parents[2]


def _cmd(overrides: dict[str, Any], clients: int, ray_address: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "experiments.simulate", "--clients", str(clients)]
    if ray_address:
        cmd += ["--ray-address", ray_address]
    for k, v in overrides.items():
        cmd += ["--set", f"{k}={v}"]
    return cmd


def rows_without_timing(run: Path) -> list[dict]:
    """``rounds.jsonl`` of ``run`` without the wall-time fields."""
    return without_timing(read_rounds(run))


def kill_and_resume(
    overrides: dict[str, Any],
    *,
    clients: int,
    results: Path,
    kill_after: int = 1,
    ray_address: str | None = None,
) -> Path:
    """Run, SIGKILL after the ``kill_after`` checkpoint, resume; the final dir.

    ``ray_address``: both runs join that Ray cluster (``--ray-address``) instead of
    starting their own instance; Ray ends the killed driver's actors itself.
    """
    config = {**overrides, "results-dir": str(results)}
    proc = subprocess.Popen(
        _cmd(config, clients, ray_address),
        cwd=ROOT,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    found: list[Path] = []
    at = None
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and proc.poll() is None:
            found = list(results.glob("*.incomplete/checkpoint.json"))
            if found:
                at = json.loads(found[0].read_text())["round"]
                if at >= kill_after:
                    break
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be killed"
        assert at is not None and at >= kill_after, "no checkpoint in time"
    finally:
        # the ServerApp, and its Ray instance unless it joined ``ray_address``
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    run_dir = found[0].parent
    assert not (run_dir / "summary.json").exists()
    done = subprocess.run(
        _cmd({**config, "resume": str(run_dir)}, clients, ray_address),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-3000:]}"
    assert "Resuming" in done.stderr, done.stderr[-3000:]
    final = Path(done.stdout.strip().splitlines()[-1])
    assert final == results / run_dir.name.removesuffix(".incomplete")
    assert not list(final.glob("checkpoint*"))  # a finished run keeps none
    return final

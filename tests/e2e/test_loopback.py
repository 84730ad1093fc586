"""The loopback backend (experiments/loopback.py): a real SuperLink and SuperNodes.

What the PHashing driver's ``--backend loopback`` and the GPU machine run: one
insecure ``flower-superlink``, one ``flower-supernode`` per client, ``flwr run``
against them. The run must complete and learn, and every process the backend
started (each in its own session) must be gone afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from experiments import loopback

pytestmark = pytest.mark.e2e


def _group_alive(pgid: int, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.2)
    return True


# opt-in (about 85 s on a quiet 2-core machine, mostly Flower starting a ClientApp
# process per message): make test-scale. make test runs the same Flower processes
# (SuperLink, SuperNodes, `flwr run`) in tests/e2e/test_deployment.py.
@pytest.mark.scale
@pytest.mark.skipif(
    os.environ.get("FEDHASH_SCALE_TESTS") != "1",
    reason="opt-in: make test-scale (FEDHASH_SCALE_TESTS=1)",
)
def test_loopback_run_learns_and_stops_every_process_it_started(tmp_path, monkeypatch):
    started: list[subprocess.Popen] = []

    class Recorded(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)

    monkeypatch.setattr(loopback.subprocess, "Popen", Recorded)
    cfg = {
        "rounds": 1,
        "eval-every": 1,
        "local-epochs": 2,
        "code-length": 16,
        "model": "mlp",
        "min-train-nodes": 2,
        "map-top-k": 50,
        "precision-k": "10,50",
        "seed": 0,
    }
    summary = loopback.run_loopback(cfg, 2, tmp_path / "run", timeout_s=300)
    assert summary["final_round"] == 1
    assert summary["final"]["map_all"] > summary["initial_map_all"]
    # the SuperLink, both SuperNodes, then `flwr run`
    names = [os.path.basename(p.args[0]) for p in started]
    assert names == ["flower-superlink", *["flower-supernode"] * 2, "flwr"]
    for proc in started:
        assert proc.returncode is not None
    # nothing left in the groups of the SuperLink and SuperNodes (killed with
    # SIGKILL: their children may take a moment to be gone)
    alive = [p.args[0] for p in started[:3] if _group_alive(p.pid, wait_s=20)]
    assert alive == []
    logs = tmp_path / "run" / "logs"
    assert {p.name for p in logs.iterdir()} >= {
        "superlink.log",
        "supernode-0.log",
        "supernode-1.log",
        "flwr-run.log",
    }


def test_loopback_refuses_zero_clients(tmp_path):
    with pytest.raises(ValueError, match="clients=0"):
        loopback.run_loopback({}, 0, tmp_path)


def _processes_with_home(home_root: Path) -> list[psutil.Process]:
    """Live processes (not zombies) whose FLWR_HOME lies under ``home_root``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            home = proc.environ().get("FLWR_HOME", "")
        except (psutil.Error, OSError):
            continue
        if home.startswith(str(home_root)):
            found.append(proc)
    return found


def _flwr_run_started(home_root: Path) -> bool:
    """Whether a process under ``home_root``'s FLWR_HOME runs ``flwr run``."""
    for proc in _processes_with_home(home_root):
        try:
            argv = proc.cmdline()
        except psutil.Error:
            continue
        # a console script: `<python> <venv>/bin/flwr run ...`
        pairs = zip(argv[:-1], argv[1:], strict=True)
        if any(os.path.basename(a) == "flwr" and b == "run" for a, b in pairs):
            return True
    return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_driver_stops_every_deployment_process(tmp_path, signum):
    # what `timeout` (SIGTERM) or Ctrl-C (SIGINT) does to a driver: before, the
    # SuperLink, SuperNodes and `flwr run` (each in its own session) outlived it
    tmp = tmp_path / "tmp"  # the deployment's FLWR_HOME is made under TMPDIR
    tmp.mkdir()
    run = tmp_path / "run"
    driver = subprocess.Popen(
        [sys.executable, "-m", "experiments.loopback", "--clients", "2"]
        + ["--out", str(run), "--set", "rounds=50", "--set", "model=mlp"],
        cwd=loopback.ROOT,
        env={**os.environ, "TMPDIR": str(tmp)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    procs: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        # `flwr run` exec'd: the driver has started (and so registered) all 4
        while not _flwr_run_started(tmp):
            assert driver.poll() is None, driver.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the run was never submitted"
            time.sleep(0.2)
        procs = _processes_with_home(tmp)
        # the SuperLink, 2 SuperNodes and `flwr run`, and what they started
        assert len(procs) >= 4
        driver.send_signal(signum)
        assert driver.wait(timeout=60) == 128 + signum
        assert b"stopping 4 deployment process(es)" in driver.stderr.read()
        deadline = time.monotonic() + 20
        while _processes_with_home(tmp) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _processes_with_home(tmp) == []
    finally:
        for pid in [driver.pid, *(proc.pid for proc in procs)]:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        driver.wait()

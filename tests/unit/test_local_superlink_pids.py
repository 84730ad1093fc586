"""server/local_superlink.py finds and stops the local SuperLink by psutil
(no /proc: macOS too), SIGKILL after the timeout for one that ignores SIGTERM."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil

from server.local_superlink import local_superlink_pids, stop_pids

SCRIPT = """
import signal, sys, time
if sys.argv[2] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(120)
"""


def test_finds_and_stops_only_this_homes_superlink(tmp_path: Path):
    fake = tmp_path / "bin" / "flower-superlink"
    fake.parent.mkdir()
    fake.write_text(SCRIPT)
    home, other = tmp_path / "home", tmp_path / "other"
    marker = str(home.resolve() / "local-superlink" / "superlink.log")
    foreign = str(other.resolve() / "local-superlink" / "superlink.log")
    procs = [
        subprocess.Popen([sys.executable, str(fake), marker, mode],
                         stdout=subprocess.PIPE, text=True)
        for mode in ("polite", "stubborn")
    ]
    bystander = subprocess.Popen([sys.executable, str(fake), foreign, "polite"],
                                 stdout=subprocess.PIPE, text=True)
    try:
        for p in (*procs, bystander):
            assert p.stdout.readline().strip() == "ready"
        found = local_superlink_pids(home)
        assert sorted(found) == sorted(p.pid for p in procs)
        start = time.monotonic()
        stop_pids(found, timeout_s=1.0)
        elapsed = time.monotonic() - start
        # psutil reaps its caller's children itself, so Popen cannot see the signal
        assert not any(psutil.pid_exists(p.pid) for p in procs)
        assert 1.0 <= elapsed < 10  # the stubborn one waited out the timeout: SIGKILL
        assert bystander.poll() is None  # another home's SuperLink is left alone
        assert local_superlink_pids(home) == []
    finally:
        for p in (*procs, bystander):
            p.kill()
            p.wait()

"""A signal that reaches a driver while it is starting a deployment process.

The SuperLink, SuperNodes and `flwr run` each run in their own session, so a
process the driver has started but not yet registered would outlive a SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from experiments import loopback

# The driver's Popen starts `sleep` in its own session, prints its PID, then
# signals its own process before Popen returns to `start_registered`: the
# handler then runs between the start and the registration.
DRIVER = textwrap.dedent(
    """
    import os, signal, subprocess, sys
    from experiments import loopback

    real_popen = subprocess.Popen

    def popen_then_signal(cmd, **kwargs):
        proc = real_popen(cmd, **kwargs)
        print(proc.pid, flush=True)
        os.kill(os.getpid(), signal.{name})
        return proc

    loopback.stop_deployments_on_signals()
    subprocess.Popen = popen_then_signal
    loopback.start_registered(["sleep", "60"], start_new_session=True)
    print("not stopped", flush=True)
    """
)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_start_stops_the_process_being_started(signum):
    done = subprocess.run(
        [sys.executable, "-c", DRIVER.format(name=signum.name)],
        cwd=loopback.ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    pid = int(done.stdout.split()[0])
    try:
        assert done.returncode == 128 + signum, done.stderr
        assert "not stopped" not in done.stdout
        assert f"signal {signum}: stopping 1 deployment process(es)" in done.stderr
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), "the process started mid-signal outlived the driver"
    finally:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def test_start_registered_refuses_once_stopping(monkeypatch):
    monkeypatch.setattr(loopback, "_STOPPING", type(loopback._STOPPING)())
    loopback._STOPPING.set()
    with pytest.raises(RuntimeError, match="stopping on a signal; nothing started"):
        loopback.start_registered(["sleep", "60"])

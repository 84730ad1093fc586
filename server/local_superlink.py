"""Find and stop the managed local SuperLink that ``flwr run`` starts for a FLWR_HOME.

``flwr run .`` (address ``:local:``) spawns a detached ``flower-superlink`` whose
command line names ``$FLWR_HOME/local-superlink/superlink.log``; that path identifies
*our* SuperLink among others on the machine, and we stop it by its PID.

Usage:

* ``python -m server.local_superlink stop <FLWR_HOME>``;
* ``python -m server.local_superlink status <FLWR_HOME> <LOG>``: the final status of
  the run whose ``flwr run`` output is in ``LOG`` ("Successfully started run <id>"),
  read from the SuperLink with ``flwr list --run-id <id> --format json``; exit 0
  when it finished completed, 1 otherwise (failed, stopped, never started), with
  one line saying so. ``make run`` exits with it, so a failed run fails the command.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

RUN_STARTED = re.compile(r"Successfully started run (\d+)")
COMPLETED = "finished:completed"


def local_superlink_pids(flwr_home: str | Path) -> list[int]:
    """PIDs of ``flower-superlink`` processes started for ``flwr_home``."""
    import psutil  # noqa: PLC0415

    marker = str(Path(flwr_home).resolve() / "local-superlink" / "superlink.log")
    pids = []
    for proc in psutil.process_iter(["cmdline"]):
        args = proc.info.get("cmdline") or []
        if any("flower-superlink" in a for a in args[:2]) and marker in args:
            pids.append(proc.pid)
    return pids


def stop_pids(pids: list[int], *, timeout_s: float = 10.0) -> None:
    """SIGTERM each PID, then SIGKILL those still alive after ``timeout_s``."""
    import psutil  # noqa: PLC0415

    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    for proc in procs:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)


def run_status(
    flwr_home: str | Path, run_id: str, *, wait_s: float = 30.0
) -> tuple[str, str]:
    """``(status, details)`` of ``run_id`` on the local SuperLink of ``flwr_home``.

    Polls ``flwr list`` until the status starts with ``finished`` or ``wait_s``
    passes (the stream can end a moment before the SuperLink records the status).
    """
    env = {**os.environ, "FLWR_HOME": str(flwr_home)}
    flwr = Path(sys.executable).with_name("flwr")
    command = [str(flwr) if flwr.exists() else "flwr", "list", "--run-id", run_id]
    deadline = time.monotonic() + wait_s
    status, details = "unknown", ""
    while True:
        done = subprocess.run(
            [*command, "--format", "json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        try:
            runs = json.loads(done.stdout).get("runs", [])
        except (json.JSONDecodeError, AttributeError):
            runs = []
        mine = [r for r in runs if str(r.get("run-id")) == run_id]
        if mine:
            status = str(mine[0].get("status", "unknown"))
            details = str(mine[0].get("status-details", "") or "")
        if status.startswith("finished") or time.monotonic() > deadline:
            return status, details
        time.sleep(1.0)


def status_main(flwr_home: str, log: str) -> int:
    """Exit code for ``make run``: 0 iff the logged run finished completed."""
    try:
        text = Path(log).read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    started = RUN_STARTED.findall(text)
    if not started:
        print("error: the run did not start (see the output above)", file=sys.stderr)
        return 1
    run_id = started[-1]
    status, details = run_status(flwr_home, run_id)
    if status == COMPLETED:
        return 0
    reason = f": {details}" if details else ""
    print(f"error: run {run_id} ended {status}{reason}", file=sys.stderr)
    return 1


USAGE = (
    "usage: python -m server.local_superlink stop <FLWR_HOME>\n"
    "       python -m server.local_superlink status <FLWR_HOME> <LOG>"
)


def main(argv: list[str]) -> int:
    """CLI: ``stop <FLWR_HOME>`` or ``status <FLWR_HOME> <LOG>``."""
    if len(argv) == 3 and argv[0] == "status":
        return status_main(argv[1], argv[2])
    if len(argv) != 2 or argv[0] != "stop":
        print(USAGE, file=sys.stderr)
        return 2
    pids = local_superlink_pids(argv[1])
    stop_pids(pids)
    if pids:
        print(f"stopped local SuperLink pid(s) {pids}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

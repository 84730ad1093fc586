"""Find and stop the managed local SuperLink that ``flwr run`` starts for a FLWR_HOME.

``flwr run .`` (address ``:local:``) spawns a detached ``flower-superlink`` whose
command line names ``$FLWR_HOME/local-superlink/superlink.log``; that path identifies
*our* SuperLink among others on the machine, and we stop it by its PID.

Usage: ``python -m server.local_superlink stop <FLWR_HOME>``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


def local_superlink_pids(flwr_home: str | Path) -> list[int]:
    """PIDs of ``flower-superlink`` processes started for ``flwr_home``."""
    marker = str(Path(flwr_home).resolve() / "local-superlink" / "superlink.log")
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv]
        if any("flower-superlink" in a for a in args[:2]) and marker in args:
            pids.append(int(proc.name))
    return pids


def stop_pids(pids: list[int], *, timeout_s: float = 10.0) -> None:
    """SIGTERM each PID, then SIGKILL those still alive after ``timeout_s``."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if Path(f"/proc/{p}").exists() and not _zombie(p)]
        time.sleep(0.1)
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _zombie(pid: int) -> bool:
    try:
        return " Z " in Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True


def main(argv: list[str]) -> int:
    """CLI: ``stop <FLWR_HOME>``."""
    if len(argv) != 2 or argv[0] != "stop":
        print(
            "usage: python -m server.local_superlink stop <FLWR_HOME>", file=sys.stderr
        )
        return 2
    pids = local_superlink_pids(argv[1])
    stop_pids(pids)
    if pids:
        print(f"stopped local SuperLink pid(s) {pids}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

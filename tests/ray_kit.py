"""Ray nodes started by a test on loopback, and stopped by their process groups.

``LoopbackCluster`` runs ``ray start --block`` processes, each in its own session and
temp dir, with every port explicit and free (other Ray instances may run on this
machine). It is stopped through the process group of each ``ray start --block``,
never with ``ray stop``, which stops every Ray instance of the user.

Two users:

- ``tests/e2e/test_ray_cluster.py`` (opt-in): a head and a worker node, the recipe
  of docs/ray-cluster.md;
- ``tests/e2e/conftest.py``: one head per pytest process that the simulation tests
  join (``simulate(..., ray_address=...)``) instead of each starting and stopping
  its own Ray instance.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = Path(sys.executable).parent / "ray"


class RayStartError(RuntimeError):
    """A ``ray start`` node did not come up; the message holds its log's tail."""


class LoopbackCluster:
    """`ray start --block` processes, each in its own session and temp dir."""

    def __init__(self) -> None:
        # short: Ray's Unix sockets live under the temp dir (108-byte path limit)
        self.root = Path(tempfile.mkdtemp(prefix="fh-ray-", dir="/tmp"))
        self.used: set[int] = set()  # every port handed to this cluster's nodes
        self.port = self.ports(1)[0]
        self.address = f"127.0.0.1:{self.port}"
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, *args: str, num_cpus: int = 1) -> None:
        temp = self.root / name
        temp.mkdir()
        flags = (
            "--node-manager-port",
            "--object-manager-port",
            "--metrics-export-port",
            "--runtime-env-agent-port",
            "--dashboard-agent-listen-port",
            "--dashboard-agent-grpc-port",
        )
        # every port explicit, free and distinct: other Ray instances may run here
        ports = dict(zip(flags, self.ports(len(flags)), strict=True))
        cmd = [str(RAY), "start", *args, "--block", "--num-cpus", str(num_cpus)]
        cmd += ["--node-ip-address", "127.0.0.1", "--temp-dir", str(temp)]
        cmd += ["--object-store-memory", str(128 * 1024**2), "--disable-usage-stats"]
        for flag, port in ports.items():
            cmd += [flag, str(port)]
        with (self.root / f"{name}.log").open("wb") as log:
            self.procs[name] = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def ports(self, n: int) -> list[int]:
        """Return ``n`` free ports, distinct from each other and from earlier ones.

        Each is held open until all are drawn: two separate ``free_port()`` calls
        can return the same port, and Ray refuses a port given to two components.
        """
        socks, out = [], []
        try:
            while len(out) < n:
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
                if port not in self.used:
                    self.used.add(port)
                    out.append(port)
        finally:
            for sock in socks:
                sock.close()
        return out

    def start_head(self, num_cpus: int = 1) -> None:
        dashboard, client = self.ports(2)
        self.start(
            "head",
            "--head",
            "--port",
            str(self.port),
            "--include-dashboard",
            "false",
            "--dashboard-port",
            str(dashboard),
            "--ray-client-server-port",
            str(client),
            "--num-gpus",
            "0",
            num_cpus=num_cpus,
        )

    def start_worker(self) -> None:
        self.start(
            "worker",
            "--address",
            self.address,
            "--resources",
            json.dumps({"worker_node": 1}),
        )

    def wait_ready(self, name: str, timeout: float = 90) -> None:
        """`ray start` writes ray_current_cluster into its temp dir once up.

        Raises :class:`RayStartError` (with the node's log) if it exits or times out.
        """
        proc, ready = self.procs[name], self.root / name / "ray_current_cluster"
        deadline = time.monotonic() + timeout
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                log = (self.root / f"{name}.log").read_text(errors="replace")
                raise RayStartError(
                    f"Ray could not start its {name} node here:\n{log[-2000:]}"
                )
            time.sleep(0.5)

    def pids(self) -> list[int]:
        """Processes still in one of our process groups."""
        groups = {p.pid for p in self.procs.values()}
        out = subprocess.run(
            ["ps", "-eo", "pid=,pgid="], capture_output=True, text=True
        ).stdout
        rows = (line.split() for line in out.splitlines())
        return [int(pid) for pid, pgid in rows if int(pgid) in groups]

    def stop(self) -> None:
        """SIGTERM each process group (ray start --block stops its node), then KILL."""
        for sig, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
            for proc in self.procs.values():
                try:
                    os.killpg(proc.pid, sig)  # start_new_session: pgid == pid
                except (ProcessLookupError, PermissionError):
                    pass
            deadline = time.monotonic() + grace
            while self.pids() and time.monotonic() < deadline:
                for proc in self.procs.values():
                    proc.poll()  # reap our direct children
                time.sleep(0.3)
            if not self.pids():
                break
        for proc in self.procs.values():
            proc.poll()
        shutil.rmtree(self.root, ignore_errors=True)

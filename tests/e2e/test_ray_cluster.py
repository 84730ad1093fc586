"""The simulation on an existing two-node Ray cluster, started here on loopback.

docs/ray-cluster.md's recipe: `ray start --head` and `ray start --address` (a second
node with its own temp dir, ports and a `worker_node` resource), then
`experiments.simulate --ray-address`. One CPU per node and one per client, so the
clients must spread over both nodes; the metrics must equal a single-node run's.

Every Ray process is stopped through the process group of the `ray start --block`
that started it (never `ray stop`, which stops every Ray instance of the user).
"""

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

import pytest

from clients.node_log import node_counts
from experiments.simulate import load_run, simulate

# opt-in (about 1.5 min on a quiet 2-core machine: two Ray nodes plus two runs):
# make test-scale
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.scale,
    pytest.mark.skipif(
        os.environ.get("FEDHASH_SCALE_TESTS") != "1",
        reason="opt-in: make test-scale (FEDHASH_SCALE_TESTS=1)",
    ),
]
RAY = Path(sys.executable).parent / "ray"
BASE = {
    "rounds": 2,
    "eval-every": 1,
    "local-epochs": 1,
    "code-length": 16,
    "map-top-k": 50,
    "precision-k": "10,50",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LoopbackCluster:
    """`ray start --block` processes, each in its own session and temp dir."""

    def __init__(self) -> None:
        # short: Ray's Unix sockets live under the temp dir (108-byte path limit)
        self.root = Path(tempfile.mkdtemp(prefix="fh-ray-", dir="/tmp"))
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, *args: str) -> None:
        temp = self.root / name
        temp.mkdir()
        ports = {  # every port explicit and free: other Ray instances may run here
            "--node-manager-port": _free_port(),
            "--object-manager-port": _free_port(),
            "--metrics-export-port": _free_port(),
            "--runtime-env-agent-port": _free_port(),
            "--dashboard-agent-listen-port": _free_port(),
            "--dashboard-agent-grpc-port": _free_port(),
        }
        cmd = [str(RAY), "start", *args, "--block", "--num-cpus", "1"]
        cmd += ["--node-ip-address", "127.0.0.1", "--temp-dir", str(temp)]
        cmd += ["--object-store-memory", str(128 * 1024**2), "--disable-usage-stats"]
        for flag, port in ports.items():
            cmd += [flag, str(port)]
        with (self.root / f"{name}.log").open("wb") as log:
            self.procs[name] = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def start_head(self) -> None:
        self.start(
            "head",
            "--head",
            "--port",
            str(self.port),
            "--include-dashboard",
            "false",
            "--dashboard-port",
            str(_free_port()),
            "--ray-client-server-port",
            str(_free_port()),
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
        """`ray start` writes ray_current_cluster into its temp dir once up."""
        proc, ready = self.procs[name], self.root / name / "ray_current_cluster"
        deadline = time.monotonic() + timeout
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                log = (self.root / f"{name}.log").read_text(errors="replace")
                pytest.skip(f"Ray could not start its {name} node here:\n{log[-2000:]}")
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


@pytest.fixture
def cluster():
    c = LoopbackCluster()
    try:
        yield c
    finally:
        c.stop()
        leftover = c.pids()
        assert not leftover, f"Ray processes left running: {leftover}"


def _metrics(run_dir: Path):
    _, rows, summary = load_run(run_dir)
    return [(r["round"], r.get("map_all"), r["train_loss"]) for r in rows], summary


def test_simulation_spreads_over_two_ray_nodes_with_single_node_metrics(
    tmp_path, cluster
):
    cluster.start_head()
    cluster.wait_ready("head")
    cluster.start_worker()  # boots while the single-node reference runs

    t0 = time.monotonic()
    single = simulate(
        {**BASE, "results-dir": str(tmp_path / "single")},
        num_clients=4,
        cpus=2,
        node_log=tmp_path / "single-nodes.jsonl",
    )
    single_s = time.monotonic() - t0

    cluster.wait_ready("worker")
    t0 = time.monotonic()
    multi = simulate(
        {**BASE, "results-dir": str(tmp_path / "cluster")},
        num_clients=4,
        ray_address=cluster.address,
        node_log=tmp_path / "cluster-nodes.jsonl",
    )
    cluster_s = time.monotonic() - t0

    import ray

    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    try:
        nodes = {n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}
    finally:
        ray.shutdown()
    assert len(nodes) == 2, nodes
    (worker,) = [n for n, res in nodes.items() if res.get("worker_node")]

    per_node = node_counts(tmp_path / "cluster-nodes.jsonl")
    print(
        f"\nsingle node: {single_s:.1f} s; two nodes: {cluster_s:.1f} s; "
        f"ClientApp messages per Ray node: {dict(per_node)}"
    )
    # each node ran ClientApp messages: the worker node and the head
    assert set(per_node) == set(nodes), (per_node, nodes)
    assert per_node[worker] > 0 and min(per_node.values()) > 0
    assert sum(per_node.values()) == sum(
        node_counts(tmp_path / "single-nodes.jsonl").values()
    )
    # same seed, same metrics per round and same final report
    (rows_a, summary_a), (rows_b, summary_b) = _metrics(single), _metrics(multi)
    assert [r for r, _, _ in rows_a] == [0, 1, 2]
    assert rows_a == rows_b
    assert summary_a["final"] == summary_b["final"]

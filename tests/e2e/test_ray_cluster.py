"""The simulation on an existing two-node Ray cluster, started here on loopback.

docs/ray-cluster.md's recipe: `ray start --head` and `ray start --address` (a second
node with its own temp dir, ports and a `worker_node` resource), then
`experiments.simulate --ray-address`. One CPU per node and one per client, so the
clients must spread over both nodes; the metrics must equal a single-node run's.

Every Ray process is stopped through the process group of the `ray start --block`
that started it (``tests/ray_kit.py``; never `ray stop`, which stops every Ray
instance of the user).
"""

import os
import time
from pathlib import Path

import pytest

from clients.node_log import node_counts
from experiments.simulate import load_run, simulate
from tests.ray_kit import LoopbackCluster, RayStartError

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
BASE = {
    "rounds": 2,
    "eval-every": 1,
    "local-epochs": 1,
    "code-length": 16,
    "map-top-k": 50,
    "precision-k": "10,50",
}


@pytest.fixture
def cluster():
    c = LoopbackCluster()
    try:
        yield c
    finally:
        c.stop()
        leftover = c.pids()
        assert not leftover, f"Ray processes left running: {leftover}"


def _ready(cluster: LoopbackCluster, name: str) -> None:
    try:
        cluster.wait_ready(name)
    except RayStartError as error:  # opt-in test: say why, as before
        pytest.skip(str(error))


def _metrics(run_dir: Path):
    _, rows, summary = load_run(run_dir)
    return [(r["round"], r.get("map_all"), r["train_loss"]) for r in rows], summary


def test_simulation_spreads_over_two_ray_nodes_with_single_node_metrics(
    tmp_path, cluster
):
    cluster.start_head()
    _ready(cluster, "head")
    cluster.start_worker()  # boots while the single-node reference runs

    t0 = time.monotonic()
    single = simulate(
        {**BASE, "results-dir": str(tmp_path / "single")},
        num_clients=4,
        cpus=2,
        node_log=tmp_path / "single-nodes.jsonl",
    )
    single_s = time.monotonic() - t0

    _ready(cluster, "worker")
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

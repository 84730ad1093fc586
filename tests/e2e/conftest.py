"""One Ray head per pytest process, joined by the simulation tests.

Each simulation on its own Ray instance starts and stops Ray's processes (GCS,
raylet, agents) and two ClientApp actors, each importing torch, scikit-learn and
flwr-datasets (about 7 CPU-seconds); on two cores shared by two pytest workers that
start-up was most of a run. The head is started on the first test that asks for it
(``ray start --head --block``, one CPU, no GPU) and stopped by its process group when
the pytest process ends (``tests/ray_kit.py``). With one CPU each run has one actor.
Measured on 2026-11-27: the 3-client, 2-round FedAvg run of this file took 25-28 s
on a 1-CPU head against 59 s on its own instance, in one script while another job
ran niced on the cores; on a quiet machine 22 s on a 1-CPU head and on a 2-CPU head
alike, and the two DP-SGD runs 23-24 s on the head against 27-28 s each on its own.

The path a user takes by default, a fresh local instance, still runs in ``make
test``: ``test_fedavg_learns_and_is_reproducible`` runs once that way (one CPU) and
once on the head and compares the metrics, and ``flwr run`` / ``make run`` start
Flower's own (``test_flwr_run.py``). Two actors at once run in the opt-in
``test_ray_cluster.py`` (a single-node run with 2 CPUs against a two-node cluster).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest

from experiments.simulate import simulate
from tests.ray_kit import LoopbackCluster


@pytest.fixture(scope="session")
def ray_head() -> Iterator[str]:
    """Address (``host:port``) of this pytest process's Ray head."""
    cluster = LoopbackCluster()
    try:
        cluster.start_head(num_cpus=1)
        cluster.wait_ready("head")
        yield cluster.address
    finally:
        cluster.stop()
    leftover = cluster.pids()
    assert not leftover, f"Ray processes left running: {leftover}"


@pytest.fixture
def simulation(ray_head: str):
    """:func:`experiments.simulate.simulate` on this process's Ray head."""
    return functools.partial(simulate, ray_address=ray_head)

import os
from pathlib import Path

import pytest
from flwr.supercore.task_identity import TaskIdentity


@pytest.fixture
def task_identity():
    """Let tests create instruction Messages outside a running ServerApp."""
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    yield
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


def pytest_configure(config):
    """Under ``make test``'s pytest-xdist workers, one torch thread each.

    Two workers on two cores with torch's default (one thread per core) each would
    oversubscribe the cores, and torch's thread pools spin while they wait (with
    another torch process on the cores, a unit test took 161 s instead of under
    20 s). Child processes (Ray workers, ClientApps) inherit ``OMP_NUM_THREADS``. A
    single process keeps the defaults.
    """
    # a node's on-disk partition cache (clients/partition_cache.py) goes to a
    # folder of this test session, never to the user's ~/.cache; child processes
    # (ClientApps, Ray workers) inherit it
    if "FEDHASH_DATA_CACHE" not in os.environ:
        import tempfile

        cache = tempfile.mkdtemp(prefix="fedhash-data-cache-")
        os.environ["FEDHASH_DATA_CACHE"] = cache
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"
        os.environ["MKL_NUM_THREADS"] = "1"
        import torch

        torch.set_num_threads(1)


_TESTS = Path(__file__).resolve().parent
_KINDS = ("unit", "integration", "e2e")


#: The slowest test files, slowest first (seconds of one file on a two-worker fresh
#: clone, from pytest's durations). ``make test`` runs files whole on two workers
#: (``--dist loadfile --no-loadscope-reorder``), handing out the next file in this
#: order as a worker frees up: the long files start first and the many short ones
#: fill in beside them, instead of a two-minute file starting last (xdist's default
#: order is by test count, which put these few-test files at the end).
#: ``tests/integration/test_test_order.py`` checks that every path here exists.
SLOWEST_FIRST = (
    "e2e/test_deployment.py",  # about 220-280 s (one shared deployment)
    "e2e/test_end_to_end.py",  # 200-250
    "e2e/test_gpu_runbook.py",  # 140-160
    "e2e/test_privacy_end_to_end.py",  # about 150
    "e2e/test_flwr_run.py",  # about 110
    "e2e/test_scale_bench.py",  # 47-63
    "e2e/test_fedhap_cost_bench.py",  # 47-49
    "unit/test_types.py",  # mypy, cold cache: 32-42
    "e2e/test_loopback_policy.py",  # 36-40
    "e2e/test_round_time_bench.py",  # 20-27
    "e2e/test_pretrained_backbone.py",  # 18-26
    "integration/test_pfmh_protocols.py",  # 18-22
    "e2e/test_clientapp_start_bench.py",  # 18-20
)


def file_rank(relative: str) -> int:
    """Return a test file's place in the run: its index in :data:`SLOWEST_FIRST`."""
    try:
        return SLOWEST_FIRST.index(relative)
    except ValueError:
        return len(SLOWEST_FIRST)


def pytest_collection_modifyitems(config, items):
    """Mark every test by its folder; put the slowest files first.

    Markers: tests/unit, tests/integration, tests/e2e. Order: :data:`SLOWEST_FIRST`,
    by a stable sort, so every file keeps its tests in order and the other files
    keep pytest's order, after the listed ones.
    """
    ranks = {}
    for item in items:
        relative = Path(item.fspath).resolve().relative_to(_TESTS)
        top = relative.parts[0]
        if top in _KINDS:
            item.add_marker(getattr(pytest.mark, top))
        ranks[item.nodeid] = file_rank(relative.as_posix())
    items.sort(key=lambda item: ranks[item.nodeid])

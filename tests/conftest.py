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


def pytest_collection_modifyitems(config, items):
    """Mark every test by its folder: tests/unit, tests/integration, tests/e2e."""
    for item in items:
        top = Path(item.fspath).resolve().relative_to(_TESTS).parts[0]
        if top in _KINDS:
            item.add_marker(getattr(pytest.mark, top))


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


_TESTS = Path(__file__).resolve().parent
_KINDS = ("unit", "integration", "e2e")


def pytest_collection_modifyitems(config, items):
    """Mark every test by its folder: tests/unit, tests/integration, tests/e2e."""
    for item in items:
        top = Path(item.fspath).resolve().relative_to(_TESTS).parts[0]
        if top in _KINDS:
            item.add_marker(getattr(pytest.mark, top))


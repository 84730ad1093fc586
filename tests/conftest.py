import pytest
from flwr.supercore.task_identity import TaskIdentity


@pytest.fixture
def task_identity():
    """Let tests create instruction Messages outside a running ServerApp."""
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    yield
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved

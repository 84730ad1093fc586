"""Bad node inputs in deployment: each bad node fails discovery with a clear error.

The real ClientApp answers the server's ``describe`` query for SuperNodes with
various node configs (no partition id, one outside ``num-partitions``, a missing
data path, a missing or foreign DPHE key bundle); ``describe_nodes`` leaves the bad
ones out, logs why, and goes on while ``min-train-nodes`` remain.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict

from clients.client_app import build_client_app
from clients.node_inputs import with_node_data_path
from crypto import generate_keys
from server.discovery import describe_nodes
from tests.fixtures import write_feature_npz
from tests.messages import reply_from

pytestmark = pytest.mark.usefixtures("task_identity")


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("node-inputs") / "keys"
    generate_keys(out, num_clients=3, key_bits=512, allow_test_keys=True)
    return out


def dphe_run(keys) -> dict[str, Any]:
    return {
        "secure-aggregation": "dphe",
        "min-train-nodes": 3,
        "dphe.key-dir": str(keys),
    }


class ClientAppGrid:
    """A Grid whose nodes run the real ClientApp in-process, one node config each.

    An exception in the ClientApp becomes an error reply, as Flower's
    ``flwr-clientapp`` process sends it (``"<class ...>:<'message'>"``).
    """

    def __init__(self, node_configs: dict[int, dict], run_config: dict[str, Any]):
        self.node_configs = node_configs
        self.run_config = run_config
        self.app = build_client_app()

    def get_node_ids(self) -> list[int]:
        return list(self.node_configs)

    def send_and_receive(self, messages, timeout=None):
        return [self.answer(m) for m in messages]

    def answer(self, message: Message) -> Message:
        node = message.metadata.dst_node_id
        context = Context(
            run_id=1,
            node_id=node,
            node_config=self.node_configs[node],
            state=RecordDict(),
            run_config=self.run_config,
        )
        try:
            reply = self.app(message, context)
        except Exception as ex:  # what flwr-clientapp does with it
            reason = str(type(ex)) + ":<'" + str(ex) + "'>"
            return reply_from(node, error=reason, message_type=MessageType.QUERY)
        return reply_from(node, reply.content, message_type=MessageType.QUERY)


def describe(node_config: dict, run_config: dict[str, Any]) -> Message:
    grid = ClientAppGrid({7: node_config}, run_config)
    message = Message(
        content=RecordDict({"config": ConfigRecord()}),
        message_type="query.describe",
        dst_node_id=7,
    )
    return grid.answer(message)


def test_node_data_path_overrides_the_run_config_on_that_node_only():
    run = {"data-path": "/server/features.npz", "seed": 1}
    assert with_node_data_path(run, {"data-path": "/data/f.npz"}) == {
        "data-path": "/data/f.npz",
        "seed": 1,
    }
    assert with_node_data_path(run, {"data-path": ""}) == run
    assert with_node_data_path(run, {"partition-id": 0}) == run
    assert run["data-path"] == "/server/features.npz"  # not mutated


def test_node_local_data_path_is_what_the_client_reads(tmp_path):
    path = write_feature_npz(tmp_path / "node.npz", n=90, num_classes=3)
    run = {"dataset": "npz", "data-path": str(tmp_path / "only-on-the-server.npz")}
    node = {"partition-id": 1, "num-partitions": 3, "data-path": str(path)}
    reply = describe(node, run)
    assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
    assert reply.content["config"]["num-database"] > 0


@pytest.mark.parametrize(
    ("node", "run", "fragments"),
    [
        ({}, {}, ["partition-id", "num-partitions", "--node-config"]),
        ({"partition-id": 0}, {}, ["lacks num-partitions"]),
        (
            {"partition-id": 3, "num-partitions": 3},
            {},
            ["partition-id=3", "0 <= partition-id < num-partitions"],
        ),
        (
            {"partition-id": 0, "num-partitions": 3, "data-path": "/no/such.npz"},
            {"dataset": "npz", "data-path": "/server.npz"},
            ["node config data-path='/no/such.npz'", "no such file"],
        ),
        (
            {"partition-id": 0, "num-partitions": 3},
            {"dataset": "npz", "data-path": "/no/such.npz"},
            ["run config data-path='/no/such.npz'"],
        ),
        (
            {"partition-id": 0, "num-partitions": 3, "data-path": "/no/cifar"},
            {"dataset": "cifar10", "data-path": "/server/cifar"},
            ["node config data-path='/no/cifar'", "no such folder"],
        ),
    ],
)
def test_bad_partition_or_data_path_fails_describe_naming_the_key(node, run, fragments):
    reply = describe(node, run)
    assert reply.has_error()
    for fragment in fragments:
        assert fragment in reply.error.reason


def test_missing_dphe_bundle_fails_describe_naming_dphe_key_bundle(keys, tmp_path):
    node = {
        "partition-id": 0,
        "num-partitions": 3,
        "dphe-key-bundle": str(tmp_path / "client-0.json"),
    }
    reply = describe(node, dphe_run(keys))
    assert reply.has_error()
    assert "dphe-key-bundle" in reply.error.reason
    assert "does not exist" in reply.error.reason


def test_foreign_or_unreadable_bundle_fails_describe(keys, tmp_path):
    node = {"partition-id": 0, "num-partitions": 3}
    foreign = describe(
        {**node, "dphe-key-bundle": str(keys / "client-1.json")}, dphe_run(keys)
    )
    assert "node config dphe-key-bundle" in foreign.error.reason
    assert "belongs to client 1" in foreign.error.reason
    garbage = tmp_path / "client-0.json"
    garbage.write_text("{not json")
    broken = describe({**node, "dphe-key-bundle": str(garbage)}, dphe_run(keys))
    assert "node config dphe-key-bundle" in broken.error.reason
    # without a node path, the bundle comes from the run's key folder
    ok = describe(node, dphe_run(keys))
    assert not ok.has_error()


def test_discovery_leaves_bad_nodes_out_and_goes_on(keys, tmp_path, caplog):
    good = {i: {"partition-id": i - 10, "num-partitions": 3} for i in (10, 11, 12)}
    bad = {
        20: {"partition-id": 2, "num-partitions": 3, "dphe-key-bundle": "/gone.json"},
        21: {"partition-id": 5, "num-partitions": 3},
        22: {"num-partitions": 3},
    }
    flwr_logger = logging.getLogger("flwr")
    flwr_logger.addHandler(caplog.handler)
    try:
        grid = ClientAppGrid({**bad, **good}, dphe_run(keys))
        found = describe_nodes(grid, min_nodes=3, wait_s=0)
        assert sorted(found) == [10, 11, 12]
        assert sorted(i.partition_id for i in found.values()) == [0, 1, 2]
        text = caplog.text
        assert "node 20 failed discovery" in text and "dphe-key-bundle" in text
        assert "node 21 failed discovery" in text and "partition-id=5" in text
        assert "node 22 failed discovery" in text and "lacks partition-id" in text
        # too few good nodes left: the run stops with a clear error
        grid = ClientAppGrid({**bad, 10: good[10], 11: good[11]}, dphe_run(keys))
        with pytest.raises(RuntimeError, match="only 2 usable node") as err:
            describe_nodes(grid, min_nodes=3, wait_s=0)
        # the error itself says why the others were refused, not only the log
        message = str(err.value)
        assert "3 refused: 1 x " in message
        for why in ("dphe-key-bundle", "partition-id=5", "lacks partition-id"):
            assert why in message
    finally:
        flwr_logger.removeHandler(caplog.handler)


def test_partition_without_train_size_rows_fails_describe_naming_the_key(tmp_path):
    # 60 samples, 30 partitions of 2 database rows, 3 training rows in all: most
    # partitions hold none of them and must say so before any training
    path = write_feature_npz(tmp_path / "f.npz", n=60, num_classes=3)
    run = {"dataset": "npz", "data-path": str(path), "train-size": 3}
    failed = [
        describe({"partition-id": p, "num-partitions": 30}, run) for p in range(30)
    ]
    errors = [r.error.reason for r in failed if r.has_error()]
    assert errors and len(errors) < 30
    assert all("train-size" in e and "nothing to train on" in e for e in errors)

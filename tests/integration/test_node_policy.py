"""The node's privacy policy: its file format, its ledger, and the server's side.

The attacks it defeats are in ``tests/integration/attacks/test_config_downgrade.py``;
here: the shipped policy files parse, a bad policy is one clear error, the node's
ledger loses no charge when messages run at once, the environment sets one policy
for every simulated node, and the server stops in one line, with the nodes'
reasons, when too few nodes accept a run (at discovery and mid-run).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict

from clients.client_app import build_client_app
from clients.node_policy import ENV_POLICY, run_terms
from privacy.node_ledger import NodeLedger, node_ledger_path
from privacy.policy import (
    Charge,
    PolicyError,
    check_budget,
    check_run,
    parse_policy,
    read_policy,
)
from server import log_filters
from server.discovery import NodesRefusedError, describe_nodes
from settings import keys as K
from settings.run_settings import RunSettings
from strategies.fedavg.strategy import HashingFedAvg
from tests.messages import reply_from

ROOT = Path(__file__).resolve().parents[2]
STRICT = ROOT / "deploy" / "policy" / "node-privacy-policy.toml"

pytestmark = pytest.mark.usefixtures("task_identity")


def test_the_shipped_strict_policy_parses_and_refuses_a_plaintext_run():
    policy = read_policy(STRICT)
    assert policy.secure_aggregation == "dphe" and policy.budget
    assert policy.refuse_seeded_noise
    plain = run_terms(RunSettings.from_config({}))
    assert any("secure-aggregation='none'" in r for r in check_run(policy, plain))


@pytest.mark.parametrize(
    "preset", ["conf/deploy-fedhap-dphe.toml", "deploy/smoke-run.toml"]
)
def test_the_deployment_presets_meet_the_policy_compose_mounts(preset):
    """docker-compose.yml mounts deploy/policy/ into every ClientApp executor; the
    runs the docs and the container test submit meet it, a prototype flip of
    exactly the cap included (4 per bit x 32 bits = 128 per record, beyond float
    rounding), and lowering a flip epsilon's protection is refused."""
    from tests.integration.test_compose import parse_run_config

    policy = read_policy(STRICT)
    config = parse_run_config([str(ROOT / preset)])
    assert check_run(policy, run_terms(RunSettings.from_config(config))) == []
    exact = {**config, "code-length": 32, "privacy.prototype-flip-epsilon": 4.0}
    assert check_run(policy, run_terms(RunSettings.from_config(exact))) == []
    for key in ("privacy.code-flip-epsilon", "privacy.prototype-flip-epsilon"):
        weaker = {**config, key: 0.0}  # 0 = no flips: epsilon infinite
        reasons = check_run(policy, run_terms(RunSettings.from_config(weaker)))
        assert any(key in r for r in reasons), (key, reasons)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"secure-aggregation": "paillier"}, "secure-aggregation='paillier'"),
        (
            {"max-epsilon": {"codes": {"epsilon": 4.0, "unit": "per record"}}},
            "max-epsilon.codes.unit='per record'",
        ),
        ({"max-epsilon": {"codes": 4.0}}, "max-epsilon.codes=4.0"),
        ({"dp-sgd": {"min-noise-multiplier": 0}}, "dp-sgd.min-noise-multiplier=0"),
        ({"budget": {"per record": -1.0}}, 'budget."per record"=-1.0'),
        ({"max-epsilon": {"code": {}}}, "unknown key max-epsilon.code"),
        ({"dpsgd": {}}, "unknown key dpsgd"),
    ],
)
def test_a_bad_policy_is_one_error_naming_the_key(data, fragment):
    with pytest.raises(PolicyError, match="privacy policy") as err:
        parse_policy(data, source="p.toml")
    assert fragment in str(err.value)
    assert "\n" not in str(err.value)


def test_code_limit_per_bit_and_budget_arithmetic():
    policy = parse_policy(
        {
            "max-epsilon": {"codes": {"epsilon": 1.0, "unit": "per bit"}},
            "budget": {"per code": 40.0},
        }
    )
    within = run_terms(RunSettings.from_config({"privacy.code-flip-epsilon": 1.0}))
    above = run_terms(RunSettings.from_config({"privacy.code-flip-epsilon": 1.5}))
    assert check_run(policy, within) == []
    assert (
        "above the policy's max-epsilon.codes = 1 per bit"
        in check_run(policy, above)[0]
    )
    assert (
        check_budget(policy, {"per code": 8.0}, [Charge("m", 32.0, "per code")]) == []
    )
    assert check_budget(policy, {"per code": 8.1}, [Charge("m", 32.0, "per code")])
    # units the policy gives no budget are not limited
    assert check_budget(policy, {}, [Charge("m", 1e9, "per frame")]) == []


def test_node_ledger_loses_no_charge_when_messages_run_at_once(tmp_path):
    path = node_ledger_path(tmp_path, 3)
    policy = parse_policy({"budget": {"per record": 100.0}})

    def charge() -> None:
        NodeLedger(path, client=3).charge_if_within(
            [Charge("dp-sgd/model", 1.0, "per record")],
            lambda spent, charges: check_budget(policy, spent, charges),
            server_round=1,
            note="run 1 train",
        )

    threads = [threading.Thread(target=charge) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ledger = NodeLedger(path, client=3)
    assert ledger.spent() == {"per record": 8.0}
    assert len(ledger.charges()) == 8
    # written atomically: no temporary file is left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        path.name,
        path.name + ".lock",
    ]


def _context(node_config: dict[str, Any], run_config: dict[str, Any]) -> Context:
    return Context(
        run_id=1,
        node_id=7,
        node_config=node_config,
        state=RecordDict(),
        run_config=run_config,
    )


def _describe_message(node: int) -> Message:
    return Message(
        content=RecordDict({K.CONFIG: ConfigRecord()}),
        message_type=K.QUERY_DESCRIBE,
        dst_node_id=node,
    )


def test_the_environment_sets_one_policy_for_every_simulated_node(
    tmp_path, monkeypatch
):
    policy = tmp_path / "policy.toml"
    policy.write_text('secure-aggregation = "dphe"\n')
    monkeypatch.setenv(ENV_POLICY, str(policy))
    node = {K.PARTITION_ID: 0, K.NUM_PARTITIONS: 3}
    reply = build_client_app()(_describe_message(7), _context(node, {}))
    assert reply.has_error() and "secure-aggregation='none'" in reply.error.reason
    # the node config wins over the environment
    lax = tmp_path / "lax.toml"
    lax.write_text("version = 1\n")
    reply = build_client_app()(
        _describe_message(7), _context({**node, K.PRIVACY_POLICY: str(lax)}, {})
    )
    assert not reply.has_error()


class PolicyGrid:
    """Nodes running the real ClientApp in-process; error replies pass through."""

    def __init__(self, node_configs: dict[int, dict], run_config: dict[str, Any]):
        self.node_configs, self.run_config = node_configs, run_config
        self.app = build_client_app()

    def get_node_ids(self) -> list[int]:
        return list(self.node_configs)

    def send_and_receive(self, messages, timeout=None):
        out = []
        for m in messages:
            node = m.metadata.dst_node_id
            reply = self.app(m, _context(self.node_configs[node], self.run_config))
            out.append(
                reply_from(node, error=reply.error.reason)
                if reply.has_error()
                else reply_from(node, reply.content)
            )
        return out


def test_discovery_fails_in_one_line_with_the_nodes_reasons(tmp_path, caplog):
    policy = tmp_path / "policy.toml"
    policy.write_text('secure-aggregation = "dphe"\n')
    nodes = {
        10 + i: {K.PARTITION_ID: i, K.NUM_PARTITIONS: 3, K.PRIVACY_POLICY: str(policy)}
        for i in range(3)
    }
    flwr_logger = logging.getLogger("flwr")
    flwr_logger.addHandler(caplog.handler)
    try:
        start = time.monotonic()
        with pytest.raises(NodesRefusedError) as err:
            # the refusals say there are 3 partitions: no waiting for more nodes
            describe_nodes(PolicyGrid(nodes, {}), min_nodes=2, wait_s=120)
        assert time.monotonic() - start < 60
    finally:
        flwr_logger.removeHandler(caplog.handler)
    message = str(err.value)
    assert "only 0 usable node(s)" in message and "3 refused: 3 x " in message
    assert "secure-aggregation='none'" in message and "\n" not in message
    for node in nodes:  # each node's refusal is logged
        assert f"node {node} refuses the run" in caplog.text
    # the ServerApp's log shows it as one line, without a traceback
    try:
        raise err.value
    except NodesRefusedError:
        record = logging.LogRecord(
            "flwr", logging.ERROR, __file__, 1, "ServerApp raised", (), sys.exc_info()
        )
    log_filters.ConfigErrorOneLine().filter(record)
    assert record.exc_info is None
    assert record.getMessage().startswith("nodes refused the run: only 0 usable")


def test_train_refusals_mid_run_stop_the_run_naming_the_reasons():
    s = HashingFedAvg(
        fraction_evaluate=0.0,
        min_train_nodes=2,
        min_available_nodes=1,
        sampling_seed=7,
    )
    s.set_node_partitions({10: 0, 20: 1, 30: 2})

    class Grid:
        def get_node_ids(self):
            return [10, 20, 30]

    zeros = ArrayRecord({"w": Array(np.zeros(3, dtype=np.float32))})
    s.configure_train(1, zeros, ConfigRecord(), Grid())
    refused = "node privacy policy refuses this run (policy p.toml): budget spent"
    replies = [reply_from(n, error=refused) for n in (10, 20)]
    replies.append(reply_from(30, error="some crash"))
    with pytest.raises(NodesRefusedError, match="2 of 3 node") as err:
        s.aggregate_train(1, replies)
    assert "2 x node privacy policy refuses this run" in str(err.value)


def test_an_unreadable_node_ledger_refuses_instead_of_forgetting(tmp_path):
    # a ledger the node cannot read is never taken for "nothing spent"
    policy = tmp_path / "policy.toml"
    policy.write_text('[budget]\n"per code" = 100.0\n')
    node_ledger_path(tmp_path, 0).write_text("{not json")
    node = {K.PARTITION_ID: 0, K.NUM_PARTITIONS: 3, K.PRIVACY_POLICY: str(policy)}
    run = {"privacy.code-flip-epsilon": 1.0}
    reply = build_client_app()(_describe_message(7), _context(node, run))
    assert reply.has_error() and not reply.has_content()
    assert "cannot read the node's ledger" in reply.error.reason
    assert "restore it, never delete it" in reply.error.reason

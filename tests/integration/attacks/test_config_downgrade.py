"""Issue 35, finding 2: the run config switches a node's protections off.

The server's side writes the run config. On main before the node-side policy, a
node took its protections from it: ``secure-aggregation = "none"`` made a node that
holds a DPHE bundle send its plaintext model, ``num-examples`` and ``train-loss``;
``privacy.code-flip-epsilon = 0`` made it publish unflipped codes; DP-SGD was
switched off the same way; and nothing on the node counted what it had spent in
earlier runs. Each test plays the server against the real ClientApp of a node whose
policy file (node config ``privacy-policy``) forbids the downgrade, and asserts that
the reply is a refusal that names the rule and carries nothing else; a control
shows the same node accepting a run that meets its policy.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict

import clients.client_app as client_app_module
from clients.client_app import build_client_app
from hashing.codes import unpack_bytes
from privacy.ledger import PrivacyLedger
from settings import keys as K
from settings.run_settings import RunSettings
from tests.integration.attacks.clientapp_calls import NUM_PARTITIONS, global_model
from tests.messages import request_to

PID = 1
NODE_ID = 7
#: the node config key that names the policy file, as operators write it
POLICY_KEY = "privacy-policy"
BASE = {"model": "mlp", "code-length": 32, "hidden-dim": 32, "local-epochs": 1}


def _policy(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _send(
    config: dict[str, Any],
    message_type: str,
    policy: Path,
    *,
    run_id: int = 1,
    server_round: int = 1,
) -> Message:
    """Send one message of a run with ``config`` to the node holding ``policy``."""
    settings = RunSettings.from_config(config)
    content = RecordDict({K.CONFIG: ConfigRecord({K.SERVER_ROUND: server_round})})
    if message_type != K.QUERY_DESCRIBE:
        content[K.ARRAYS] = global_model(settings, PID)
    context = Context(
        run_id=run_id,
        node_id=NODE_ID,
        node_config={
            K.PARTITION_ID: PID,
            K.NUM_PARTITIONS: NUM_PARTITIONS,
            POLICY_KEY: str(policy),
        },
        state=RecordDict(),
        run_config=dict(config),
    )
    return build_client_app()(request_to(NODE_ID, content, message_type), context)


def _assert_refused(reply: Message, *fragments: str) -> None:
    """A refusal: an error naming the rule, and no content (no data, no arrays)."""
    assert reply.has_error(), f"the node answered: {list(reply.content)}"
    assert not reply.has_content()
    reason = reply.error.reason
    assert reason.startswith("node privacy policy refuses this run"), reason
    for fragment in fragments:
        assert fragment in reason, (fragment, reason)


@pytest.fixture
def no_data_access(monkeypatch):
    """Fail the test if the ClientApp reads its partition."""
    calls: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        raise AssertionError("the refused run read the node's data")

    monkeypatch.setattr(client_app_module, "load_local_data", refuse)
    return calls


def test_config_downgrade_secure_aggregation_none_is_refused(tmp_path, no_data_access):
    # the node requires DPHE; the server submits the run in plaintext
    policy = _policy(tmp_path, 'secure-aggregation = "dphe"\n')
    config = {**BASE, "secure-aggregation": "none"}
    for message_type in (MessageType.TRAIN, K.QUERY_DESCRIBE):
        _assert_refused(
            _send(config, message_type, policy),
            "secure-aggregation='none'",
            'secure-aggregation = "dphe"',
        )
    assert no_data_access == []


def test_config_downgrade_unflipped_codes_are_refused(tmp_path):
    policy = _policy(
        tmp_path,
        """
        [max-epsilon]
        codes = { epsilon = 16.0, unit = "per code" }
        """,
    )
    # the server asks for the codes without flips (eps = inf per code)
    refused = _send({**BASE, "privacy.code-flip-epsilon": 0.0}, K.QUERY_ENCODE, policy)
    _assert_refused(refused, "privacy.code-flip-epsilon=0.0", "max-epsilon.codes = 16")
    # ... or above the limit: 1.0 per bit is 32 per code
    _assert_refused(
        _send({**BASE, "privacy.code-flip-epsilon": 1.0}, K.QUERY_ENCODE, policy),
        "epsilon 32 per code",
    )
    # control: 0.5 per bit x 32 bits = 16 per code is within the policy
    reply = _send({**BASE, "privacy.code-flip-epsilon": 0.5}, K.QUERY_ENCODE, policy)
    assert not reply.has_error(), reply.error.reason
    codes = unpack_bytes(reply.content[K.CODES][K.PACKED_CODES].numpy(), 32)
    assert codes.shape[0] > 0 and set(np.unique(codes)) <= {-1, 1}


def test_config_downgrade_dp_sgd_off_or_weak_is_refused(tmp_path):
    policy = _policy(
        tmp_path,
        """
        [dp-sgd]
        required = true
        min-noise-multiplier = 0.8
        """,
    )
    dp = {**BASE, "loss": "csq", "batch-size": 32}
    _assert_refused(
        _send({**dp, "dp-sgd.enabled": False}, MessageType.TRAIN, policy),
        "dp-sgd.enabled=false",
        "dp-sgd.required = true",
    )
    _assert_refused(
        _send(
            {**dp, "dp-sgd.enabled": True, "dp-sgd.noise-multiplier": 0.3},
            MessageType.TRAIN,
            policy,
        ),
        "dp-sgd.noise-multiplier=0.3",
        "dp-sgd.min-noise-multiplier = 0.8",
    )
    # a target epsilon that needs less noise on this node's data is refused too
    _assert_refused(
        _send(
            {**dp, "dp-sgd.enabled": True, "dp-sgd.target-epsilon": 50.0},
            MessageType.TRAIN,
            policy,
        ),
        "dp-sgd.target-epsilon=50.0",
        "dp-sgd.min-noise-multiplier = 0.8",
    )
    # control: sigma 1.0 trains, and the reply reports its DP-SGD charge
    reply = _send(
        {**dp, "dp-sgd.enabled": True, "dp-sgd.noise-multiplier": 1.0},
        MessageType.TRAIN,
        policy,
    )
    assert not reply.has_error(), reply.error.reason
    assert K.ARRAYS in reply.content


def test_config_downgrade_budget_exhausted_across_runs(tmp_path):
    # 0.5 per bit x 32 bits = 16 per code per published code set; budget 32
    policy = _policy(
        tmp_path,
        """
        [budget]
        "per code" = 32.0
        """,
    )
    config = {**BASE, "privacy.code-flip-epsilon": 0.5}
    # run 1: two evaluations, each charged to the node's own ledger on its disk
    for server_round in (0, 1):
        reply = _send(
            config, K.QUERY_ENCODE, policy, run_id=1, server_round=server_round
        )
        assert not reply.has_error(), reply.error.reason
    # the node's ledger, in its state folder (by default the policy's folder)
    ledger = tmp_path / f"privacy-ledger-partition-{PID}.json"
    charges = PrivacyLedger.read(ledger).charges
    assert ledger.stat().st_mode & 0o077 == 0  # the node's alone
    assert PrivacyLedger(charges).total(PID, "per code")[0] == pytest.approx(32.0)
    assert [c.note for c in charges] == ["run 1 query.encode"] * 2
    # run 2 (a new run, same seed): the budget is spent, whatever the run says
    _assert_refused(
        _send(config, K.QUERY_DESCRIBE, policy, run_id=2),
        'budget."per code" = 32 is spent',
    )
    _assert_refused(
        _send(config, K.QUERY_ENCODE, policy, run_id=2),
        'budget."per code" = 32',
        "0 left",
    )
    # nothing more was charged
    assert PrivacyLedger.read(ledger).charges == charges

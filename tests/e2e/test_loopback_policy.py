"""A deployed node's privacy policy refuses a run the server submits in plaintext.

A real SuperLink and two SuperNodes (experiments/loopback.py: ``flower-superlink``,
``flower-supernode``, ``flwr run``), each SuperNode started with
``--node-config "... privacy-policy='<file>'"`` naming a policy that requires DPHE.
The run is submitted with ``secure-aggregation = "none"``: every node refuses at
discovery, in its own ``flwr-clientapp`` process, before reading its data, and the
run fails with one line that gives the nodes' reason.
"""

from __future__ import annotations

import pytest

from experiments import loopback

pytestmark = pytest.mark.e2e


def test_deployed_nodes_refuse_a_plaintext_run_under_their_policy(tmp_path):
    policy = tmp_path / "node-policy.toml"
    policy.write_text('secure-aggregation = "dphe"\n')
    cfg = {
        "rounds": 1,
        "model": "mlp",
        "min-train-nodes": 2,
        "secure-aggregation": "none",
    }
    with pytest.raises(RuntimeError, match="loopback run failed") as err:
        loopback.run_loopback(
            cfg,
            2,
            tmp_path / "run",
            timeout_s=300,
            node_config=f"privacy-policy='{policy}'",
        )
    tail = str(err.value)
    lines = [line for line in tail.splitlines() if "nodes refused the run:" in line]
    assert len(lines) == 1, tail
    assert "only 0 usable node(s)" in lines[0]
    assert "2 x node privacy policy refuses this run" in lines[0]
    assert "secure-aggregation='none'" in lines[0]
    assert 'the policy requires secure-aggregation = "dphe"' in lines[0]
    # nothing was trained: no results directory was completed
    assert not list((tmp_path / "run").glob("*/summary.json"))

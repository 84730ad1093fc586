"""`flwr run .` and `make run` as a user types them: managed local SuperLink, Ray.

Every test that starts Flower's managed local SuperLink is in this file, so that
``make test``'s workers (``--dist loadfile``: one file, one worker) never start two
at once (``make run`` shares the repository's ``.flwr`` home); each takes a free port
(``tests/local_flower.py``).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from server.local_superlink import (
    RUN_STARTED,
    local_superlink_pids,
    run_status,
    stop_pids,
)
from tests.local_flower import (
    PORT_ENV,
    TEST_CLIENT_CPUS,
    local_superlink_env,
    make_run,
)

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_flwr_run_cli_writes_a_complete_results_directory(tmp_path):
    flwr_home = tmp_path / "flwr-home"
    results = tmp_path / "results"
    bin_dir = Path(sys.executable).parent
    env = {
        **local_superlink_env(),
        "FLWR_HOME": str(flwr_home),
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    }
    cmd = [
        str(bin_dir / "flwr"),
        "run",
        str(ROOT),
        "--stream",
        "--federation-config",
        # one Ray actor on 2 cores: one ClientApp start-up (tests/local_flower.py)
        f"num-supernodes=3 client-resources-num-cpus={TEST_CLIENT_CPUS}",
        "--run-config",
        f"rounds=1 eval-every=1 code-length=16 results-dir='{results}'",
    ]
    try:
        proc = subprocess.run(
            cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=420
        )
    finally:
        pids = local_superlink_pids(flwr_home)
        stop_pids(pids)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert pids, "flwr run should have started a managed local SuperLink"
    assert not local_superlink_pids(flwr_home)
    runs = [p for p in results.iterdir() if p.is_dir()]
    # beside the run: the server's checkpoint key (.server-state.key, 0600)
    assert sorted(p.name for p in results.iterdir() if not p.is_dir()) == [
        ".server-state.key"
    ]
    assert len(runs) == 1 and not runs[0].name.endswith(".incomplete"), runs
    summary = json.loads((runs[0] / "summary.json").read_text())
    config = json.loads((runs[0] / "config.json").read_text())
    assert summary["final_round"] == 1
    assert len(config["nodes"]) == 3
    assert config["config"]["code-length"] == 16
    assert "round   1/1" in proc.stdout + proc.stderr
    # what ran: versions and the FAB; an installed FAB is no git checkout
    prov = config["provenance"]
    assert prov["versions"]["flwr"].startswith("1.42") and prov["versions"]["torch"]
    assert len(prov["fab"]["hash"]) == 64 and prov["git"] is None
    for name in ("rounds.csv", "clients.csv", "loss_per_round.png"):
        assert (runs[0] / name).is_file(), name


def test_make_run_refuses_unreadable_data_before_flower_starts(tmp_path):
    # the file exists and is readable but is no .npz: the pre-flight check reads
    # it (the loader's own rules) and refuses it in one line, exit 2, before any
    # SuperLink or Ray starts (the ServerApp would refuse it in the same words)
    bad = tmp_path / "features.npz"
    bad.write_text("not an archive")
    config = (
        f"'dataset=\"npz\" data-path=\"{bad}\" rounds=1 "
        f"results-dir=\"{tmp_path / 'results'}\"'"
    )
    done = make_run(config)
    text = done.stdout + done.stderr
    assert done.returncode == 2, text[-3000:]
    config_lines = [line for line in text.splitlines() if "run config:" in line]
    assert len(config_lines) == 1, config_lines
    assert "could not be read as a .npz archive" in config_lines[0]
    assert "Traceback" not in text
    assert "ended finished" not in text and not (tmp_path / "results").exists()


def test_flwr_run_fails_with_the_nodes_reason_when_their_policy_refuses(
    tmp_path, monkeypatch
):
    # every simulated node holds a policy that requires DPHE (FEDHASH_PRIVACY_POLICY:
    # Flower's simulation gives virtual nodes no node config of their own); the run
    # is submitted in plaintext: each node refuses at discovery, before any data
    # or training, and the run ends failed with one line that gives their reason
    policy = tmp_path / "policy.toml"
    policy.write_text('secure-aggregation = "dphe"\n')
    flwr_home = tmp_path / "flwr-home"
    bin_dir = Path(sys.executable).parent
    env = {
        **local_superlink_env(),
        "FLWR_HOME": str(flwr_home),
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "FEDHASH_PRIVACY_POLICY": str(policy),
    }
    monkeypatch.setenv(PORT_ENV, env[PORT_ENV])  # run_status asks this SuperLink
    cmd = [
        str(bin_dir / "flwr"),
        "run",
        str(ROOT),
        "--stream",
        "--federation-config",
        f"num-supernodes=3 client-resources-num-cpus={TEST_CLIENT_CPUS}",
        "--run-config",
        "rounds=1 secure-aggregation='none' "
        f"results-dir='{tmp_path / 'results'}'",
    ]
    try:
        proc = subprocess.run(
            cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=420
        )
        text = proc.stdout + proc.stderr
        started = RUN_STARTED.findall(text)
        status = run_status(str(flwr_home), started[-1])[0] if started else "none"
    finally:
        stop_pids(local_superlink_pids(flwr_home))
    assert status.startswith("finished:failed"), (status, text[-4000:])
    lines = [line for line in text.splitlines() if "nodes refused the run:" in line]
    assert len(lines) == 1, text[-4000:]
    assert "only 0 usable node(s)" in lines[0]
    assert "3 x node privacy policy refuses this run" in lines[0]
    assert "secure-aggregation='none'" in lines[0]
    assert 'the policy requires secure-aggregation = "dphe"' in lines[0]
    assert not local_superlink_pids(flwr_home)

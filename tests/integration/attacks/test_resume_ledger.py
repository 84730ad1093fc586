"""Resume must not under-count epsilon; checkpoints must not reset it.

The attacks run the real experiment loop (``server.experiment.run_experiment``)
against the real ClientApp in this process (``inprocess_grid.py``): 2 clients,
digits, DP-SGD (each train reply reports its epsilon), 3 rounds. The server "dies"
right after round 2's train replies reached it, before round 2's checkpoint, and the
run is resumed from its round-1 checkpoint.

* ``test_resume_ledger*``: each client released round 2 twice (the crashed attempt
  and the redo). On the old code the crashed round's charges were lost and the redo
  charged once: 3 charges for 4 releases.
* ``test_checkpoint_tamper*``: whoever can edit the run directory drops a client's
  charges from ``checkpoint.json`` (or from the journal). On the old code the resume
  accepted the edited checkpoint and the client's spent epsilon was reset.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from flwr.supercore.task_identity import TaskIdentity

from privacy.ledger import PrivacyLedger
from server.experiment import run_experiment
from settings.run_settings import ConfigError, RunSettings
from tests.integration.attacks.inprocess_grid import InProcessGrid, ServerCrash

pytestmark = pytest.mark.usefixtures("task_identity")

CLIENTS = 2
CONFIG = {
    "rounds": 3,
    "eval-every": 3,
    "local-epochs": 1,
    "train-size": 300,
    "code-length": 16,
    "model": "mlp",
    "loss": "csq",
    "dp-sgd.enabled": True,
    "dp-sgd.noise-multiplier": 1.0,
    "map-top-k": 50,
    "precision-k": "10",
}
DP = "dp-sgd/model"


def _crashed_run(base: Path) -> tuple[Path, InProcessGrid]:
    """Run until round 2's train replies arrived, then die; the .incomplete dir."""
    config = {**CONFIG, "results-dir": str(base / "results")}
    grid = InProcessGrid(config, CLIENTS, crash_after_train=2)
    with pytest.raises(ServerCrash):
        run_experiment(grid, RunSettings.from_config(config))
    (run_dir,) = (base / "results").glob("*.incomplete")
    assert json.loads((run_dir / "checkpoint.json").read_text())["round"] == 1
    return run_dir, grid


@pytest.fixture(scope="module")
def crashed_once(tmp_path_factory):
    """One crashed run (and a pristine copy of its results folder) per module."""
    base = tmp_path_factory.mktemp("crashed")
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    try:  # as the task_identity fixture does, for this module-wide run
        run_dir, grid = _crashed_run(base)
    finally:
        TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved
    shutil.copytree(base / "results", base / "pristine", symlinks=True)
    return base, run_dir, grid


@pytest.fixture
def crashed(crashed_once):
    """The crashed run as it was left (the results folder restored, same path)."""
    base, run_dir, grid = crashed_once
    shutil.rmtree(base / "results")
    shutil.copytree(base / "pristine", base / "results", symlinks=True)
    return base, run_dir, grid


def _resume(tmp_path: Path, run_dir: Path) -> tuple[Path, InProcessGrid]:
    config = {**CONFIG, "results-dir": str(tmp_path / "results"),
              "resume": str(run_dir)}
    grid = InProcessGrid(config, CLIENTS)
    results = run_experiment(grid, RunSettings.from_config(config))
    return results.dir, grid


def test_resume_ledger_charges_the_crashed_round_and_its_redo(crashed):
    tmp_path, run_dir, crashed = crashed
    final, resumed = _resume(tmp_path, run_dir)
    ledger = PrivacyLedger.read(final / "privacy_ledger.json")
    for pid in range(CLIENTS):
        released = crashed.releases[pid] + resumed.releases[pid]
        assert released == [1, 2, 2, 3]  # round 2 twice: the crash, then the redo
        charged = [c.round for c in ledger.charges
                   if c.client == pid and c.mechanism == DP]
        # the old code: [1, 2, 3] (3 charges for 4 releases)
        assert charged == released
        eps = [c.epsilon for c in ledger.charges if c.client == pid]
        assert ledger.total(pid, "per record")[0] == pytest.approx(sum(eps))
    # the summary states the composed total of all four releases
    summary = json.loads((final / "summary.json").read_text())
    worst = max(ledger.total(p, "per record")[0] for p in range(CLIENTS))
    assert summary["privacy"]["per record"]["max_client_epsilon"] == pytest.approx(
        worst
    )


def test_resume_ledger_keeps_charges_appended_before_the_crash(crashed):
    # the journal holds round 2's charges the moment the replies arrived
    _, run_dir, crashed = crashed
    journal = run_dir / "privacy_charges.jsonl"
    rounds = [json.loads(x)["charge"]["round"]
              for x in journal.read_text().splitlines()]
    assert sorted(rounds) == sorted(r for p in crashed.releases.values() for r in p)
    assert rounds.count(2) == CLIENTS


def test_checkpoint_tamper_of_the_ledger_is_refused(crashed):
    tmp_path, run_dir, _ = crashed
    path = run_dir / "checkpoint.json"
    payload = json.loads(path.read_text())
    # the old format kept the ledger in the checkpoint: drop client 0's charges
    if "ledger" in payload:
        payload["ledger"] = [c for c in payload["ledger"] if c["client"] != 0]
    else:  # the new one records how many journal charges it covers
        payload["journal"]["charges"] = 0
    path.write_text(json.dumps(payload))
    with pytest.raises(ConfigError, match="checkpoint.json fails its HMAC"):
        _resume(tmp_path, run_dir)


def test_checkpoint_tamper_of_the_journal_is_refused(crashed):
    tmp_path, run_dir, _ = crashed
    journal = run_dir / "privacy_charges.jsonl"
    assert journal.exists(), "no durable journal of charges"
    lines = journal.read_text().splitlines()
    # lower one charge's epsilon in place
    entry = json.loads(lines[0])
    entry["charge"]["epsilon"] = 0.0
    journal.write_text("\n".join([json.dumps(entry), *lines[1:]]) + "\n")
    with pytest.raises(ConfigError, match="line 1 fails its HMAC"):
        _resume(tmp_path, run_dir)
    # or cut the charges the checkpoint covers
    journal.write_text(lines[-1] + "\n")
    with pytest.raises(ConfigError, match="line 1 fails its HMAC|charges were removed"):
        _resume(tmp_path, run_dir)
    journal.write_text("")
    with pytest.raises(ConfigError, match="charges were removed"):
        _resume(tmp_path, run_dir)


def test_checkpoint_tamper_key_is_server_local_and_private(crashed):
    tmp_path, run_dir, _ = crashed
    key = tmp_path / "results" / ".server-state.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    secret = key.read_text().strip()
    for path in run_dir.rglob("*"):  # not in the config, results or checkpoint
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path
    # a checkpoint authenticated by another server's key is refused
    key.unlink()
    (tmp_path / "results" / ".server-state.key").write_text(os.urandom(32).hex())
    os.chmod(key, 0o600)
    with pytest.raises(ConfigError, match="fails its HMAC"):
        _resume(tmp_path, run_dir)
    os.chmod(key, 0o644)  # a key others can read authenticates nothing
    with pytest.raises(ConfigError, match=r"mode -rw-r--r--.*chmod 600"):
        _resume(tmp_path, run_dir)

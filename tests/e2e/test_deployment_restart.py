"""Deployment at scale: 8 SuperNodes, the SuperLink SIGKILLed mid-run and restarted.

Opt-in (``make test-scale``; marker ``scale``, skipped unless
``FEDHASH_SCALE_TESTS=1``): about 10-15 minutes on 2 shared cores.

The loopback deployment of ``test_deployment.py`` (``deployment_kit.py``: TLS,
SuperNode authentication, process isolation, signed FABs, the Fleet gateway), with
8 SuperNodes (partition-id 0..7, num-partitions 8) and the SuperLink's state in
``--database volumes/superlink-state/state.db`` (compose's ``superlink-state``
volume). A FedAvg run on digits (3 rounds, no privacy mechanism, so its numbers are
a deterministic function of the config) is started with ``flwr run``; once its
round-2 checkpoint is on disk the SuperLink process is SIGKILLed, left down for
longer than Flower's task heartbeat patience (2 x 30 s), and restarted with the
same database and port. The SuperNodes and the executors retry and reconnect by
themselves. The interrupted run's ServerApp cannot continue (its task expired),
so the run is submitted again with ``resume = '<run dir>.incomplete'``; it must
finish with all 8 nodes, and its rows must equal those of an uninterrupted
in-process simulation of the same config with 8 clients.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from settings.check import parse_run_config
from tests.compose_local import ROOT
from tests.e2e.deployment_kit import (
    BIN,
    Deployment,
    loopback_deployment,
    signal_group,
    wait_for,
    wait_https,
)
from tests.e2e.resume_kit import rows_without_timing

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.scale,
    pytest.mark.skipif(
        os.environ.get("FEDHASH_SCALE_TESTS") != "1",
        reason="opt-in: make test-scale (FEDHASH_SCALE_TESTS=1)",
    ),
]

NODES = 8
#: Flower 1.42: a running task (the ServerApp) expires HEARTBEAT_PATIENCE (2) x
#: HEARTBEAT_DEFAULT_INTERVAL (30 s) after its last heartbeat
#: (flwr/supercore/corestate/sql_corestate.py, _cleanup_expired_task_tokens)
OUTAGE_S = 75
CONFIG = {
    "strategy": "fedavg",
    "dataset": "digits",
    "rounds": 3,
    "eval-every": 2,
    "local-epochs": 1,
    "code-length": 16,
    "model": "mlp",
    "hidden-dim": 32,
    "map-top-k": 50,
    "precision-k": "10,50",
    "min-train-nodes": NODES,
    "round-timeout": 600.0,  # 8 ClientApp starts per round on 2 busy cores
}
#: one torch thread per process, here and in the simulation (Ray gives each
#: 1-CPU actor one), so that both sum floats in the same order; and 8 ClientApps
#: on 2 cores do not fight over threads
ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
STARTED = re.compile(r"Successfully started run (\d+)")


def _submit(dep: Deployment, app: str, name: str, config: dict) -> tuple:
    """``flwr run app fedhash --stream`` in the background; wait for its run id."""
    path = dep.tmp / f"{name}.toml"
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in config.items()))
    log = dep.tmp / "logs" / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(BIN / "flwr"), "run", app, "fedhash", "--stream"]
            + ["--run-config", str(path)],
            cwd=dep.tmp,
            env=dep.host_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    dep.procs[f"flwr-run-{name}"] = proc  # stopped with the deployment
    wait_for(
        lambda: STARTED.search(log.read_text()) or proc.poll() is not None,
        180,
        f"{name}: the run to start",
    )
    match = STARTED.search(log.read_text())
    assert match, log.read_text()[-3000:]
    return match.group(1), proc, log


def _run_status(dep: Deployment, run_id: str) -> str:
    proc = subprocess.run(
        [str(BIN / "flwr"), "ls", "fedhash", "--run-id", run_id, "--format", "json"],
        cwd=dep.tmp,
        env=dep.host_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    try:
        runs = json.loads(proc.stdout)["runs"]
    except (ValueError, KeyError):
        return ""
    return runs[0]["status"] if runs else ""


def _simulated_rows(tmp: Path) -> list[dict]:
    """The same config, uninterrupted, in Flower's simulation engine (8 clients)."""
    cmd = [sys.executable, "-m", "experiments.simulate", "--clients", str(NODES)]
    for k, v in {**CONFIG, "results-dir": str(tmp / "simulation")}.items():
        cmd += ["--set", f"{k}={v}"]
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return rows_without_timing(Path(proc.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory):
    with loopback_deployment(
        tmp_path_factory.mktemp("deployment-restart"),
        num_nodes=NODES,
        # the keyholder is started as in compose; this run does not use it
        keyholder_run_config={
            **parse_run_config([str(ROOT / "conf" / "deploy-fedhap-dphe.toml")]),
            "rounds": 1,
        },
        extra_env=ENV,
        activate_timeout=300,
        # this test is about restarting the SuperLink, with a plaintext run: its
        # nodes' operator holds a policy without rules (the shipped one refuses
        # plaintext, tests/e2e/test_deployment.py runs under it)
        node_policy="version = 1\n",
    ) as dep:
        yield dep


def test_superlink_restart_mid_run_then_resume(deployment: Deployment, tmp_path):
    dep = deployment
    t0 = time.monotonic()
    marks: dict[str, float] = {}
    results = dep.tmp / "results"
    config = {**CONFIG, "results-dir": str(results)}
    database = dep.tmp / "volumes" / "superlink-state" / "state.db"
    command = dep.plan.command("superlink")
    assert command[command.index("--database") + 1] == str(database)
    assert database.is_file()
    app = dep.sign(dep.creds.fab_signing_key)  # one FAB, one code hash, both runs

    # 1. the run, until its round-2 checkpoint is on disk
    run_id, run_proc, run_log = _submit(dep, app, "run", config)
    checkpoint = None

    def round_2_checkpointed() -> bool:
        nonlocal checkpoint
        # (not the CLI: `flwr run --stream` may stop streaming, exit 0, while the
        # run goes on)
        assert not list(results.glob("*/summary.json")), "the run finished"
        for path in results.glob("*.incomplete/checkpoint.json"):
            try:
                if json.loads(path.read_text())["round"] >= 2:
                    checkpoint = path
                    return True
            except (ValueError, KeyError):  # replaced while read
                pass
        return False

    wait_for(round_2_checkpointed, 1200, "the round-2 checkpoint")
    marks["checkpoint r2"] = time.monotonic() - t0
    run_dir = checkpoint.parent
    checkpoint_round = json.loads(checkpoint.read_text())["round"]
    assert "Discovery: 8 node(s)" in run_log.read_text()

    # 2. SIGKILL the SuperLink (by its PID), and keep it down past the ServerApp
    #    task's heartbeat patience
    link = dep.procs.pop("superlink")
    dep.procs["superlink-killed"] = link
    os.kill(link.pid, signal.SIGKILL)
    assert link.wait(timeout=30) == -signal.SIGKILL
    killed_at = time.monotonic()
    marks["superlink killed"] = killed_at - t0
    time.sleep(OUTAGE_S)
    # nothing else died: the executors and SuperNodes retry, the run's ServerApp
    # (a child of the serverapp executor) waits for the SuperLink
    alive = {n: p.poll() is None for n, p in dep.procs.items()}
    dead = [n for n, ok in alive.items() if not ok and n != "superlink-killed"]
    assert set(dead) <= {"register-supernodes", "flwr-run-run"}, dead
    observed = {
        "flwr run (stream) exit code": run_proc.poll(),
        "serverapp log after kill": dep.log("serverapp")[-1500:],
        "supernode-0 log after kill": dep.log("supernode-0")[-1500:],
    }
    assert not (run_dir.parent / run_dir.name.removesuffix(".incomplete")).exists()

    # 3. the SuperLink again, same database, same port
    dep.start("superlink", log_name="superlink-restarted")
    port = dep.plan.port("superlink", 8000)
    wait_https(
        f"https://127.0.0.1:{port}/health",
        dep.creds.ca_cert,
        dep.procs["superlink"],
        120,
    )
    marks["superlink restarted"] = time.monotonic() - t0
    # the interrupted run is over: its task expired while the SuperLink was down
    wait_for(
        lambda: _run_status(dep, run_id).startswith("finished"),
        300,
        "the interrupted run to be marked finished",
    )
    observed["interrupted run status"] = _run_status(dep, run_id)
    assert observed["interrupted run status"] == "finished:failed"
    # its ServerApp gave up; the directory stays .incomplete with the checkpoint
    assert json.loads(checkpoint.read_text())["round"] == checkpoint_round
    assert not list(results.glob("*/summary.json"))

    # 4. the run again, resuming from its checkpoint
    resumed_id, resumed_proc, resumed_log = _submit(
        dep, app, "resumed", {**config, "resume": str(run_dir)}
    )
    assert resumed_id != run_id
    final = run_dir.parent / run_dir.name.removesuffix(".incomplete")
    wait_for(
        lambda: (final / "summary.json").is_file() or (run_dir / "error.txt").is_file(),
        1500,
        "the resumed run to finish",
    )
    marks["resumed run finished"] = time.monotonic() - t0
    wait_for(
        lambda: _run_status(dep, resumed_id).startswith("finished"),
        300,
        "the resumed run's status",
    )
    signal_group(resumed_proc, signal.SIGKILL)
    shown = subprocess.run(
        [str(BIN / "flwr"), "log", resumed_id, "fedhash", "--show"],
        cwd=dep.tmp,
        env=dep.host_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = resumed_log.read_text() + shown.stdout
    (dep.tmp / "logs" / "resumed-show.log").write_text(shown.stdout)
    assert _run_status(dep, resumed_id) == "finished:completed", out[-4000:]
    assert f"after round {checkpoint_round} of 3" in out, out[-4000:]
    assert final.is_dir() and not run_dir.exists()
    assert (final / "summary.json").is_file()
    assert not list(final.glob("checkpoint*"))

    # all 8 nodes took part after the restart: discovery, training, evaluation
    assert "Discovery: 8 node(s)" in out, out[-4000:]
    for i in range(NODES):
        assert f"[RUN {resumed_id}]" in dep.log(f"supernode-{i}"), i
    rows = rows_without_timing(final)
    assert [r["round"] for r in rows] == [0, 1, 2, 3]
    assert rows[-1]["eval_clients"] == NODES

    # 5. the same numbers as an uninterrupted run of the same config
    simulated = _simulated_rows(tmp_path)
    marks["simulation finished"] = time.monotonic() - t0
    report = {
        "marks_s": {k: round(v, 1) for k, v in marks.items()},
        "run_id": run_id,
        "resumed_run_id": resumed_id,
        "checkpoint_round": checkpoint_round,
        **observed,
        "resumed rows": rows,
        "simulated rows": simulated,
    }
    (dep.tmp / "report.json").write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps(report, indent=1, default=str))
    assert rows == simulated

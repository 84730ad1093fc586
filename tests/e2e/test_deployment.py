"""A real deployment on loopback: the processes docker-compose.yml's containers run.

SuperLink (TLS, SuperNode authentication, process isolation, SuperExec secret), the
DPHE keyholder (TLS, bearer token), the ServerApp executor, and SuperNodes each with
their own authentication key, partition and ClientApp executor. Every command is
the compose service's command (``tests/compose_local.py`` maps container paths to
the generated credentials, service names to 127.0.0.1 and ports to free ones).

A fourth SuperNode is registered but its DPHE key bundle is missing: it must fail
discovery with an error naming ``dphe-key-bundle`` while the run goes on with the
other three. Every process is started in its own session and stopped by its
process group id.

The SuperNodes reach the SuperLink only through ``fleet-gateway`` (Fleet API only;
the Control API is on the SuperLink's own port) and run only FABs signed by the
operator's key (``--trusted-entities``), which the SuperLink fetches with their
signatures from ``fab-registry``.
"""

from __future__ import annotations

import functools
import json
import re
import signal
import ssl
import subprocess
import tomllib
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import pytest

from crypto import (
    AggregateRefused,
    AggregationContext,
    DPHEAggregator,
    RemoteKeyholder,
    encrypt_update,
    load_aggregator_bundle,
    load_client_bundle,
)
from crypto.keyholder import read_streams_file
from deploy.generate import (
    connection_toml,
    make_auth_key_pair,
    make_fab_signing_key,
)
from settings.check import parse_run_config
from tests.compose_local import ROOT, container_to_host, free_port
from tests.e2e.deployment_kit import (
    BIN,
    Deployment,
    loopback_deployment,
)
from tests.e2e.deployment_kit import signal_group as _signal_group
from tests.e2e.deployment_kit import wait_for as _wait_for

pytestmark = pytest.mark.e2e

GOOD_NODES = 3  # docker-compose.yml's SuperNodes
BAD_NODE = 3  # a fourth, registered, whose DPHE bundle is missing
PRESET = ROOT / "conf" / "deploy-fedhap-dphe.toml"
# small enough for CI (one round: every message of a round starts a ClientApp
# process per node); the ServerApp still runs FedHAP + DPHE for real. The global
# prototypes' broadcast of later rounds is covered in simulation (test_end_to_end).
FAST = {
    "rounds": 1,
    "eval-every": 1,
    "local-epochs": 2,
    "code-length": 16,
    "model": "mlp",
    "hidden-dim": 32,
    "fedhap.discriminator-hidden-dim": 16,
    "map-top-k": 50,
    "precision-k": "10,50",
    "dphe.weighting": "uniform",
}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory):
    # 3 SuperNodes as in docker-compose.yml, and a fourth whose bundle is missing
    with loopback_deployment(
        tmp_path_factory.mktemp("deployment"),
        num_nodes=GOOD_NODES + 1,
        keyholder_run_config={**parse_run_config([str(PRESET)]), **FAST},
        no_bundle=(BAD_NODE,),
    ) as dep:
        yield dep


def _run_config(dep: Deployment, path: Path, **extra) -> Path:
    """conf/deploy-fedhap-dphe.toml with the serverapp's paths mapped, plus FAST."""
    serverapp = dep.plan.compose["services"]["serverapp"]
    config = parse_run_config([str(PRESET)])
    for key, value in config.items():
        if isinstance(value, str) and value.startswith("/"):
            config[key] = str(container_to_host(serverapp, value, dep.plan.rebase))
    keyholder = f"127.0.0.1:{dep.plan.port('keyholder', 8765)}"
    config["dphe.keyholder-url"] = config["dphe.keyholder-url"].replace(
        "keyholder:8765", keyholder
    )
    config.update(FAST)
    config.update(extra)
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in config.items()))
    return path


def test_fedhap_with_dphe_runs_on_the_deployment(deployment: Deployment):
    dep = deployment
    run_config = _run_config(dep, dep.tmp / "run.toml")
    results = dep.tmp / "results"  # deploy/results, mounted at /app/results
    # the operator signs the FAB; the SuperLink fetches it, signatures included,
    # from the registry, and the SuperNodes verify them (--trusted-entities)
    app = dep.sign(dep.creds.fab_signing_key)
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert app == f"@fedhash/fedhash=={version}"
    cmd = [str(BIN / "flwr"), "run", app, "fedhash", "--stream"]
    cmd += ["--run-config", str(run_config)]
    proc = subprocess.run(
        cmd,
        cwd=dep.tmp,
        env=dep.host_env,
        capture_output=True,
        text=True,
        timeout=420,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "/v1/hub/fetch-fab" in dep.log("fab-registry")
    runs = [p for p in results.iterdir() if p.is_dir()]
    assert len(runs) == 1 and not runs[0].name.endswith(".incomplete"), out[-4000:]
    config = json.loads((runs[0] / "config.json").read_text())
    summary = json.loads((runs[0] / "summary.json").read_text())
    rows = [json.loads(x) for x in (runs[0] / "rounds.jsonl").read_text().splitlines()]
    assert config["config"]["strategy"] == "fedhap"
    assert config["config"]["secure-aggregation"] == "dphe"
    # the bad node failed discovery with a clear error; the run went on without it
    assert [n["partition_id"] for n in config["nodes"]] == [0, 1, 2]
    assert "failed discovery" in out and "dphe-key-bundle" in out
    assert f"client-{BAD_NODE}.json" in out
    trained = [r for r in rows if r["round"] > 0]
    assert [r["dphe"]["contributors"] for r in trained] == [GOOD_NODES]
    # prototypes went as encrypted per-class sums (conf: dphe.prototypes = true)
    assert config["config"]["dphe.prototypes"] is True
    assert all(r.get("prototype_classes") == 10 for r in trained)
    assert summary["final_round"] == 1
    assert summary["final"]["map_all"] > summary["initial_map_all"]
    # the ServerApp used the keyholder service (over TLS), in its one round once for
    # the model and once for the prototype sums
    assert "keyholder service https://127.0.0.1:" in out
    assert dep.log("keyholder").count('"POST /v1/decrypt-aggregate HTTP/1.1" 200') == 2


def _rogue_supernode(dep: Deployment, name: str, edit) -> subprocess.CompletedProcess:
    """SuperNode 0's command, edited; run until it exits (it must not connect)."""
    cmd = dep.plan.command("supernode-0")
    port = cmd.index("--port")
    cmd[port + 1] = str(free_port())
    cmd = edit(cmd)
    log = dep.tmp / "logs" / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=dep.tmp,
            env=dep.service_env(name),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=60)
        finally:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(cmd, proc.returncode, log.read_text(), "")


def _without(cmd: list[str], flag: str) -> list[str]:
    i = cmd.index(flag)
    return cmd[:i] + cmd[i + 2 :]


def test_supernode_with_an_unknown_key_is_refused(deployment: Deployment):
    key = deployment.tmp / "rogue.key"
    key.write_bytes(make_auth_key_pair("rogue")[0])
    key.chmod(0o600)

    def edit(cmd):
        cmd[cmd.index("--auth-supernode-private-key") + 1] = str(key)
        return cmd

    proc = _rogue_supernode(deployment, "rogue-key", edit)
    assert proc.returncode != 0
    assert "Failed to activate SuperNode" in proc.stdout, proc.stdout[-2000:]
    assert "No SuperNode found with the given public key" in deployment.log("superlink")


@pytest.mark.parametrize(
    "how",
    ["no-ca-certificate", "plain-http"],
)
def test_supernode_without_the_ca_certificate_cannot_connect(
    deployment: Deployment, how: str
):
    def edit(cmd):
        cmd = _without(cmd, "--root-certificates") + ["--max-retries", "0"]
        if how == "plain-http":  # Flower refuses node auth without TLS itself
            cmd = _without(cmd, "--auth-supernode-private-key") + ["--insecure"]
        return cmd

    proc = _rogue_supernode(deployment, how, edit)
    assert proc.returncode != 0
    assert "Failed to initialize the connection" in proc.stdout, proc.stdout[-2000:]
    if how == "no-ca-certificate":
        assert "CERTIFICATE_VERIFY_FAILED" in proc.stdout


def test_runtime_api_refuses_an_executor_without_the_shared_secret(
    deployment: Deployment,
):
    dep = deployment
    cmd = _without(dep.plan.command("serverapp"), "--superexec-auth-secret-file")
    before = dep.log("superlink").count("SuperExec authentication failed")
    proc = subprocess.Popen(
        cmd,
        cwd=dep.tmp,
        env=dep.service_env("rogue-executor"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_for(
            lambda: (
                dep.log("superlink").count("SuperExec authentication failed") > before
            ),
            60,
            "the SuperLink to refuse the executor",
        )
    finally:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()


def test_keyholder_serves_only_the_serverapp(deployment: Deployment):
    dep = deployment
    url = f"https://127.0.0.1:{dep.plan.port('keyholder', 8765)}"
    ca = str(dep.creds.serverapp / "ca.crt")
    aggregator = load_aggregator_bundle(dep.creds.serverapp / "aggregator.json")
    params = read_streams_file(dep.creds.keyholder / "keyholder-streams.json")["model"]
    rng = np.random.default_rng(0)
    rounds = iter(range(1000, 2000))  # after the run's rounds, in the same session
    serverapp = RemoteKeyholder(url, aggregator.auth_token, ca_file=ca)

    def encrypted_sum(count: int):
        context = AggregationContext(serverapp.session_id(), "model", next(rounds))
        agg = DPHEAggregator(aggregator, params, context)
        for i in range(count):
            bundle = load_client_bundle(dep.creds.clientapp(i) / f"client-{i}.json")
            update = rng.normal(scale=0.1, size=params.dimension)
            agg.add(
                i,
                encrypt_update(
                    update,
                    weight=1,
                    bundle=bundle,
                    params=params,
                    context=context,
                    rng=rng,
                ),
            )
        return agg.result()

    assert serverapp.health()["min_contributors"] == 3
    assert len(serverapp.decrypt_aggregate(encrypted_sum(3))) == params.dimension + 1
    # fewer than 3 contributors: refused
    with pytest.raises(AggregateRefused):
        serverapp.decrypt_aggregate(encrypted_sum(2))
    # anyone without the ServerApp's token: refused before the body is read
    real = aggregator.auth_token
    near = real[:-1] + ("0" if real[-1] != "0" else "1")  # one character off
    for token in ("x" * 64, near):
        with pytest.raises(RuntimeError, match="rejected the auth token"):
            RemoteKeyholder(url, token, ca_file=ca).decrypt_aggregate(
                encrypted_sum(3)
            )
    request = urllib.request.Request(url + "/v1/decrypt-aggregate", data=b"{}")
    context = ssl.create_default_context(cafile=ca)
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10, context=context)
    assert err.value.code == 401
    err.value.close()  # else uvicorn's graceful shutdown waits for this connection
    # a client without the CA certificate cannot even connect
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(url + "/v1/health", timeout=10)


FAB_REFUSED = "failed discovery: The FAB could not be verified"


def _submit(dep: Deployment, app: str, name: str, **config) -> tuple:
    """``flwr run app --stream`` in the background; wait for its run id."""
    path = _run_config(
        dep, dep.tmp / f"{name}.toml", **{"results-dir": str(dep.tmp / name), **config}
    )
    log = dep.tmp / "logs" / f"{name}.log"
    cmd = [str(BIN / "flwr"), "run", app, "fedhash", "--stream"]
    cmd += ["--run-config", str(path)]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=dep.tmp,
            env=dep.host_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    started = re.compile(r"Successfully started run (\d+)")
    try:
        _wait_for(
            lambda: started.search(log.read_text()) or proc.poll() is not None,
            120,
            f"{name}: the run to start",
        )
    except BaseException:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()
        raise
    match = started.search(log.read_text())
    assert match, log.read_text()[-3000:]
    return match.group(1), proc, log


def _finish(dep: Deployment, run: tuple, done, what: str) -> str:
    """Wait until ``done(output)``; stop the run and its stream; return the output."""
    run_id, proc, log = run
    try:
        _wait_for(lambda: done(log.read_text()) or proc.poll() is not None, 180, what)
    finally:
        subprocess.run(
            [str(BIN / "flwr"), "stop", run_id, "fedhash"],
            cwd=dep.tmp,
            env=dep.host_env,
            capture_output=True,
            timeout=60,
            check=False,
        )
        _signal_group(proc, signal.SIGKILL)
        proc.wait()
    return log.read_text()


def _app_variant(dep: Deployment, name: str) -> Path:
    """This app plus one file: a FAB of its own hash.

    The SuperLink keeps one signature set per FAB hash (last write wins), so runs
    submitted at the same time must not share FAB bytes.
    """
    folder = dep.tmp / "apps" / name
    fab = next(dep.registry.rglob("*.fab"))
    with zipfile.ZipFile(fab) as bundle:
        for member in bundle.namelist():
            if not member.startswith(".info/"):
                bundle.extract(member, folder)
    (folder / "VARIANT.md").write_text(f"{name}\n")
    # the FAB holds none of what fab-exclude names, and Flower 1.42 refuses a
    # pattern that matches nothing: drop the list from the extracted app
    pyproject = folder / "pyproject.toml"
    text = pyproject.read_text()
    start = text.index("fab-exclude = [")
    pyproject.write_text(text[:start] + text[text.index("]\n", start) + 2 :])
    return folder


def _refused_by_every_node(out: str) -> bool:
    return len(set(re.findall(r"node (\d+) " + FAB_REFUSED, out))) == GOOD_NODES + 1


def test_supernodes_run_only_fabs_signed_by_a_trusted_entity(
    deployment: Deployment,
):
    """Unsigned and foreign-signed FABs are refused by every SuperNode.

    Together, concurrently (each costs a ServerApp start): ``flwr run <dir>`` (the
    FAB arrives without signatures: Flower 1.42 attaches them only to FABs
    fetched from the Hub, here the registry) and the registry serving a FAB signed
    by a key the nodes do not trust. The trusted-id-but-wrong-key case is in
    tests/integration/test_api_gateway.py.
    """
    dep = deployment
    private, _, rogue_id = make_fab_signing_key("rogue")
    key = dep.tmp / "rogue-signing.key"
    key.write_bytes(private)
    key.chmod(0o600)
    unsigned, untrusted = _app_variant(dep, "unsigned"), _app_variant(dep, "untrusted")
    runs = {"unsigned": _submit(dep, str(unsigned), "unsigned")}
    try:
        app = dep.sign(key, rogue_id, app=untrusted)
        runs["untrusted"] = _submit(dep, app, "untrusted")
    finally:
        dep.sign(dep.creds.fab_signing_key)  # the registry serves the good one again
    why = {
        "unsigned": "App verification is not supported by the connected SuperLink",
        "untrusted": "FAB verification failed: the provided trusted entities",
    }
    for name, run in runs.items():
        out = _finish(dep, run, _refused_by_every_node, f"{name}: refusals")
        # every node answered the ServerApp's first message with Flower's
        # INVALID_FAB error instead of running the ClientApp
        assert _refused_by_every_node(out), out[-3000:]
        assert "Discovery:" not in out  # no node got as far as describing itself
        for i in range(GOOD_NODES + 1):
            log = dep.log(f"supernode-{i}")
            assert f"[RUN {run[0]}]" in log
            assert why[name] in log, log[-2000:]


def test_seeded_privacy_noise_is_refused_by_the_deployment(deployment: Deployment):
    # a signed FAB, but a run config the deployed ServerApp must refuse: with
    # seeded noise the server could rebuild every flip and DP-SGD draw
    dep = deployment
    app = dep.sign(dep.creds.fab_signing_key)
    run = _submit(dep, app, "seeded", **{"privacy.noise": "seeded"})
    out = _finish(
        dep, run, lambda text: "simulation engine only" in text, "the refusal"
    )
    assert "privacy.noise='seeded'" in out and "simulation engine only" in out, out
    assert "Discovery:" not in out and not (dep.tmp / "seeded").exists()
    for i in range(GOOD_NODES + 1):  # no node ever got a message of this run
        assert f"[RUN {run[0]}]" not in dep.log(f"supernode-{i}")


def _post_status(ca: ssl.SSLContext, base: str, path: str) -> int:
    """HTTP status of an empty protobuf POST to ``base + path`` (TLS: ``ca``)."""
    request = urllib.request.Request(base + path, data=b"", method="POST")
    request.add_header("Content-Type", "application/protobuf")
    try:
        with urllib.request.urlopen(request, timeout=10, context=ca) as response:
            return response.status
    except urllib.error.HTTPError as error:
        error.close()
        return error.code


def test_executor_and_operator_reach_only_their_api(deployment: Deployment):
    """The ServerApp executor's gateway serves the Runtime API only, the operator's
    the Control API only: a compromised ServerApp cannot submit runs or FABs, nor
    register node keys; the run above went through both."""
    dep = deployment
    ca = ssl.create_default_context(cafile=str(dep.creds.ca_cert))
    runtime = f"https://127.0.0.1:{dep.plan.port('runtime-gateway', 9091)}"
    control = f"https://127.0.0.1:{dep.plan.port('control-gateway', 9093)}"
    cmd = dep.plan.command("serverapp")
    assert cmd[cmd.index("--runtime-api-address") + 1] == runtime.removeprefix(
        "https://"
    )

    post = functools.partial(_post_status, ca)
    for path in (
        "/v1/control/start-run",
        "/v1/control/add-app",
        "/v1/control/register-node",
        "/v1/fleet/pull-messages",
        "/v1/runtime/../control/start-run",
        "/docs",
    ):
        assert post(runtime, path) == 404, path
    for path in (
        "/v1/runtime/get-nodes",
        "/v1/runtime/push-messages",
        "/v1/fleet/pull-messages",
        "/v1/control/../runtime/get-nodes",
    ):
        assert post(control, path) == 404, path
    # their own API's routes reach the SuperLink, which checks the caller itself
    assert post(runtime, "/v1/runtime/get-nodes") != 404
    assert post(control, "/v1/control/list-runs") != 404
    assert dep.log("runtime-gateway").count("refused") >= 6
    assert dep.log("control-gateway").count("refused") >= 4


def test_supernodes_reach_only_the_fleet_api(deployment: Deployment):
    dep = deployment
    ca = ssl.create_default_context(cafile=str(dep.creds.ca_cert))
    link = f"https://127.0.0.1:{dep.plan.port('superlink', 8000)}"
    gateway = f"https://127.0.0.1:{dep.plan.port('fleet-gateway', 9092)}"
    assert link != gateway
    # every SuperNode is configured with the gateway's address only
    for i in range(GOOD_NODES + 1):
        cmd = dep.plan.command(f"supernode-{i}")
        assert cmd[cmd.index("--superlink") + 1] == gateway.removeprefix("https://")

    post = functools.partial(_post_status, ca)
    before = dep.log("fleet-gateway").count("refused")
    for path in (
        "/v1/control/register-node",
        "/v1/control/start-run",
        "/v1/control/list-runs",
        "/v1/runtime/get-nodes",
        "/v1/fleet/../control/start-run",
        "/v1/fleet/%2e%2e/control/start-run",
        "//v1/control/start-run",
        "/docs",
        "/openapi.json",
    ):
        assert post(gateway, path) == 404, path
        if path.startswith("/v1/control/"):
            assert post(link, path) != 404, path  # served on the SuperLink's port
    assert dep.log("fleet-gateway").count("refused") >= before + 9
    # the Fleet API's own registration is off (SuperNode authentication)
    assert post(gateway, "/v1/fleet/register-node") in (401, 403, 412)
    with urllib.request.urlopen(gateway + "/health", timeout=10, context=ca) as r:
        assert r.status == 200

    # `flwr supernode register` through the Fleet address fails; the key stays
    # unknown, so a SuperNode with it is refused below
    private, public = make_auth_key_pair("sybil")
    home = dep.tmp / "homes" / "sybil-cli"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        connection_toml(
            address=gateway.removeprefix("https://"),
            root_certificates=str(dep.creds.ca_cert),
        )
    )
    (dep.tmp / "sybil.pub").write_bytes(public)
    proc = subprocess.run(
        [str(BIN / "flwr"), "supernode", "register", str(dep.tmp / "sybil.pub")],
        cwd=dep.tmp,
        env={**dep.env, "FLWR_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0, proc.stdout + proc.stderr
    key = dep.tmp / "sybil.key"
    key.write_bytes(private)
    key.chmod(0o600)

    def edit(cmd):
        cmd[cmd.index("--auth-supernode-private-key") + 1] = str(key)
        return cmd + ["--max-retries", "0"]

    rogue = _rogue_supernode(dep, "sybil", edit)
    assert rogue.returncode != 0
    assert "Failed to activate SuperNode" in rogue.stdout, rogue.stdout[-2000:]


def test_an_older_signed_build_is_refused_by_every_node(deployment: Deployment):
    """The registry need not be trusted: serving an older build the operator once
    signed is refused by every SuperNode once it ran a newer one (signed manifest,
    deploy/supernode_guard.py), although Flower's own signature check accepts it
    (tests/integration/attacks/test_fab_rollback.py)."""
    dep = deployment
    older = dep.sign(dep.creds.fab_signing_key)
    newer = dep.sign(dep.creds.fab_signing_key)
    version = newer.rsplit("==", 1)[1]
    assert older != newer
    accepted = f"FAB fedhash/fedhash=={version} accepted"

    def every_node_accepted(_out: str) -> bool:
        return all(
            accepted in dep.log(f"supernode-{i}") for i in range(GOOD_NODES + 1)
        )

    _finish(dep, _submit(dep, newer, "newer"), every_node_accepted, "newer: accepted")
    assert every_node_accepted("")
    run = _submit(dep, older, "older")
    out = _finish(dep, run, _refused_by_every_node, "older: refusals")
    assert _refused_by_every_node(out), out[-3000:]
    assert "Discovery:" not in out
    for i in range(GOOD_NODES + 1):
        log = dep.log(f"supernode-{i}")
        refusal = f"is older than {version}, which this node already ran"
        assert refusal in log, log[-2000:]

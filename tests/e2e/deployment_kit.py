"""The loopback deployment of docker-compose.yml, shared by the deployment e2e tests.

:func:`loopback_deployment` starts the compose services' own commands as local
processes (``tests/compose_local.py`` maps container paths to the generated
credentials, service names to 127.0.0.1 and ports to free ones): SuperLink (TLS,
SuperNode authentication, process isolation, SuperExec secret, state in
``volumes/superlink-state/state.db``), the DPHE keyholder, the ServerApp executor,
the FAB registry, the Fleet, Runtime and Control gateways, and N registered
SuperNodes, each with its
ClientApp executor. Every process is started in its own session and stopped by its
process group id. Used by ``test_deployment.py`` (3 + 1 nodes) and
``test_deployment_restart.py`` (8 nodes, opt-in).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crypto.keyholder import write_streams_file
from deploy.generate import Credentials, generate
from strategies.dphe.keyholder_streams import run_streams
from tests.compose_local import (
    ROOT,
    LocalPlan,
    clone_node,
    container_to_host,
    free_port,
    load_compose,
)

BIN = Path(sys.executable).parent
COMPOSE_NODES = 3  # docker-compose.yml's SuperNodes


@dataclass
class Deployment:
    """Processes of one loopback deployment, and where their files are."""

    tmp: Path
    creds: Credentials
    plan: LocalPlan
    env: dict[str, str]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def log(self, name: str) -> str:
        return (self.tmp / "logs" / f"{name}.log").read_text(errors="replace")

    def service_env(self, name: str) -> dict[str, str]:
        home = self.tmp / "homes" / name
        home.mkdir(parents=True, exist_ok=True)
        extra = {}
        if name in self.plan.compose["services"]:
            extra = self.plan.environment(name)
        return {**self.env, **extra, "FLWR_HOME": str(home)}

    @property
    def registry(self) -> Path:
        """Host folder of the fab-registry's /fabs (compose: ./deploy/fabs)."""
        service = self.plan.compose["services"]["fab-registry"]
        return container_to_host(service, "/fabs", self.plan.rebase)

    def sign(self, key: Path, key_id: str | None = None, app: Path = ROOT) -> str:
        """The operator's step: sign this repository's FAB; return its app spec."""
        cmd = [sys.executable, "-m", "deploy.fab_registry", "sign", str(app)]
        cmd += ["--key", str(key), "--registry", str(self.registry)]
        cmd += ["--key-id", key_id] if key_id else []
        proc = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return re.search(r"flwr run (@\S+)", proc.stdout).group(1)

    @property
    def host_env(self) -> dict[str, str]:
        """Environment of the operator's ``flwr`` on the host."""
        return {**self.env, "FLWR_HOME": str(self.creds.flwr_home)}

    def workdir(self, name: str) -> Path:
        service = self.plan.compose["services"][name]
        if service.get("working_dir") == "/opt/fedhash":
            return ROOT
        work = self.tmp / "work" / name
        work.mkdir(parents=True, exist_ok=True)
        return work

    def start(
        self,
        name: str,
        *,
        env: dict[str, str] | None = None,
        log_name: str | None = None,
        **kw,
    ) -> subprocess.Popen:
        """Start a service in its own session (its pid is its process group id).

        Its output goes to ``logs/<log_name or name>.log``. A service started again
        replaces ``procs[name]``: move the old entry first, to keep it stopped.
        """
        log = (self.tmp / "logs" / f"{log_name or name}.log").open("wb")
        self.procs[name] = subprocess.Popen(
            self.plan.command(name, **kw),
            cwd=self.workdir(name),
            env=env or self.service_env(name),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return self.procs[name]

    def stop_all(self) -> None:
        """SIGTERM every process group we started, SIGKILL what is left after 15 s."""
        for proc in self.procs.values():
            signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for name, proc in self.procs.items():
            if proc.poll() is None:
                print(f"{name} (pid {proc.pid}) ignored SIGTERM", file=sys.stderr)
            signal_group(proc, signal.SIGKILL)
            proc.wait()


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # start_new_session: pgid == pid
    except (ProcessLookupError, PermissionError):
        pass


def wait_https(url: str, ca: Path, proc: subprocess.Popen, timeout: float) -> None:
    context = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2, context=context):
                return
        except (urllib.error.URLError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.3)


@contextmanager
def loopback_deployment(
    tmp: Path,
    *,
    num_nodes: int,
    keyholder_run_config: dict[str, Any],
    no_bundle: tuple[int, ...] = (),
    extra_env: dict[str, str] | None = None,
    activate_timeout: float = 120,
    node_policy: str | None = None,
) -> Iterator[Deployment]:
    """Start the deployment with ``num_nodes`` SuperNodes; stop every process after.

    Nodes 0..2 are docker-compose.yml's, the others clones of node 2 (own key,
    partition, bundle); every node gets ``num-partitions=num_nodes``. The nodes in
    ``no_bundle`` are registered but their DPHE key bundle is deleted. The keyholder
    pins the DPHE streams of ``keyholder_run_config``. Yields once every SuperNode
    is activated.

    ``node_policy``: the TOML text of the nodes' privacy policy instead of the
    shipped ``deploy/policy/node-privacy-policy.toml`` (compose mounts that folder).
    """
    (tmp / "logs").mkdir()
    link_port, control_port = free_port(), free_port()
    creds = generate(
        tmp / "credentials",
        num_supernodes=num_nodes,
        key_bits=512,
        allow_test_keys=True,
        host_port=control_port,  # the host's flwr reaches the Control gateway
    )
    for i in no_bundle:
        (creds.clientapp(i) / f"client-{i}.json").unlink()
    compose = load_compose()
    for i in range(COMPOSE_NODES, num_nodes):
        compose = clone_node(compose, COMPOSE_NODES - 1, i)

    def rebase(source: str) -> Path:
        for prefix, base in (
            ("./deploy/credentials/", creds.root),
            ("./deploy/", tmp),
        ):
            if source.startswith(prefix):
                path = base / source[len(prefix) :]
                break
        else:  # a named volume
            path = tmp / "volumes" / source
        if not source.startswith("./deploy/credentials/"):
            path.mkdir(parents=True, exist_ok=True)
        return path

    ports = {("superlink", 8000): link_port, ("control-gateway", 9093): control_port}
    plan = LocalPlan(compose, rebase, ports, BIN)
    # compose mounts ./deploy/policy (the nodes' privacy policy) read-only
    policy = ROOT / "deploy" / "policy"
    shutil.copytree(policy, rebase("./deploy/policy"), dirs_exist_ok=True)
    if node_policy is not None:  # the nodes' operator edits their policy
        (rebase("./deploy/policy") / "node-privacy-policy.toml").write_text(node_policy)
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        **(extra_env or {}),
    }
    dep = Deployment(tmp=tmp, creds=creds, plan=plan, env=env)
    nodes = range(num_nodes)

    def all_partitions(config: dict) -> dict:
        return {**config, "num-partitions": num_nodes}

    try:
        # what needs no registration starts at once
        # the keyholder pins the parameters of this test's run (its own config)
        write_streams_file(
            creds.keyholder / "keyholder-streams.json",
            run_streams(keyholder_run_config, key_bits=512),
        )
        for name in ("superlink", "keyholder", "fab-registry"):
            dep.start(name)
        wait_https(
            f"https://127.0.0.1:{link_port}/health",
            creds.ca_cert,
            dep.procs["superlink"],
            60,
        )
        # the ServerApp executor's and the operator's one-API ways in
        for name in ("runtime-gateway", "control-gateway"):
            dep.start(name)
        for name, port in (("runtime-gateway", 9091), ("control-gateway", 9093)):
            wait_https(
                f"https://127.0.0.1:{plan.port(name, port)}/health",
                creds.ca_cert,
                dep.procs[name],
                60,
            )
        dep.start("serverapp")
        # the one-shot registration service, with the host's Flower home
        config_toml = (creds.flwr_home / "config.toml").read_bytes()
        register = dep.start(
            "register-supernodes", env={**env, "FLWR_HOME": str(creds.flwr_home)}
        )
        assert register.wait(timeout=180) == 0, dep.log("register-supernodes")
        assert dep.log("register-supernodes").count("registered as node") == len(nodes)
        # compose mounts the registrar's config.toml read-only: nothing is written
        assert [p.name for p in creds.flwr_home.iterdir()] == ["config.toml"]
        assert (creds.flwr_home / "config.toml").read_bytes() == config_toml
        # the SuperNodes' only way in: the Fleet-only listener
        dep.start("fleet-gateway")
        wait_https(
            f"https://127.0.0.1:{plan.port('fleet-gateway', 9092)}/health",
            creds.ca_cert,
            dep.procs["fleet-gateway"],
            60,
        )
        for i in nodes:
            dep.start(f"supernode-{i}", node_config_edit=all_partitions)
        # as compose's depends_on (service_healthy): a ClientApp executor starts once
        # its SuperNode's Runtime API answers; started earlier, it backs off for up
        # to 14 s between connection attempts and delays the run's first messages
        for i in nodes:
            wait_https(
                f"https://127.0.0.1:{plan.port(f'supernode-{i}', 9094)}/health",
                creds.ca_cert,
                dep.procs[f"supernode-{i}"],
                60,
            )
            dep.start(f"clientapp-{i}")
        wait_https(
            f"https://127.0.0.1:{plan.port('keyholder', 8765)}/v1/health",
            creds.ca_cert,
            dep.procs["keyholder"],
            60,
        )
        wait_for(
            lambda: (
                dep.log("superlink").count("[Fleet.ActivateNode] Activated")
                >= len(nodes)
            ),
            activate_timeout,
            "SuperNodes to activate",
        )
        yield dep
    finally:
        dep.stop_all()
    assert all(p.poll() is not None for p in dep.procs.values())

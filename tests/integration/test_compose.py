"""Static checks of docker-compose*.yml, deploy/Dockerfile and their agreement.

No Docker here: the compose files are checked against the installed Flower CLIs
(every flag must appear in their ``--help``), against the credentials
``deploy.generate`` writes (every mounted path a command names must exist) and
against each other (ports, node configs, networks). tests/e2e/test_deployment.py runs
the same commands as processes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import pytest
import yaml
from flwr.cli.utils import filter_paths_for_publish
from packaging.requirements import Requirement
from packaging.version import Version

from crypto.keyholder_service import build_parser as keyholder_parser
from deploy.api_gateway import build_parser as gateway_parser
from deploy.fab_registry import build_parser as registry_parser
from deploy.generate import COMPOSE_SUPERLINK_PORT, generate
from deploy.register import build_parser as register_parser
from deploy.supernode_guard import build_parser as guard_parser
from settings.check import parse_run_config
from tests.compose_local import (
    ROOT,
    container_to_host,
    executor_of,
    flags,
    load_compose,
    mounts,
    node_config,
)

BIN = Path(sys.executable).parent
FLOWER_CLIS = ("flower-superlink", "flower-supernode", "flower-superexec")
OVERRIDES = ("deploy/docker-compose.cuda.yml", "deploy/docker-compose.insecure.yml")
NUM_NODES = 3
SUPERNODES = [f"supernode-{i}" for i in range(NUM_NODES)]
CLIENTAPPS = [f"clientapp-{i}" for i in range(NUM_NODES)]
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_compose()


@pytest.fixture(scope="module")
def creds(tmp_path_factory: pytest.TempPathFactory):
    return generate(
        tmp_path_factory.mktemp("compose") / "credentials",
        num_supernodes=NUM_NODES,
        key_bits=512,
        allow_test_keys=True,
    )


@lru_cache(maxsize=1)
def flower_help() -> dict[str, set[str]]:
    """Flags each installed Flower CLI lists in ``--help`` (run concurrently)."""

    def run(cli: str) -> set[str]:
        proc = subprocess.run(
            [str(BIN / cli), "--help"], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        return set(_FLAG.findall(proc.stdout))

    with ThreadPoolExecutor(len(FLOWER_CLIS)) as pool:
        return dict(zip(FLOWER_CLIS, pool.map(run, FLOWER_CLIS), strict=True))


def known_flags(command: list[str]) -> set[str] | None:
    """Flags the program of ``command`` accepts; None for inline Python."""
    if command[0] in FLOWER_CLIS:
        return flower_help()[command[0]]
    if command[:3] == ["python", "-m", "crypto.keyholder_service"]:
        parser = keyholder_parser()
    elif command[:3] == ["python", "-m", "deploy.register"]:
        parser = register_parser()
    elif command[:3] == ["python", "-m", "deploy.api_gateway"]:
        parser = gateway_parser()
    elif command[:3] == ["python", "-m", "deploy.supernode_guard"]:
        # its own flag, then flower-supernode's
        own = {s for a in guard_parser()._actions for s in a.option_strings}
        flower = flower_help()["flower-supernode"]
        return {f for f in own if f.startswith("--")} | flower
    elif command[:4] == ["python", "-m", "deploy.fab_registry", "serve"]:
        sub = next(a for a in registry_parser()._actions if a.choices)
        parser = sub.choices["serve"]
    elif command[:2] == ["python", "-c"]:
        return None
    else:
        raise AssertionError(f"unknown program in compose: {command[:3]}")
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--")}


def all_files() -> list[str]:
    return ["docker-compose.yml", *OVERRIDES]


@pytest.mark.parametrize("name", all_files())
def test_compose_files_are_yaml_with_known_services(name: str, compose: dict):
    data = yaml.safe_load((ROOT / name).read_text())
    assert isinstance(data, dict) and isinstance(data["services"], dict)
    base = set(compose["services"])
    if name == "docker-compose.yml":
        assert base == {
            "superlink",
            "register-supernodes",
            "serverapp",
            "keyholder",
            "fleet-gateway",
            "runtime-gateway",
            "control-gateway",
            "fab-registry",
            *SUPERNODES,
            *CLIENTAPPS,
        }
    else:  # an override only changes services of the base file
        assert set(data["services"]) <= base


@pytest.mark.parametrize("name", all_files())
def test_every_command_flag_exists_in_the_installed_clis(name: str):
    services = load_compose(ROOT / name)["services"]
    checked = 0
    for service_name, service in services.items():
        command = service.get("command")
        if not command:
            continue
        accepted = known_flags(command)
        if accepted is None:
            continue
        used = {arg.split("=")[0] for arg in command if arg.startswith("--")}
        unknown = used - accepted
        assert not unknown, f"{name}: {service_name} uses unknown flags {unknown}"
        checked += 1
    if name != "deploy/docker-compose.cuda.yml":  # the CUDA override changes no command
        assert checked >= len(services) - 1  # all but an inline `python -c`


def test_ports_agree(compose: dict):
    services = compose["services"]
    link = flags(services["superlink"]["command"])
    port = int(link["--port"])
    assert port == COMPOSE_SUPERLINK_PORT  # what deploy.generate's configs use
    # nothing of the SuperLink is published: the host reaches the Control gateway,
    # on its loopback only (the Control API has no user auth), at the port the
    # host's Flower config names
    assert "ports" not in services["superlink"]
    control = int(flags(services["control-gateway"]["command"])["--port"])
    assert services["control-gateway"]["ports"] == [f"127.0.0.1:{port}:{control}"]
    for name, service in services.items():
        command = service.get("command", [])
        for flag in ("--superlink", "--runtime-api-address"):
            address = flags(command).get(flag)
            if address is None:
                continue
            host, _, target_port = address.rpartition(":")
            target = flags(services[host]["command"])
            assert int(target_port) == int(target["--port"]), (name, flag)
    keyholder_port = int(flags(services["keyholder"]["command"])["--port"])
    preset = parse_run_config([str(ROOT / "conf/deploy-fedhap-dphe.toml")])
    assert preset["dphe.keyholder-url"] == f"https://keyholder:{keyholder_port}"


def test_mounted_paths_exist_in_the_generated_credentials(compose: dict, creds):
    def rebase(source: str) -> Path:
        assert source.startswith("./deploy/credentials/"), source
        return creds.root / source[len("./deploy/credentials/") :]

    for name, service in compose["services"].items():
        for mount in mounts(service):
            if mount.source.startswith("./deploy/credentials/"):
                assert mount.read_only, (name, mount)
                assert rebase(mount.source).exists(), (name, mount)
        for arg in service["command"]:
            if not arg.startswith("/credentials") and not arg.startswith("/public"):
                continue
            host = container_to_host(service, arg, rebase)
            assert host is not None, f"{name}: {arg} is not mounted"
            assert host.exists(), f"{name}: {arg} -> {host} was not generated"


def test_node_configs_match_partitions_bundles_and_mounts(compose: dict, creds):
    def rebase(source: str) -> Path:
        if source.startswith("./deploy/credentials/"):
            return creds.root / source[len("./deploy/credentials/") :]
        return Path("/nonexistent") / source

    seen = []
    for i, name in enumerate(SUPERNODES):
        config = node_config(compose["services"][name]["command"])
        assert set(config) == {
            "partition-id",
            "num-partitions",
            "data-path",
            "dphe-key-bundle",
            "privacy-policy",
            "state-dir",
        }
        assert config["num-partitions"] == NUM_NODES
        seen.append(config["partition-id"])
        executor = executor_of(compose, name)
        assert executor == CLIENTAPPS[i]
        # node-config paths are read by the ClientApp, in the executor's container
        bundle = container_to_host(
            compose["services"][executor], config["dphe-key-bundle"], rebase
        )
        assert bundle == creds.clientapp(i) / f"client-{config['partition-id']}.json"
        assert bundle.is_file()
        data = [m for m in mounts(compose["services"][executor]) if m.target == "/data"]
        assert data and data[0].read_only
        assert config["data-path"].startswith("/data/")
        assert data[0].source == f"./deploy/data/{name}"
        # the node's own privacy policy (read-only, shipped strict) and a state
        # volume of its own for its ledger; the SuperNode keeps its FAB versions
        by_target = {m.target: m for m in mounts(compose["services"][executor])}
        policy = by_target["/policy"]
        assert policy.read_only and policy.source == "./deploy/policy"
        assert config["privacy-policy"] == "/policy/node-privacy-policy.toml"
        assert (ROOT / "deploy/policy/node-privacy-policy.toml").is_file()
        state = by_target[config["state-dir"]]
        assert not state.read_only and state.source == f"{executor}-state"
        guard = compose["services"][name]["command"]
        assert guard[:3] == ["python", "-m", "deploy.supernode_guard"]
        node_mounts = {m.target: m for m in mounts(compose["services"][name])}
        fab_state = node_mounts[guard[guard.index("--fab-state-dir") + 1]]
        assert not fab_state.read_only and fab_state.source == f"{name}-state"
    assert sorted(seen) == list(range(NUM_NODES))


def test_secure_by_default(compose: dict):
    services = compose["services"]
    for name, service in services.items():
        assert "--insecure" not in service.get("command", []), name
    link = flags(services["superlink"]["command"])
    for flag in (
        "--ssl-ca-certfile",
        "--ssl-certfile",
        "--ssl-keyfile",
        "--enable-supernode-auth",
        "--superexec-auth-secret-file",
    ):
        assert flag in link
    assert link["--isolation"] == "process"
    keys = set()
    for name in SUPERNODES:
        node = flags(services[name]["command"])
        assert "--root-certificates" in node and "--ssl-certfile" in node
        keys.add(services[name]["volumes"][0])
        assert node["--auth-supernode-private-key"] == "/credentials/auth.key"
    assert len(keys) == NUM_NODES  # one key folder per SuperNode
    for name in ("serverapp", *CLIENTAPPS):
        executor = flags(services[name]["command"])
        assert "--root-certificates" in executor
        assert "--superexec-auth-secret-file" in executor
    keyholder = flags(services["keyholder"]["command"])
    assert "--ssl-certfile" in keyholder and "--allow-plain-http" not in keyholder
    assert int(keyholder["--min-contributors"]) >= 3


def test_networks_isolate_keyholder_and_clientapps(compose: dict):
    services, networks = compose["services"], compose["networks"]

    def members(network: str) -> set[str]:
        return {n for n, s in services.items() if network in s.get("networks", [])}

    for network in services["keyholder"]["networks"]:
        assert members(network) == {"keyholder", "serverapp"}
        assert networks[network]["internal"] is True
    assert "ports" not in services["keyholder"]
    for node, app in zip(SUPERNODES, CLIENTAPPS, strict=True):
        for network in services[app]["networks"]:
            assert members(network) == {node, app}
            assert networks[network]["internal"] is True


def test_insecure_mode_only_behind_its_own_file():
    insecure = load_compose(ROOT / "deploy/docker-compose.insecure.yml")["services"]
    text = (ROOT / "deploy/docker-compose.insecure.yml").read_text()
    assert text.startswith("# INSECURE")
    for name in ("superlink", "serverapp", *SUPERNODES, *CLIENTAPPS):
        assert "--insecure" in insecure[name]["command"], name
    for name in SUPERNODES:  # Flower refuses node authentication without TLS
        assert "--auth-supernode-private-key" not in insecure[name]["command"]
    assert "keyholder" not in insecure  # the keyholder keeps TLS and its token


def test_cuda_override_reserves_a_gpu_per_clientapp_executor():
    cuda = load_compose(ROOT / "deploy/docker-compose.cuda.yml")["services"]
    assert set(cuda) == set(CLIENTAPPS)
    for service in cuda.values():
        assert service["image"] == "fedhash:cuda"
        devices = service["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
        assert service["build"]["args"]["TORCH_INDEX_URL"] == "https://pypi.org/simple"


def test_dockerfile_pins_user_and_offline_runtime():
    text = (ROOT / "deploy/Dockerfile").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for pin in re.findall(r"torch(?:vision)?==[\d.]+", makefile):
        assert pin in text
    assert "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1" in text
    assert "FLWR_HOME=/home/app/.flwr" in text
    users = re.findall(r"^USER (\S+)", text, flags=re.M)
    assert users and users[-1] not in ("root", "0")
    # every package `pip install .` builds is copied into the image
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    for package in packages:
        assert re.search(rf"^COPY {package} {package}$", text, flags=re.M), package
    dockerignore = (ROOT / ".dockerignore").read_text().split()
    assert "deploy/credentials/" in dockerignore and ".venv/" in dockerignore


def test_dockerfile_copies_every_deploy_module_the_services_run(compose: dict):
    """A compose command's `python -m deploy.X`, and every deploy module it imports,
    is in the image (a renamed module broke the build once, seen only by
    make test-containers)."""
    text = (ROOT / "deploy/Dockerfile").read_text()
    copied = set(re.findall(r"deploy/(\w+)\.py", text))
    wanted = set()
    for name in all_files():
        for service in load_compose(ROOT / name)["services"].values():
            command = service.get("command") or []
            if command[:2] == ["python", "-m"] and command[2].startswith("deploy."):
                wanted.add(command[2].split(".")[1])
                # deploy/ is copied to /opt/fedhash, not installed
                if name == "docker-compose.yml":
                    assert service.get("working_dir") == "/opt/fedhash", command
    todo = list(wanted)
    while todo:
        source = (ROOT / "deploy" / f"{todo.pop()}.py").read_text()
        for module in re.findall(r"^\s*from deploy\.(\w+) import", source, re.M):
            if module not in wanted:
                wanted.add(module)
                todo.append(module)
    assert {"api_gateway", "supernode_guard", "fab_manifest"} <= wanted
    assert wanted <= copied, wanted - copied


def test_constraints_pin_every_dependency_within_pyproject():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = {}
    for line in (ROOT / "deploy/constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[_norm(name)] = Version(version)
    for raw in pyproject["project"]["dependencies"]:
        req = Requirement(raw)
        assert _norm(req.name) in pins, f"{req.name} is not pinned"
        assert pins[_norm(req.name)] in req.specifier, (req, pins[_norm(req.name)])


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_credentials_data_and_results_never_enter_a_fab():
    files = {
        ".gitignore": (ROOT / ".gitignore").read_bytes(),
        "pyproject.toml": b"",
        "deploy/generate.py": b"",
        "deploy/credentials/serverapp/aggregator.json": b"{}",
        "deploy/credentials/keyholder/keyholder.json": b"{}",
        "deploy/credentials/flwr-home/config.toml": b"",
        "deploy/data/supernode-0/x.json": b"{}",
        "deploy/results/run/summary.json": b"{}",
        "deploy/fabs/fedhash/fedhash/0.1.0.json": b"{}",  # signatures
    }
    kept = set(filter_paths_for_publish(files))
    assert kept == {".gitignore", "pyproject.toml", "deploy/generate.py"}


CORE = "superlink-core"  # the only network the SuperLink listens on
GATEWAYS = {
    "fleet-gateway": "fleet",
    "runtime-gateway": "runtime",
    "control-gateway": "control",
}


def _members(services: dict, network: str) -> set[str]:
    return {n for n, s in services.items() if network in s.get("networks", [])}


def test_each_party_reaches_only_the_gateway_of_its_api(compose: dict):
    """Flower 1.42 serves Fleet, Control and Runtime on one SuperLink port, with no
    user authentication on Control. The SuperLink listens only on its address on
    `superlink-core`, whose only other members are the three gateways; SuperNodes
    reach the Fleet gateway, the ServerApp executor the Runtime gateway, the host and
    the key registration the Control gateway; the FAB registry, on `registry` with
    the SuperLink, finds nothing listening there."""
    services, networks = compose["services"], compose["networks"]
    link = services["superlink"]
    assert flags(link["command"])["--host"] == CORE
    assert link["networks"][CORE] == {"aliases": [CORE]}
    for name, service in services.items():  # the alias is defined nowhere else
        nets = service.get("networks", [])
        if isinstance(nets, dict):
            for net, cfg in nets.items():
                assert CORE not in ((cfg or {}).get("aliases") or []) or (
                    name, net) == ("superlink", CORE), name
    assert networks[CORE]["internal"] is True
    assert _members(services, CORE) == {"superlink", *GATEWAYS}
    for gateway, api in GATEWAYS.items():
        command = flags(services[gateway]["command"])
        assert command["--api"] == api, gateway
        assert command["--superlink"] == f"superlink:{COMPOSE_SUPERLINK_PORT}"
    # whoever else shares a network with the SuperLink: the FAB registry only
    for network in set(link["networks"]) - {CORE}:
        assert _members(services, network) == {"superlink", "fab-registry"}, network
    # SuperNodes: only the Fleet gateway, on networks of SuperNodes and it alone
    for name in SUPERNODES:
        for network in services[name]["networks"]:
            if network.startswith("node-"):
                continue
            assert _members(services, network) == {*SUPERNODES, "fleet-gateway"}
        target = flags(services[name]["command"])["--superlink"]
        assert target.split(":")[0] == "fleet-gateway", name
    # the ServerApp executor: only the Runtime gateway (and the keyholder)
    serverapp = services["serverapp"]
    target = flags(serverapp["command"])["--runtime-api-address"]
    assert target.split(":")[0] == "runtime-gateway"
    assert _members(services, "runtime") == {"serverapp", "runtime-gateway"}
    assert not set(serverapp["networks"]) & set(link["networks"])
    # the Control gateway: the host's loopback and the one-shot registration only
    assert set(services["register-supernodes"]["networks"]) == {"control"}
    assert _members(services, "control") == {"control-gateway", "register-supernodes"}
    for name in (*SUPERNODES, *CLIENTAPPS, "serverapp", "keyholder", "fab-registry"):
        assert not set(services[name]["networks"]) & {"control", CORE}, name
    # internal networks stay internal; only `control` (host loopback) and `fleet`
    # have a route out
    outside = {n for n, cfg in networks.items() if not (cfg or {}).get("internal")}
    assert outside == {"control", "fleet"}
    # the gateway's port defaults to loopback (FEDHASH_FLEET_BIND opens it)
    assert services["fleet-gateway"]["ports"] == ["127.0.0.1:9092:9092"]
    for name in ("runtime-gateway", "serverapp", "fab-registry", "keyholder"):
        assert "ports" not in services[name], name


def test_supernodes_run_only_signed_fabs(compose: dict, creds):
    services = compose["services"]
    for i, name in enumerate(SUPERNODES):
        node = flags(services[name]["command"])
        assert node["--trusted-entities"] == "/credentials/trusted-entities.yaml"
        path = container_to_host(
            services[name], node["--trusted-entities"], lambda s: _cred(creds, s)
        )
        assert path == creds.trusted_entities(i)
        entities = yaml.safe_load(path.read_text())
        key_id = (creds.fab_signing_key.parent / "key-id").read_text().strip()
        assert list(entities) == [key_id]
        public = creds.fab_signing_key.with_suffix(".pub").read_text().strip()
        assert entities[key_id] == public and public.startswith("ssh-ed25519 ")
    # the signing key is the operator's: mounted nowhere
    for service in services.values():
        for mount in mounts(service):
            assert "fab-signing" not in mount.source
    # the SuperLink fetches FABs and their signatures from the private registry
    env = services["superlink"]["environment"]
    registry = flags(services["fab-registry"]["command"])
    assert env["FLWR_SUPERGRID_API_URL"] == (
        f"https://fab-registry:{registry['--port']}/v1"
    )
    assert env["REQUESTS_CA_BUNDLE"] == "/credentials/ca.crt"
    assert set(services["fab-registry"]["networks"]) <= set(
        services["superlink"]["networks"]
    )
    assert all(m.read_only for m in mounts(services["fab-registry"]))
    insecure = load_compose(ROOT / "deploy/docker-compose.insecure.yml")["services"]
    for name in SUPERNODES:  # signing stays on without TLS
        assert "--trusted-entities" in insecure[name]["command"]
        assert "fleet-gateway:9092" in insecure[name]["command"]
    assert "--insecure" in insecure["fleet-gateway"]["command"]


def _cred(creds, source: str) -> Path:
    assert source.startswith("./deploy/credentials/"), source
    return creds.root / source[len("./deploy/credentials/") :]


# --- issue 15: build arguments, health checks, docs/deploy.md, scale-out, `config`

_COMPOSE_V2 = (
    shutil.which("docker") is not None
    and subprocess.run(
        ["docker", "compose", "version"], capture_output=True, check=False
    ).returncode
    == 0
)
needs_compose = pytest.mark.skipif(
    not _COMPOSE_V2, reason="docker compose (v2) not installed"
)
LONG_RUNNING = {
    "superlink",
    "fleet-gateway",
    "runtime-gateway",
    "control-gateway",
    "fab-registry",
    "serverapp",
    "keyholder",
    *SUPERNODES,
    *CLIENTAPPS,
}


def _compose_config(*files: str, env: dict[str, str] | None = None) -> dict:
    """``docker compose -f ... config --format json``, in the repository."""
    args = [a for f in files for a in ("-f", f)]
    base = {k: v for k, v in os.environ.items() if not k.startswith("FEDHASH_")}
    proc = subprocess.run(
        ["docker", "compose", *args, "config", "--format", "json"],
        cwd=ROOT,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_build_arguments_come_from_the_environment(compose: dict):
    args = compose["services"]["superlink"]["build"]["args"]
    raw = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    raw_args = raw["x-fedhash-image"]["build"]["args"]
    # unset: Docker Hub's image and the PyTorch CPU index; set but empty: the torch
    # index is pip's default (`-`, not `:-`, so that empty stays empty)
    assert (
        raw_args["PYTHON_IMAGE"] == "${FEDHASH_PYTHON_IMAGE:-python:3.11-slim-bookworm}"
    )
    assert raw_args["TORCH_INDEX_URL"] == (
        "${FEDHASH_TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}"
    )
    assert args["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    text = (ROOT / "deploy/Dockerfile").read_text()
    assert "ARG PYTHON_IMAGE=python:3.11-slim-bookworm" in text
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in text
    # an empty index drops --index-url; no `# syntax=` frontend to pull
    assert '${TORCH_INDEX_URL:+--index-url "${TORCH_INDEX_URL}"}' in text
    assert not re.search(r"^# ?syntax=", text, flags=re.M)


@needs_compose
def test_docker_compose_config_passes_build_arguments_through():
    default = _compose_config("docker-compose.yml")
    offline = _compose_config(
        "docker-compose.yml",
        env={
            "FEDHASH_PYTHON_IMAGE": "local/python:3.11",
            "FEDHASH_TORCH_INDEX_URL": "",
        },
    )
    for name in LONG_RUNNING:
        assert default["services"][name]["build"]["args"] == {
            "PYTHON_IMAGE": "python:3.11-slim-bookworm",
            "TORCH_INDEX_URL": "https://download.pytorch.org/whl/cpu",
            "APP_UID": "1000",
            "APP_GID": "1000",
        }
        built = offline["services"][name]["build"]["args"]
        assert built["PYTHON_IMAGE"] == "local/python:3.11"
        assert built["TORCH_INDEX_URL"] == ""


@needs_compose
def test_docker_compose_config_accepts_the_cuda_and_insecure_overrides():
    """Validated with `docker compose config` only: not run on a GPU here."""
    cuda = _compose_config("docker-compose.yml", "deploy/docker-compose.cuda.yml")
    for name in CLIENTAPPS:
        service = cuda["services"][name]
        assert service["image"] == "fedhash:cuda"
        assert service["build"]["args"]["TORCH_INDEX_URL"] == "https://pypi.org/simple"
        device = service["deploy"]["resources"]["reservations"]["devices"][0]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert cuda["services"]["superlink"]["image"] == "fedhash:cpu"
    insecure = _compose_config(
        "docker-compose.yml", "deploy/docker-compose.insecure.yml"
    )
    for name in (*SUPERNODES, *CLIENTAPPS, "serverapp"):
        test = " ".join(insecure["services"][name]["healthcheck"]["test"])
        assert "http://" in test, name  # plain HTTP where the service is insecure


def test_every_long_running_service_has_a_tls_health_check(compose: dict):
    services = compose["services"]
    assert "healthcheck" not in services["register-supernodes"]  # one-shot
    for name in LONG_RUNNING:
        check = services[name]["healthcheck"]
        test = " ".join(check["test"])
        assert check["test"][:2] == ["CMD", "python"], name
        assert "https://" in test and "cafile='/credentials/ca.crt'" in test, name
        assert check["retries"] * int(check["interval"].rstrip("s")) >= 60, name
    for i in range(NUM_NODES):  # each executor checks the Runtime API it serves
        assert f"https://supernode-{i}:9094/health" in " ".join(
            services[f"clientapp-{i}"]["healthcheck"]["test"]
        )
        assert services[f"clientapp-{i}"]["depends_on"] == {
            f"supernode-{i}": {"condition": "service_healthy"}
        }


def test_docs_deploy_blocks_are_the_commands_the_container_test_runs(compose: dict):
    from tests.e2e.test_containers import APP, doc_blocks

    blocks = doc_blocks()
    assert list(blocks) == ["credentials", "owner", "up", "run", "results", "down"]
    assert "python -m deploy.generate\n" in blocks["credentials"] + "\n"
    assert "--run-config deploy/smoke-run.toml" in blocks["credentials"]
    assert "docker compose up --build -d --wait" in blocks["up"]
    assert f"flwr run {APP} fedhash --stream --run-config deploy/smoke-run.toml" in (
        blocks["run"].replace("\\\n  ", "")
    )
    assert blocks["down"] == "docker compose down -v"
    # the folders the blocks create are the compose file's bind mounts
    made = set()
    for word in blocks["credentials"].split():
        if word.startswith("deploy/data/supernode-{"):
            made |= {f"deploy/data/supernode-{i}" for i in range(NUM_NODES)}
        elif word.startswith("deploy/"):
            made.add(word)
    for service in compose["services"].values():
        for mount in mounts(service):
            source = mount.source.removeprefix("./")
            if source.startswith(("deploy/data", "deploy/results", "deploy/fabs")):
                assert source in made, source
    # the smoke config is a DPHE run config the settings accept (container paths)
    from settings.run_settings import RunSettings

    smoke = parse_run_config([str(ROOT / "deploy/smoke-run.toml")])
    preset = parse_run_config([str(ROOT / "conf/deploy-fedhap-dphe.toml")])
    assert {k: smoke[k] for k in preset} == preset
    assert RunSettings.from_config(smoke).secure_aggregation == "dphe"


def test_scale_override_adds_nodes_with_their_own_keys_partitions_and_data():
    from deploy.scale import override

    data = override(6)
    services = data["services"]
    assert set(services) == {
        *(f"supernode-{i}" for i in range(6)),
        *(f"clientapp-{i}" for i in range(3, 6)),
    }
    for i in range(6):
        config = node_config(services[f"supernode-{i}"]["command"])
        assert config["partition-id"] == i and config["num-partitions"] == 6
    for i in range(3, 6):
        node, app = services[f"supernode-{i}"], services[f"clientapp-{i}"]
        assert f"./deploy/credentials/supernode-{i}:/credentials:ro" in node["volumes"]
        assert f"./deploy/data/supernode-{i}:/data:ro" in app["volumes"]
        assert node["networks"] == ["fleet", f"node-{i}"]
        assert app["networks"] == [f"node-{i}"]
        assert f"supernode-{i}:9094" in app["command"]
        assert data["networks"][f"node-{i}"] == {"internal": True}
        # its own state volumes: FAB versions (SuperNode), privacy ledger (ClientApp)
        assert f"supernode-{i}-state:/state" in node["volumes"]
        assert f"clientapp-{i}-state:/state" in app["volumes"]
        assert f"supernode-{i}-state" in data["volumes"]
        assert f"clientapp-{i}-state" in data["volumes"]
        assert "privacy-policy='/policy/node-privacy-policy.toml'" in " ".join(
            node["command"]
        )
    with pytest.raises(ValueError):
        override(2)


@needs_compose
def test_docker_compose_config_accepts_the_scale_override(tmp_path):
    from deploy.scale import write

    path = write(6, ROOT / f".scale-test-{os.getpid()}.yml")
    try:
        merged = _compose_config("docker-compose.yml", path.name)
    finally:
        path.unlink()
    services = merged["services"]
    assert {f"supernode-{i}" for i in range(6)} <= set(services)
    assert services["clientapp-5"]["image"] == "fedhash:cpu"
    assert merged["networks"]["node-5"]["internal"] is True


def _readme_block(after: str) -> str:
    text = (ROOT / "docs" / "deploy.md").read_text()
    start = text.index("```bash\n", text.index(after)) + len("```bash\n")
    return text[start : text.index("```\n", start)]


def _commands(block: str) -> list[str]:
    """Shell lines of a block: continuations joined, comments and spacing dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    out = []
    for line in joined.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            out.append(re.sub(r"\s+", " ", line))
    return out


def test_readme_compose_commands_are_the_tested_ones():
    """README "With Docker Compose" = docs/deploy.md's tested blocks (the run
    config aside: the README runs the full preset, the test a 2-round one)."""
    from tests.e2e.test_containers import doc_blocks

    tested = {c for b in doc_blocks().values() for c in _commands(b)}
    readme = _commands(_readme_block("**With Docker Compose**"))
    assert len(readme) >= 8
    for command in readme:
        command = command.replace(
            "conf/deploy-fedhap-dphe.toml", "deploy/smoke-run.toml"
        )
        assert command in tested, command


_PROGRAMS = {
    "flower-superlink": "superlink",
    "python -m deploy.fab_registry serve": "fab-registry",
    "python -m crypto.keyholder_service": "keyholder",
    "python -m deploy.api_gateway": "fleet-gateway",
    "python -m deploy.supernode_guard": "supernode-0",
}


def test_readme_bare_process_commands_use_the_compose_flags(compose: dict):
    """The bare-process path runs each service with the compose command's flags
    (only --host may be left to its loopback default)."""
    commands = _commands(_readme_block("**The same on bare processes**"))
    seen = {}
    for command in commands:
        command = re.sub(r"^(\w+=\S+ )+", "", command)  # env assignments
        command = command.split(" & ")[0].rstrip(" &")
        for program, service in _PROGRAMS.items():
            if command.startswith(program):
                seen[service] = set(_FLAG.findall(command))
        if command.startswith("flower-superexec"):
            name = "serverapp" if "8000" in command else "clientapp-0"
            seen[name] = set(_FLAG.findall(command))
    assert set(seen) == {*_PROGRAMS.values(), "serverapp", "clientapp-0"}
    for service, used in seen.items():
        expected = {
            a for a in compose["services"][service]["command"] if a.startswith("--")
        }
        assert used <= expected, (service, used - expected)
        assert expected - used <= {"--host"}, (service, expected - used)

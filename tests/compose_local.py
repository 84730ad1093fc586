"""Read docker-compose.yml and turn its services' commands into local processes.

The loopback deployment test runs *the commands the containers run*: each service's
``command`` with container paths mapped to the host folders its volumes mount,
service host names to 127.0.0.1 and container ports to free local ports.
"""

from __future__ import annotations

import copy
import re
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from flwr.common.config import parse_config_args

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
_VAR = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")
_HOST_PORT = re.compile(r"^([a-z][a-z0-9-]*):(\d+)$")
_URL = re.compile(r"^(https?://)([a-z][a-z0-9-]*):(\d+)(/.*)?$")


def interpolate(value: Any, env: Mapping[str, str] | None = None) -> Any:
    """Apply compose's ``${VAR:-default}`` interpolation to every string in value."""
    env = env or {}
    if isinstance(value, str):
        return _VAR.sub(lambda m: env.get(m.group(1), m.group(2) or ""), value)
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    return value


def load_compose(path: Path = COMPOSE, env: Mapping[str, str] | None = None) -> dict:
    """The compose file as a dict, interpolated (defaults unless ``env`` says)."""
    return interpolate(yaml.safe_load(path.read_text()), env)


@dataclass(frozen=True)
class Mount:
    """One volume of a service (short syntax)."""

    source: str  # "./relative/path" (bind) or a named volume
    target: str
    read_only: bool


def mounts(service: Mapping[str, Any]) -> list[Mount]:
    """Parse a service's ``volumes`` (``source:target[:ro]``)."""
    out = []
    for spec in service.get("volumes", []):
        parts = spec.split(":")
        out.append(Mount(parts[0], parts[1], len(parts) > 2 and parts[2] == "ro"))
    return out


def container_to_host(
    service: Mapping[str, Any], path: str, rebase: Callable[[str], Path]
) -> Path | None:
    """Host path of container ``path`` through the service's mounts, or None."""
    best = None
    for m in mounts(service):
        if path == m.target or path.startswith(m.target.rstrip("/") + "/"):
            if best is None or len(m.target) > len(best.target):
                best = m
    if best is None:
        return None
    rest = path[len(best.target) :].lstrip("/")
    base = rebase(best.source)
    return base / rest if rest else base


def flags(command: list[str]) -> dict[str, str | None]:
    """``--flag value`` pairs of a command (value None for a bare switch)."""
    out: dict[str, str | None] = {}
    for i, arg in enumerate(command):
        if arg.startswith("--"):
            name, eq, inline = arg.partition("=")
            nxt = command[i + 1] if i + 1 < len(command) else None
            if eq:
                out[name] = inline
            elif nxt is not None and not nxt.startswith("--"):
                out[name] = nxt
            else:
                out[name] = None
    return out


def node_config(command: list[str]) -> dict[str, Any]:
    """The ``--node-config`` of a SuperNode command, parsed as Flower does."""
    raw = flags(command).get("--node-config")
    return parse_config_args([raw]) if raw else {}


def format_node_config(config: Mapping[str, Any]) -> str:
    """Inverse of :func:`node_config` (strings double-quoted)."""
    parts = []
    for key, value in config.items():
        if isinstance(value, str):
            parts.append(f'{key}="{value}"')
        elif isinstance(value, bool):
            parts.append(f"{key}={str(value).lower()}")
        else:
            parts.append(f"{key}={value}")
    return " ".join(parts)


def executor_of(compose: Mapping[str, Any], supernode: str) -> str:
    """Name of the service whose superexec serves ``supernode``'s Runtime API."""
    for name, service in compose["services"].items():
        address = flags(service.get("command", [])).get("--runtime-api-address")
        if address and address.split(":")[0] == supernode:
            return name
    raise KeyError(f"no ClientApp executor for {supernode}")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clone_node(compose: dict, src: int, dst: int) -> dict:
    """Compose with SuperNode ``src`` and its executor copied as node ``dst``."""
    out = copy.deepcopy(compose)
    for kind in ("supernode", "clientapp"):
        text = yaml.safe_dump(out["services"][f"{kind}-{src}"])
        for old, new in (
            (f"supernode-{src}", f"supernode-{dst}"),
            (f"clientapp-{src}", f"clientapp-{dst}"),
            (f"client-{src}.json", f"client-{dst}.json"),
            (f"partition-id={src} ", f"partition-id={dst} "),
            (f"node-{src}", f"node-{dst}"),
        ):
            text = text.replace(old, new)
        out["services"][f"{kind}-{dst}"] = yaml.safe_load(text)
    return out


@dataclass
class LocalPlan:
    """How compose services map onto this machine."""

    compose: dict
    rebase: Callable[[str], Path]
    ports: dict[tuple[str, int], int]
    bin_dir: Path

    def port(self, service: str, container_port: int) -> int:
        """Local port for a service's container port (allocated on first use)."""
        key = (service, container_port)
        if key not in self.ports:
            self.ports[key] = free_port()
        return self.ports[key]

    def command(
        self, name: str, *, node_config_edit: Callable[[dict], dict] | None = None
    ) -> list[str]:
        """The service's command, runnable here."""
        service = self.compose["services"][name]
        raw = list(service["command"])
        exe = raw[0]
        if exe == "python":
            out = [sys.executable]
        else:
            out = [str(self.bin_dir / exe)]
        prev = exe
        for arg in raw[1:]:
            out.append(self._arg(name, service, prev, arg, node_config_edit))
            prev = arg
        return out

    def environment(self, name: str) -> dict[str, str]:
        """The service's ``environment``, runnable here (URLs and paths mapped)."""
        service = self.compose["services"][name]
        out = {}
        for key, value in (service.get("environment") or {}).items():
            value = str(value)
            url = _URL.match(value)
            if url and url.group(2) in self.compose["services"]:
                port = self.port(url.group(2), int(url.group(3)))
                value = f"{url.group(1)}127.0.0.1:{port}{url.group(4) or ''}"
            elif value.startswith("/"):
                host = container_to_host(service, value, self.rebase)
                value = str(host) if host is not None else value
            out[key] = value
        return out

    def _arg(
        self,
        name: str,
        service: Mapping[str, Any],
        prev: str,
        arg: str,
        node_config_edit: Callable[[dict], dict] | None,
    ) -> str:
        if prev == "--host":
            return "127.0.0.1"
        if prev == "--port":
            return str(self.port(name, int(arg)))
        if prev == "--node-config":
            config = node_config(["--node-config", arg])
            executor = self.compose["services"][executor_of(self.compose, name)]
            for key, value in config.items():
                if isinstance(value, str) and value.startswith("/"):
                    host = container_to_host(executor, value, self.rebase)
                    config[key] = str(host) + ("/" if value.endswith("/") else "")
            if node_config_edit is not None:
                config = node_config_edit(config)
            return format_node_config(config)
        match = _HOST_PORT.match(arg)
        if match and match.group(1) in self.compose["services"]:
            return f"127.0.0.1:{self.port(match.group(1), int(match.group(2)))}"
        if arg.startswith("/"):
            host = container_to_host(service, arg, self.rebase)
            if host is not None:
                return str(host)
        return arg

"""One federated run on a loopback Flower deployment instead of Ray's simulation.

``run_loopback(cfg, clients, run_dir)`` starts an insecure ``flower-superlink`` and
``clients`` ``flower-supernode`` processes on 127.0.0.1 (each with
``partition-id=i num-partitions=clients`` as node config), submits this repository
with ``flwr run . loopback --stream`` and the run config ``cfg``, waits for it, and
stops every process it started by its process group id. It returns the run's
``summary.json``, like :func:`experiments.lib.runs.run_federated` (the Ray backend).

Why: the GPU machine this project is sometimes lent has no network and no Ray
(too large to carry), but Flower's own SuperLink and SuperNodes run there; each
ClientApp then trains on CUDA (``device = "auto"``). It is also how the containers
run, minus TLS and node authentication, which a single-user benchmark on one host
does not need (``docs/deployment.md`` has the secure deployment).

``python -m experiments.loopback --clients 3 --set rounds=2`` runs one from the
command line and prints the results directory.

A driver stopped by SIGTERM (``timeout``, a scheduler) or Ctrl-C must not leave
SuperLinks and SuperNodes behind: they run in their own sessions, so they would
outlive it. :func:`stop_deployments_on_signals` (called by the command-line
drivers) makes SIGTERM and SIGINT stop every deployment this process started, then
exit with 128 + the signal number (143, 130).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))


def run_config_arg(cfg: dict[str, Any]) -> str:
    """``cfg`` as one ``--run-config`` string (``key=value`` pairs, TOML values)."""
    return " ".join(f"{k}={_toml_value(v)}" for k, v in cfg.items())


def _bin(name: str) -> str:
    """Return a Flower console script next to this interpreter, else on PATH."""
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if not found:
        raise FileNotFoundError(
            f"{name}: not found next to {sys.executable} or on PATH (install flwr)"
        )
    return found


#: Every process a deployment of this process started and has not stopped yet.
_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.RLock()  # re-entrant: the handler runs in the main thread
_STOPPING = threading.Event()
#: A signal that reached the main thread while it was between ``Popen`` and
#: registering the new process in ``_LIVE``: the handler defers to the end of the
#: registration, or the new process (in its own session) would outlive the driver.
_MAIN_STARTING: dict[str, Any] = {"active": False, "deferred": None}


def stop_deployments_on_signals() -> None:
    """On SIGTERM or SIGINT, stop every live deployment, then exit 128 + signum.

    Call it from the main thread (Python's rule for signal handlers). Rows a
    driver has already appended stay; the runs in flight are lost, as on any
    interruption, and ``--resume`` redoes them.
    """

    def handler(signum: int, _frame: Any) -> None:
        if _MAIN_STARTING["active"]:
            _MAIN_STARTING["deferred"] = signum
            return
        _stop_all_and_exit(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, handler)


def _stop_all_and_exit(signum: int) -> None:
    with _LIVE_LOCK:
        _STOPPING.set()
        procs = list(_LIVE)
    print(
        f"loopback: signal {signum}: stopping {len(procs)} deployment process(es)",
        file=sys.stderr,
        flush=True,
    )
    _stop(procs)
    os._exit(128 + signum)  # worker threads would wait on dead deployments


def start_registered(cmd: list[str], **popen_kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(cmd, **popen_kwargs)``, registered for the signal handler.

    Started and registered under the lock: once the handler holds it and has set
    ``_STOPPING``, no other thread can start a process. In the main thread a signal
    arriving mid-start is handled once the process is registered, so it is stopped
    with the rest.
    """
    main = threading.current_thread() is threading.main_thread()
    try:
        with _LIVE_LOCK:
            if _STOPPING.is_set():
                raise RuntimeError("loopback: stopping on a signal; nothing started")
            if main:
                _MAIN_STARTING["active"] = True
            proc = subprocess.Popen(cmd, **popen_kwargs)
            _LIVE.add(proc)
    finally:
        if main:
            _MAIN_STARTING["active"] = False
            signum, _MAIN_STARTING["deferred"] = _MAIN_STARTING["deferred"], None
            if signum is not None:
                _stop_all_and_exit(signum)
    return proc


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + 15
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        with _LIVE_LOCK:
            _LIVE.discard(proc)


def _wait_port(port: int, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(
                f"flower-superlink exited with {proc.returncode}:\n"
                + log.read_text(errors="replace")[-3000:]
            )
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"flower-superlink did not listen on {port}")
        time.sleep(0.2)


def run_loopback(
    cfg: dict[str, Any],
    clients: int,
    run_dir: Path,
    *,
    timeout_s: float = 3600.0,
    node_config: str = "",
) -> dict[str, Any]:
    """Run ``cfg`` on a fresh loopback deployment of ``clients`` SuperNodes.

    The ServerApp writes its results under ``run_dir`` (``results-dir``); the
    processes' logs go to ``run_dir/logs/``. ``node_config``: more node-config
    entries of every SuperNode (e.g. ``privacy-policy='<file>'``). Returns the final
    ``summary.json``.
    Raises ``RuntimeError`` (with the log tails) when the run does not complete.
    """
    if clients < 1:
        raise ValueError(f"clients={clients}: at least 1 SuperNode is needed")
    run_dir = Path(run_dir).resolve()
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="flwr-loopback-"))
    port = _free_port()
    (home / "config.toml").write_text(
        '[superlink]\ndefault = "loopback"\n\n'
        f'[superlink.loopback]\naddress = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "PYTHONUNBUFFERED": "1",
    }
    procs: list[subprocess.Popen] = []

    def start(name: str, cmd: list[str]) -> subprocess.Popen:
        with (logs / f"{name}.log").open("wb") as out:
            proc = start_registered(
                cmd,
                cwd=home,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        procs.append(proc)
        return proc

    try:
        link = start(
            "superlink",
            [
                _bin("flower-superlink"),
                "--insecure",
                "--disable-runtime-dependency-installation",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
        )
        _wait_port(port, link, logs / "superlink.log", timeout=120)
        for pid in range(clients):
            start(
                f"supernode-{pid}",
                [
                    _bin("flower-supernode"),
                    "--insecure",
                    "--superlink",
                    f"127.0.0.1:{port}",
                    "--port",
                    str(_free_port()),
                    "--node-config",
                    f"partition-id={pid} num-partitions={clients} "
                    f"{node_config}".strip(),
                ],
            )
        run_cfg = {**cfg, "results-dir": str(run_dir)}
        cmd = [_bin("flwr"), "run", str(ROOT), "loopback", "--stream"]
        cmd += ["--run-config", run_config_arg(run_cfg)]
        submit = start("flwr-run", cmd)
        try:
            returncode = submit.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            returncode = None
        finals = [
            p for p in run_dir.iterdir() if p.is_dir() and (p / "summary.json").exists()
        ]
        if returncode != 0 or len(finals) != 1:
            tail = (logs / "flwr-run.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(
                f"loopback run failed (flwr run exit {returncode}, "
                + (f"stopped after {timeout_s:g} s, " if returncode is None else "")
                + f"{len(finals)} complete results directories in {run_dir}); "
                f"logs in {logs}:\n{tail}"
            )
        return json.loads((finals[0] / "summary.json").read_text())
    finally:
        _stop(procs)
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    """CLI entry point."""
    from experiments.lib.overrides import parse_overrides, resolved_settings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "loopback")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    stop_deployments_on_signals()
    cfg = parse_overrides(args.set)
    resolved_settings(cfg)  # a bad value fails here, before any process starts
    summary = run_loopback(cfg, args.clients, args.out)
    print(json.dumps(summary.get("final", {}), indent=2))
    print(args.out)


if __name__ == "__main__":
    main()

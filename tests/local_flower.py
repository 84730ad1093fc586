"""``flwr run .`` and ``make run`` against Flower's managed local SuperLink.

Flower starts that SuperLink on port 39091 unless ``FLWR_LOCAL_SUPERLINK_HTTP_API_PORT``
says otherwise. 39091 is inside Linux's ephemeral range (32768-60999), so any process
that asks the kernel for a free port (Ray, a test deployment on the other pytest
worker) can hold it, and the SuperLink then exits at once ("exited with code 1").
Each test here gets a port the kernel has just handed out instead.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.compose_local import free_port

ROOT = Path(__file__).resolve().parents[1]
PORT_ENV = "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"


def local_superlink_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of ``env`` (default: ours) whose local SuperLink takes a free port."""
    return {**(os.environ if env is None else env), PORT_ENV: str(free_port())}


#: CPUs per simulated client in the tests that start Flower's own Ray: 2 (on two
#: cores one ClientApp actor instead of two), never more than the machine has (Ray
#: would then fit no client at all).
TEST_CLIENT_CPUS = min(2, os.cpu_count() or 1)


def make_run(
    run_config: str,
    clients: int | str = 3,
    client_cpus: int | str = TEST_CLIENT_CPUS,
    client_gpus: int | str = 0,
) -> subprocess.CompletedProcess:
    """Run ``make run RUN_CONFIG=<run_config>`` in the repository; its result.

    ``client_cpus`` / ``client_gpus``: ``make run``'s ``CLIENT_CPUS`` (its default
    is 1) and ``CLIENT_GPUS`` (default 0).
    """
    env = local_superlink_env(
        {
            **os.environ,
            "NUM_CLIENTS": str(clients),
            "CLIENT_CPUS": str(client_cpus),
            "CLIENT_GPUS": str(client_gpus),
        }
    )
    env.pop("MAKEFLAGS", None)
    return subprocess.run(
        ["make", "--no-print-directory", "run", f"RUN_CONFIG={run_config}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )

"""Where a ServerApp or ClientApp runs: Flower's simulation engine or a deployment.

Two things are allowed in simulation only, because they give up a guarantee against
the server: reproducible ("seeded") privacy noise and the in-process DPHE keyholder
(the secret key inside the ServerApp process). Both sides check for themselves:

* the ServerApp from the :class:`~flwr.serverapp.Grid` it is handed: Flower's
  simulation engine (``flwr run`` with a simulation SuperLink, and
  ``flwr.simulation.run_simulation``) hands every ServerApp an ``InMemoryGrid``; a
  deployment hands it a grid that talks to a SuperLink over the network;
* the ClientApp from its process: in simulation it runs inside a Ray worker of the
  simulation backend; a deployed SuperNode runs it in a ``flwr-clientapp`` process
  that never starts Ray. A client never trusts the run config (which the server
  writes) to tell it that it is simulated.
"""

from __future__ import annotations

import sys
from typing import Any


def server_in_simulation(grid: Any) -> bool:
    """Return True when ``grid`` is the simulation engine's in-memory grid."""
    try:
        from flwr.superlink.grid import InMemoryGrid
    except ImportError:  # pragma: no cover - flwr layout changed
        return False
    return isinstance(grid, InMemoryGrid)


def client_in_simulation() -> bool:
    """Return True when this process is a Ray worker of Flower's simulation engine."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return False
    try:
        worker = ray._private.worker.global_worker  # noqa: SLF001
    except AttributeError:  # pragma: no cover - Ray layout changed
        return False
    return getattr(worker, "mode", None) == getattr(ray, "WORKER_MODE", object())


#: the federation size the docs and ``make run`` use
DOCUMENTED_SUPERNODES = 10


def default_size_warning(num_nodes: int) -> str | None:
    """Say so when a simulation has Flower's default size (2 SuperNodes), else None.

    ``flwr run .`` takes the federation size from the user's Flower home, not from
    the app, so a plain ``flwr run .`` gets Flower's default instead of the
    documented 10; the ServerApp logs this instead of running silently.
    """
    from flwr.supercore.constant import DEFAULT_SIMULATION_CONFIG

    if num_nodes != DEFAULT_SIMULATION_CONFIG.num_supernodes:
        return None
    n = DOCUMENTED_SUPERNODES
    return (
        f"this simulation has {num_nodes} SuperNodes, Flower's default; the "
        f"documented default is {n}: set it once with `flwr federation "
        f"simulation-config --num-supernodes {n} --client-resources-num-cpus 1`, or "
        f'pass --federation-config "num-supernodes={n}" to flwr run (make run does); '
        f"if {num_nodes} is what you meant, ignore this"
    )

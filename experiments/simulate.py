"""Run the real ServerApp and ClientApp in Flower's simulation engine, in-process.

By default Ray starts a fresh single-node instance in this process
(``address="local"``). ``ray_address`` / ``--ray-address`` connects to an existing
Ray cluster instead (``ray start --head`` plus ``ray start --address`` on the other
machines): the clients' actors are spread over its nodes, and the ServerApp, hence
the results directory, stays in this process. docs/ray-cluster.md has the recipe.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flwr.simulation import run_simulation

from clients.client_app import build_client_app
from server.server_app import build_server_app


def backend_config(
    *,
    cpus: int = 2,
    ray_address: str | None = None,
    client_cpus: float = 1,
    client_gpus: float = 0.0,
) -> dict[str, Any]:
    """Flower's Ray ``backend_config``; ``init_args`` go to ``ray.init`` unchanged.

    Without ``ray_address`` Ray starts its own instance with ``cpus`` CPUs, even if
    ``RAY_ADDRESS`` is set or a ``ray start`` cluster runs on this machine (a plain
    ``ray.init()`` would join those). With it, this process joins that cluster
    (``host:port`` of the head's GCS, or ``auto``: ``RAY_ADDRESS``, else the last
    ``ray start`` on this machine); ``ray.init`` then refuses ``num_cpus`` and
    ``num_gpus``, which each node declared at its own ``ray start``.
    """
    init_args: dict[str, Any] = {"include_dashboard": False}
    if ray_address:
        init_args["address"] = ray_address
    else:
        init_args.update(address="local", num_cpus=cpus)
        if not client_gpus:
            init_args["num_gpus"] = 0
    return {
        "client_resources": {"num_cpus": client_cpus, "num_gpus": client_gpus},
        "init_args": init_args,
    }


def simulate(
    overrides: dict[str, Any],
    *,
    num_clients: int,
    cpus: int = 2,
    ray_address: str | None = None,
    client_cpus: float = 1,
    client_gpus: float = 0.0,
    node_log: Path | None = None,
) -> Path:
    """Run one simulation; return the results directory it finished.

    The run writes under the config's ``results-dir`` (the app's default unless
    ``overrides`` set it), which may hold earlier runs: the one returned is the
    single directory this call added.

    ``cpus`` is the CPU count Ray may use (one client runs per CPU at a time);
    ignored with ``ray_address``, the existing cluster's nodes set their own.
    ``client_cpus`` / ``client_gpus`` are each client's Ray resources.
    ``node_log``: record which Ray node ran each message
    (:func:`clients.node_log.record_nodes`).
    """
    from experiments.lib.overrides import resolved_settings

    settings = resolved_settings(overrides)  # a bad value fails here, before Ray
    results_dir = Path(settings.results_dir)
    before = set(results_dir.iterdir()) if results_dir.is_dir() else set()
    client_app = build_client_app(
        overrides, node_log=None if node_log is None else str(Path(node_log).resolve())
    )
    run_simulation(
        server_app=build_server_app(overrides),
        client_app=client_app,
        num_supernodes=num_clients,
        backend_config=backend_config(
            cpus=cpus,
            ray_address=ray_address,
            client_cpus=client_cpus,
            client_gpus=client_gpus,
        ),
    )
    runs = [p for p in results_dir.iterdir() if p.is_dir() and p not in before]
    if len(runs) != 1 or runs[0].name.endswith(".incomplete"):
        raise RuntimeError(
            f"the run did not finish: expected one new finished run directory in "
            f"{results_dir}, found {sorted(p.name for p in runs)}"
        )
    return runs[0]


def load_run(run_dir: Path) -> tuple[dict, list[dict], dict]:
    """(config.json, rounds.jsonl rows, summary.json) of a finished run."""
    config = json.loads((run_dir / "config.json").read_text())
    rows = [json.loads(x) for x in (run_dir / "rounds.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    return config, rows, summary


def main() -> None:
    """CLI: ``python -m experiments.simulate --clients N [--set key=value ...]``.

    Prints the finished results directory. The results-dir must be empty or new.
    ``--ray-address HOST:PORT`` (or ``auto``) runs the clients on an existing Ray
    cluster (docs/ray-cluster.md).
    """
    import argparse

    from experiments.lib.overrides import parse_overrides, resolved_settings

    parser = argparse.ArgumentParser(description="one in-process simulation")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument(
        "--cpus", type=int, default=2, help="CPUs Ray may use (own instance only)"
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        metavar="HOST:PORT|auto",
        help="join this existing Ray cluster instead of starting one "
        "(auto: RAY_ADDRESS, else the last `ray start` on this machine)",
    )
    parser.add_argument("--client-cpus", type=float, default=1, help="CPUs per client")
    parser.add_argument(
        "--client-gpus", type=float, default=0.0, help="GPUs per client"
    )
    parser.add_argument(
        "--node-log",
        type=Path,
        default=None,
        metavar="FILE",
        help="append partition id, Ray node id, host and pid of every ClientApp "
        "message to FILE (on the node that ran it); prints messages per node",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    overrides = parse_overrides(args.set)
    settings = resolved_settings(overrides)  # fail before starting Ray
    Path(settings.results_dir).mkdir(parents=True, exist_ok=True)
    run_dir = simulate(
        overrides,
        num_clients=args.clients,
        cpus=args.cpus,
        ray_address=args.ray_address,
        client_cpus=args.client_cpus,
        client_gpus=args.client_gpus,
        node_log=args.node_log,
    )
    if args.node_log is not None and args.node_log.exists():
        from clients.node_log import node_counts

        for node, count in sorted(node_counts(args.node_log).items()):
            print(f"ray node {node}: {count} ClientApp messages")
    print(run_dir)


if __name__ == "__main__":
    from experiments.lib.progress import cli

    cli(main)

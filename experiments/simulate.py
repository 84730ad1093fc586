"""Run the real ServerApp and ClientApp in Flower's simulation engine, in-process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flwr.simulation import run_simulation

from clients.client_app import build_client_app
from server.server_app import build_server_app


def simulate(overrides: dict[str, Any], *, num_clients: int, cpus: int = 2) -> Path:
    """Run one simulation; return the single finished results directory.

    ``cpus`` is the CPU count Ray may use (one client runs per CPU at a time).
    """
    from experiments.overrides import resolved_settings

    resolved_settings(overrides)  # a bad value fails here, before Ray starts
    results_dir = Path(overrides["results-dir"])
    run_simulation(
        server_app=build_server_app(overrides),
        client_app=build_client_app(overrides),
        num_supernodes=num_clients,
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {"num_cpus": cpus, "num_gpus": 0, "include_dashboard": False},
        },
    )
    runs = [p for p in results_dir.iterdir() if p.is_dir()]
    if len(runs) != 1 or runs[0].name.endswith(".incomplete"):
        raise RuntimeError(
            f"the run did not finish: expected one finished run directory in "
            f"{results_dir}, found {[p.name for p in runs]}"
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
    """
    import argparse

    from experiments.overrides import parse_overrides, resolved_settings

    parser = argparse.ArgumentParser(description="one in-process simulation")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--cpus", type=int, default=2, help="CPUs Ray may use")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    overrides = parse_overrides(args.set)
    resolved_settings(overrides)  # fail before starting Ray
    Path(overrides.get("results-dir", "results")).mkdir(parents=True, exist_ok=True)
    print(simulate(overrides, num_clients=args.clients, cpus=args.cpus))


if __name__ == "__main__":
    from experiments.progress import cli

    cli(main)

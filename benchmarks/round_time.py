"""Seconds per federated round for 10 and 100 simulated clients (default model).

For each client count: one simulation (Flower + Ray, in-process) with ``rounds``
rounds and evaluation only at round 0 and the last round; seconds per round are taken
from ``rounds.jsonl`` over the rounds without evaluation. Baseline measured in the
same run: the same local training (every partition, one round, same model and
hyper-parameters) done sequentially in this process without Flower, timed right
before and right after the simulation (the machine is shared: the mean of the two
is the baseline, both are in the JSON); the ratio ``round_s / sequential_s`` is the
cost of the federation machinery (Ray actors, message serialisation, data loading,
aggregation) relative to the bare compute.

``--before FILE`` embeds an earlier ``round_time.json`` (e.g. measured before a
change, with its own same-run baseline) under ``before`` for comparison.

``python benchmarks/round_time.py [--clients 10,100] [--rounds 4] [--out FILE]
[--before FILE] [--ray-address HOST:PORT]``; ``--ray-address`` joins a running Ray
cluster instead of starting one (the smoke test's shared head: ``--clients 2
--rounds 3``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from clients.data import load_local_data  # noqa: E402
from experiments.lib.overrides import resolved_settings  # noqa: E402
from experiments.simulate import simulate  # noqa: E402
from hashing.train import LocalTrainConfig, train_dpsh  # noqa: E402
from server.run_files import read_rounds  # noqa: E402
from settings.run_model import build_run_model  # noqa: E402


def sequential_round(clients: int) -> float:
    """One round of local training for every partition, sequentially, no Flower."""
    settings = resolved_settings({})
    torch.set_num_threads(1)
    data = [
        load_local_data(settings, partition_id=i, num_partitions=clients)
        for i in range(clients)
    ]
    torch.manual_seed(0)
    start_state = build_run_model(settings, data[0].input_shape).state_dict()
    cfg = LocalTrainConfig(
        epochs=settings.local_epochs,
        learning_rate=settings.learning_rate,
        batch_size=settings.batch_size,
        quantization_weight=settings.quantization_weight,
    )
    # untimed warm-up: the first optimiser step of a process imports torch._dynamo
    # (seconds), which the simulation's actors pay before their timed rounds too
    warm = build_run_model(settings, data[0].input_shape)
    train_dpsh(
        warm,
        data[0].inputs,
        data[0].labels,
        config=cfg,
        device=torch.device("cpu"),
        generator=torch.Generator().manual_seed(0),
    )
    t0 = time.perf_counter()
    for i, d in enumerate(data):
        model = build_run_model(settings, d.input_shape)
        model.load_state_dict(start_state)
        train_dpsh(
            model,
            d.inputs,
            d.labels,
            config=cfg,
            device=torch.device("cpu"),
            generator=torch.Generator().manual_seed(i),
        )
    return time.perf_counter() - t0


def federated_round(clients: int, rounds: int, ray_address: str | None = None) -> dict:
    """Seconds per non-evaluation round of a real simulation."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run_dir = simulate(
            {"rounds": rounds, "eval-every": rounds, "results-dir": tmp},
            num_clients=clients,
            ray_address=ray_address,
        )
        total = time.perf_counter() - t0
        rows = read_rounds(run_dir)
    elapsed = {r["round"]: r["elapsed_s"] for r in rows}
    # rounds 1..rounds-1 have no evaluation; take the time between their ends
    plain = [elapsed[r] - elapsed[r - 1] for r in range(2, rounds)]
    return {
        "seconds_per_round": sum(plain) / len(plain),
        "rounds_measured": len(plain),
        "total_seconds_incl_startup_and_eval": total,
    }


def main(argv: list[str] | None = None) -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="10,100")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--out", type=Path, default=ROOT / "docs/results/benchmarks/round_time.json"
    )
    parser.add_argument("--before", type=Path, default=None)
    parser.add_argument("--ray-address", default=None, help="join this Ray cluster")
    args = parser.parse_args(argv)
    before = json.loads(args.before.read_text()) if args.before else None
    if args.rounds < 3:
        parser.error("--rounds must be >= 3 (round 1 and the last round are excluded)")
    results = []
    for n in (int(c) for c in args.clients.split(",")):
        seq_before = sequential_round(n)
        fed = federated_round(n, args.rounds, args.ray_address)
        seq_after = sequential_round(n)
        seq = (seq_before + seq_after) / 2
        row = {
            "clients": n,
            **fed,
            "sequential_local_training_seconds": seq,
            "sequential_before_after_seconds": [seq_before, seq_after],
            "ratio_round_over_sequential": fed["seconds_per_round"] / seq,
        }
        results.append(row)
        print(json.dumps(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "benchmark": "round_time",
                "defaults": "pyproject [tool.flwr.app.config] (digits, auto, 32 bits)",
                "client_resources": {"num_cpus": 1, "num_gpus": 0},
                "cpu_count": os.cpu_count(),
                "python": platform.python_version(),
                "torch": torch.__version__,
                "command": "python benchmarks/round_time.py "
                + " ".join(sys.argv[1:] if argv is None else argv),
                "results": results,
                **({"before": before} if before else {}),
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()

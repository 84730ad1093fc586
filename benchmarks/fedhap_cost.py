"""Extra cost per round of FedHAP over FedAvg: training wall time and bytes.

Runs, one after the other on the same machine, a FedAvg (DPSH) simulation and a
FedHAP simulation with the same data, clients, code length, rounds and local epochs
(evaluation only at round 0 and the last round). Per round it reads from
``rounds.jsonl`` the training wall time (``train_round_s``: configure, local
training, replies, aggregation; evaluation excluded) and the mean payload bytes per
client of the train messages (down) and replies (up). Rounds 1 (Ray warm-up; FedHAP
has no prototypes yet) and the last (followed by evaluation) are excluded from the
timing. FedAvg is the baseline; the JSON holds both and their ratios. FedHAP's bytes
are also split into the discriminator's parameters and the prototype records.

``python benchmarks/fedhap_cost.py [--clients 20] [--rounds 6] [--bits 48]
[--ray-address HOST:PORT]``; ``--ray-address`` joins a running Ray cluster instead of
starting one per simulation (the smoke test's shared head:
``--clients 2 --rounds 3 --bits 16``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from experiments.lib.overrides import resolved_settings  # noqa: E402
from experiments.simulate import simulate  # noqa: E402
from server.run_files import read_rounds  # noqa: E402
from settings.run_model import build_run_discriminator  # noqa: E402


def run(
    strategy: str, clients: int, rounds: int, bits: int, ray_address: str | None = None
) -> dict:
    """Mean train seconds and bytes per client over the measured rounds."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = simulate(
            {
                "strategy": strategy,
                "rounds": rounds,
                "eval-every": rounds,
                "code-length": bits,
                "partitioning": "pathological",
                "results-dir": tmp,
            },
            num_clients=clients,
            ray_address=ray_address,
        )
        rows = read_rounds(run_dir)
    measured = [r for r in rows if 2 <= r["round"] < rounds]
    return {
        "strategy": strategy,
        "train_seconds_per_round": statistics.fmean(
            r["train_round_s"] for r in measured
        ),
        "train_seconds_each_round": [r["train_round_s"] for r in measured],
        "down_bytes_per_client": statistics.fmean(
            r["down_bytes_per_client"] for r in measured
        ),
        "up_bytes_per_client": statistics.fmean(
            r["up_bytes_per_client"] for r in measured
        ),
        "rounds_measured": len(measured),
    }


def main(argv: list[str] | None = None) -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--bits", type=int, default=48)
    parser.add_argument(
        "--out", type=Path, default=ROOT / "docs/results/benchmarks/fedhap_cost.json"
    )
    parser.add_argument("--ray-address", default=None, help="join this Ray cluster")
    args = parser.parse_args(argv)
    if args.rounds < 3:
        parser.error("--rounds must be >= 3 (round 1 and the last round are excluded)")
    base = run("fedavg", args.clients, args.rounds, args.bits, args.ray_address)
    print(json.dumps(base), flush=True)
    fedhap = run("fedhap", args.clients, args.rounds, args.bits, args.ray_address)
    print(json.dumps(fedhap), flush=True)
    settings = resolved_settings({"strategy": "fedhap", "code-length": args.bits})
    disc = build_run_discriminator(settings, 10)
    disc_bytes = sum(t.numel() * t.element_size() for t in disc.state_dict().values())
    result = {
        "benchmark": "fedhap_cost",
        "setting": (
            f"digits, {args.clients} clients, pathological 3 classes/client, "
            f"{args.bits} bits, {args.rounds} rounds, defaults otherwise"
        ),
        "baseline": base,
        "fedhap": fedhap,
        "ratio_train_seconds": fedhap["train_seconds_per_round"]
        / base["train_seconds_per_round"],
        "extra_down_bytes_per_client": fedhap["down_bytes_per_client"]
        - base["down_bytes_per_client"],
        "extra_up_bytes_per_client": fedhap["up_bytes_per_client"]
        - base["up_bytes_per_client"],
        "discriminator_parameter_bytes": disc_bytes,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    print(
        json.dumps(
            {
                k: v
                for k, v in result.items()
                if k.startswith(("ratio", "extra", "disc"))
            }
        )
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

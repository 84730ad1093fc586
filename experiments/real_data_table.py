"""One method against its baselines on a real dataset: floor, federated, ceiling.

``python -m experiments.real_data_table --data-path ../shared/data/mirflickr25k_tags.npz
--seeds 0,1,2 --out docs/results/fedhap-mirflickr`` runs, for each seed, DPSH
(FedAvg) and FedHAP through Flower's simulation (``--clients`` IID clients,
``--bits``, ``--rounds``, the pyproject defaults otherwise) and the centralized
training of the same model with the same epoch budget (``experiments/centralized.py``).
The untrained floor is each federated run's round-0 mAP. The query set is the file's
fixed ``split`` when it has one (docs/data.md). Rows go to ``<out>/rows.jsonl``
(resumable with ``--resume``); ``<out>/table.md`` and ``<out>/summary.json`` hold
mean +- sample std over seeds, with the protocol above the table.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from experiments.sweep import ROOT, run_centralized, run_federated
from experiments.sweep_runner import exit_if_failed, run_sweep, write_tables

METHODS = {"DPSH (FedAvg)": "fedavg", "FedHAP": "fedhap", "centralized": None}


def main() -> None:
    """CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-path", type=Path, required=True)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--bits", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=Path, default=ROOT / "results/real-data")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    if not args.data_path.is_file():
        parser.error(f"--data-path {args.data_path}: no such file")
    seeds = [int(s) for s in args.seeds.split(",")]
    base = {
        "dataset": "npz",
        "data-path": str(args.data_path.resolve()),
        "code-length": args.bits,
        "rounds": args.rounds,
        "eval-every": args.rounds,
    }
    jobs = [(seed, m) for seed in seeds for m in METHODS]
    args.out.mkdir(parents=True, exist_ok=True)

    def run(job: tuple[int, str]) -> dict[str, Any]:
        seed, method = job
        cfg = {**base, "seed": seed}
        name = f"{method} s{seed}"
        t0 = time.perf_counter()
        if METHODS[method] is None:
            out = run_centralized(cfg, args.runs / f"centralized-s{seed}.json")
            floor = None
        else:
            cfg["strategy"] = METHODS[method]
            safe = name.replace(" ", "_").replace("(", "").replace(")", "")
            run_dir = args.runs / safe
            out = run_federated(cfg, args.clients, run_dir)
            floor = out["initial_map_all"]
        return {
            "name": name,
            "method": method,
            "seed": seed,
            "map_all": out["final"]["map_all"],
            "map_at_k": out["final"]["map_at_k"],
            "floor_map_all": floor,
            "protocol": out.get("protocol", ""),
            "seconds": time.perf_counter() - t0,
        }

    def tables(rows: list[dict[str, Any]]) -> None:
        def cell(vals: list[float]) -> str:
            if not vals:
                return "-"
            std = statistics.stdev(vals) if len(vals) > 1 else 0.0
            return f"{100 * statistics.mean(vals):.2f} ± {100 * std:.2f}"

        lines = [
            "| method | mAP@ALL % | mAP@100 % | untrained floor mAP@ALL % | seeds | "
            "wall s (mean) |",
            "|---|---|---|---|---|---|",
        ]
        summary = {}
        for method in METHODS:
            mine = [r for r in rows if r["method"] == method]
            if not mine:
                continue
            floors = [
                r["floor_map_all"] for r in mine if r["floor_map_all"] is not None
            ]
            lines.append(
                f"| {method} | {cell([r['map_all'] for r in mine])} | "
                f"{cell([r['map_at_k'] for r in mine])} | {cell(floors)} | "
                f"{len(mine)} | {statistics.mean(r['seconds'] for r in mine):.0f} |"
            )
            summary[method] = {
                "map_all": [r["map_all"] for r in mine],
                "map_at_k": [r["map_at_k"] for r in mine],
            }
        protocol = next((r["protocol"] for r in rows if r["protocol"]), "")
        head = (
            f"Protocol (ours; not the paper's exact split, see docs/data.md): "
            f"{args.clients} IID clients, {args.bits} bits, {args.rounds} rounds, "
            "the pyproject defaults otherwise; centralized = the same model trained "
            "on the union of the database with the same epoch budget; untrained "
            "floor = the federated runs' round-0 mAP; mean ± sample std over seeds "
            f"{args.seeds}. Run protocol: {protocol}"
        )
        write_tables(args.out, {"rows": rows, "cells": summary}, head + "\n\n" +
                     "\n".join(lines))

    rows, failed = run_sweep(
        jobs,
        run,
        rows_path=args.out / "rows.jsonl",
        resume=args.resume,
        name=lambda job: f"{job[1]} s{job[0]}",
        describe=lambda r: f"mAP@ALL {r['map_all']:.4f}",
        after_row=tables,
    )
    tables(rows)
    print((args.out / "table.md").read_text())
    exit_if_failed(failed)


if __name__ == "__main__":
    main()

"""mAP with failing clients: FedAvg (DPSH) and FedHAP, 0 / 10 / 30 % faults per round.

``python -m experiments.project faults --seeds 0,1,2 [--kind raise] [--out DIR]`` runs,
on the embedded digits with 10 clients (IID), every method at 0, 1 and 3 clients
told to fail in every round (``faults.clients``; which ones is drawn per round from
the seed), and writes ``<out>/rows.jsonl`` (resumable with ``--resume``),
``<out>/summary.json`` and ``<out>/table.md`` (final mAP@ALL, mean +- sample std
over seeds, and the change against no faults). Each run is one Flower simulation
in its own process (``experiments/lib/runs.py``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from experiments.lib.grids import SEEDS, csv, flag_list, load_grids
from experiments.lib.runner import exit_if_failed, run_sweep, write_tables
from experiments.lib.runs import ROOT, run_centralized, run_federated, safe_name
from experiments.lib.tables import MISSING, mean_sd_cell, pm, table_head, table_row

METHODS: dict[str, dict[str, Any]] = {
    "DPSH (FedAvg)": {"strategy": "fedavg"},
    "FedHAP": {"strategy": "fedhap"},
}
CLIENTS = 10


CEILING = "centralized"  # the same model on the whole database, same epoch budget


def jobs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every (seed, faults, method) run, seed-major, then the ceiling per seed."""
    runs = [
        {"seed": seed, "failing": k, "method": m}
        for seed in args.seeds
        for k in args.failing
        for m in METHODS
    ]
    return runs + [{"seed": s, "failing": 0, "method": CEILING} for s in args.seeds]


def name(job: dict[str, Any]) -> str:
    """Return the run name ``<method> faults=<k> s<seed>``."""
    return f"{job['method']} faults={job['failing']} s{job['seed']}"


def run_one(job: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """One simulation (or the centralized ceiling); its row."""
    if job["method"] == CEILING:
        t0 = time.perf_counter()
        cfg = {**args.base, "seed": job["seed"]}
        out = run_centralized(cfg, args.runs / f"centralized-s{job['seed']}.json")
        return {
            "name": name(job),
            **job,
            "map_all": out["final"]["map_all"],
            "floor_map_all": None,
            "seconds": time.perf_counter() - t0,
        }
    cfg = {
        **METHODS[job["method"]],
        **args.base,
        "seed": job["seed"],
        "faults.clients": job["failing"],
        "faults.kind": args.kind,
    }
    t0 = time.perf_counter()
    run_dir = args.runs / safe_name(name(job))
    summary = run_federated(cfg, CLIENTS, run_dir)
    return {
        "name": name(job),
        **job,
        "kind": args.kind,
        "map_all": summary["final"]["map_all"],
        "floor_map_all": summary["initial_map_all"],  # the untrained model
        "seconds": time.perf_counter() - t0,
    }


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> tuple[dict, str]:
    """Mean +- std per (method, faults) and the change against no faults."""
    cells: dict[str, dict[int, list[float]]] = {}
    for r in rows:
        cells.setdefault(r["method"], {}).setdefault(r["failing"], []).append(
            r["map_all"]
        )
    lines = table_head(
        "method",
        *(f"{k}/{CLIENTS} failing ({k * 100 // CLIENTS} %)" for k in args.failing),
    )
    summary: dict[str, Any] = {}
    for method, by_k in cells.items():
        base = statistics.mean(by_k[0]) if by_k.get(0) else None
        out = []
        for k in args.failing:
            vals = by_k.get(k, [])
            if not vals:
                out.append(MISSING)
                continue
            mean = statistics.mean(vals)
            std = statistics.stdev(vals) if len(vals) > 1 else 0.0
            delta = f" ({mean - base:+.3f})" if base is not None and k else ""
            out.append(pm(mean, std, fmt=".3f") + delta)
            cell = {"mean": mean, "std": std, "n": len(vals)}
            summary.setdefault(method, {})[k] = cell
        lines.append(table_row(method, *out))
    # one untrained model per seed (every run of a seed starts from it)
    by_seed = {
        r["seed"]: r["floor_map_all"]
        for r in rows
        if r.get("floor_map_all") is not None
    }
    if by_seed:
        floors = list(by_seed.values())
        lines.append(
            table_row(
                "untrained floor (round 0)",
                mean_sd_cell(floors, fmt=".3f"),
                *[MISSING] * (len(args.failing) - 1),
            )
        )
        summary["untrained floor"] = {"per_seed": by_seed}
    protocol = (
        f"Protocol: digits (scikit-learn), {CLIENTS} clients IID, "
        f"{args.base['rounds']} rounds, {args.base['local-epochs']} local epochs, "
        f"32 bits; the server's 10 % stratified query set against every client's "
        f"published codes (mAP@ALL after the last round); in every round k of the "
        f"{CLIENTS} sampled clients are told to fail (faults.kind = {args.kind!r}), "
        f"drawn per round from the seed; the round aggregates the rest; seeds "
        f"{','.join(map(str, args.seeds))}, mean ± sample std; (change against 0 "
        "failing). Untrained floor: the federated runs' round-0 mAP (the same "
        "initial model for both methods). Ceiling: centralized, the same model on "
        "the whole database with the same epoch budget (rounds x local epochs), no "
        "faults."
    )
    return summary, protocol + "\n\n" + "\n".join(lines)


def main() -> None:
    """CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    grids = load_grids("project", "faults", ("seeds", "failing"))
    parser.add_argument("--seeds", default=csv(grids["seeds"]))
    parser.add_argument("--kind", default="raise")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path, default=ROOT / "docs/results/faults")
    parser.add_argument(
        "--runs",
        type=Path,
        default=ROOT / "results/faults",
        help="where the run directories go (not committed)",
    )
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    args.seeds = flag_list(parser, "--seeds", args.seeds, SEEDS)
    args.failing = grids["failing"]
    args.base = {"rounds": args.rounds, "eval-every": args.rounds, "local-epochs": 3}
    args.out.mkdir(parents=True, exist_ok=True)

    def after(rows: list[dict[str, Any]]) -> None:
        summary, text = table(rows, args)
        write_tables(args.out, {"rows": rows, "cells": summary}, text)

    rows, failed = run_sweep(
        jobs(args),
        lambda job: run_one(job, args),
        rows_path=args.out / "rows.jsonl",
        resume=args.resume,
        name=name,
        describe=lambda r: f"mAP@ALL {r['map_all']:.4f}",
        after_row=after,
    )
    after(rows)
    print(table(rows, args)[1])
    exit_if_failed(failed)

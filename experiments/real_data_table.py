"""FedHAP against tuned FedAvg baselines on a real dataset: floor, federated, ceiling.

``python -m experiments.real_data_table --data-path ../shared/data/mirflickr25k_tags.npz
--seeds 0,1,2 --out docs/results/fedhap-mirflickr`` runs, in two stages:

1. **Tuning.** Each FedAvg baseline (DPSH, CSQ, HashNet, DCH, GreedyHash: the
   per-batch or per-sample losses of FedHAP's Table 2 and HashNet; the FedProx
   baselines of its Table 2 when ``--methods`` names them), IID, and the
   centralized ceiling are run at each learning rate of ``--lr-grid`` (the ceiling:
   ``--ceiling-lr-grid``, by default the same) with seed
   ``--tune-seed`` (not one of the table's seeds); the learning rate with the best
   final mAP@ALL is kept for the table. The tuning scores on the same query set as
   the table: this favours the baselines and the ceiling, never FedHAP (whose
   learning rate is the default, untuned). With ``--fedhap-lr-grid`` FedHAP is tuned
   the same way over its own grid, so every method gets the same treatment (the
   fair protocol where the best rate moves, e.g. with the number of clients).
2. **The table**, after all tuning runs, partitioning by partitioning, seed by seed
   (a table cut short holds whole partitionings). For every seed and partitioning
   (``iid``; ``non-iid``: FedHAP's label shards, ``--classes-per-client`` classes per
   client, a multi-label sample counted under its lowest label), each baseline with
   its tuned learning rate and FedHAP through Flower's simulation (``--clients``
   clients, ``--bits``, ``--rounds``, the pyproject defaults otherwise), and the
   centralized training of the same network with DPSH's loss and the same epoch
   budget (``experiments/centralized.py``; partitioning does not apply to it).
   ``--train-size N`` trains everything on a seeded random N of the database rows
   (``train-size``; FedHAP's MIRFlickr protocol is 10,000), tuning included.

``--untuned`` skips stage 1: every method, the ceiling included, runs at the
default learning rate (5e-4), and the protocol says "untuned (defaults)". It is
the fair choice where tuning would have to score on the reported queries (the
tuning above does) and no validation split is drawn.

The untrained floor is each federated run's round-0 mAP. The query set is the
file's fixed ``split`` when it has one (docs/data.md). Rows go to
``<out>/rows.jsonl`` (``kind`` "tune" or "table"; ``--resume`` skips the rows there;
a table row whose learning rate is no longer its method's tuned one, after a grid
grew, becomes ``kind`` "superseded" and is run again);
``<out>/table.md`` and ``<out>/summary.json`` hold mean +- sample std over seeds
with the protocol above the tables, and ``<out>/curves-<partitioning>.png`` the
precision-recall (Hamming radius), P@K and recall@K curves of all methods (means
over seeds).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.real_data_figures import plot_curves, report_curves
from experiments.sweep import ROOT, check_partitions, run_centralized, run_federated
from experiments.sweep_runner import (
    check_resume_setup,
    exit_if_failed,
    load_rows,
    run_sweep,
    shown_in_table,
    write_tables,
)

CENTRALIZED = "centralized (DPSH)"
#: Method -> the config keys that make it (``None``: the centralized ceiling).
METHODS: dict[str, dict[str, Any] | None] = {
    "DPSH (FedAvg)": {"strategy": "fedavg", "loss": "dpsh"},
    "FedHAP": {"strategy": "fedhap"},
    CENTRALIZED: None,
    "CSQ (FedAvg)": {"strategy": "fedavg", "loss": "csq"},
    "HashNet (FedAvg)": {"strategy": "fedavg", "loss": "hashnet"},
    "DCH (FedAvg)": {"strategy": "fedavg", "loss": "dch"},
    "GreedyHash (FedAvg)": {"strategy": "fedavg", "loss": "greedyhash"},
    # FedHAP's Table 2 also runs its baselines under FedProx (its Table 6: DPSH and
    # CSQ); the proximal term's mu is the run config's fedprox.mu (default 0.01)
    "DPSH (FedProx)": {"strategy": "fedprox", "loss": "dpsh"},
    "CSQ (FedProx)": {"strategy": "fedprox", "loss": "csq"},
    "DCH (FedProx)": {"strategy": "fedprox", "loss": "dch"},
    "GreedyHash (FedProx)": {"strategy": "fedprox", "loss": "greedyhash"},
}
#: What ``--methods`` runs by default (the FedProx baselines only when named).
DEFAULT_METHODS = tuple(m for m in METHODS if "(FedProx)" not in m)
BASELINES = tuple(m for m in METHODS if m not in ("FedHAP", CENTRALIZED))
#: The methods whose learning rate is tuned over ``--lr-grid``: the baselines and the
#: centralized ceiling (a ceiling at an untuned rate would be no ceiling).
TUNED = (*BASELINES, CENTRALIZED)
PARTITIONS = ("iid", "non-iid")
#: P@K / recall@K list lengths of every run (the curves' x axis).
CURVE_KS = "10,50,100,200,500,1000,2000,5000"
DEFAULT_LR = 5e-4


def safe_name(name: str) -> str:
    """Return a run name as a folder name (no spaces or parentheses)."""
    return name.replace(" ", "_").replace("(", "").replace(")", "")


def percent_cell(vals: list[float]) -> str:
    """``mean ± sample std`` of fractions, in percent (``-`` when empty)."""
    if not vals:
        return "-"
    std = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return f"{100 * statistics.mean(vals):.2f} ± {100 * std:.2f}"


def main() -> None:
    """CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-path", type=Path, required=True)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--bits", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--classes-per-client", type=int, default=3)
    parser.add_argument("--partitions", default=",".join(PARTITIONS))
    parser.add_argument(
        "--methods",
        default=",".join(DEFAULT_METHODS),
        help=f"default: {', '.join(DEFAULT_METHODS)}; accepted too: "
        + ", ".join(m for m in METHODS if m not in DEFAULT_METHODS),
    )
    parser.add_argument("--lr-grid", default="0.0002,0.0005,0.002")
    parser.add_argument(
        "--ceiling-lr-grid",
        default=None,
        help="learning rates tried for the centralized ceiling (default: --lr-grid)",
    )
    parser.add_argument(
        "--fedhap-lr-grid",
        default=None,
        help="tune FedHAP too, over these learning rates (default: FedHAP runs "
        f"untuned at {DEFAULT_LR})",
    )
    parser.add_argument("--tune-seed", type=int, default=99)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=Path, default=ROOT / "results/real-data")
    parser.add_argument(
        "--train-size",
        type=int,
        default=0,
        help="train on a seeded random N of the database rows (0: all of them); "
        "FedHAP's MIRFlickr protocol is 10000",
    )
    parser.add_argument(
        "--untuned",
        action="store_true",
        help=f"no tuning: every method and the ceiling at the default {DEFAULT_LR}",
    )
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    if args.untuned and (
        args.fedhap_lr_grid is not None or args.ceiling_lr_grid is not None
    ):
        parser.error("--untuned takes no --fedhap-lr-grid / --ceiling-lr-grid")
    if not args.data_path.is_file():
        parser.error(f"--data-path {args.data_path}: no such file")
    seeds = [int(s) for s in args.seeds.split(",")]
    try:
        lr_grid = parse_lr_grid(args.lr_grid, "--lr-grid")
        ceiling_grid = parse_lr_grid(
            args.ceiling_lr_grid or args.lr_grid, "--ceiling-lr-grid"
        )
        fedhap_grid = (
            parse_lr_grid(args.fedhap_lr_grid, "--fedhap-lr-grid")
            if args.fedhap_lr_grid is not None
            else None
        )
    except ValueError as exc:
        parser.error(str(exc))
    # the tuned methods and their grids (FedHAP only with --fedhap-lr-grid)
    grids = {m: ceiling_grid if m == CENTRALIZED else lr_grid for m in TUNED}
    if fedhap_grid is not None:
        grids["FedHAP"] = fedhap_grid
    if args.untuned:
        grids = {}  # best_lr: DEFAULT_LR for every method
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    partitions = [p.strip() for p in args.partitions.split(",") if p.strip()]
    for m in methods:
        if m not in METHODS:
            parser.error(f"--methods: unknown {m!r}; accepted: {', '.join(METHODS)}")
    for p in partitions:
        if p not in PARTITIONS:
            parser.error(f"--partitions: unknown {p!r}; accepted: iid, non-iid")
    if args.tune_seed in seeds:
        parser.error(f"--tune-seed {args.tune_seed} is one of --seeds {args.seeds}")
    if args.resume:
        try:
            check_resume_setup(args.out, setup_of(args))
            check_fedhap_tuning(load_rows(args.out / "rows.jsonl"), fedhap_grid)
        except ValueError as exc:
            parser.error(str(exc))
    part_cfg = partition_configs(args.classes_per_client)
    base = base_config(args.data_path, args.bits, args.rounds, args.train_size)
    runs = [(p, s) for p in partitions for s in seeds] + [("iid", args.tune_seed)]
    try:  # an impossible partitioning fails here, not in every run
        check_partitions(
            ({**base, "seed": s, **part_cfg[p]} for p, s in runs), args.clients
        )
    except ValueError as exc:
        parser.error(str(exc))
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    def federated(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], float]:
        t0 = time.perf_counter()
        # run_federated clears what an interrupted attempt left in run_dir
        out = run_federated(cfg, args.clients, args.runs / safe_name(name))
        return out, time.perf_counter() - t0

    def centralized(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], float]:
        """Train the ceiling: the same network, DPSH's loss, on the union."""
        t0 = time.perf_counter()
        out = run_centralized(
            {**cfg, "loss": "dpsh"}, args.runs / f"{safe_name(name)}.json"
        )
        return out, time.perf_counter() - t0

    # Two stages, one rows file: the tuning runs of the baselines (IID) and of the
    # ceiling (``kind`` "tune", seed --tune-seed), then the table, partition-major,
    # then seed-major, so a table cut short has whole partitionings.
    rows_path = args.out / "rows.jsonl"
    if args.resume:
        _merge_legacy_tuning(args.out)
    known: list[dict[str, Any]] = load_rows(rows_path) if args.resume else []
    tune_jobs: list[tuple[Any, ...]] = [
        ("tune", m, lr) for m in methods if m in grids for lr in grids[m]
    ]
    table_jobs: list[tuple[Any, ...]] = []
    for i, part in enumerate(partitions):
        for seed in seeds:
            for m in methods:
                if METHODS[m] is None:
                    if i == 0:
                        table_jobs.append(("table", seed, "-", m))
                    continue
                table_jobs.append(("table", seed, part, m))

    def best_lr(method: str) -> float:
        if method not in grids:
            return DEFAULT_LR
        lr = tuned_lr(known, method, grids[method])
        if lr is None:
            raise RuntimeError(f"{method}: tuning runs missing for --lr-grid")
        return lr

    def job_name(job: tuple[Any, ...]) -> str:
        if job[0] == "tune":
            return f"tune {job[1]} lr={job[2]}"
        return f"{job[3]} {job[2]} s{job[1]}"

    def run(job: tuple[Any, ...]) -> dict[str, Any]:
        row = tune(job) if job[0] == "tune" else table_run(job)
        known.append(row)
        return row

    def tune(job: tuple[Any, ...]) -> dict[str, Any]:
        _, method, lr = job
        cfg = {**base, "seed": args.tune_seed, "learning-rate": lr}
        name = f"tune {method} lr{lr} s{args.tune_seed}"
        if METHODS[method] is None:
            out, secs = centralized(cfg, name)
        else:
            cfg.update({**part_cfg["iid"], **METHODS[method]})  # type: ignore[dict-item]
            out, secs = federated(cfg, name)
        return {
            "kind": "tune",
            "name": job_name(job),
            "method": method,
            "learning_rate": lr,
            "seed": args.tune_seed,
            "map_all": out["final"]["map_all"],
            "seconds": secs,
        }

    def table_run(job: tuple[Any, ...]) -> dict[str, Any]:
        _, seed, part, method = job
        lr = best_lr(method)
        cfg: dict[str, Any] = {**base, "seed": seed, "learning-rate": lr}
        name = job_name(job)
        if METHODS[method] is None:
            out, secs = centralized(cfg, name)
            floor = None
        else:
            cfg.update(part_cfg[part])
            cfg.update(METHODS[method])  # type: ignore[arg-type]
            out, secs = federated(cfg, name)
            floor = out["initial_map_all"]
        return {
            "kind": "table",
            "name": name,
            "method": method,
            "partitioning": part,
            "seed": seed,
            "learning_rate": lr,
            "map_all": out["final"]["map_all"],
            "map_at_k": out["final"]["map_at_k"],
            "floor_map_all": floor,
            "curves": report_curves(out["final"]),
            "protocol": out.get("protocol", ""),
            "seconds": secs,
        }

    def tables(rows: list[dict[str, Any]]) -> None:
        tuned = {m: tuned_lr(rows, m, grids[m]) for m in grids}
        tuned = {m: lr for m, lr in tuned.items() if lr is not None}
        table_rows = [r for r in rows if r.get("kind", "table") == "table"]
        shown = shown_in_table(METHODS, methods, table_rows, "method")
        _write(table_rows, _tuning(rows), tuned, args, shown, partitions, started)

    sweep = {
        "run": run,
        "rows_path": rows_path,
        "name": job_name,
        "describe": lambda r: f"mAP@ALL {r['map_all']:.4f} ({r['seconds']:.0f} s)",
        "after_row": tables,
    }
    rows, failed = run_sweep(tune_jobs, resume=args.resume, **sweep)
    # a table run whose learning rate is no longer its method's tuned one (the grid
    # grew on --resume) is superseded: kept in rows.jsonl, and run again
    stale = supersede_stale_rows(rows_path, grids)
    if stale:
        print(f"{len(stale)} table runs superseded (new tuned lr): {stale}")
    known[:] = load_rows(rows_path)
    rows, more_failed = run_sweep(table_jobs, resume=True, **sweep)
    failed += more_failed
    tables(rows)

    table_rows = [r for r in rows if r.get("kind", "table") == "table"]
    for part in partitions:
        plot_curves(table_rows, part, args.out / f"curves-{part}.png", bits=args.bits)
    print((args.out / "table.md").read_text())
    exit_if_failed(failed)


def check_fedhap_tuning(
    rows: list[dict[str, Any]], fedhap_grid: Sequence[float] | None
) -> None:
    """Refuse to resume a folder that tuned FedHAP without ``--fedhap-lr-grid``.

    Its FedHAP rows are at the tuned rate, and a resume without the grid would run
    new ones at the default and state the default in the protocol.

    Raises
    ------
    ValueError
        Naming the folder's FedHAP rates and the flag to pass.
    """
    tuned = sorted(
        {r["learning_rate"] for r in _tuning(rows) if r.get("method") == "FedHAP"}
    )
    if tuned and fedhap_grid is None:
        raise ValueError(
            "--resume: this folder tuned FedHAP (rates "
            + ",".join(f"{lr:g}" for lr in tuned)
            + "); pass --fedhap-lr-grid again (e.g. --fedhap-lr-grid "
            + ",".join(f"{lr:g}" for lr in tuned)
            + ")"
        )


def setup_of(args: argparse.Namespace) -> dict[str, Any]:
    """Return the settings a table's numbers depend on (``summary.json["setup"]``).

    :mod:`experiments.across_table` combines only tables whose setups differ in
    one setting (``bits`` or ``clients``), and :mod:`experiments.rounds_sweep`
    states the code length its learning rates were tuned at.
    """
    return {
        "data": args.data_path.name,
        "clients": args.clients,
        "bits": args.bits,
        "rounds": args.rounds,
        "train_size": args.train_size,
        "classes_per_client": args.classes_per_client,
        **({"untuned": True} if getattr(args, "untuned", False) else {}),
    }


def partition_configs(classes_per_client: int) -> dict[str, dict[str, Any]]:
    """Config keys of each ``--partitions`` name (non-iid: FedHAP's label shards)."""
    return {
        "iid": {"partitioning": "iid"},
        "non-iid": {
            "partitioning": "pathological",
            "classes-per-client": classes_per_client,
        },
    }


def base_config(
    data_path: Path, bits: int, rounds: int, train_size: int, eval_every: int = 0
) -> dict[str, Any]:
    """Return the config keys every run of the table shares.

    Evaluated after the last round, or every ``eval_every`` rounds.
    """
    return {
        "dataset": "npz",
        "data-path": str(data_path.resolve()),
        "code-length": bits,
        "rounds": rounds,
        "eval-every": eval_every or rounds,
        "precision-k": CURVE_KS,
        **({"train-size": train_size} if train_size else {}),
    }


def _tuning(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("kind") == "tune"]


def best_tuned_lr(tuning: list[dict[str, Any]], method: str) -> float | None:
    """Learning rate of ``method``'s best tuning run (final mAP@ALL), or ``None``.

    Among equal scores the smallest learning rate wins, whatever the rows' order.
    """
    mine = sorted(
        (r for r in tuning if r["method"] == method), key=lambda r: r["learning_rate"]
    )
    if not mine:
        return None
    return max(mine, key=lambda r: r["map_all"])["learning_rate"]


def parse_lr_grid(text: str, flag: str) -> list[float]:
    """Learning rates of a comma-separated ``text``: positive finite numbers.

    Raises
    ------
    ValueError
        Naming ``flag``, the bad value and what is accepted.
    """
    rates = []
    for item in text.split(","):
        try:
            lr = float(item)
        except ValueError:
            lr = math.nan
        if not (math.isfinite(lr) and lr > 0):
            raise ValueError(
                f"{flag}: {item.strip()!r} in {text!r} is not a learning rate; "
                "accepted: comma-separated positive numbers, e.g. 0.002,0.005"
            )
        rates.append(lr)
    return rates


def tuned_lr(
    rows: list[dict[str, Any]], method: str, lr_grid: Sequence[float]
) -> float | None:
    """``method``'s tuned learning rate over ``lr_grid`` (``None`` until all are run).

    Only tuning rows at a rate of the grid count (:func:`best_tuned_lr`).
    """
    tuning = [r for r in _tuning(rows) if r["learning_rate"] in lr_grid]
    have = {r["learning_rate"] for r in tuning if r["method"] == method}
    if any(lr not in have for lr in lr_grid):
        return None
    return best_tuned_lr(tuning, method)


def supersede_stale_rows(
    rows_path: Path, grids: Mapping[str, Sequence[float]]
) -> list[str]:
    """Mark the table rows run at a learning rate that is no longer tuned.

    A table row of a tuned method (a key of ``grids``) whose ``learning_rate``
    differs from :func:`tuned_lr` (its tuning covers ``grids[method]``) gets
    ``kind`` "superseded" and its name prefixed ``superseded:``, so a resumed sweep
    runs it again at the tuned rate; nothing is deleted. The file is rewritten
    atomically.

    Returns
    -------
    list of str
        The superseded rows' former names.
    """
    rows = load_rows(rows_path)
    stale = []
    for row in rows:
        if row.get("kind", "table") != "table" or row.get("method") not in grids:
            continue
        lr = tuned_lr(rows, row["method"], grids[row["method"]])
        if lr is not None and row["learning_rate"] != lr:
            stale.append(row["name"])
            row["kind"] = "superseded"
            row["name"] = f"superseded: {row['name']} (lr {row['learning_rate']:g})"
    if stale:
        tmp = rows_path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(rows_path)
    return stale


def lr_grid_lines(
    tuning: list[dict[str, Any]],
    methods: Sequence[str],
    lrs: Sequence[float],
    chosen: Mapping[str, Any],
    *,
    lr_key: str = "learning_rate",
) -> list[str]:
    """Markdown table: final mAP@ALL % per method (rows) and learning rate (columns).

    The chosen rate (``chosen[method]``) is bold; a missing run is ``-``; a method
    without any tuning run is left out. Used by this driver and PHashing's.
    """
    lines = [
        "| method | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " |",
        "|---|" + "---|" * len(lrs),
    ]
    for method in methods:
        cells = []
        for lr in lrs:
            got = [
                r["map_all"]
                for r in tuning
                if r["method"] == method and r[lr_key] == lr
            ]
            txt = f"{100 * got[0]:.2f}" if got else "-"
            cells.append(f"**{txt}**" if chosen.get(method) == lr else txt)
        if any(c != "-" for c in cells):
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return lines


def _merge_legacy_tuning(out: Path) -> None:
    """Move rows of an older ``tuning.jsonl`` into ``rows.jsonl`` (kind "tune")."""
    legacy = out / "tuning.jsonl"
    if not legacy.exists():
        return
    rows_path = out / "rows.jsonl"
    have = {r["name"] for r in load_rows(rows_path)}
    with rows_path.open("a") as f:
        for r in load_rows(legacy):
            if r["name"] not in have:
                f.write(json.dumps({"kind": "tune", **r}) + "\n")
    legacy.unlink()


def _write(
    rows: list[dict[str, Any]],
    tuned_rows: list[dict[str, Any]],
    tuned: dict[str, float],
    args: argparse.Namespace,
    methods: list[str],
    partitions: list[str],
    started: float,
) -> None:
    if args.train_size:
        split = (
            f"the file's queries; a seeded random {args.train_size} of the database "
            "rows are the training set (each client trains on its rows of it and "
            "encodes its whole partition; the centralized ceiling trains on the same "
            "rows); every database row is retrieved"
        )
        if args.train_size == 10000 and "mirflickr" in args.data_path.name:
            split = "FedHAP Table 1's split: " + split
    else:
        split = (
            "ours; the paper's queries but not its 10,000-sample training subset: "
            "every client trains on its whole partition, see docs/data.md"
        )
    fedhap_tuned = args.fedhap_lr_grid is not None
    tuning = (
        f"untuned (defaults): every method and the ceiling at learning rate "
        f"{DEFAULT_LR}; "
        if getattr(args, "untuned", False)
        else f"every method's learning rate, FedHAP's included, tuned on seed "
        f"{args.tune_seed} (federated methods IID); "
        if fedhap_tuned
        else "the baselines' and the ceiling's learning rates tuned on seed "
        f"{args.tune_seed} (baselines IID), FedHAP's the default {DEFAULT_LR}; "
    )
    head = (
        f"Protocol ({split}): "
        f"{args.clients} clients, {args.bits} bits, {args.rounds} rounds, "
        f"non-iid = {args.classes_per_client} label shards per client (a "
        f"multi-label sample under its lowest label); {tuning}"
        "centralized = the same network trained with DPSH's loss on the union of "
        "the database, same epoch budget; untrained floor = the federated runs' "
        f"round-0 mAP; mean ± sample std over seeds {args.seeds}."
    )
    lines = [head, ""]
    summary: dict[str, Any] = {
        "setup": setup_of(args),
        "tuned_learning_rates": tuned,
        "cells": {},
    }
    central = [r for r in rows if r["method"] == CENTRALIZED]
    for part in partitions:
        protocol = next(
            (r["protocol"] for r in rows if r["partitioning"] == part),
            "",
        )
        lines += [
            f"**{part}**" + (f" (run protocol: {protocol})" if protocol else ""),
            "",
            "| method | lr | mAP@ALL % | mAP@100 % | recall@1000 % | untrained floor "
            "mAP@ALL % | seeds | wall s (mean) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for method in methods:
            mine = (
                central
                if METHODS[method] is None
                else [
                    r
                    for r in rows
                    if r["method"] == method and r["partitioning"] == part
                ]
            )
            if not mine:
                continue
            floors = [
                r["floor_map_all"] for r in mine if r["floor_map_all"] is not None
            ]
            rec = [_at(r, "recall_at_k", 1000) for r in mine]
            lines.append(
                f"| {method} | {mine[0]['learning_rate']:g} | "
                f"{percent_cell([r['map_all'] for r in mine])} | "
                f"{percent_cell([r['map_at_k'] for r in mine])} | "
                f"{percent_cell([v for v in rec if v is not None])} | "
                f"{percent_cell(floors)} | "
                f"{len(mine)} | {statistics.mean(r['seconds'] for r in mine):.0f} |"
            )
            summary["cells"][f"{method} | {part}"] = {
                "map_all": [r["map_all"] for r in mine],
                "map_at_k": [r["map_at_k"] for r in mine],
            }
        lines.append("")
    if tuned_rows:
        lines += [
            f"**Learning-rate tuning** (seed {args.tune_seed}, federated "
            f"{'methods' if fedhap_tuned else 'baselines'} IID, final mAP@ALL %; "
            "the chosen learning rate in bold)",
            "",
            *lr_grid_lines(
                tuned_rows,
                ("FedHAP", *TUNED) if fedhap_tuned else TUNED,
                _lrs(tuned_rows),
                tuned,
            ),
        ]
        lines.append("")
    total = sum(r["seconds"] for r in rows) + sum(r["seconds"] for r in tuned_rows)
    lines.append(f"Wall time of all runs: {total / 60:.0f} min (sum over runs).")
    summary["rows"] = rows
    summary["tuning"] = tuned_rows
    write_tables(args.out, summary, "\n".join(lines))


def _lrs(tuned_rows: list[dict[str, Any]]) -> list[float]:
    return sorted({r["learning_rate"] for r in tuned_rows})


def _at(row: dict[str, Any], key: str, k: int) -> float | None:
    curves = row.get("curves") or {}
    ks = curves.get("ks", [])
    return curves[key][ks.index(k)] if k in ks else None


if __name__ == "__main__":
    main()

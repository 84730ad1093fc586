"""The foundation table: FedAvg, FedProx and centralized, mean +- std of mAP over seeds.

``python -m experiments.project foundation --seeds 0,1,2`` runs, for IID and
pathological non-IID (3 classes per client) partitions and 16/32/64 bits, FedAvg
and FedProx (10 simulated clients, each run in its own process) and centralized
training of the same model with the same epoch budget. Every run's directory is kept
under ``<out>/runs/``; ``<out>/summary.json`` and ``<out>/table.md`` hold the
aggregate.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from experiments.lib.grids import COUNTS, SEEDS, csv, flag_list, load_grids
from experiments.lib.progress import SweepProgress
from experiments.lib.runs import PARTITIONS, ROOT, run_centralized, run_federated
from experiments.lib.tables import MISSING, mean_sd, pm, table_head, table_row

#: the table's name: its grid table and its results folder
GRID = "foundation"


def foundation(args: argparse.Namespace) -> list[dict[str, Any]]:
    """FedAvg / FedProx / centralized x IID / non-IID x bits x seeds."""
    rows = []
    base = dict(args.base)
    runs_per_cell = 1 + 2 * len(PARTITIONS)  # centralized + FedAvg/FedProx per split
    progress = SweepProgress(len(args.bits) * len(args.seeds) * runs_per_cell)
    for bits in args.bits:
        for seed in args.seeds:
            common = {**base, "code-length": bits, "seed": seed}
            t0 = time.perf_counter()
            cen = run_centralized(
                common, args.out / "runs" / f"centralized-{bits}b-s{seed}.json"
            )
            rows.append(
                _row("centralized", "-", bits, seed, cen, time.perf_counter() - t0)
            )
            _progress(progress, rows[-1])
            rows.append(floor_row(bits, seed, cen))
            for part_name, part in PARTITIONS.items():
                for strategy in ("fedavg", "fedprox"):
                    cfg = {**common, **part, "strategy": strategy}
                    name = f"{strategy}-{cfg['partitioning']}-{bits}b-s{seed}"
                    t0 = time.perf_counter()
                    summary = run_federated(cfg, args.clients, args.out / "runs" / name)
                    rows.append(
                        _row(
                            strategy,
                            part_name,
                            bits,
                            seed,
                            summary,
                            time.perf_counter() - t0,
                        )
                    )
                    _progress(progress, rows[-1])
    return rows


#: the untrained floor: the model every run of a seed starts from, evaluated
#: before training (the centralized run's ``initial``)
FLOOR = "untrained (floor)"


def floor_row(bits: int, seed: int, centralized: dict[str, Any]) -> dict[str, Any]:
    """Return the floor row of one (bits, seed): its centralized run's initial mAP."""
    return {
        "method": FLOOR,
        "partitioning": "-",
        "bits": bits,
        "seed": seed,
        "map_all": centralized["initial"]["map_all"],
        "map_at_k": None,
        "top_k": None,
        "seconds": 0.0,
    }


def _row(method: str, part: str, bits: int, seed: int, res: dict, secs: float) -> dict:
    final = res["final"]
    return {
        "method": method,
        "partitioning": part,
        "bits": bits,
        "seed": seed,
        "map_all": final["map_all"],
        "map_at_k": final["map_at_k"],
        "top_k": final["top_k"],
        "seconds": secs,
    }


def _progress(progress: SweepProgress, row: dict) -> None:
    progress.report(
        f"{row['method']:<12} {row['partitioning']:<24} {row['bits']:>3}b seed "
        f"{row['seed']}: mAP@ALL {row['map_all']:.4f} ({row['seconds']:.0f} s)"
    )


def aggregate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and sample std over seeds per (method, partitioning, bits)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["method"], r["partitioning"], r["bits"]), []).append(r)
    out = []
    for (method, part, bits), rs in groups.items():
        map_all = mean_sd([r["map_all"] for r in rs])
        at_k = [r["map_at_k"] for r in rs if r["map_at_k"] is not None]
        map_at_k = mean_sd(at_k) if at_k else (None, None)
        out.append(
            {
                "method": method,
                "partitioning": part,
                "bits": bits,
                "seeds": [r["seed"] for r in rs],
                "map_all_mean": map_all[0],
                "map_all_std": map_all[1],
                "map_at_k_mean": map_at_k[0],
                "map_at_k_std": map_at_k[1],
                "top_k": rs[0]["top_k"],
            }
        )
    return out


def markdown_table(agg: list[dict[str, Any]], bits: list[int]) -> str:
    """Rows = method x partitioning, columns = bits, cells = mAP@ALL mean +- std."""
    lines = table_head("method", "partitioning", *(f"{b} bits" for b in bits))
    keys = sorted({(a["method"], a["partitioning"]) for a in agg}, key=_order)
    for method, part in keys:
        cells = []
        for b in bits:
            a = next(
                (
                    x
                    for x in agg
                    if (x["method"], x["partitioning"], x["bits"]) == (method, part, b)
                ),
                None,
            )
            cells.append(
                MISSING
                if a is None
                else pm(a["map_all_mean"], a["map_all_std"], scale=100)
            )
        lines.append(table_row(method, part, *cells))
    return "\n".join(lines)


def _order(key: tuple[str, str]) -> tuple[int, str]:
    rank = {FLOOR: -1, "fedavg": 0, "fedprox": 1, "centralized": 2}
    return (rank.get(key[0], 9), key[1])


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    grids = load_grids("project", GRID, ("seeds", "bits"))
    parser.add_argument("--seeds", default=csv(grids["seeds"]))
    parser.add_argument("--bits", default=csv(grids["bits"]))
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    from experiments.lib.overrides import parse_overrides

    args.grid = GRID
    args.seeds = flag_list(parser, "--seeds", args.seeds, SEEDS)
    args.bits = flag_list(parser, "--bits", args.bits, COUNTS)
    args.base = parse_overrides(args.set)
    args.out = args.out or ROOT / "docs" / "results" / args.grid
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    rows = foundation(args)
    agg = aggregate(rows)
    table = markdown_table(agg, args.bits)
    (args.out / "summary.json").write_text(
        json.dumps(
            {
                "grid": args.grid,
                "clients": args.clients,
                "base_overrides": args.base,
                "metric": "mAP@ALL (mean ± sample std over seeds, in %)",
                "rows": rows,
                "aggregate": agg,
                "seconds": time.perf_counter() - started,
            },
            indent=2,
        )
        + "\n"
    )
    (args.out / "table.md").write_text(table + "\n")
    print(table)

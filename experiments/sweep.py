"""Seed sweeps behind the README tables: mean +- std of mAP over seeds.

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
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from experiments.lib.grids import csv, load_grids
from experiments.lib.progress import SweepProgress
from experiments.lib.tables import MISSING, mean_sd, pm, table_head, table_row
from experiments.overrides import resolved_settings

ROOT = Path(__file__).resolve().parents[1]

PARTITIONS = {
    "iid": {"partitioning": "iid"},
    "non-iid (3 cls/client)": {"partitioning": "pathological", "classes-per-client": 3},
}


def _sets(cfg: dict[str, Any]) -> list[str]:
    out = []
    for k, v in cfg.items():
        out += ["--set", f"{k}={json.dumps(v) if isinstance(v, str) else v}"]
    return out


def check_partitions(configs: Iterable[dict[str, Any]], clients: int) -> None:
    """Partition each run config's database over ``clients`` once, before any run.

    A partitioning the data cannot give (three label shards per client over 100
    clients, where a class has fewer rows than the clients that draw it) refuses
    every ClientApp of every run at discovery, a few minutes into each. This finds
    it in the driver, in seconds. Configs with the same data, partitioning and
    seed are checked once.

    Raises
    ------
    ValueError
        The message names the config keys, the seed and what the data allows.
    """
    from clients.data import data_key, database_partition, load_key_split

    checked: set[Any] = set()
    for cfg in configs:
        settings = resolved_settings(cfg)
        key = data_key(settings)
        if key in checked:
            continue
        checked.add(key)
        split = load_key_split(key)
        try:
            # as a ClientApp cuts its partition (partition 0 computes them all)
            database_partition(split, key, 0, clients)
        except ValueError as exc:
            scheme = {
                "partitioning": key.partitioning,
                "dirichlet-alpha": key.dirichlet_alpha,
                "classes-per-client": key.classes_per_client,
                "partition-repeats": key.partition_repeats,
            }
            read = {
                "dirichlet": "dirichlet-alpha",
                "pathological": "classes-per-client",
            }
            named = {
                k: v
                for k, v in scheme.items()
                if k == "partitioning"
                or k == read.get(settings.partitioning)
                or (k == "partition-repeats" and v != 1)
            }
            raise ValueError(
                f"{clients} clients, seed {settings.seed}, "
                + ", ".join(f"{k} = {v!r}" for k, v in named.items())
                + f": {exc}"
            ) from None


def run_federated(
    cfg: dict[str, Any], clients: int, run_dir: Path, *, cpus: int | None = None
) -> dict[str, Any]:
    """One simulation in a subprocess; returns its summary.json (plus ``run_dir``).

    ``cpus``: the CPUs its Ray instance may use (``experiments.simulate --cpus``;
    ``None``: that command's default).

    ``run_dir`` belongs to this one run, and a sweep runs it only for a job not in
    its rows, so anything already in it was left by an interrupted attempt (an
    ``.incomplete`` directory, or a run killed before its row was written): it is
    removed first, else the new run would find two run directories and fail.
    """
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    cmd = [sys.executable, "-m", "experiments.simulate", "--clients", str(clients)]
    if cpus is not None:
        cmd += ["--cpus", str(cpus)]
    cmd += _sets({**cfg, "results-dir": str(run_dir)})
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"run failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    final = Path(proc.stdout.strip().splitlines()[-1])
    summary = json.loads((final / "summary.json").read_text())
    summary["run_dir"] = str(final)
    return summary


def run_centralized(cfg: dict[str, Any], out: Path) -> dict[str, Any]:
    """Centralized ceiling in a subprocess; returns its JSON."""
    cmd = [sys.executable, "-m", "experiments.centralized", "--out", str(out)]
    cmd += _sets(cfg)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"run failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


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
        map_at_k = mean_sd([r["map_at_k"] for r in rs])
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
    rank = {"fedavg": 0, "fedprox": 1, "centralized": 2}
    return (rank.get(key[0], 9), key[1])


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("grid", choices=["foundation"])
    grids = load_grids("project", "foundation", ("seeds", "bits"))
    parser.add_argument("--seeds", default=csv(grids["seeds"]))
    parser.add_argument("--bits", default=csv(grids["bits"]))
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    from experiments.overrides import parse_overrides

    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.bits = [int(b) for b in args.bits.split(",")]
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


"""FedHAP experiments behind the README tables (paper Tables 2-6 shape).

``python -m experiments.fedhap tables --seeds 0,1,2 --jobs 2`` runs, on the embedded
digits with 20 clients and 12/24/48 bits, DPSH (FedAvg), DPSH (FedProx), FedHAP-1/2/3
and FedHAP under IID and pathological non-IID (3 classes per client) partitions, then
the client-count sweep (20/40/60/100 clients, IID, 48 bits) for DPSH (FedAvg),
DPSH (FedProx) and FedHAP, and FedHAP with the Euclidean triplet distance
(non-IID, 48 bits; the paper's Table 7). Beside the main table, its bounds
(``--only bounds`` adds them to a finished table): the untrained floor of each
partitioning, code length and seed (the round-0 mAP of a 1-round DPSH (FedAvg) run:
every method of a seed starts from the same network) and the centralized ceiling
(the same network trained with DPSH's loss on the whole database for rounds x
local-epochs epochs, at the table's learning rate like every row: not tuned; the
tuned table is ``experiments.fedhap real-data``). ``--only discriminator`` runs FedHAP
against FedHAP with our discriminator options, not the paper's: the projection
discriminator (``fedhap.discriminator``), sign codes through a straight-through
estimator (``fedhap.discriminator-input``), and both (non-IID, 48 bits; only when
asked). Each run is one Flower simulation in its
own process; ``--jobs`` runs that many at once. Every finished run is appended to
``<out>/rows.jsonl`` at once (``--resume`` skips those already there), so an
interrupted sweep loses nothing; ``<out>/summary.json`` and ``<out>/table.md`` hold
the aggregate (mean +- sample std over seeds).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from experiments.lib.grids import COUNTS, SEEDS, csv, flag_list, load_grids
from experiments.lib.runner import exit_if_failed, run_sweep, write_tables
from experiments.lib.runs import PARTITIONS, ROOT, run_centralized, run_federated
from experiments.lib.tables import (
    MISSING,
    mean_sd,
    mean_sd_cell,
    n_note,
    pm,
    table_head,
    table_row,
)
from experiments.tables.real_data_setup import CENTRALIZED, DISCRIMINATOR_OPTIONS

METHODS: dict[str, dict[str, Any]] = {
    "DPSH (FedAvg)": {"strategy": "fedavg"},
    "DPSH (FedProx)": {"strategy": "fedprox"},
    "FedHAP-1": {"strategy": "fedhap", "fedhap.variant": "fedhap-1"},
    "FedHAP-2": {"strategy": "fedhap", "fedhap.variant": "fedhap-2"},
    "FedHAP-3": {"strategy": "fedhap", "fedhap.variant": "fedhap-3"},
    "FedHAP": {"strategy": "fedhap", "fedhap.variant": "full"},
    "FedHAP (Euclidean)": {
        "strategy": "fedhap",
        "fedhap.variant": "full",
        "fedhap.triplet-distance": "euclidean",
    },
    **{
        m: {"strategy": "fedhap", "fedhap.variant": "full", **keys}
        for m, keys in DISCRIMINATOR_OPTIONS.items()
    },
}
DISCRIMINATOR_METHODS = ("FedHAP", *DISCRIMINATOR_OPTIONS)
MAIN_METHODS = tuple(
    m for m in METHODS if "Euclidean" not in m and m not in DISCRIMINATOR_OPTIONS
)
CLIENT_SWEEP_METHODS = ("DPSH (FedAvg)", "DPSH (FedProx)", "FedHAP")
#: the main table's bounds, below its methods in each partitioning's table
FLOOR = "untrained (floor)"
BOUNDS = (FLOOR, CENTRALIZED)


def jobs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """All runs, seed-major so that a partial sweep covers every cell."""
    out = []
    for seed in args.seeds:
        for bits in args.bits:
            for part_name in PARTITIONS:
                for method in MAIN_METHODS:
                    out.append(_main_job("main", method, part_name, bits, seed, args))
    for seed in args.seeds:  # the main table's floor and ceiling
        for bits in args.bits:
            for part_name in PARTITIONS:
                out.append(_main_job("bounds", FLOOR, part_name, bits, seed, args))
            out.append(_main_job("bounds", CENTRALIZED, "-", bits, seed, args))
    for seed in args.seeds:
        for clients in args.client_counts:
            if clients == args.clients:
                continue  # the main table's IID 48-bit runs
            for method in CLIENT_SWEEP_METHODS:
                out.append(
                    {
                        "table": "clients",
                        "method": method,
                        "partitioning": "iid",
                        "bits": args.sweep_bits,
                        "clients": clients,
                        "seed": seed,
                        "cfg": {"partitioning": "iid", "code-length": args.sweep_bits},
                    }
                )
    for seed in args.seeds:  # Table 7: distance metric, non-IID, 48 bits
        out.append(
            {
                "table": "distance",
                "method": "FedHAP (Euclidean)",
                "partitioning": "non-iid (3 cls/client)",
                "bits": args.sweep_bits,
                "clients": args.clients,
                "seed": seed,
                "cfg": {
                    **PARTITIONS["non-iid (3 cls/client)"],
                    "code-length": args.sweep_bits,
                },
            }
        )
    for seed in args.seeds:  # our discriminator option against the paper's
        for method in DISCRIMINATOR_METHODS:
            out.append(
                {
                    "table": "discriminator",
                    "method": method,
                    "partitioning": "non-iid (3 cls/client)",
                    "bits": args.sweep_bits,
                    "clients": args.clients,
                    "seed": seed,
                    "cfg": {
                        **PARTITIONS["non-iid (3 cls/client)"],
                        "code-length": args.sweep_bits,
                    },
                }
            )
    return out


def _main_job(
    table: str,
    method: str,
    part_name: str,
    bits: int,
    seed: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Return one job of the main table or its bounds (the ceiling's part is "-")."""
    return {
        "table": table,
        "method": method,
        "partitioning": part_name,
        "bits": bits,
        "clients": args.clients,
        "seed": seed,
        "cfg": {**PARTITIONS.get(part_name, {}), "code-length": bits},
    }


def job_name(job: dict[str, Any]) -> str:
    """Directory name of one run."""
    method = job["method"].lower().replace(" ", "").replace("(", "-").replace(")", "")
    part = job["cfg"].get("partitioning", "central")
    method = method.replace(",", "")
    name = f"{method}-{part}-{job['bits']}b-{job['clients']}c-s{job['seed']}"
    return name if job["table"] != "discriminator" else f"discriminator-{name}"


def run_job(job: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Run one simulation (or a bound of the main table); return its row."""
    t0 = time.perf_counter()
    cfg = {
        **args.base,
        **job["cfg"],
        "seed": job["seed"],
        "min-train-nodes": min(job["clients"], 2),
    }
    if job["method"] in BOUNDS:
        return _run_bound(job, cfg, args) | {"seconds": time.perf_counter() - t0}
    cfg |= METHODS[job["method"]]
    summary = run_federated(cfg, job["clients"], args.out / "runs" / job_name(job))
    final = summary["final"]
    return {
        "name": job_name(job),
        **{k: v for k, v in job.items() if k != "cfg"},
        "map_all": final["map_all"],
        "map_at_k": final["map_at_k"],
        "top_k": final["top_k"],
        "train_round_s_mean": summary.get("train_round_s_mean"),
        "down_bytes_per_client_mean": summary.get("down_bytes_per_client_mean"),
        "up_bytes_per_client_mean": summary.get("up_bytes_per_client_mean"),
        "seconds": time.perf_counter() - t0,
    }


def _run_bound(
    job: dict[str, Any], cfg: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    """Run one floor (a 1-round DPSH (FedAvg) run) or ceiling; return its row."""
    name = job_name(job)
    if job["method"] == FLOOR:
        cfg = {**cfg, **METHODS["DPSH (FedAvg)"], "rounds": 1, "eval-every": 1}
        summary = run_federated(cfg, job["clients"], args.out / "runs" / name)
        result = {"map_all": summary["initial_map_all"], "map_at_k": None}
    else:
        out = run_centralized(
            {**cfg, "loss": "dpsh"}, args.out / "runs" / f"{name}.json"
        )
        result = {k: out["final"][k] for k in ("map_all", "map_at_k")}
        result["epochs"] = out["epochs"]
    return {
        "name": name,
        **{k: v for k, v in job.items() if k != "cfg"},
        **result,
        "top_k": None,
    }


def aggregate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and sample std over seeds per (method, partitioning, bits, clients)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["table"] == "discriminator":  # its own FedHAP runs, paired by seed
            continue
        key = (r["method"], r["partitioning"], r["bits"], r["clients"])
        groups.setdefault(key, []).append(r)
    out = []
    for (method, part, bits, clients), rs in groups.items():

        def stat(key: str, rs: list[dict] = rs) -> tuple[float, float]:
            vals = [r[key] for r in rs if r.get(key) is not None]
            if not vals:
                return float("nan"), float("nan")
            return mean_sd(vals)

        m, s = stat("map_all")
        mk, sk = stat("map_at_k")
        out.append(
            {
                "method": method,
                "partitioning": part,
                "bits": bits,
                "clients": clients,
                "seeds": sorted(r["seed"] for r in rs),
                "map_all_mean": m,
                "map_all_std": s,
                "map_at_k_mean": mk,
                "map_at_k_std": sk,
                "train_round_s_mean": stat("train_round_s_mean")[0],
                "down_bytes_per_client": stat("down_bytes_per_client_mean")[0],
                "up_bytes_per_client": stat("up_bytes_per_client_mean")[0],
            }
        )
    return out


def _cell(a: dict[str, Any] | None) -> str:
    if a is None:
        return MISSING
    cell = pm(a["map_all_mean"], a["map_all_std"], scale=100)
    return cell + n_note(len(a["seeds"]), 3)


def tables(agg: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """Markdown: main table (methods x bits per partitioning) and client sweep."""
    find = {(a["method"], a["partitioning"], a["bits"], a["clients"]): a for a in agg}
    lines = []
    for part_name in PARTITIONS:
        lines += [
            f"**{part_name}, {args.clients} clients** (mAP@ALL %, mean ± std)",
            "",
            *table_head("method", *(f"{b} bits" for b in args.bits)),
        ]
        for method in MAIN_METHODS:
            cells = [
                _cell(find.get((method, part_name, b, args.clients))) for b in args.bits
            ]
            lines.append(table_row(method, *cells))
        for method, part in ((FLOOR, part_name), (CENTRALIZED, "-")):
            cells = [
                _cell(find.get((method, part, b, args.clients))) for b in args.bits
            ]
            if any(c != MISSING for c in cells):
                lines.append(table_row(method, *cells))
        lines.append("")
    if any(a["method"] in BOUNDS for a in agg):
        lines += [BOUNDS_NOTE, ""]
    counts = args.client_counts
    lines += [
        f"**Clients (IID, {args.sweep_bits} bits)** (mAP@ALL %, mean ± std)",
        "",
        *table_head("method", *(f"{c} clients" for c in counts)),
    ]
    for method in CLIENT_SWEEP_METHODS:
        cells = [_cell(find.get((method, "iid", args.sweep_bits, c))) for c in counts]
        lines.append(table_row(method, *cells))
    non_iid = "non-iid (3 cls/client)"
    lines += [
        "",
        f"**Distance metric (non-IID, {args.sweep_bits} bits, "
        f"{args.clients} clients)**",
        "",
        *table_head("triplet distance", "mAP@ALL %"),
    ]
    for label, method in (("cosine", "FedHAP"), ("Euclidean", "FedHAP (Euclidean)")):
        key = (method, non_iid, args.sweep_bits, args.clients)
        lines.append(table_row(label, _cell(find.get(key))))
    disc = discriminator_table(args)
    if getattr(args, "only", None) == "discriminator":
        return "\n".join(disc)
    lines += ["", *disc] if disc else []
    lines += [
        "",
        f"**Cost per round ({args.clients} clients, means over runs)**",
        "",
        *table_head(
            "method", "bits", "train s/round", "down KiB/client", "up KiB/client"
        ),
    ]
    for method in MAIN_METHODS:
        for b in args.bits:
            rs = [
                a
                for a in agg
                if a["method"] == method
                and a["bits"] == b
                and a["clients"] == args.clients
            ]
            if not rs:
                continue
            secs = statistics.fmean(a["train_round_s_mean"] for a in rs)
            down = statistics.fmean(a["down_bytes_per_client"] for a in rs) / 1024
            up = statistics.fmean(a["up_bytes_per_client"] for a in rs) / 1024
            lines.append(
                table_row(method, b, f"{secs:.2f}", f"{down:.1f}", f"{up:.1f}")
            )
    return "\n".join(lines)


#: what the main table's bound rows are (printed under it)
BOUNDS_NOTE = (
    "untrained (floor): the round-0 mAP of a 1-round DPSH (FedAvg) run of the same "
    "partitioning, code length and seed (every method of a seed starts from the "
    "same network); centralized (DPSH): the same network trained with DPSH's loss "
    "on the whole database for rounds x local-epochs epochs at the table's learning "
    "rate, like every row here (not tuned; a tuned ceiling is in the tuned table)."
)


def discriminator_table(args: argparse.Namespace) -> list[str]:
    """Markdown lines: the discriminator options' mAP per seed (none: ``[]``)."""
    disc_rows = [r for r in agg_rows(args) if r["table"] == "discriminator"]
    if not disc_rows:
        return []
    lines = [
        f"**Discriminator (non-IID, {args.sweep_bits} bits, {args.clients} "
        "clients; mAP@ALL %)**",
        "",
        *table_head("method", *(f"seed {s}" for s in args.seeds), "mean ± std"),
    ]
    for method in DISCRIMINATOR_METHODS:
        by_seed = {r["seed"]: r for r in disc_rows if r["method"] == method}
        cells = [
            f"{100 * by_seed[s]['map_all']:.2f}" if s in by_seed else MISSING
            for s in args.seeds
        ]
        vals = [r["map_all"] for r in by_seed.values()]
        lines.append(table_row(method, *cells, mean_sd_cell(vals, scale=100)))
    return lines


def agg_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Return the rows behind the tables (set by :func:`write_outputs`)."""
    return getattr(args, "rows", [])


def write_outputs(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """Write summary.json and table.md from the rows so far; return the tables."""
    args.rows = rows
    agg = aggregate(rows)
    summary = {
        "grid": "fedhap",
        "base_overrides": args.base,
        "metric": "mAP@ALL (mean ± sample std over seeds, in %)",
        "rows": rows,
        "aggregate": agg,
    }
    return write_tables(args.out, summary, tables(agg, args))


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    grids = load_grids("fedhap", "tables", ("seeds", "bits", "client-counts"))
    parser.add_argument("--seeds", default=csv(grids["seeds"]))
    parser.add_argument("--bits", default=csv(grids["bits"]))
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--client-counts", default=csv(grids["client-counts"]))
    parser.add_argument("--sweep-bits", type=int, default=48)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument(
        "--only",
        choices=["main", "bounds", "clients", "distance", "discriminator"],
        default=None,
        help="one table (default: main with its bounds, clients and distance)",
    )
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    from experiments.lib.overrides import checked_overrides

    args.seeds = flag_list(parser, "--seeds", args.seeds, SEEDS)
    args.bits = flag_list(parser, "--bits", args.bits, COUNTS)
    args.client_counts = flag_list(
        parser, "--client-counts", args.client_counts, COUNTS
    )
    args.base = checked_overrides(args.set)  # fails before any run
    args.out = args.out or ROOT / "docs" / "results" / "fedhap"
    args.out.mkdir(parents=True, exist_ok=True)
    rows, failed = run_sweep(
        [
            j
            for j in jobs(args)
            if j["table"] == (args.only or j["table"])
            and (args.only or j["table"] != "discriminator")
        ],
        lambda job: run_job(job, args),
        rows_path=args.out / "rows.jsonl",
        resume=args.resume,
        name=job_name,
        describe=lambda row: f"mAP@ALL {row['map_all']:.4f} ({row['seconds']:.0f} s)",
        after_row=lambda rows: write_outputs(rows, args),
        workers=args.jobs,
    )
    print(write_outputs(rows, args))
    exit_if_failed(failed)  # the tables hold what finished

"""PFMH experiments behind the README tables (paper Tables 1-2 shape).

``python -m experiments.pfmh_sweep --seeds 0,1,2 --jobs 1`` runs, on the two-view
digits (``multiview-digits``) with 10 clients, Dirichlet(0.1) label skew and
16/32/64/128 bits, the preset ``conf/pfmh.toml`` (``--set`` overrides it) as:

* ``PFMH`` -- personalized mode (only prototypes travel), full objective;
* ``PFMH (fedavg mode)`` -- the same, with the network also FedAvg'd;
* ``FedAvg (same model)`` -- the same multi-modal network FedAvg'd and trained with
  L_hash only (Eq. 11: similarity matching + information preservation), no
  prototypes at all (``pfmh.mode = "fedavg"``, ``pfmh.variant = "wo-p"``);
* ``w/o-PE (FedProto-like)`` -- prototype exchange without completion (Eq. 7);
* ``w/o-P (local only)`` -- no prototype terms; in personalized mode nothing but
  metrics is exchanged, so every client trains alone;
* ``w/o-Ls`` / ``w/o-Ll`` -- without similarity matching / information preservation;
* ``centralized`` -- the same network trained on the union of the clients' local
  databases (``experiments/centralized.py``), same epoch budget.

``--only completion`` runs the completion check: PFMH and w/o-PE under
Dirichlet(alpha) for the ``--completion-alphas`` (clients miss fewer classes as
alpha grows) at ``--completion-bits``.

Each run is one Flower simulation (or one centralized training) in its own process;
``--jobs`` runs that many at once, each simulation with ``--cpus`` Ray CPUs. Every
finished run is appended to ``<out>/rows.jsonl`` at once (``--resume`` skips those
already there); ``<out>/summary.json`` and ``<out>/table.md`` hold the aggregate
(mean +- sample std over seeds), ``<out>/map_per_round-<bits>b.png`` the mAP of
both protocols per evaluated round (``experiments/pfmh_figures.py``, from the kept
run directories under ``<out>/runs/``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from experiments.sweep import ROOT, _sets, run_federated
from experiments.sweep_runner import exit_if_failed, run_sweep, write_tables
from settings.check import parse_run_config

CENTRALIZED = "centralized"
METHODS: dict[str, dict[str, Any]] = {
    "PFMH": {"pfmh.mode": "personalized", "pfmh.variant": "full"},
    "PFMH (fedavg mode)": {"pfmh.mode": "fedavg", "pfmh.variant": "full"},
    "FedAvg (same model)": {"pfmh.mode": "fedavg", "pfmh.variant": "wo-p"},
    "w/o-PE (FedProto-like)": {"pfmh.mode": "personalized", "pfmh.variant": "wo-pe"},
    "w/o-P (local only)": {"pfmh.mode": "personalized", "pfmh.variant": "wo-p"},
    "w/o-Ls": {"pfmh.mode": "personalized", "pfmh.variant": "wo-ls"},
    "w/o-Ll": {"pfmh.mode": "personalized", "pfmh.variant": "wo-ll"},
    CENTRALIZED: {"pfmh.variant": "full"},
}
COMPLETION_METHODS = ("PFMH", "w/o-PE (FedProto-like)")
#: Metrics of a row, as named in rounds.jsonl / summary.json.
LOCAL = "local_map_all"
LOCAL_K = "local_map_at_k"
SQ_CDB = "server_queries_client_db_map_all"
UNION = "map_all"


def preset() -> dict[str, Any]:
    """``conf/pfmh.toml``, the base of every run, with flat keys as ``flwr run`` has."""
    return parse_run_config([str(ROOT / "conf" / "pfmh.toml")])


def jobs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """All runs, seed-major so that a partial sweep covers every cell."""
    out = []
    if args.only in (None, "main"):
        for seed in args.seeds:
            for bits in args.bits:
                for method in METHODS:
                    out.append(
                        {
                            "table": "main",
                            "method": method,
                            "alpha": args.base["dirichlet-alpha"],
                            "bits": bits,
                            "seed": seed,
                        }
                    )
    if args.only in (None, "completion"):
        for seed in args.seeds:
            for alpha in args.completion_alphas:
                for method in COMPLETION_METHODS:
                    out.append(
                        {
                            "table": "completion",
                            "method": method,
                            "alpha": alpha,
                            "bits": args.completion_bits,
                            "seed": seed,
                        }
                    )
    return out


def job_name(job: dict[str, Any]) -> str:
    """Directory name of one run."""
    method = job["method"].lower()
    for ch in " ()/":
        method = method.replace(ch, "-" if ch == "/" else "")
    return f"{method}-a{job['alpha']}-{job['bits']}b-s{job['seed']}"


def run_job(job: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Run one simulation (or centralized training); return its row."""
    cfg = {
        **args.base,
        **METHODS[job["method"]],
        "code-length": job["bits"],
        "dirichlet-alpha": job["alpha"],
        "seed": job["seed"],
        "min-train-nodes": min(args.clients, 2),
    }
    run_dir = args.out / "runs" / job_name(job)
    t0 = time.perf_counter()
    if job["method"] == CENTRALIZED:
        run_dir.mkdir(parents=True, exist_ok=True)  # its JSON is overwritten
        out = run_dir / "centralized.json"
        cmd = [sys.executable, "-m", "experiments.centralized", "--out", str(out)]
        cmd += ["--clients", str(args.clients), "--threads", str(args.cpus)]
        _run(cmd + _sets(cfg))
        result = json.loads(out.read_text())
        per_client, final, initial = result["final_per_client"], result["final"], {}
        costs: dict[str, Any] = {}
    else:
        # clears what an interrupted attempt left in run_dir
        summary = run_federated(cfg, args.clients, run_dir, cpus=args.cpus)
        per_client = summary["final_per_client"]
        initial = summary["initial_per_client"] or {}
        final = summary["final"] or {}
        costs = {
            k: summary.get(k)
            for k in (
                "train_round_s_mean",
                "down_bytes_per_client_mean",
                "up_bytes_per_client_mean",
            )
        }
    return {
        "name": job_name(job),
        **job,
        LOCAL: per_client.get(LOCAL),
        LOCAL_K: per_client.get(LOCAL_K),
        SQ_CDB: per_client.get(SQ_CDB),
        UNION: final.get(UNION),
        "initial_" + LOCAL: initial.get(LOCAL),
        "initial_" + SQ_CDB: initial.get(SQ_CDB),
        **costs,
        "seconds": time.perf_counter() - t0,
    }


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"run failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return proc


def aggregate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and sample std over seeds per (table, method, alpha, bits)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["table"], r["method"], r["alpha"], r["bits"]), []).append(
            r
        )
    out = []
    for (table, method, alpha, bits), rs in groups.items():
        entry: dict[str, Any] = {
            "table": table,
            "method": method,
            "alpha": alpha,
            "bits": bits,
            "seeds": sorted(r["seed"] for r in rs),
        }
        for key in (
            LOCAL,
            LOCAL_K,
            SQ_CDB,
            UNION,
            "initial_" + LOCAL,
            "initial_" + SQ_CDB,
            "train_round_s_mean",
            "down_bytes_per_client_mean",
            "up_bytes_per_client_mean",
        ):
            vals = [r[key] for r in rs if r.get(key) is not None]
            entry[key] = (
                [
                    statistics.fmean(vals),
                    statistics.stdev(vals) if len(vals) > 1 else 0.0,
                ]
                if vals
                else None
            )
        out.append(entry)
    return out


def _cell(a: dict[str, Any] | None, key: str) -> str:
    if a is None or a.get(key) is None:
        return "-"
    mean, std = a[key]
    n = len(a["seeds"])
    return f"{100 * mean:.2f} ± {100 * std:.2f}" + ("" if n >= 3 else f" (n={n})")


def protocol(args: argparse.Namespace) -> str:
    """Return the protocol paragraph above the tables (data, federation, floor)."""
    from experiments.overrides import resolved_settings
    from server.experiment import prepare_data, protocol_text

    settings = resolved_settings({**args.base, "seed": args.seeds[0]})
    data = prepare_data(settings)
    text = protocol_text(settings, data, args.clients).rstrip(".")
    return (
        f"Protocol: {text}. For the methods that are one model (fedavg mode, FedAvg, "
        "centralized) also the union protocol: the server's queries against all "
        f"partitions. Federation: {args.clients} clients, Dirichlet "
        f"{settings.dirichlet_alpha} (the seed also draws the partition), "
        f"{settings.rounds} rounds of {settings.local_epochs} local epochs, lr "
        f"{settings.learning_rate:g}, batch {settings.batch_size}. Floor: the "
        "untrained network (round 0). Ceiling: 'centralized', the same network "
        "trained on the union of the clients' local databases for the same number "
        "of epochs."
    )


def tables(agg: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """Markdown tables: one per metric, methods x bits; completion; cost."""
    main = {(a["method"], a["bits"]): a for a in agg if a["table"] == "main"}
    alpha = args.base["dirichlet-alpha"]
    lines: list[str] = [protocol(args), ""]
    titles = (
        (LOCAL, "Ours (per-client, local queries): local queries vs local database"),
        (SQ_CDB, "Server queries vs each client's own database, averaged over clients"),
        (UNION, "Union protocol (one model only): server queries vs all partitions"),
    )
    header = "| method | " + " | ".join(f"{b} bits" for b in args.bits) + " |"
    rule = "|---|" + "---|" * len(args.bits)
    for key, title in titles:
        lines += [
            f"**{title}** (mAP@ALL %, mean ± std over seeds; {args.clients} clients, "
            f"Dirichlet {alpha})",
            "",
            header,
            rule,
        ]
        first = next(iter(METHODS))
        if key != UNION:  # the untrained network (round 0 of the PFMH runs)
            cells = [_cell(main.get((first, b)), "initial_" + key) for b in args.bits]
            lines.append("| untrained (round 0) | " + " | ".join(cells) + " |")
        for method in METHODS:
            cells = [_cell(main.get((method, b)), key) for b in args.bits]
            if all(c == "-" for c in cells):
                continue
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
        lines.append("")
    comp = [a for a in agg if a["table"] == "completion"]
    if comp:
        alphas = sorted({a["alpha"] for a in comp})
        find = {(a["method"], a["alpha"]): a for a in comp}
        lines += [
            f"**Completion vs missing classes** (per-client mAP@ALL %, "
            f"{args.completion_bits} bits; the main table's alpha {alpha} row is "
            "from the main runs)",
            "",
            "| method | "
            + " | ".join(f"Dirichlet {x}" for x in [alpha, *alphas])
            + " |",
            "|---|" + "---|" * (len(alphas) + 1),
        ]
        for method in COMPLETION_METHODS:
            cells = [_cell(main.get((method, args.completion_bits)), LOCAL)]
            cells += [_cell(find.get((method, x)), LOCAL) for x in alphas]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [
        "**Cost per round** (means over runs)",
        "",
        "| method | bits | train s/round | down KiB/client | up KiB/client |",
        "|---|---|---|---|---|",
    ]
    for method in METHODS:
        for b in args.bits:
            a = main.get((method, b))
            if a is None or a.get("train_round_s_mean") is None:
                continue
            lines.append(
                f"| {method} | {b} | {a['train_round_s_mean'][0]:.2f} | "
                f"{a['down_bytes_per_client_mean'][0] / 1024:.1f} | "
                f"{a['up_bytes_per_client_mean'][0] / 1024:.1f} |"
            )
    return "\n".join(lines)


def write_outputs(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """Write summary.json and table.md from the rows so far; return the tables."""
    agg = aggregate(rows)
    summary = {
        "grid": "pfmh",
        "base_config": args.base,
        "clients": args.clients,
        "metric": "mAP@ALL (mean, sample std over seeds; fractions)",
        "rows": rows,
        "aggregate": agg,
    }
    return write_tables(args.out, summary, tables(agg, args))


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--bits", default="16,32,64,128")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--cpus", type=int, default=1, help="Ray CPUs per run")
    parser.add_argument("--only", choices=["main", "completion"], default=None)
    parser.add_argument("--completion-alphas", default="1.0")
    parser.add_argument("--completion-bits", type=int, default=32)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    from experiments.overrides import parse_overrides, resolved_settings

    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.bits = [int(b) for b in args.bits.split(",")]
    args.completion_alphas = [float(a) for a in args.completion_alphas.split(",")]
    args.base = {**preset(), **parse_overrides(args.set)}
    resolved_settings(args.base)  # fail before any run
    args.out = args.out or ROOT / "docs" / "results" / "pfmh"
    args.out.mkdir(parents=True, exist_ok=True)
    rows, failed = run_sweep(
        jobs(args),
        lambda job: run_job(job, args),
        rows_path=args.out / "rows.jsonl",
        resume=args.resume,
        name=job_name,
        describe=lambda row: (
            f"per-client mAP@ALL {row[LOCAL]:.4f} ({row['seconds']:.0f} s)"
        ),
        after_row=lambda rows: write_outputs(rows, args),
        workers=args.jobs,
    )
    print(write_outputs(rows, args))
    from experiments.pfmh_figures import plot_map_per_round

    for bits in args.bits:
        path = plot_map_per_round(rows, args.out, bits=bits)
        print(f"mAP per round, {bits} bits: {path or 'no kept run directory'}")
    exit_if_failed(failed)  # the tables hold what finished


if __name__ == "__main__":
    from experiments.progress import cli

    cli(main)

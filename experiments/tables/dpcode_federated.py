"""DPcode through Flower: merged top-k quality against the exact pooled top-k.

Each row is one real simulation (``strategy = "dpcode"``, 10 clients, digits IID,
k = 20): every client publishes its private top-k once, the server merges them
(:func:`privacy.dpcode.merge_releases`) and compares the merged list with the exact
top-k of all clients' data pooled (evaluation only). Privacy noise is **seeded**
(simulation only, no guarantee against the server) so that the table reproduces;
3 seeds, mean +- std. ``source = "codes"`` rows need ``--codes-model``: the
``model.pt`` of a trained FedAvg run of the same model / code-length.

    python -m experiments.dpcode federated [--codes-model RUN/model.pt] [--quick]

Writes ``docs/results/dpcode-federated/`` (rows.jsonl, summary.json, table.md);
``--resume`` skips finished rows.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lib.runner import exit_if_failed, load_rows, run_sweep, write_tables
from experiments.lib.tables import pm, table_head, table_row
from experiments.simulate import simulate

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = 10
K = 20


def _jobs(args: argparse.Namespace) -> list[dict[str, Any]]:
    jobs = []
    seeds = [0] if args.quick else [0, 1, 2]
    epsilons = [1.0] if args.quick else [1.0, 8.0]
    variants = ["pruned"] if args.quick else ["paper", "pruned"]
    sources = ["frames"] + (["codes"] if args.codes_model else [])
    for source in sources:
        for variant in variants:
            for eps in epsilons:
                for seed in seeds:
                    jobs.append(
                        {"source": source, "variant": variant, "eps": eps, "seed": seed}
                    )
    return jobs


def _name(job: dict[str, Any]) -> str:
    return f"{job['source']}-{job['variant']}-eps{job['eps']:g}-s{job['seed']}"


def _run(job: dict[str, Any], codes_model: str) -> dict[str, Any]:
    overrides: dict[str, Any] = {
        "strategy": "dpcode",
        "seed": job["seed"],
        "privacy.noise": "seeded",
        "dpcode.k": K,
        "dpcode.epsilon": job["eps"],
        "dpcode.variant": job["variant"],
        "dpcode.source": job["source"],
    }
    if job["source"] == "codes":
        overrides |= {"dpcode.codes-model": codes_model, "dpcode.chunk-bits": 4}
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = simulate({**overrides, "results-dir": tmp}, num_clients=CLIENTS)
        summary = json.loads((run_dir / "summary.json").read_text())
    quality = summary["evaluation"]
    return {
        "name": _name(job),
        **job,
        "f_score": quality["f_score"],
        "relative_error": quality["relative_error"],
        "clients": summary["clients"],
        "epsilon_per_frame": summary["privacy"]["max_client_epsilon"],
    }


def _table(rows: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    groups: dict[tuple[str, str, float], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["source"], r["variant"], r["eps"]), []).append(r)
    lines = [
        f"Protocol: DPcode through Flower's simulation engine, {CLIENTS} clients "
        "(digits, IID partitions of the database split), each client's top-"
        f"{K} release merged by summed noisy supports; F-score and median RE of "
        f"the merged top-{K} against the exact top-{K} of the pooled client data. "
        "Seeded privacy noise (simulation only); mean +- std over seeds. "
        "Command: `python -m experiments.dpcode federated`.",
        "",
        *table_head(
            "source", "variant", "eps per frame", "seeds", "F-score", "median RE"
        ),
    ]
    summary: dict[str, Any] = {}
    for (source, variant, eps), rs in sorted(groups.items()):
        f = np.array([r["f_score"] for r in rs])
        re = np.array([r["relative_error"] for r in rs], dtype=float)
        lines.append(
            table_row(
                source,
                variant,
                f"{eps:g}",
                len(rs),
                pm(f.mean(), f.std()),  # population std (numpy's default)
                pm(re.mean(), re.std()),
            )
        )
        summary[f"{source}/{variant}/eps{eps:g}"] = {
            "f_score_mean": float(f.mean()),
            "f_score_std": float(f.std()),
            "re_mean": float(re.mean()),
            "re_std": float(re.std()),
            "seeds": len(rs),
        }
    return "\n".join(lines), summary


def main() -> None:
    """CLI: run the grid (resumable) and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--codes-model", default="")
    parser.add_argument("--quick", action="store_true", help="one small row")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "docs" / "results" / "dpcode-federated"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows_path = args.out / "rows.jsonl"
    if not args.resume and rows_path.exists():
        rows_path.unlink()
    _, failed = run_sweep(
        _jobs(args),
        lambda job: _run(job, args.codes_model),
        rows_path=rows_path,
        resume=args.resume,
        name=_name,
        describe=lambda r: f"F {r['f_score']:.3f} RE {r['relative_error']:.2f}",
    )
    text, summary = _table(load_rows(rows_path))
    print(write_tables(args.out, summary, text))
    exit_if_failed(failed)

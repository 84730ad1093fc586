"""DPcode through Flower: merged top-k quality against the exact pooled top-k.

Each row is one real simulation (``strategy = "dpcode"``, 10 clients, digits IID,
k = 20): every client publishes its private top-k once, the server merges them
(:func:`privacy.dpcode.merge_releases`) and compares the merged list with the exact
top-k of all clients' data pooled (evaluation only). Privacy noise is **seeded**
(simulation only, no guarantee against the server) so that the table reproduces;
3 seeds, mean +- std. ``source = "codes"`` rows need ``--codes-model``: the
``model.pt`` of a trained FedAvg run of the same model / code-length.

Each source has a floor: a release that reads no data, k distinct patterns drawn
uniformly over every set of 1..l words of the source's vocabulary
(:func:`experiments.tables.dpcode_table.random_patterns`, the main DPcode table's
floor), scored against the same pooled top-k; it publishes no supports, so no RE.
It is computed offline (no Flower run): the pooled data are what the runs'
evaluation rebuilds (:func:`strategies.dpcode.server.pooled_truth`).

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

from experiments.lib.overrides import resolved_settings
from experiments.lib.runner import exit_if_failed, load_rows, run_sweep, write_tables
from experiments.lib.tables import MISSING, pm, table_head, table_row
from experiments.simulate import simulate
from experiments.tables.dpcode_table import random_patterns
from privacy.dpcode import f_score
from privacy.noise import NoiseSource
from strategies.dpcode.server import codes_model_state, pooled_truth

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = 10
K = 20
#: the variant of a floor row: a release that reads no data
FLOOR = "random patterns (floor)"


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
        for seed in seeds:
            jobs.append({"source": source, "variant": FLOOR, "eps": 0.0, "seed": seed})
    return jobs


def _name(job: dict[str, Any]) -> str:
    if job["variant"] == FLOOR:
        return f"{job['source']}-floor-s{job['seed']}"
    return f"{job['source']}-{job['variant']}-eps{job['eps']:g}-s{job['seed']}"


def _overrides(job: dict[str, Any], codes_model: str) -> dict[str, Any]:
    overrides: dict[str, Any] = {
        "strategy": "dpcode",
        "seed": job["seed"],
        "privacy.noise": "seeded",
        "dpcode.k": K,
        "dpcode.source": job["source"],
    }
    if job["variant"] != FLOOR:
        overrides |= {"dpcode.epsilon": job["eps"], "dpcode.variant": job["variant"]}
    if job["source"] == "codes":
        overrides |= {"dpcode.codes-model": codes_model, "dpcode.chunk-bits": 4}
    return overrides


def _floor(job: dict[str, Any], codes_model: str) -> dict[str, Any]:
    """Return the floor row: k random patterns of the vocabulary, no data read."""
    settings = resolved_settings(_overrides(job, codes_model))
    truth, tx, _ = pooled_truth(settings, CLIENTS, codes_model_state(settings))
    rng = NoiseSource.seeded(
        "dpcode-federated", job["source"], "floor", job["seed"]
    ).numpy_generator()
    n_words = tx.matrix.shape[1]
    patterns = random_patterns(n_words, K, settings.dpcode.max_length, rng)
    return {
        "name": _name(job),
        **job,
        "f_score": f_score(truth, patterns),
        "relative_error": None,  # no supports published
        "vocabulary": n_words,
        "epsilon_per_frame": 0.0,
    }


def _run(job: dict[str, Any], codes_model: str) -> dict[str, Any]:
    if job["variant"] == FLOOR:
        return _floor(job, codes_model)
    overrides = _overrides(job, codes_model)
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
        f"Floor: {K} distinct patterns of 1..l words drawn uniformly from the "
        "source's vocabulary, reading no data (no supports, so no RE). "
        "Command: `python -m experiments.dpcode federated`.",
        "",
        *table_head(
            "source", "variant", "eps per frame", "seeds", "F-score", "median RE"
        ),
    ]
    summary: dict[str, Any] = {}
    for (source, variant, eps), rs in sorted(groups.items()):
        f = np.array([r["f_score"] for r in rs])
        floor = variant == FLOOR
        re = None if floor else np.array([r["relative_error"] for r in rs], float)
        lines.append(
            table_row(
                source,
                variant,
                MISSING if floor else f"{eps:g}",
                len(rs),
                pm(f.mean(), f.std()),  # population std (numpy's default)
                MISSING if re is None else pm(re.mean(), re.std()),
            )
        )
        key = f"{source}/floor" if floor else f"{source}/{variant}/eps{eps:g}"
        summary[key] = {
            "f_score_mean": float(f.mean()),
            "f_score_std": float(f.std()),
            **(
                {}
                if re is None
                else {"re_mean": float(re.mean()), "re_std": float(re.std())}
            ),
            "seeds": len(rs),
        }
    return "\n".join(lines), summary


def describe(row: dict[str, Any]) -> str:
    """Return one progress line's result: F-score, and RE where supports exist."""
    re = row["relative_error"]
    return f"F {row['f_score']:.3f}" + ("" if re is None else f" RE {re:.2f}")


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
        describe=describe,
    )
    text, summary = _table(load_rows(rows_path))
    print(write_tables(args.out, summary, text))
    exit_if_failed(failed)

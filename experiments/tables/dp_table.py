"""DP-SGD: mAP against epsilon for FedAvg (CSQ loss) and FedHAP (paper-less table).

``python -m experiments.project dp-sgd --seeds 0,1,2 --jobs 2`` trains, on digits
with 10 IID clients, 32 bits and the ``mlp`` model (fast per-sample gradients),
FedAvg with the per-sample CSQ loss and FedHAP under DP-SGD (``fedhap-3``,
hash-centre initial
prototypes, prototypes uploaded with Random Flipping at ``--proto-eps`` per bit),
for each noise multiplier in ``--noise`` and without DP. Each row reports the final
mAP@ALL and, from the run's privacy ledger, the largest per-client composed epsilon
per record (DP-SGD, basic composition over rounds, delta summed) and per code
(flipped prototypes). Results: ``<out>/summary.json``, ``<out>/table.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from experiments.lib.grids import csv, load_grids
from experiments.lib.runs import ROOT, run_federated
from experiments.lib.tables import mean_sd_cell, table_head, table_row

COMMON = {"model": "mlp", "code-length": 32, "learning-rate": 0.005}
METHODS = {
    "FedAvg (CSQ)": {"strategy": "fedavg", "loss": "csq"},
    "FedHAP (DP form)": {
        "strategy": "fedhap",
        "fedhap.variant": "fedhap-3",
        "fedhap.initial-prototypes": "centers",
    },
}


def config(method: str, noise: float | None, args: argparse.Namespace) -> dict:
    """Run config of one cell; ``noise=None`` is the non-private reference."""
    cfg = {
        **COMMON,
        **METHODS[method],
        "rounds": args.rounds,
        "eval-every": args.rounds,
    }
    if noise is not None:
        cfg |= {"dp-sgd.enabled": True, "dp-sgd.noise-multiplier": noise}
        if cfg["strategy"] == "fedhap":
            cfg["privacy.prototype-flip-epsilon"] = args.proto_eps
    return cfg


def run_one(
    method: str, noise: float | None, seed: int, args: argparse.Namespace
) -> dict:
    """One simulation; its row."""
    tag = "nodp" if noise is None else f"sigma{noise:g}"
    name = f"{METHODS[method]['strategy']}-{tag}-s{seed}"
    summary = run_federated(
        {**config(method, noise, args), "seed": seed},
        args.clients,
        args.out / "runs" / name,
    )
    priv = summary.get("privacy", {})
    return {
        "method": method,
        "noise": noise,
        "seed": seed,
        "map_all": summary["final"]["map_all"],
        "eps_per_record": priv.get("per record", {}).get("max_client_epsilon"),
        "delta_per_record": priv.get("per record", {}).get("max_client_delta"),
        "eps_per_code": priv.get("per code", {}).get("max_client_epsilon"),
    }


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: method x noise, mAP and composed epsilons."""
    lines = table_head(
        "method",
        "sigma",
        "mAP@ALL %",
        "eps per record (DP-SGD, all rounds)",
        "delta",
        "eps per code (flipped prototypes)",
    )
    keys = sorted(
        {(r["method"], r["noise"]) for r in rows},
        key=lambda k: (k[0], float("-inf") if k[1] is None else -k[1]),
    )
    for method, noise in keys:
        rs = [r for r in rows if (r["method"], r["noise"]) == (method, noise)]
        maps = mean_sd_cell([r["map_all"] for r in rs], scale=100)

        def mean(key: str, rs: list = rs) -> str:
            vals = [r[key] for r in rs if r[key] is not None]
            return f"{statistics.fmean(vals):.3g}" if vals else "-"

        lines.append(
            table_row(
                method,
                "no DP" if noise is None else noise,
                f"{maps} (n={len(rs)})",
                mean("eps_per_record"),
                mean("delta_per_record"),
                mean("eps_per_code"),
            )
        )
    return "\n".join(lines)


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    grids = load_grids("project", "dp-sgd", ("seeds", "noise"))
    parser.add_argument("--seeds", default=csv(grids["seeds"]))
    parser.add_argument("--noise", default=csv(grids["noise"]))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--proto-eps", type=float, default=4.0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument(
        "--out", type=Path, default=ROOT / "docs" / "results" / "dp_sgd"
    )
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    noises: list[float | None] = [None] + [float(x) for x in args.noise.split(",")]
    cells = [(m, n, s) for s in seeds for m in METHODS for n in noises]
    rows: list[dict[str, Any]] = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_one, *c, args) for c in cells]
        for fut in as_completed(futures):
            rows.append(fut.result())
            print(json.dumps(rows[-1]), flush=True)
            _write(rows, args)  # after every run: an interrupted sweep keeps its rows
    print(_write(rows, args))


def _write(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    text = table(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(
        json.dumps(
            {
                "setting": {**COMMON, "clients": args.clients, "rounds": args.rounds},
                "prototype_flip_epsilon_per_bit": args.proto_eps,
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    (args.out / "table.md").write_text(text + "\n")
    return text

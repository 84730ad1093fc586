"""DP-SGD: mAP against epsilon for FedAvg (CSQ loss) and FedHAP (paper-less table).

``python -m experiments.project dp-sgd --seeds 0,1,2 --jobs 2`` trains, on digits
with 10 IID clients, 32 bits and the ``mlp`` model (fast per-sample gradients),
FedAvg with the per-sample CSQ loss and FedHAP under DP-SGD (``fedhap-3``,
hash-centre initial
prototypes, prototypes uploaded with Random Flipping at ``--proto-eps`` per bit),
for each noise multiplier in ``--noise`` and without DP. Each row reports the final
mAP@ALL and, from the run's privacy ledger, the largest per-client composed epsilon
per record (DP-SGD, basic composition over rounds, delta summed) and per code
(flipped prototypes). The untrained floor of a method and seed is the mAP of the model
its runs start from (the server's round-0 evaluation of its non-private run);
``--floor-only`` measures just the floors (one 1-round run per method and seed) and adds
them to an existing ``summary.json``. Results: ``<out>/summary.json``,
``<out>/table.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from experiments.lib.grids import POSITIVE, SEEDS, csv, flag_list, load_grids
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
        "floor_map_all": summary.get("initial_map_all"),
    }


def floor_one(method: str, seed: int, args: argparse.Namespace) -> dict:
    """Measure the untrained floor of one method and seed.

    A 1-round non-private run's round-0 evaluation: the model every run of that
    method and seed starts from.
    """
    cfg = {**config(method, None, args), "rounds": 1, "eval-every": 1, "seed": seed}
    name = f"{METHODS[method]['strategy']}-floor-s{seed}"
    summary = run_federated(cfg, args.clients, args.out / "runs" / name)
    return {"method": method, "seed": seed, "map_all": summary["initial_map_all"]}


def floors_from_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Floors recorded by the non-private runs themselves (``floor_map_all``)."""
    return [
        {"method": r["method"], "seed": r["seed"], "map_all": r["floor_map_all"]}
        for r in rows
        if r["noise"] is None and r.get("floor_map_all") is not None
    ]


def table(
    rows: list[dict[str, Any]], floors: list[dict[str, Any]] | None = None
) -> str:
    """Markdown: method x noise, mAP and composed epsilons.

    Under each method's rows, its untrained floor (``floors``: method, seed,
    map_all), where measured.
    """
    lines = table_head(
        "method",
        "sigma",
        "mAP@ALL %",
        "eps per record (DP-SGD, all rounds)",
        "delta",
        "eps per code (flipped prototypes)",
    )
    for method in sorted({r["method"] for r in rows}):
        noises = sorted(
            {r["noise"] for r in rows if r["method"] == method},
            key=lambda n: float("-inf") if n is None else -n,
        )
        for noise in noises:
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
        fl = [f["map_all"] for f in floors or [] if f["method"] == method]
        if fl:
            cell = mean_sd_cell(fl, scale=100)
            lines.append(
                table_row(
                    method, "untrained (floor)", f"{cell} (n={len(fl)})", "-", "-", "-"
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
        "--floor-only",
        action="store_true",
        help="only the untrained floors, added to <out>/summary.json's rows",
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "docs" / "results" / "dp_sgd"
    )
    args = parser.parse_args()
    seeds = flag_list(parser, "--seeds", args.seeds, SEEDS)
    if args.floor_only:
        _floor_only(seeds, args)
        return
    noises: list[float | None] = [None]
    noises += flag_list(parser, "--noise", args.noise, POSITIVE)
    cells = [(m, n, s) for s in seeds for m in METHODS for n in noises]
    rows: list[dict[str, Any]] = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_one, *c, args) for c in cells]
        for fut in as_completed(futures):
            rows.append(fut.result())
            print(json.dumps(rows[-1]), flush=True)
            _write(rows, args)  # after every run: an interrupted sweep keeps its rows
    print(_write(rows, args))


def _floor_only(seeds: list[int], args: argparse.Namespace) -> None:
    path = args.out / "summary.json"
    if not path.is_file():
        raise SystemExit(f"--floor-only: {path} does not exist; run the table first")
    rows = json.loads(path.read_text())["rows"]
    floors = []
    for method in METHODS:
        for seed in seeds:
            floors.append(floor_one(method, seed, args))
            print(json.dumps(floors[-1]), flush=True)
    print(_write(rows, args, floors))


def _write(
    rows: list[dict[str, Any]],
    args: argparse.Namespace,
    floors: list[dict[str, Any]] | None = None,
) -> str:
    floors = floors if floors is not None else floors_from_rows(rows)
    text = table(rows, floors)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(
        json.dumps(
            {
                "setting": {**COMMON, "clients": args.clients, "rounds": args.rounds},
                "prototype_flip_epsilon_per_bit": args.proto_eps,
                "rows": rows,
                "floors": floors,
            },
            indent=2,
        )
        + "\n"
    )
    (args.out / "table.md").write_text(text + "\n")
    return text

"""DP-SGD: mAP against epsilon for FedAvg (CSQ loss) and FedHAP (paper-less table).

``python -m experiments.project dp-sgd --data-path data/digits-fixed.npz --seeds
0,1,2 --out docs/results/dp-sgd-validation`` trains, on digits with a fixed query
split (``python -m hashdata.digits_file``), 10 IID clients, 32 bits and the ``mlp``
model (fast per-sample gradients), FedAvg with the per-sample CSQ loss and FedHAP
under DP-SGD (``fedhap-3``, hash-centre initial prototypes, prototypes uploaded with
Random Flipping at ``--proto-eps`` per bit), for each noise multiplier in ``--noise``
and without DP, beside the **centralized ceiling**: the same network trained with
CSQ's loss on the union of the training rows for the same epochs, without DP.

**Tuning, on a validation split** (:mod:`experiments.lib.tuning`, as every tuned
table): each cell -- a method at one noise multiplier, and the ceiling -- runs at
each learning rate of ``--lr-grid`` with seed ``--tune-seed`` on a validation split
drawn from the file's database rows (``--val-fraction``, seeded by ``--val-seed``);
the file's queries are in no tuning run. The best validation mAP@ALL is the cell's
rate; a choice on a grid edge extends that cell's grid (``--max-extensions``). The
table then runs every cell at its rate for each seed. Local epochs are not tuned
(3, the run config's).

Without ``--data-path`` the runs use the built-in digits, whose queries are drawn
per seed, so no validation split keeps clear of them: every cell then runs untuned
at lr 5e-3 and the protocol says so.

Each row reports the final mAP@ALL and, from the run's privacy ledger, the largest
per-client composed epsilon per record (DP-SGD, basic composition over rounds,
delta summed) and per code (flipped prototypes). The untrained floor of a method and
seed is the mAP of the model its runs start from (the round-0 evaluation of its
non-private run). Rows go to ``<out>/rows.jsonl`` (``kind`` "tune" or "table";
``--resume`` skips those there); ``<out>/summary.json`` and ``<out>/table.md`` hold
the table, the split's record, the grids and the chosen rates. ``--floor-only``
measures just the floors of an older table (one 1-round run per method and seed)
and adds them to its ``summary.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from experiments.lib.grids import POSITIVE, SEEDS, csv, flag_list, load_grids
from experiments.lib.runner import (
    check_resume_setup,
    exit_if_failed,
    load_rows,
    run_sweep,
    write_tables,
)
from experiments.lib.runs import ROOT, run_centralized, run_federated, safe_name
from experiments.lib.tables import mean_sd_cell, table_head, table_row
from experiments.lib.tuning import (
    VALIDATION_FRACTION,
    Grid,
    choice_on_edge,
    run_tuning,
    tuned_setting,
    tuning_flags_error,
    write_validation_file,
)

COMMON = {"model": "mlp", "code-length": 32, "learning-rate": 0.005}
#: The rate of every cell of an untuned table (no ``--data-path``).
UNTUNED_LR = COMMON["learning-rate"]
METHODS = {
    "FedAvg (CSQ)": {"strategy": "fedavg", "loss": "csq"},
    "FedHAP (DP form)": {
        "strategy": "fedhap",
        "fedhap.variant": "fedhap-3",
        "fedhap.initial-prototypes": "centers",
    },
}
#: The ceiling: the same network trained centrally with CSQ's loss, without DP.
CEILING = "centralized (CSQ)"

Job = tuple[Any, ...]


def noise_label(noise: float | None) -> str:
    """Return how a noise multiplier is named (``None``: the non-private run)."""
    return "no DP" if noise is None else f"sigma {noise:g}"


def cell_name(method: str, noise: float | None) -> str:
    """Return the name of one tuned cell: a method at one noise multiplier."""
    return f"{method}, {noise_label(noise)}"


def config(method: str, noise: float | None, args: argparse.Namespace) -> dict:
    """Run config of one cell; ``noise=None`` is the non-private reference."""
    cfg = {**COMMON, "rounds": args.rounds, "eval-every": args.rounds}
    if method == CEILING:
        return {**cfg, "loss": "csq"}
    cfg |= METHODS[method]
    if noise is not None:
        cfg |= {"dp-sgd.enabled": True, "dp-sgd.noise-multiplier": noise}
        if cfg["strategy"] == "fedhap":
            cfg["privacy.prototype-flip-epsilon"] = args.proto_eps
    return cfg


def data_config(path: Path | None) -> dict[str, Any]:
    """Config keys of the data: the fixed-split file, or the built-in digits."""
    if path is None:
        return {}
    return {"dataset": "npz", "data-path": str(path.resolve())}


def run_cell(
    method: str, noise: float | None, cfg: dict[str, Any], run_dir: Path, clients: int
) -> dict[str, Any]:
    """Run one cell's config (a simulation, or the centralized ceiling).

    Returns the row's metrics: mAP@ALL, the ledger's epsilons, the floor.
    """
    if method == CEILING:
        run_dir.mkdir(parents=True, exist_ok=True)
        out = run_centralized(cfg, run_dir / "centralized.json")
        return {"map_all": out["final"]["map_all"]}
    summary = run_federated(cfg, clients, run_dir)
    priv = summary.get("privacy", {})
    return {
        "map_all": summary["final"]["map_all"],
        "eps_per_record": priv.get("per record", {}).get("max_client_epsilon"),
        "delta_per_record": priv.get("per record", {}).get("max_client_delta"),
        "eps_per_code": priv.get("per code", {}).get("max_client_epsilon"),
        "floor_map_all": summary.get("initial_map_all") if noise is None else None,
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
    map_all), where measured. A row's learning rate is shown where the rows
    record one.
    """
    with_lr = any("learning_rate" in r for r in rows)
    # older ledgers charged the flipped prototypes per code, newer ones per record
    per_code = any(r.get("eps_per_code") is not None for r in rows)
    lines = table_head(
        "method",
        "sigma",
        *(["lr"] if with_lr else []),
        "mAP@ALL %",
        "eps per record (all rounds)",
        "delta",
        *(["eps per code (flipped prototypes)"] if per_code else []),
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
                vals = [r[key] for r in rs if r.get(key) is not None]
                return f"{statistics.fmean(vals):.3g}" if vals else "-"

            lrs = sorted(
                {f"{r['learning_rate']:g}" for r in rs if "learning_rate" in r}
            )
            lines.append(
                table_row(
                    method,
                    "no DP" if noise is None else noise,
                    *([", ".join(lrs) or "-"] if with_lr else []),
                    f"{maps} (n={len(rs)})",
                    mean("eps_per_record"),
                    mean("delta_per_record"),
                    *([mean("eps_per_code")] if per_code else []),
                )
            )
        fl = [f["map_all"] for f in floors or [] if f["method"] == method]
        if fl:
            cell = mean_sd_cell(fl, scale=100)
            lines.append(
                table_row(
                    method,
                    "untrained (floor)",
                    *(["-"] if with_lr else []),
                    f"{cell} (n={len(fl)})",
                    "-",
                    "-",
                    *(["-"] if per_code else []),
                )
            )
    return "\n".join(lines)


def protocol(args: argparse.Namespace) -> str:
    """Return the paragraph above the table: data, training, tuning, floor, ceiling."""
    if args.validation is not None:
        split = args.validation
        tuning = (
            f"each cell's learning rate tuned over {csv(args.lr_grid)} (a choice on "
            f"an edge extends the grid, at most {args.max_extensions} times) on a "
            f"validation split of {split.source}'s database rows ({split.queries} "
            f"validation queries against {split.database} rows, seed {split.seed}; "
            f"the file's {split.left_out} queries in no tuning run), tune seed "
            f"{args.tune_seed}"
        )
        data = f"{args.data_path.name} (its fixed query split)"
    else:
        tuning = f"untuned: every cell at lr {UNTUNED_LR:g} (no fixed query split)"
        data = "the built-in digits (queries drawn per seed)"
    from experiments.lib.overrides import resolved_settings

    run = resolved_settings(config(next(iter(METHODS)), 1.0, args))
    return (
        f"Protocol: {data}, {args.clients} IID clients, {run.code_length} bits, "
        f"`{run.model}`, {args.rounds} rounds of {run.local_epochs} local epochs, "
        f"batch {run.batch_size}, DP-SGD clip {run.dp_sgd.max_grad_norm:g} and delta "
        f"{run.dp_sgd.delta:g} per round; {tuning}. Epsilon per record: the largest "
        "client total of the run's privacy ledger, basic composition over rounds "
        "(epsilons and deltas summed) of DP-SGD's per-round RDP epsilon and, for "
        f"FedHAP, of its prototypes flipped at {args.proto_eps:g} per bit "
        f"({args.proto_eps * run.code_length:g} per record a round). Floor: the "
        "untrained network (each non-private run's round 0). Ceiling: "
        f"'{CEILING}', the same network trained with CSQ's loss on the union of "
        f"the training rows for {args.rounds} x {run.local_epochs} epochs, without DP"
        + (", tuned the same way." if args.validation is not None else ".")
    )


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    grids = load_grids("project", "dp-sgd", ("seeds", "noise", "lr-grid"))
    parser.add_argument("--seeds", default=csv(grids["seeds"]))
    parser.add_argument("--noise", default=csv(grids["noise"]))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--proto-eps", type=float, default=4.0)
    parser.add_argument(
        "--data-path",
        type=Path,
        default=None,
        help="an .npz with a fixed query split (python -m hashdata.digits_file); "
        "without it the built-in digits run untuned",
    )
    parser.add_argument("--lr-grid", default=csv(grids["lr-grid"]))
    parser.add_argument("--tune-seed", type=int, default=99)
    parser.add_argument("--val-fraction", type=float, default=VALIDATION_FRACTION)
    parser.add_argument("--val-seed", type=int, default=None)
    parser.add_argument("--max-extensions", type=int, default=1)
    parser.add_argument("--resume", action="store_true")
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
    args.lr_grid = flag_list(parser, "--lr-grid", args.lr_grid, POSITIVE)
    error = tuning_flags_error(
        tune_seed=args.tune_seed,
        # without a data file nothing is tuned, so any seed may be a table seed
        seeds=seeds if args.data_path is not None else (),
        val_fraction=args.val_fraction,
        max_extensions=args.max_extensions,
    )
    if error is not None:
        parser.error(error)
    if args.resume:
        try:
            check_resume_setup(args.out, setup_of(args))
        except ValueError as exc:
            parser.error(str(exc))
    args.out.mkdir(parents=True, exist_ok=True)
    args.validation = None
    if args.data_path is not None:
        try:
            args.validation = write_validation_file(
                args.data_path,
                args.out / "runs" / "validation",
                fraction=args.val_fraction,
                seed=args.tune_seed if args.val_seed is None else args.val_seed,
            )
        except (ValueError, OSError) as exc:
            parser.error(str(exc))
    cells = {cell_name(m, n): (m, n) for m in METHODS for n in noises}
    cells[cell_name(CEILING, None)] = (CEILING, None)
    tuned: dict[str, Grid] = (
        {c: Grid(list(args.lr_grid)) for c in cells} if args.validation else {}
    )
    rows_path = args.out / "rows.jsonl"
    known: list[dict[str, Any]] = load_rows(rows_path) if args.resume else []

    def rate(cell: str) -> float:
        if cell not in tuned:
            return UNTUNED_LR
        setting = tuned_setting(known, cell, tuned[cell])
        if setting is None:
            raise RuntimeError(f"{cell}: tuning runs missing for its grid")
        return setting[0]

    def job_name(job: Job) -> str:
        # a table run is named with its cell's current rate: when a resumed
        # sweep's grid grows and the choice moves, the run is new
        if job[0] == "tune":
            return f"tune {job[1]} lr={job[2]:g}"
        return f"{job[1]} s{job[2]} lr={rate(job[1]):g}"

    def row_name(row: dict[str, Any]) -> str:
        lr = row["learning_rate"]
        if row["kind"] == "tune":
            return f"tune {row['method']} lr={lr:g}"
        return f"{cell_name(row['method'], row['noise'])} s{row['seed']} lr={lr:g}"

    def run(job: Job) -> dict[str, Any]:
        t0 = time.perf_counter()
        if job[0] == "tune":
            _, cell, lr, _epochs = job
            method, noise = cells[cell]
            assert args.validation is not None  # tuning runs only with a split
            seed, kind = args.tune_seed, "tune"
            data = {"dataset": "npz", "data-path": args.validation.path}
        else:
            _, cell, seed = job
            method, noise = cells[cell]
            lr, data, kind = rate(cell), data_config(args.data_path), "table"
        cfg = {**config(method, noise, args), **data, "seed": seed, "learning-rate": lr}
        run_dir = args.out / "runs" / safe_name(job_name(job))
        metrics = run_cell(method, noise, cfg, run_dir, args.clients)
        row = {
            "kind": kind,
            "name": job_name(job),
            "method": cell if kind == "tune" else method,
            "noise": noise,
            "seed": seed,
            "learning_rate": lr,
            **({"scored_on": "validation"} if kind == "tune" else {}),
            **metrics,
            "seconds": time.perf_counter() - t0,
        }
        known.append(row)
        return row

    def write(rows: list[dict[str, Any]]) -> None:
        _write(rows, args, tuned)

    sweep = {
        "run": run,
        "rows_path": rows_path,
        "name": job_name,
        "row_name": row_name,
        "describe": lambda r: f"mAP@ALL {r['map_all']:.4f} ({r['seconds']:.0f} s)",
        "after_row": write,
    }
    tune_jobs = [("tune", c, lr, e) for c, g in tuned.items() for lr, e in g.settings()]
    rows, failed = run_tuning(
        tune_jobs,
        known,
        tuned,
        max_extensions=args.max_extensions,
        resume=args.resume,
        **sweep,
    )
    table_jobs = [("table", c, s) for s in seeds for c in cells]
    rows, more_failed = run_sweep(table_jobs, resume=True, **sweep)
    failed += more_failed
    write(rows)
    print((args.out / "table.md").read_text())
    exit_if_failed(failed)


def setup_of(args: argparse.Namespace) -> dict[str, Any]:
    """Return the settings every row of a table shares (``summary.json["setup"]``)."""
    return {
        "data": args.data_path.name if args.data_path else "digits (built-in)",
        "clients": args.clients,
        "rounds": args.rounds,
        "prototype_flip_epsilon_per_bit": args.proto_eps,
        **COMMON,
        **(
            {
                "tuning": f"validation split {args.val_fraction:g}, seed "
                f"{args.tune_seed if args.val_seed is None else args.val_seed}"
            }
            if args.data_path
            else {"untuned": True}
        ),
    }


def _floor_only(seeds: list[int], args: argparse.Namespace) -> None:
    path = args.out / "summary.json"
    if not path.is_file():
        raise SystemExit(f"--floor-only: {path} does not exist; run the table first")
    summary = json.loads(path.read_text())
    floors = []
    for method in METHODS:
        for seed in seeds:
            floors.append(floor_one(method, seed, args))
            print(json.dumps(floors[-1]), flush=True)
    summary["floors"] = floors
    text = table(summary["rows"], floors)
    path.write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "table.md").write_text(text + "\n")
    print(text)


def _write(
    rows: list[dict[str, Any]],
    args: argparse.Namespace,
    grids: dict[str, Grid],
) -> None:
    chosen = {c: tuned_setting(rows, c, g) for c, g in grids.items()}
    # rows run at a rate that is no longer their cell's choice (its grid grew on a
    # resumed sweep) stay in rows.jsonl, out of the table
    table_rows = [
        r
        for r in rows
        if r.get("kind", "table") == "table"
        and (
            chosen.get(cell_name(r["method"], r["noise"])) is None
            or chosen[cell_name(r["method"], r["noise"])][0] == r["learning_rate"]
        )
    ]
    floors = floors_from_rows(table_rows)
    summary = {
        "setup": setup_of(args),
        "setting": {**COMMON, "clients": args.clients, "rounds": args.rounds},
        "prototype_flip_epsilon_per_bit": args.proto_eps,
        "tuning_split": args.validation.to_dict() if args.validation else None,
        "tuning_grids": {
            c: {
                "learning_rates": g.lrs,
                "added": [v for axis, v in g.extended if axis == "lr"],
                "tune_seed": args.tune_seed,
                "chosen_learning_rate": None if chosen[c] is None else chosen[c][0],
            }
            for c, g in grids.items()
        },
        # every run of the folder, resumed invocations included
        "run_seconds_summed": round(sum(r["seconds"] for r in rows), 1),
        "rows": rows,
        "floors": floors,
    }
    text = protocol(args) + "\n\n" + table(table_rows, floors)
    text += tuning_table(rows, grids, chosen)
    write_tables(args.out, summary, text)


def tuning_table(
    rows: list[dict[str, Any]],
    grids: dict[str, Grid],
    chosen: dict[str, tuple[float, int] | None],
) -> str:
    """Markdown: each cell's validation mAP@ALL per learning rate, the choice marked."""
    if not grids:
        return ""
    lrs = sorted({lr for g in grids.values() for lr in g.lrs})
    lines = [
        "",
        "",
        "**Tuning** (validation mAP@ALL %, tune seed; **bold**: the cell's choice; "
        "'edge': still on its grid's edge after the extensions)",
        "",
        *table_head("cell", *(f"lr {lr:g}" for lr in lrs)),
    ]
    for cell, grid in grids.items():
        best = chosen[cell]
        score = {
            r["learning_rate"]: r["map_all"]
            for r in rows
            if r.get("kind") == "tune" and r["method"] == cell
        }
        cells = []
        for lr in lrs:
            if lr not in score:
                cells.append("-")
                continue
            text = f"{100 * score[lr]:.2f}"
            if best is not None and best[0] == lr:
                edge = choice_on_edge(grid, lr, best[1])
                text = f"**{text}**" + (" edge" if edge else "")
            cells.append(text)
        lines.append(table_row(cell, *cells))
    return "\n".join(lines)

"""FedHAP against tuned FedAvg baselines on a real dataset: floor, federated, ceiling.

``python -m experiments.fedhap real-data --data-path
../shared/data/mirflickr25k_tags.npz --seeds 0,1,2 --out
docs/results/fedhap-mirflickr`` runs, in two stages:

1. **Tuning, on a validation split.** Every method -- FedHAP, each FedAvg
   baseline (DPSH, CSQ, HashNet, DCH, GreedyHash: the per-batch or per-sample
   losses of FedHAP's Table 2 and HashNet; the FedProx baselines of its Table 2
   when ``--methods`` names them) and the centralized ceiling -- is run at
   each learning rate of ``--lr-grid`` (FedHAP: ``--fedhap-lr-grid``, the ceiling:
   ``--ceiling-lr-grid``, by default the same) times each local-epoch count of
   ``--epochs-grid`` (the paper's 5 included by default), with seed
   ``--tune-seed`` (not one of the table's seeds), on a **validation split**
   (:mod:`experiments.lib.tuning`): ``--val-fraction`` of the file's database rows,
   stratified and seeded (``--val-seed``, default the tune seed), are the
   validation queries, the other database rows the validation database, and the
   file's own queries are in no tuning run. The federated methods are tuned with
   IID clients (``--tune-partitioning iid``, the default), or under each
   partitioning the table runs (``--tune-partitioning table``: one choice per
   method and partitioning, so a non-IID row runs at the setting that won with
   non-IID clients); the ceiling has no partitioning. The setting with the best
   validation mAP@ALL is kept for the table; one on the edge of its grid extends
   that grid (a learning rate by the edge's ratio, epochs by the edge's step, at
   most ``--max-extensions`` times per axis) before the choice. The split's record,
   the grids, their extensions and the chosen values go to ``summary.json``.
2. **The table**, after all tuning runs, partitioning by partitioning, seed by seed
   (a table cut short holds whole partitionings). For every seed and partitioning
   (``iid``; ``non-iid``: FedHAP's label shards, ``--classes-per-client`` classes per
   client, a multi-label sample counted under its lowest label), each baseline with
   its tuned learning rate and FedHAP through Flower's simulation (``--clients``
   clients, ``--bits``, ``--rounds``, the pyproject defaults otherwise), and the
   centralized training of the same network with DPSH's loss on the union of the
   clients' training rows for ``--rounds`` x its own local epochs, tuned like the
   others' (``experiments/centralized.py``; partitioning does not apply to it).
   ``--train-size N`` trains everything on a seeded random N of the database rows
   (``train-size``; FedHAP's MIRFlickr protocol is 10,000), tuning included.

``--untuned`` skips stage 1: every method, the ceiling included, runs at the
default learning rate (5e-4) and local epochs, and the protocol says "untuned
(defaults)". It is the choice for a file without a fixed split, where no
validation split keeps clear of every seed's queries.

The untrained floor is each federated run's round-0 mAP. The query set is the
file's fixed ``split`` when it has one (docs/data.md). Rows go to
``<out>/rows.jsonl`` (``kind`` "tune" or "table"; ``--resume`` skips the rows there;
a table row whose learning rate or local epochs are no longer its method's tuned
ones, after a grid grew, becomes ``kind`` "superseded" and is run again);
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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.lib.grids import (
    SEEDS,
    BadItem,
    csv,
    flag_list,
    load_grids,
    parse_csv,
    split_names,
)
from experiments.lib.runner import (
    check_resume_setup,
    exit_if_failed,
    load_rows,
    rewrite_rows,
    run_sweep,
    shown_in_table,
    write_tables,
)
from experiments.lib.runs import (
    ROOT,
    check_partitions,
    run_centralized,
    run_federated,
    safe_name,
)
from experiments.lib.tables import (
    MISSING,
    mean_sd_cell,
    seeds_run,
    table_head,
    table_row,
)
from experiments.lib.tuning import (
    DEFAULT_EPOCHS,
    VALIDATION_FRACTION,
    Grid,
    ValidationSplit,
    choice_on_edge,
    replay_extensions,
    row_epochs,
    run_tuning,
    tuned_setting,
    tuning_flags_error,
    tuning_rows,
    write_validation_file,
)
from experiments.tables.real_data_figures import plot_curves, report_curves
from experiments.tables.real_data_setup import (
    CENTRALIZED,
    DEFAULT_LR,
    DEFAULT_METHODS,
    FEDHAP_METHODS,
    METHODS,
    PARTITIONS,
    TUNED,
    base_config,
    partition_configs,
    setup_of,
)


def main() -> None:
    """CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    grids = load_grids("fedhap", "real-data", ("seeds", "lr-grid", "epochs-grid"))
    parser.add_argument("--data-path", type=Path, required=True)
    parser.add_argument("--seeds", default=csv(grids["seeds"]))
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
    parser.add_argument("--lr-grid", default=csv(grids["lr-grid"]))
    parser.add_argument(
        "--ceiling-lr-grid",
        default=None,
        help="learning rates tried for the centralized ceiling (default: --lr-grid)",
    )
    parser.add_argument(
        "--fedhap-lr-grid",
        default=None,
        help="learning rates tried for FedHAP and its discriminator options "
        "(default: --lr-grid; the paper's Adam rate is 5e-3)",
    )
    parser.add_argument(
        "--epochs-grid",
        default=csv(grids["epochs-grid"]),
        help="local epochs tried for every tuned method, the ceiling's epoch budget "
        f"included (default {csv(grids['epochs-grid'])}: ours and the paper's)",
    )
    parser.add_argument("--tune-seed", type=int, default=99)
    parser.add_argument(
        "--tune-partitioning",
        choices=TUNE_PARTITIONINGS,
        default="iid",
        help="iid: every federated method tuned with IID clients, whatever the "
        "table's partitioning (default); table: tuned under each partitioning of "
        "--partitions, one choice per method and partitioning",
    )
    parser.add_argument(
        "--val-fraction",
        type=float,
        default=VALIDATION_FRACTION,
        help="share of the file's database rows drawn as validation queries for "
        "tuning (the file's own queries are in no tuning run)",
    )
    parser.add_argument(
        "--val-seed",
        type=int,
        default=None,
        help="seed of the validation draw (default: --tune-seed)",
    )
    parser.add_argument(
        "--max-extensions",
        type=int,
        default=2,
        help="a chosen value on a grid edge extends that axis, at most this often",
    )
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
    if args.val_seed is None:
        args.val_seed = args.tune_seed
    if not args.data_path.is_file():
        parser.error(f"--data-path {args.data_path}: no such file")
    seeds = flag_list(parser, "--seeds", args.seeds, SEEDS)
    try:
        lr_grid = parse_lr_grid(args.lr_grid, "--lr-grid")
        ceiling_grid = parse_lr_grid(
            args.ceiling_lr_grid or args.lr_grid, "--ceiling-lr-grid"
        )
        fedhap_grid = parse_lr_grid(
            args.fedhap_lr_grid or args.lr_grid, "--fedhap-lr-grid"
        )
        epochs_grid = parse_epochs_grid(args.epochs_grid)
    except ValueError as exc:
        parser.error(str(exc))
    methods = split_names(args.methods)
    partitions = split_names(args.partitions)
    for m in methods:
        if m not in METHODS:
            parser.error(f"--methods: unknown {m!r}; accepted: {', '.join(METHODS)}")
    for p in partitions:
        if p not in PARTITIONS:
            parser.error(f"--partitions: unknown {p!r}; accepted: iid, non-iid")
    # the tuned cells (a method, or a method under one partitioning) and their
    # grids, FedHAP's included: cell -> (method, the partitioning it is tuned under)
    cells = tuning_cells(args.tune_partitioning, partitions)
    grids = {
        cell: Grid(
            list(
                fedhap_grid
                if m in FEDHAP_METHODS
                else ceiling_grid
                if m == CENTRALIZED
                else lr_grid
            ),
            list(epochs_grid),
        )
        for cell, (m, _) in cells.items()
    }
    if args.untuned:
        grids = {}  # best setting: DEFAULT_LR, DEFAULT_EPOCHS for every method
        fedhap_grid = None
    error = tuning_flags_error(
        tune_seed=args.tune_seed,
        seeds=seeds,
        val_fraction=args.val_fraction,
        max_extensions=args.max_extensions,
    )
    if error:
        parser.error(error)
    if args.resume:
        try:
            check_resume_setup(args.out, setup_of(args))
            check_fedhap_tuning(load_rows(args.out / "rows.jsonl"), fedhap_grid)
        except ValueError as exc:
            parser.error(str(exc))
    part_cfg = partition_configs(args.classes_per_client)
    base = base_config(args.data_path, args.bits, args.rounds, args.train_size)
    runs = [(p, s) for p in partitions for s in seeds] + [
        (p, args.tune_seed) for p in sorted({p for _, p in cells.values() if p})
    ]
    try:  # an impossible partitioning fails here, not in every run
        check_partitions(
            ({**base, "seed": s, **part_cfg[p]} for p, s in runs), args.clients
        )
    except ValueError as exc:
        parser.error(str(exc))
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    validation: ValidationSplit | None = None
    if grids:
        try:  # the tuning runs' data file: the validation split of --data-path
            validation = write_validation_file(
                args.data_path,
                args.runs / "validation",
                fraction=args.val_fraction,
                seed=args.val_seed,
            )
        except ValueError as exc:
            parser.error(f"{exc}; or pass --untuned")
    args.validation = validation

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

    # Two stages, one rows file: the tuning runs of the federated methods (IID, or
    # under each table partitioning) and of the ceiling (``kind`` "tune", seed
    # --tune-seed), then the table, partition-major, then seed-major, so a table cut
    # short has whole partitionings.
    rows_path = args.out / "rows.jsonl"
    if args.resume:
        _merge_legacy_tuning(args.out)
    known: list[dict[str, Any]] = load_rows(rows_path) if args.resume else []
    tune_jobs: list[tuple[Any, ...]] = [
        ("tune", cell, lr, e)
        for cell, grid in grids.items()
        if cells[cell][0] in methods
        for lr, e in grid.settings()
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

    def cell_of(method: str, part: str) -> str:
        return tuning_cell(method, part, args.tune_partitioning)

    def best_setting(method: str, part: str) -> tuple[float, int]:
        cell = cell_of(method, part)
        if cell not in grids:
            return DEFAULT_LR, DEFAULT_EPOCHS
        setting = tuned_setting(known, cell, grids[cell])
        if setting is None:
            raise RuntimeError(f"{cell}: tuning runs missing for its grid")
        return setting

    def job_name(job: tuple[Any, ...]) -> str:
        if job[0] == "tune":
            return f"tune {job[1]} lr={job[2]} E={job[3]}"
        return f"{job[3]} {job[2]} s{job[1]}"

    def run(job: tuple[Any, ...]) -> dict[str, Any]:
        row = tune(job) if job[0] == "tune" else table_run(job)
        known.append(row)
        return row

    def tune(job: tuple[Any, ...]) -> dict[str, Any]:
        _, cell, lr, epochs = job
        method, part = cells[cell]
        assert validation is not None  # tuning runs only with a validation split
        cfg = {
            **base,
            "data-path": validation.path,
            "seed": args.tune_seed,
            "learning-rate": lr,
            "local-epochs": epochs,
        }
        name = f"tune {cell} lr{lr} E{epochs} s{args.tune_seed}"
        if METHODS[method] is None:
            out, secs = centralized(cfg, name)
        else:
            cfg.update({**part_cfg[part], **METHODS[method]})  # type: ignore[dict-item]
            out, secs = federated(cfg, name)
        return {
            "kind": "tune",
            "name": job_name(job),
            "method": cell,
            **({} if cell == method else {"tuned_method": method}),
            "partitioning": part or "-",
            "learning_rate": lr,
            "local_epochs": epochs,
            "seed": args.tune_seed,
            "scored_on": "validation",
            "map_all": out["final"]["map_all"],
            "seconds": secs,
        }

    def table_run(job: tuple[Any, ...]) -> dict[str, Any]:
        _, seed, part, method = job
        lr, epochs = best_setting(method, part)
        cfg: dict[str, Any] = {
            **base,
            "seed": seed,
            "learning-rate": lr,
            "local-epochs": epochs,
        }
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
            "local_epochs": epochs,
            "map_all": out["final"]["map_all"],
            "map_at_k": out["final"]["map_at_k"],
            "floor_map_all": floor,
            "curves": report_curves(out["final"]),
            "protocol": out.get("protocol", ""),
            "seconds": secs,
        }

    def tables(rows: list[dict[str, Any]]) -> None:
        chosen = {c: tuned_setting(rows, c, grids[c]) for c in grids}
        chosen = {m: s for m, s in chosen.items() if s is not None}
        tuned = {m: s[0] for m, s in chosen.items()}
        table_rows = [r for r in rows if r.get("kind", "table") == "table"]
        shown = shown_in_table(METHODS, methods, table_rows, "method")
        args.grids = grids
        args.tuned_epochs = {m: s[1] for m, s in chosen.items()}
        _write(table_rows, tuning_rows(rows), tuned, args, shown, partitions, started)

    sweep = {
        "run": run,
        "rows_path": rows_path,
        "name": job_name,
        "describe": lambda r: f"mAP@ALL {r['map_all']:.4f} ({r['seconds']:.0f} s)",
        "after_row": tables,
    }
    # a choice on a grid's edge extends that axis (every value of the other axis),
    # for the methods named only; the others in a resumed folder keep the grids
    # their rows grew (for the table and the stale-row check) and grow no further
    named = {c: g for c, g in grids.items() if cells[c][0] in methods}
    if args.resume:
        others = {c: g for c, g in grids.items() if c not in named}
        replay_extensions(known, others, max_extensions=args.max_extensions)
    rows, failed = run_tuning(
        tune_jobs,
        known,
        named,
        max_extensions=args.max_extensions,
        resume=args.resume,
        **sweep,
    )
    # a table run whose learning rate is no longer its method's tuned one (the grid
    # grew on --resume) is superseded: kept in rows.jsonl, and run again
    stale = supersede_stale_rows(
        rows_path, grids, cell=lambda r: cell_of(r["method"], r["partitioning"])
    )
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


#: ``--tune-partitioning``: tune the federated methods with IID clients, or under
#: each partitioning the table runs.
TUNE_PARTITIONINGS = ("iid", "table")


def tuning_cell(method: str, part: str, tune_partitioning: str) -> str:
    """Return the tuned cell whose setting a row of ``method`` under ``part`` runs at.

    The cell is the method's name where one choice serves every partitioning (the
    ceiling, IID tuning, an IID row), else ``"<method>, <part>"``; a tuning row's
    ``method`` is its cell.
    """
    # a method no longer in METHODS (an old folder's row) is its own cell
    if tune_partitioning == "iid" or METHODS.get(method) is None or part == "iid":
        return method
    return f"{method}, {part}"


def tuning_cells(
    tune_partitioning: str, partitions: Sequence[str]
) -> dict[str, tuple[str, str | None]]:
    """Every tuned cell, in table order: cell -> (method, the partitioning tuned under).

    FedHAP's methods first, then the baselines and the ceiling (whose partitioning is
    ``None``); under ``--tune-partitioning table`` one cell per method and
    partitioning of ``partitions``, else one IID cell per method.
    """
    parts = list(partitions) if tune_partitioning == "table" else ["iid"]
    out: dict[str, tuple[str, str | None]] = {}
    for method in (*FEDHAP_METHODS, *TUNED):
        if METHODS[method] is None:
            out[method] = (method, None)
            continue
        for part in parts:
            out[tuning_cell(method, part, tune_partitioning)] = (method, part)
    return out


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
        {
            r["learning_rate"]
            for r in tuning_rows(rows)
            # a cell tuned under one partitioning names its method in tuned_method
            if r.get("tuned_method", r.get("method")) in FEDHAP_METHODS
        }
    )
    if tuned and fedhap_grid is None:
        raise ValueError(
            "--resume: this folder tuned FedHAP (rates "
            + ",".join(f"{lr:g}" for lr in tuned)
            + "); pass --fedhap-lr-grid again (e.g. --fedhap-lr-grid "
            + ",".join(f"{lr:g}" for lr in tuned)
            + ")"
        )


def parse_epochs_grid(text: str) -> list[int]:
    """Local-epoch counts of a comma-separated ``text``: integers >= 1.

    Raises
    ------
    ValueError
        Naming ``--epochs-grid``, the bad value and what is accepted.
    """
    try:
        return parse_csv(text, int, lambda epochs: epochs >= 1)
    except BadItem as bad:
        raise ValueError(
            f"--epochs-grid: {bad.item!r} in {text!r} is not a number of "
            "local epochs; accepted: comma-separated integers >= 1, e.g. 3,5"
        ) from None


def parse_lr_grid(text: str, flag: str) -> list[float]:
    """Learning rates of a comma-separated ``text``: positive finite numbers.

    Raises
    ------
    ValueError
        Naming ``flag``, the bad value and what is accepted.
    """
    try:
        return parse_csv(text, float, lambda lr: math.isfinite(lr) and lr > 0)
    except BadItem as bad:
        raise ValueError(
            f"{flag}: {bad.item!r} in {text!r} is not a learning rate; "
            "accepted: comma-separated positive numbers, e.g. 0.002,0.005"
        ) from None


def tuned_lr(
    rows: list[dict[str, Any]], method: str, lr_grid: Grid | Sequence[float]
) -> float | None:
    """``method``'s tuned learning rate over the grid (``None`` until all are run).

    :func:`tuned_setting`'s rate; a plain list of rates is tried at the default
    local epochs.
    """
    setting = tuned_setting(rows, method, lr_grid)
    return None if setting is None else setting[0]


def supersede_stale_rows(
    rows_path: Path,
    grids: Mapping[str, Grid | Sequence[float]],
    cell: Callable[[dict[str, Any]], str] = lambda row: row["method"],
) -> list[str]:
    """Mark the table rows run at a setting that is no longer tuned.

    A table row of a tuned cell (``cell(row)``, a key of ``grids``; by default the
    row's method) whose ``learning_rate`` or ``local_epochs`` differs from
    :func:`tuned_setting` (its tuning covers ``grids[cell]``) gets ``kind``
    "superseded" and its name prefixed
    ``superseded:`` and suffixed with its setting (rate and local epochs, so two
    superseded settings of one row keep distinct names), so a resumed sweep runs it
    again at the tuned setting; nothing is deleted. The file is rewritten atomically.

    Returns
    -------
    list of str
        The superseded rows' former names.
    """
    rows = load_rows(rows_path)
    stale = []
    for row in rows:
        if row.get("kind", "table") != "table" or cell(row) not in grids:
            continue
        setting = tuned_setting(rows, cell(row), grids[cell(row)])
        if setting is not None and (row["learning_rate"], row_epochs(row)) != setting:
            stale.append(row["name"])
            row["kind"] = "superseded"
            row["name"] = (
                f"superseded: {row['name']} "
                f"(lr {row['learning_rate']:g} x {row_epochs(row)} epochs)"
            )
    if stale:
        rewrite_rows(rows_path, rows)
    return stale


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
    validation = getattr(args, "validation", None)
    untuned = getattr(args, "untuned", False)
    under = (
        "under each partitioning of the table, one choice per partitioning"
        if getattr(args, "tune_partitioning", "iid") == "table"
        else "IID"
    )
    tuning = (
        f"untuned (defaults): every method and the ceiling at learning rate "
        f"{DEFAULT_LR}, {DEFAULT_EPOCHS} local epochs; "
        if untuned
        else "every method's learning rate and local epochs, FedHAP's and the "
        f"ceiling's included, tuned on seed {args.tune_seed} (federated methods "
        f"{under}) by validation mAP@ALL on a "
        + (validation.text() if validation is not None else "validation split")
        + "; "
    )
    head = (
        f"Protocol ({split}): "
        f"{args.clients} clients, {args.bits} bits, {args.rounds} rounds, "
        f"non-iid = {args.classes_per_client} label shards per client (a "
        f"multi-label sample under its lowest label); {tuning}"
        "centralized = the same network trained with DPSH's loss on the union of "
        "the clients' training rows for "
        + (
            f"{args.rounds} x {DEFAULT_EPOCHS} epochs, the federated runs' budget; "
            if untuned
            else f"{args.rounds} x its own local epochs (column local epochs); "
        )
        + "untrained floor = the federated runs' "
        "round-0 mAP; mean ± sample std over the seeds run (seeds "
        f"{seeds_run(rows)}; each row's count in column seeds)."
    )
    lines = [head, ""]
    grids: Mapping[str, Grid] = getattr(args, "grids", {})
    tuned_epochs: Mapping[str, int] = getattr(args, "tuned_epochs", {})
    summary: dict[str, Any] = {
        "setup": setup_of(args),
        "tuned_learning_rates": tuned,
        "tuned_local_epochs": dict(tuned_epochs),
        "tuning_split": validation.to_dict() if validation is not None else None,
        "tuning_grids": {
            m: {
                "learning_rates": sorted(g.lrs),
                "local_epochs": sorted(g.epochs),
                "extended": [list(x) for x in g.extended],
                "seed": args.tune_seed,
                "chosen": (
                    {"learning_rate": tuned[m], "local_epochs": tuned_epochs[m]}
                    if m in tuned and m in tuned_epochs
                    else None
                ),
                "chosen_on_edge": (
                    m in tuned
                    and m in tuned_epochs
                    and choice_on_edge(g, tuned[m], tuned_epochs[m])
                ),
            }
            for m, g in grids.items()
        },
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
            *table_head(
                "method",
                "lr",
                "local epochs",
                "mAP@ALL %",
                "mAP@100 %",
                "recall@1000 %",
                "untrained floor mAP@ALL %",
                "seeds",
                "wall s (mean)",
            ),
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
                table_row(
                    method,
                    f"{mine[0]['learning_rate']:g}",
                    row_epochs(mine[0]),
                    mean_sd_cell([r["map_all"] for r in mine], scale=100),
                    mean_sd_cell([r["map_at_k"] for r in mine], scale=100),
                    mean_sd_cell([v for v in rec if v is not None], scale=100),
                    mean_sd_cell(floors, scale=100),
                    len(mine),
                    f"{statistics.mean(r['seconds'] for r in mine):.0f}",
                )
            )
            summary["cells"][f"{method} | {part}"] = {
                "seeds": [r["seed"] for r in mine],
                "map_all": [r["map_all"] for r in mine],
                "map_at_k": [r["map_at_k"] for r in mine],
            }
        lines.append("")
    if tuned_rows:
        lines += [
            f"**Tuning** (seed {args.tune_seed}, federated methods {under}, validation "
            "mAP@ALL %, never the reported queries; the chosen setting in bold; "
            "a method whose choice sits on an edge of its grid after "
            f"{getattr(args, 'max_extensions', 0)} extensions is marked *edge*)",
            "",
            *setting_grid_lines(
                tuned_rows,
                list(
                    tuning_cells(getattr(args, "tune_partitioning", "iid"), partitions)
                ),
                tuned,
                tuned_epochs,
                summary,
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


def setting_grid_lines(
    tuning: list[dict[str, Any]],
    methods: Sequence[str],
    tuned: Mapping[str, float],
    tuned_epochs: Mapping[str, int],
    summary: Mapping[str, Any],
) -> list[str]:
    """Markdown table: validation mAP@ALL % per method and epochs (rows) and lr."""
    lrs = _lrs(tuning)
    lines = table_head("method", "local epochs", *(f"lr {lr:g}" for lr in lrs))
    grids = summary.get("tuning_grids", {})
    for method in methods:
        mine = [r for r in tuning if r["method"] == method]
        edge = " *edge*" if grids.get(method, {}).get("chosen_on_edge") else ""
        for epochs in sorted({row_epochs(r) for r in mine}):
            cells = []
            for lr in lrs:
                got = [
                    r["map_all"]
                    for r in mine
                    if r["learning_rate"] == lr and row_epochs(r) == epochs
                ]
                txt = f"{100 * got[0]:.2f}" if got else MISSING
                best = tuned.get(method) == lr and tuned_epochs.get(method) == epochs
                cells.append(f"**{txt}**" if best else txt)
            lines.append(table_row(f"{method}{edge}", epochs, *cells))
    return lines


def _at(row: dict[str, Any], key: str, k: int) -> float | None:
    curves = row.get("curves") or {}
    ks = curves.get("ks", [])
    return curves[key][ks.index(k)] if k in ks else None

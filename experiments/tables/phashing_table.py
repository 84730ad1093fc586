"""PHashing on federated models (paper Table 1 and Fig. 2 shape): mAP and PR vs epsilon.

``python -m experiments.phashing table1 --seeds 0,1,2`` trains DPSH (FedAvg) and
FedHAP through Flower (10 clients, IID, defaults otherwise) at 16/32/64 bits, then
replays the publication step of the final evaluation offline for each epsilon: every
client's database partition is encoded once with the final global model and passed
through the same ``clients.publish.publish_codes`` the ClientApp uses, with the same
per-client seeds, and ranked against the server's queries. Flipping does not change
training, so one training run serves every epsilon; the replay with flipping off
must reproduce the run's own final mAP (exactly on the CPU; to 1e-3 on CUDA, whose
kernels may differ between the ClientApp and the replay), and the script checks it.
Epsilon uses the paper's calibration beta = e^-eps; the table also gives the epsilon
that actually holds per bit and per code.

Beside the federated methods every table has the untrained floor (the runs' round-0
mAP) and the centralized ceiling (``experiments.centralized``: the same network and
loss trained on the whole database with the same epoch budget, no flipping).

Backends: ``--backend simulation`` (Flower's Ray engine, the default) or
``--backend loopback`` (a local SuperLink and one SuperNode per client,
:mod:`experiments.loopback`: what runs on a GPU machine without Ray). ``--jobs N``
trains N runs at once. ``--resume`` keeps the finished runs of ``rows.jsonl``.
``--lr-grid 1e-4,3e-4,1e-3`` first tunes each federated method's learning rate on
``--tune-seed`` (99, not a table seed) at the first ``--bits``, by final mAP@ALL on
a validation split of the database, the centralized ceiling the same way, and
trains the table with the chosen rates; the tuning table is written below the main
one. Table rows record their learning rate: a row trained at a rate that is no
longer its method's choice (a grid grew on ``--resume``) is marked ``superseded``,
kept in ``rows.jsonl`` and run again. ``--tuned-from DIR`` instead takes the rates
another table chose (its ``summary.json``), e.g. to add code lengths to a table
tuned at 32 bits: it refuses a folder whose clients, rounds or run config (bar the
data file's folder) differ, and the protocol says where the rates came from.
``--set key=value`` (repeatable) overrides the run config of every run, e.g. another
dataset: ``--set dataset=npz --set data-path=../shared/data/cifar10_jpeg.npz --set
image-shape=32,32,3``.

Writes ``<out>/table.md`` (protocol, table, wall time), ``summary.json``,
``rows.jsonl`` (one line per run and epsilon, with the PR curve) and
``pr-<bits>b.png`` (precision-recall over Hamming radius per epsilon, the paper's
Fig. 2 shape, means over seeds).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clients.data import load_local_data
from clients.publish import publish_codes
from experiments.lib.grids import (
    COUNTS,
    NON_NEGATIVE,
    SEEDS,
    csv,
    flag_list,
    load_grids,
)
from experiments.lib.overrides import checked_overrides, resolved_settings
from experiments.lib.runner import (
    load_rows,
    resume_refusal,
    rewrite_rows,
    setup_differences,
)
from experiments.lib.runs import ROOT, run_centralized, run_federated
from experiments.lib.tables import MISSING, mean_sd_cell, table_head, table_row
from experiments.lib.tuning import (
    grid_extension,
    tuning_flags_error,
    write_validation_file,
)
from experiments.tables.real_data_figures import report_curves
from experiments.tables.real_data_setup import best_tuned_lr, lr_grid_lines
from hashing.codes import sign_codes
from hashing.retrieval import evaluate_retrieval
from hashing.train import encode, select_device
from privacy.flipping import flip_guarantee
from privacy.noise import NoiseSource
from server.experiment import prepare_data, protocol_text
from settings.run_model import build_run_model, split_global_state

METHODS = {"DPSH (FedAvg)": "fedavg", "FedHAP": "fedhap"}
CEILING = "centralized (ceiling)"
FLOOR = "untrained (round 0 of the DPSH runs)"


def replay(
    run_dir: Path, cfg: dict, clients: int, epsilons: list[float]
) -> dict[float, dict[str, Any]]:
    """Replay the final evaluation with database codes published at each epsilon.

    Returns ``{eps: report dict}`` of the run's final model; each partition is
    encoded once.
    """
    base = resolved_settings(cfg)
    data = prepare_data(base)
    model_state, _ = split_global_state(
        torch.load(run_dir / "model.pt", map_location="cpu")
    )
    model = build_run_model(base, data.input_shape)
    model.load_state_dict(model_state)
    device = select_device(base.device, deterministic=base.cuda_deterministic)
    queries = sign_codes(encode(model, data.queries.inputs, device=device))
    raw, labels = [], []
    for pid in range(clients):
        local = load_local_data(base, partition_id=pid, num_partitions=clients)
        raw.append(sign_codes(encode(model, local.inputs, device=device)))
        labels.append(local.labels.numpy())
    out = {}
    for eps in epsilons:
        settings = resolved_settings(
            {
                **cfg,
                "privacy.code-flip-epsilon": eps,
                "privacy.flip-calibration": "paper",
            }
        )
        codes = []
        for pid in range(clients):
            # seeded flips (paper-table reproduction, see the table's note): the same
            # seed gives the same table; not a private release against the server
            noise = NoiseSource.seeded(settings.seed, settings.rounds, pid, "publish")
            published, _ = publish_codes(raw[pid], settings=settings, noise=noise)
            codes.append(published)
        report = evaluate_retrieval(
            queries,
            np.concatenate(codes),
            data.queries.labels,
            np.concatenate(labels),
            top_k=settings.map_top_k,
            ks=settings.precision_ks(),
        )
        out[eps] = report.to_dict()
    return out


def _run_dir(root: Path) -> Path:
    return next(p for p in root.iterdir() if p.is_dir() and p.name != "logs")


def _jobs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every training job, bits-major then seed (a cut-short table has whole seeds)."""
    jobs = []
    for bits in args.bits_list:
        for seed in args.seeds_list:
            for method, strategy in METHODS.items():
                jobs.append(
                    {"method": method, "strategy": strategy, "bits": bits, "seed": seed}
                )
            if args.ceiling:
                jobs.append(
                    {
                        "method": CEILING,
                        "strategy": "fedavg",
                        "bits": bits,
                        "seed": seed,
                    }
                )
    return jobs


def _job_name(job: dict[str, Any]) -> str:
    kind = "centralized" if job["method"] == CEILING else job["strategy"]
    if job.get("kind") == "tune":
        return f"tune-{kind}-{job['bits']}b-lr{job['lr']:g}-s{job['seed']}"
    return f"{kind}-{job['bits']}b-s{job['seed']}"


def tuned_methods(args: argparse.Namespace) -> dict[str, str]:
    """Return ``{method: strategy}`` of what ``--lr-grid`` tunes: every method run.

    The federated methods and, unless ``--no-ceiling``, the centralized ceiling
    (its strategy is unused: it trains in :mod:`experiments.centralized`).
    """
    ceiling = {CEILING: "fedavg"} if getattr(args, "ceiling", True) else {}
    return {**METHODS, **ceiling}


def _tune_jobs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Learning-rate tuning: each method and the ceiling at each ``--lr-grid`` rate."""
    return [
        {
            "kind": "tune",
            "method": method,
            "strategy": strategy,
            "bits": args.tune_bits,
            "seed": args.tune_seed,
            "lr": lr,
        }
        for method, strategy in tuned_methods(args).items()
        for lr in args.lr_grid
    ]


def tuned_lrs(rows: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Return ``{method: lr}`` chosen by the tuning rows, the ceiling's by its own.

    Without ``--lr-grid`` every method keeps the run config's learning rate
    (``None`` here); under ``--no-ceiling`` the ceiling's is ``None``. Raises
    ``RuntimeError`` when a grid value has no tuning row.
    """
    if not args.lr_grid:
        return {m: None for m in (*METHODS, CEILING)}
    grids = getattr(args, "lr_grids", {})
    chosen: dict[str, Any] = {CEILING: None}
    for method in tuned_methods(args):
        grid = grids.get(method, args.lr_grid)
        mine = [
            r
            for r in rows
            if r.get("kind") == "tune" and r["method"] == method and r["lr"] in grid
        ]
        missing = sorted(set(grid) - {r["lr"] for r in mine})
        if missing:
            raise RuntimeError(f"{method}: no tuning run at lr {missing}")
        chosen[method] = best_tuned_lr(
            [{**r, "learning_rate": r["lr"]} for r in mine], method
        )
    return chosen


def extension_jobs(
    rows: list[dict[str, Any]], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Grow each method's grid whose tuned rate sits on an edge; return the new jobs.

    ``args.lr_grids`` (method -> rates) is changed in place; the next rate beyond
    the edge is :func:`experiments.lib.tuning.grid_extension`'s (geometric).
    """
    chosen = tuned_lrs(rows, args)
    jobs = []
    for method, strategy in tuned_methods(args).items():
        grid = args.lr_grids[method]
        new = grid_extension(grid, chosen[method], geometric=True)
        if new is None or new in grid:
            continue
        grid.append(new)
        jobs.append(
            {
                "kind": "tune",
                "method": method,
                "strategy": strategy,
                "bits": args.tune_bits,
                "seed": args.tune_seed,
                "lr": new,
            }
        )
    return jobs


def setup_of(args: argparse.Namespace) -> dict[str, Any]:
    """Return the settings every run of a table shares (``summary.json["setup"]``).

    Rows are keyed by method, bits and seed, so these are what ``--resume`` and
    ``--tuned-from`` compare. ``data-path`` counts by file name: the same file
    sits in another folder on another machine.
    """
    return {
        "clients": args.clients,
        "rounds": args.rounds,
        "epsilons": sorted(args.eps_list),
        **{f"--set {k}": _data_name(k, v) for k, v in args.base.items()},
    }


def _data_name(key: str, value: Any) -> Any:
    return Path(str(value)).name if key == "data-path" else value


def recorded_setup(summary: dict[str, Any]) -> dict[str, Any]:
    """Return the setup a ``summary.json`` records, or rebuild it from older keys.

    Tables written before setups were recorded give their clients, rounds, run
    config overrides and, where they have table rows, the epsilons of those rows.
    """
    if isinstance(summary.get("setup"), dict):
        return summary["setup"]
    setup = {
        "clients": summary.get("clients"),
        "rounds": summary.get("rounds"),
        **{
            f"--set {k}": _data_name(k, v)
            for k, v in dict(summary.get("base_overrides", {})).items()
        },
    }
    eps = {
        r["eps"] for r in summary.get("rows", []) if r.get("kind", "table") == "table"
    }
    if eps:
        setup["epsilons"] = sorted(eps)
    return setup


def check_resume(args: argparse.Namespace) -> None:
    """Refuse ``--resume`` into a folder whose runs share another setup.

    Raises
    ------
    SystemExit
        A setting differs; the message names it and both values.
    """
    try:
        summary = json.loads((args.out / "summary.json").read_text())
    except (OSError, ValueError):
        return  # nothing written yet: nothing to mix with
    recorded = recorded_setup(summary)
    ignore = () if "epsilons" in recorded else ("epsilons",)
    differ = setup_differences(recorded, setup_of(args), ignore)
    if differ:
        raise SystemExit(resume_refusal(args.out, *differ[0]))


def read_tuned_from(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Return the learning rates another PHashing table tuned, and where.

    The folder must be a ``--lr-grid`` table of the same setup (:func:`setup_of`;
    the epsilons aside, since tuning is non-private). Returns ``{"rates":
    {method: lr}, "folder", "bits", "seed", "hardware", "ceiling_tuned"}``;
    ``ceiling_tuned`` is false for a table written before ceilings were tuned
    (its ceiling rate is DPSH's).

    Raises
    ------
    SystemExit
        The folder has no tuned rates, lacks a method (the ceiling only counts when
        this table trains one), or has another setup (the message names the
        setting and both values).
    """
    path = Path(folder) / "summary.json"
    need = (*METHODS, CEILING) if getattr(args, "ceiling", True) else tuple(METHODS)
    try:
        summary = json.loads(path.read_text())
        recorded = summary["tuned_learning_rates"]
        rates = {m: float(recorded[m]) for m in need}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(
            f"--tuned-from {folder}: no tuned learning rates for every method in "
            f"{path} ({exc!r}); run `python -m experiments.phashing table1 --lr-grid` "
            "there first" + (" (or --no-ceiling here)" if CEILING in need else "")
        ) from None
    rates.setdefault(CEILING, None)
    differ = setup_differences(
        recorded_setup(summary), setup_of(args), ignore=("epsilons",)
    )
    if differ:
        raise SystemExit(
            f"--tuned-from {folder}: its setup differs from this table's ("
            + "; ".join(
                f"{k}: {there!r} there, {here!r} here" for k, there, here in differ
            )
            + "); rates tuned there do not carry over"
        )
    tunes = [r for r in summary.get("rows", []) if r.get("kind") == "tune"]
    return {
        "rates": rates,
        "folder": str(folder),
        "bits": sorted({r["bits"] for r in tunes}),
        "seed": sorted({r["seed"] for r in tunes}),
        "hardware": summary.get("hardware", "unknown hardware"),
        "ceiling_tuned": CEILING in summary.get("tuning_grids", {}),
    }


def _lr_text(args: argparse.Namespace) -> str:
    """How the table's learning rates were chosen, for the protocol line."""
    if args.lr_grid:
        return "learning rate tuned per method (below), "
    src = getattr(args, "tuned_from_info", None)
    if src is None:
        return ""
    rates = ", ".join(f"{m} {lr:g}" for m, lr in src["rates"].items() if m in METHODS)
    bits = "/".join(str(b) for b in src["bits"])
    here = ",".join(str(b) for b in args.bits_list)
    return (
        f"learning rate per method as tuned in `{src['folder']}` ({rates}; tuned "
        f"there at {bits} bits, seed {'/'.join(map(str, src['seed']))}, on "
        f"{src['hardware']}; not retuned at {here} bits), "
    )


def _ceiling_lr_text(args: argparse.Namespace) -> str:
    """Say the ceiling's learning rate, for the protocol line ("": the run config's)."""
    if args.lr_grid:
        return " at its own learning rate, tuned like the federated methods' (below)"
    src = getattr(args, "tuned_from_info", None)
    if src is None or src["rates"].get(CEILING) is None:
        return ""
    if src.get("ceiling_tuned"):
        return f" at the learning rate tuned for it there ({src['rates'][CEILING]:g})"
    return (
        f" at DPSH's rate from there ({src['rates'][CEILING]:g}; that table did not "
        "tune its ceiling)"
    )


def _config(job: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    return {
        **args.base,
        "strategy": job["strategy"],
        "code-length": job["bits"],
        "seed": job["seed"],
        "rounds": args.rounds,
        "eval-every": args.rounds,
        **({"learning-rate": job["lr"]} if job.get("lr") is not None else {}),
        # a tuning run scores on the validation split, never on the table's queries
        **(
            {"data-path": args.validation.path}
            if job.get("kind") == "tune" and getattr(args, "validation", None)
            else {}
        ),
    }


def _train(job: dict[str, Any], args: argparse.Namespace) -> tuple[dict, float]:
    cfg = _config(job, args)
    runs = args.out / "runs" / _job_name(job)
    if runs.exists():  # left by an interrupted run: the job is not in rows.jsonl
        shutil.rmtree(runs)
    t0 = time.perf_counter()
    if job["method"] == CEILING:
        runs.mkdir(parents=True, exist_ok=True)
        return run_centralized(cfg, runs / "centralized.json"), time.perf_counter() - t0
    if args.backend == "loopback":
        from experiments.loopback import run_loopback

        summary = run_loopback(cfg, args.clients, runs)
    else:
        summary = run_federated(cfg, args.clients, runs)
    return summary, time.perf_counter() - t0


def _finish(
    job: dict[str, Any], summary: dict, secs: float, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Rows of one finished training job (replays the federated ones)."""
    # the rate it trained at (None: the run config's) is part of every row's key
    base = {**{k: job[k] for k in ("method", "bits", "seed")}, "lr": job.get("lr")}
    if job.get("kind") == "tune":
        return [
            {
                **base,
                "kind": "tune",
                "eps": 0.0,
                "map_all": summary["final"]["map_all"],
                "train_seconds": secs,
            }
        ]
    if job["method"] == CEILING:
        final = summary["final"]
        return [
            {
                **base,
                "eps": 0.0,
                "map_all": final["map_all"],
                "train_seconds": secs,
                "curves": report_curves(final),
            }
        ]
    cfg = _config(job, args)
    run_dir = _run_dir(args.out / "runs" / _job_name(job))
    t0 = time.perf_counter()
    reports = replay(run_dir, cfg, args.clients, args.eps_list)
    ran = summary["final"]["map_all"]
    delta = abs(reports[0.0]["map_all"] - ran)
    on_cpu = select_device(resolved_settings(cfg).device).type == "cpu"
    if delta > (0.0 if on_cpu else 1e-3):
        raise RuntimeError(
            f"{_job_name(job)}: replay mAP {reports[0.0]['map_all']} != run's {ran}"
        )
    rows = [
        {**base, "eps": eps, "map_all": rep["map_all"], "curves": report_curves(rep)}
        for eps, rep in reports.items()
    ]
    rows[0].update(
        train_seconds=secs,
        replay_seconds=time.perf_counter() - t0,
        initial_map_all=summary.get("initial_map_all"),
        run_map_all=ran,
        replay_delta=delta,
    )
    return rows


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    grids = load_grids("phashing", "table1", ("seeds", "bits", "epsilons"))
    parser.add_argument("--seeds", default=csv(grids["seeds"]))
    parser.add_argument("--bits", default=csv(grids["bits"]))
    parser.add_argument("--epsilons", default=csv(grids["epsilons"]))
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument(
        "--backend", choices=("simulation", "loopback"), default="simulation"
    )
    parser.add_argument("--jobs", type=int, default=1, help="training runs at once")
    parser.add_argument(
        "--no-ceiling",
        dest="ceiling",
        action="store_false",
        help="skip the centralized ceiling runs",
    )
    parser.add_argument(
        "--lr-grid",
        default="",
        help="comma-separated learning rates: each method, the centralized ceiling "
        "too, is tuned over them on --tune-seed (the table's config, --tune-bits, "
        "final mAP@ALL on a validation split of the database) before the table "
        "runs. Empty: the run config's learning rate",
    )
    parser.add_argument("--tune-seed", type=int, default=99)
    parser.add_argument(
        "--max-extensions",
        type=int,
        default=2,
        help="a tuned rate on a grid edge extends that grid, at most this often",
    )
    parser.add_argument(
        "--tune-bits",
        type=int,
        default=None,
        help="code length the --lr-grid tuning runs at (default: the first --bits); "
        "its rates serve every --bits",
    )
    parser.add_argument(
        "--tuned-from",
        type=Path,
        default=None,
        metavar="DIR",
        help="take each method's learning rate from another --lr-grid table of the "
        "same setup (its summary.json) instead of tuning",
    )
    parser.add_argument("--resume", action="store_true")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "docs" / "results" / "phashing"
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    args.base = checked_overrides(args.set)  # fails before any run
    args.seeds_list = flag_list(parser, "--seeds", args.seeds, SEEDS)
    args.bits_list = flag_list(parser, "--bits", args.bits, COUNTS)
    args.eps_list = flag_list(parser, "--epsilons", args.epsilons, NON_NEGATIVE)
    if args.tune_bits is None:
        args.tune_bits = args.bits_list[0]
    elif args.tune_bits < 1:
        parser.error(f"--tune-bits {args.tune_bits}: must be >= 1")
    if 0.0 not in args.eps_list:
        parser.error(
            f"--epsilons {args.epsilons!r}: must include 0 (the non-private row)"
        )
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: must be >= 1")
    try:
        args.lr_grid = [float(x) for x in args.lr_grid.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--lr-grid {args.lr_grid!r}: expected numbers, e.g. 1e-4,3e-4")
    if any(lr <= 0 for lr in args.lr_grid):
        parser.error(f"--lr-grid {args.lr_grid}: learning rates must be > 0")
    if args.lr_grid and args.tuned_from is not None:
        parser.error("--lr-grid and --tuned-from: give one (tune here, or reuse rates)")
    if args.lr_grid:
        error = tuning_flags_error(
            tune_seed=args.tune_seed,
            seeds=args.seeds_list,
            val_fraction=None,  # no flag: the validation split's default share
            max_extensions=args.max_extensions,
        )
        if error:
            parser.error(error)
    args.tuned_from_info = (
        read_tuned_from(args.tuned_from, args) if args.tuned_from is not None else None
    )
    args.validation = None
    args.lr_grids = {m: list(args.lr_grid) for m in tuned_methods(args)}
    if args.lr_grid:
        data_path = args.base.get("data-path")
        if args.base.get("dataset") != "npz" or not data_path:
            parser.error(
                "--lr-grid tunes on a validation split drawn from the database rows of "
                "an .npz with a fixed split; accepted: --set dataset=npz --set "
                "data-path=FILE, or no --lr-grid (the run config's learning rate)"
            )
        try:
            args.validation = write_validation_file(
                Path(str(data_path)),
                args.out / "runs" / "validation",
                seed=args.tune_seed,
            )
        except ValueError as exc:
            parser.error(str(exc))
    if args.backend == "loopback":
        from experiments.loopback import stop_deployments_on_signals

        stop_deployments_on_signals()
    if args.resume:
        check_resume(args)
    args.out.mkdir(parents=True, exist_ok=True)
    args.protocol = _protocol(args)  # loads the data: once, not after every run
    rows_path = args.out / "rows.jsonl"
    if not args.resume:
        rows_path.unlink(missing_ok=True)
    rows = load_rows(rows_path)
    start = time.perf_counter()
    failed: list[str] = []
    if args.lr_grid:  # phase 1: tuning, before any table run needs its result
        _execute(_tune_jobs(args), rows, rows_path, failed, args, start)
        for _ in range(args.max_extensions):  # a choice on a grid edge grows it
            if failed:
                break
            more = extension_jobs(rows, args)
            if not more:
                break
            _execute(more, rows, rows_path, failed, args, start)
        if failed:
            raise SystemExit(
                "tuning failed (rerun with --resume to retry):\n" + "\n".join(failed)
            )
    args.tuned = (
        args.tuned_from_info["rates"]
        if args.tuned_from_info is not None
        else tuned_lrs(rows, args)
    )
    stale = supersede_stale_rows(rows, rows_path, args)
    if stale:
        print(f"{len(stale)} table runs superseded (not at today's tuned lr): {stale}")
    jobs = [{**j, "lr": args.tuned[j["method"]]} for j in _jobs(args)]
    _execute(jobs, rows, rows_path, failed, args, start)
    print(_write(rows, args))
    if failed:
        raise SystemExit(
            f"{len(failed)} run(s) failed (rerun with --resume to retry them):\n"
            + "\n".join(failed)
        )


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    """Return what makes a row done: kind, method, bits, seed and learning rate."""
    return (row.get("kind", "table"), row["method"], row["bits"], row["seed"]) + (
        row.get("lr"),
    )


def legacy_lr(method: str, args: argparse.Namespace) -> float | None:
    """Return the learning rate a table row written without one was trained at.

    Before rows recorded it, a table trained every method at the rate its tuning
    rows chose (the run config's without tuning, ``--tuned-from``'s rates with it)
    and the ceiling at DPSH's; ``args.tuned`` holds today's choices.
    """
    if method != CEILING:
        return args.tuned[method]
    src = getattr(args, "tuned_from_info", None)
    if src is not None:
        return src["rates"].get(CEILING)
    return args.tuned["DPSH (FedAvg)"] if args.lr_grid else None


def supersede_stale_rows(
    rows: list[dict[str, Any]], rows_path: Path, args: argparse.Namespace
) -> list[str]:
    """Mark the table rows trained at a rate that is no longer their method's.

    A table row without ``lr`` (written before rows recorded it) gets
    :func:`legacy_lr` in ``rows``. A row whose rate differs from ``args.tuned``
    gets ``kind`` "superseded": kept in ``rows`` and ``rows.jsonl`` (rewritten
    atomically, only when a row is superseded), left out of the table, and its
    run trained again at the tuned rate.

    Returns
    -------
    list of str
        The superseded runs' names (one per run, not per epsilon).
    """
    stale: list[str] = []
    for row in rows:
        if row.get("kind", "table") != "table":
            continue
        if row["method"] == CEILING and not getattr(args, "ceiling", True):
            continue  # --no-ceiling skips the ceiling's runs; it keeps their rows
        if "lr" not in row:
            row["lr"] = legacy_lr(row["method"], args)
        if row["lr"] == args.tuned[row["method"]]:
            continue
        row["kind"] = "superseded"
        name = f"{row['method']} {row['bits']} bits seed {row['seed']} lr {row['lr']}"
        if name not in stale:
            stale.append(name)
    if stale:
        rewrite_rows(rows_path, rows)
    return stale


def _execute(
    jobs: list[dict[str, Any]],
    rows: list[dict[str, Any]],
    rows_path: Path,
    failed: list[str],
    args: argparse.Namespace,
    start: float,
) -> None:
    """Run the jobs not yet in ``rows`` (``--jobs`` at once); append their rows.

    Training runs in the pool's threads; each finished job is replayed, written and
    printed here, in this thread, one at a time (a replay holds its run's codes).
    """
    done = {_key(r) for r in rows}
    todo = [j for j in jobs if _key(j) not in done]
    print(
        f"{len(todo)} runs to do ({len(jobs) - len(todo)} already done), "
        f"backend {args.backend}, {args.jobs} at once",
        flush=True,
    )
    begun = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(_train, job, args): job for job in todo}
        for n, fut in enumerate(as_completed(futures), 1):
            job = futures[fut]
            try:
                summary, secs = fut.result()
                new = _finish(job, summary, secs, args)
            except Exception as exc:  # noqa: BLE001 - reported, the table goes on
                failed.append(f"{_job_name(job)}: {exc}")
                print(f"  [{n}/{len(todo)}] {_job_name(job)} FAILED: {exc}")
                continue
            with rows_path.open("a") as f:
                for r in new:
                    f.write(json.dumps(r) + "\n")
            rows += new
            cells = ", ".join(f"eps {r['eps']:g}: {r['map_all']:.4f}" for r in new)
            elapsed = time.perf_counter() - begun
            eta = elapsed / n * (len(todo) - n)
            print(
                f"  [{n}/{len(todo)}, {(time.perf_counter() - start) / 60:.1f} min,"
                f" ETA {eta / 60:.0f} min] {_job_name(job)} ({job['method']}): "
                f"{cells} ({secs:.0f} s)",
                flush=True,
            )
            if job.get("kind") != "tune":
                _write(rows, args)
    if failed:
        raise SystemExit(
            f"{len(failed)} run(s) failed (rerun with --resume to retry them):\n"
            + "\n".join(failed)
        )


def _cell(vals: list[float], seeds: int) -> str:
    """Mean ± sample std in %; a cell with fewer runs than seeds says how many."""
    return mean_sd_cell(vals, scale=100, expected=seeds)


def hardware() -> str:
    """Where the runs trained: the CUDA device's name, else the CPU count."""
    if torch.cuda.is_available():
        return f"CUDA ({torch.cuda.get_device_name(0)})"
    import os

    return f"CPU ({os.cpu_count()} cores)"


def _protocol(args: argparse.Namespace) -> str:
    settings = resolved_settings({**args.base, "seed": args.seeds_list[0]})
    data = prepare_data(settings)
    backend = (
        "Flower's simulation engine (Ray)"
        if args.backend == "simulation"
        else "a loopback Flower deployment (SuperLink + one SuperNode per client)"
    )
    return (
        f"Protocol: {protocol_text(settings, data, args.clients).rstrip('.')}. "
        f"Training: {args.clients} clients, {args.rounds} rounds of "
        f"{settings.local_epochs} local epoch(s), model `{settings.model}`, "
        f"batch {settings.batch_size}, "
        + (_lr_text(args) or f"lr {settings.learning_rate:g}, ")
        + "run through "
        f"{backend}. Database codes are flipped at publication (paper calibration "
        "beta = e^-eps), replayed on each final model. Ceiling: the same network and "
        "DPSH loss trained centrally on "
        + (
            f"the same {settings.train_size} training rows"
            if settings.train_size
            else "the whole database"
        )
        + " for rounds x local epochs epochs"
        + _ceiling_lr_text(args)
        + ", no flipping. Floor: the round-0 mAP of the DPSH (FedAvg) runs. "
        f"Hardware: {hardware()}."
    )


def _write(all_rows: list[dict], args: argparse.Namespace) -> str:
    bits_list = args.bits_list
    rows = [r for r in all_rows if r.get("kind", "table") == "table"]
    # the seeds of the rows (a --resume with fewer --seeds keeps the others' runs)
    seeds = sorted({r["seed"] for r in rows} | set(args.seeds_list))
    n = len(seeds)
    lines: list[str] = []
    if args.base:  # e.g. another dataset (--set)
        overrides = ", ".join(f"`{k} = {v!r}`" for k, v in args.base.items())
        lines += [f"Run config overrides: {overrides}.", ""]
    lines += [
        args.protocol,
        "",
        "Flips use SEEDED privacy noise (a reproduction of the paper's table: the "
        "same seed gives the same table; not a release private against anyone who "
        "knows the seed).",
        "",
        "mAP@ALL %, mean ± sample std over seeds "
        + ",".join(str(s) for s in seeds)
        + (
            " (a cell of fewer runs says how many: n=k)"
            if len({(r["method"], r["bits"], r["eps"], r["seed"]) for r in rows})
            < len({(r["method"], r["bits"], r["eps"]) for r in rows}) * n
            else ""
        )
        + ".",
        "",
        *table_head(
            "method",
            "eps (paper calibration)",
            *(f"{b} bits" for b in bits_list),
            f"eps that holds (per bit / per code) at {bits_list[-1]} bits",
        ),
    ]
    fed = [r for r in rows if r["method"] == "DPSH (FedAvg)" and r["eps"] == 0.0]
    floor = [
        _cell(
            [
                r["initial_map_all"]
                for r in fed
                if r["bits"] == b and r.get("initial_map_all") is not None
            ],
            n,
        )
        for b in bits_list
    ]
    lines.append(table_row(FLOOR, MISSING, *floor, MISSING))
    for method in METHODS:
        for eps in args.eps_list:
            cells = [
                _cell(
                    [
                        r["map_all"]
                        for r in rows
                        if (r["method"], r["bits"], r["eps"]) == (method, b, eps)
                    ],
                    n,
                )
                for b in bits_list
            ]
            if eps == 0:
                label, holds = "non-private", "-"
            else:
                g = flip_guarantee(eps, bits_list[-1], "paper")
                label, holds = f"{eps:g}", f"{g.eps_per_bit:.3f} / {g.eps_per_code:.1f}"
            lines.append(table_row(method, label, *cells, holds))
    ceiling = [
        _cell(
            [r["map_all"] for r in rows if (r["method"], r["bits"]) == (CEILING, b)], n
        )
        for b in bits_list
    ]
    lines.append(table_row(CEILING, "non-private", *ceiling, MISSING))
    train = sum(r.get("train_seconds", 0.0) for r in rows)
    replay_s = sum(r.get("replay_seconds", 0.0) for r in rows)
    lines += [
        "",
        f"Wall time: {train / 60:.1f} min of training summed over the "
        f"{sum(1 for r in rows if 'train_seconds' in r)} runs (runs may overlap "
        f"with --jobs), {replay_s / 60:.1f} min of replays."
        + _superseded_text(all_rows),
    ]
    tuning = [r for r in all_rows if r.get("kind") == "tune"]
    if args.lr_grid:
        lines += ["", *_tuning_lines(tuning, args)]
    text = "\n".join(lines)
    (args.out / "summary.json").write_text(
        json.dumps(
            {
                "metric": "mAP@ALL",
                "clients": args.clients,
                "rounds": args.rounds,
                "backend": args.backend,
                "hardware": hardware(),
                "calibration": "paper (beta = e^-eps)",
                "setup": setup_of(args),
                **({"base_overrides": args.base} if args.base else {}),
                **({"tuned_learning_rates": args.tuned} if _lr_text(args) else {}),
                **(
                    {
                        "tuning_split": args.validation.to_dict(),
                        "tuning_grids": {
                            m: {
                                "learning_rates": sorted(g),
                                "extended": sorted(set(g) - set(args.lr_grid)),
                                "seed": args.tune_seed,
                                "bits": args.tune_bits,
                                "chosen": args.tuned.get(m),
                            }
                            for m, g in args.lr_grids.items()
                        },
                    }
                    if getattr(args, "validation", None) is not None
                    else {}
                ),
                **(
                    {"tuned_from": args.tuned_from_info}
                    if getattr(args, "tuned_from_info", None)
                    else {}
                ),
                "rows": [
                    {k: v for k, v in r.items() if k != "curves"} for r in all_rows
                ],
            },
            indent=2,
        )
        + "\n"
    )
    (args.out / "table.md").write_text(text + "\n")
    for b in bits_list:
        _plot_pr(rows, b, args.out / f"pr-{b}b.png")
    return text


def _superseded_text(all_rows: list[dict]) -> str:
    """Say which runs are left out as superseded (another rate than chosen), if any."""
    old = [
        r for r in all_rows if r.get("kind") == "superseded" and "train_seconds" in r
    ]
    if not old:
        return ""
    secs = sum(r["train_seconds"] for r in old)
    return (
        f" Not in the table: {len(old)} superseded runs ({secs / 60:.1f} min), "
        "trained at a rate that is no longer their method's choice, kept in "
        '`rows.jsonl` as kind "superseded".'
    )


def _tuning_lines(tuning: list[dict], args: argparse.Namespace) -> list[str]:
    """Render the tuning table (final mAP@ALL % per method and lr), best in bold."""
    lines = [
        f"**Learning-rate tuning** (seed {args.tune_seed}, {args.tune_bits} bits, "
        f"the same clients and rounds, final mAP@ALL % on the "
        + (
            args.validation.text()
            if getattr(args, "validation", None) is not None
            else "table's queries (tuned before validation splits)"
        )
        + "; the best is bold and used for every table run, at every code length, "
        "and a best rate on a grid edge extends the grid; the centralized ceiling is "
        "tuned the same way, trained on the validation split's database rows):",
        "",
        *lr_grid_lines(
            tuning,
            (*METHODS, CEILING),
            sorted({r["lr"] for r in tuning}),
            args.tuned,
            lr_key="lr",
        ),
    ]
    secs = sum(r.get("train_seconds", 0.0) for r in tuning)
    lines += ["", f"Tuning wall time: {secs / 60:.1f} min over {len(tuning)} runs."]
    return lines


def _plot_pr(rows: list[dict], bits: int, path: Path) -> None:
    """PR over Hamming radius, one panel per method, one line per epsilon (Fig. 2)."""
    mine = [r for r in rows if r["bits"] == bits and r.get("curves")]
    methods = [m for m in (*METHODS, CEILING) if any(r["method"] == m for r in mine)]
    if not mine or not methods:
        return
    from server.plots import plt, save_figure

    fig, axes = plt.subplots(
        1, len(methods), figsize=(5 * len(methods), 4), squeeze=False
    )
    for ax, method in zip(axes[0], methods, strict=True):
        for i, eps in enumerate(
            sorted({r["eps"] for r in mine if r["method"] == method})
        ):
            sel = [r for r in mine if (r["method"], r["eps"]) == (method, eps)]
            precision = np.mean([r["curves"]["pr"]["precision"] for r in sel], axis=0)
            recall = np.mean([r["curves"]["pr"]["recall"] for r in sel], axis=0)
            keep = recall > 0  # radius 0 may retrieve nothing
            label = "non-private" if eps == 0 else f"eps {eps:g}"
            ax.plot(
                recall[keep],
                precision[keep],
                marker=".",
                color=plt.get_cmap("tab10")(i),
                label=f"{label} ({len(sel)} seeds)",
            )
        ax.set(xlabel="recall", ylabel="precision", title=method, xlim=(0, 1.02))
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"PR over Hamming radius, {bits} bits")
    save_figure(fig, path, dpi=110)

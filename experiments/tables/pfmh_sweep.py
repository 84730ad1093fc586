"""PFMH experiments behind the README tables (paper Tables 1-2 shape).

``python -m experiments.pfmh tables --seeds 0,1,2 --jobs 1`` runs, on the two-view
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

``--only sensitivity`` runs the paper's Fig. 7 shape: PFMH at
``--sensitivity-bits`` with the loss weight alpha (similarity matching, Eq. 11)
over ``--loss-alphas`` while beta stays at its default, then beta (information
preservation) over ``--loss-betas`` while alpha stays at its default, one weight
at a time (the paper does not say how it varied them). The point at both defaults
is the main table's PFMH run; ``sensitivity-<bits>b.png`` draws the table.

Every federated row also records the global protocol's precision@K averaged over
clients (the run's ``precision-k`` cut-offs): ``precision_at_k-<bits>b.png`` draws
it per method (the paper's Fig. 4, top-K precision).

Each run is one Flower simulation (or one centralized training) in its own process;
``--jobs`` runs that many at once, each simulation with ``--cpus`` Ray CPUs. Every
finished run is appended to ``<out>/rows.jsonl`` at once (``--resume`` skips those
already there); ``<out>/summary.json`` and ``<out>/table.md`` hold the aggregate
(mean +- sample std over seeds), ``<out>/map_per_round-<bits>b.png`` the mAP of
both protocols per evaluated round (``experiments/tables/pfmh_figures.py``, from
the kept run directories under ``<out>/runs/``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from experiments.lib.grids import COUNTS, POSITIVE, SEEDS, csv, flag_list, load_grids
from experiments.lib.runner import exit_if_failed, load_rows, run_sweep, write_tables
from experiments.lib.runs import ROOT, run_federated, set_flags
from experiments.lib.tables import MISSING, mean_sd, n_note, pm, table_head, table_row
from experiments.lib.tuning import (
    VALIDATION_FRACTION,
    Grid,
    run_tuning,
    tuned_setting,
    tuning_flags_error,
    write_validation_file,
)
from experiments.tables.pfmh_tuned import (
    TABLE,
    TUNE,
    cell_name,
    chosen_rates,
    table_rows,
    tuning_record,
    tuning_table,
    tuning_text,
)
from hashing.pfmh.evaluation import PRECISION_PREFIX
from hashing.pfmh.metric_names import (
    LOCAL_MAP_ALL,
    LOCAL_MAP_AT_K,
    SQ_CLIENT_DB_MAP_ALL,
)
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
SENSITIVITY_METHOD = "PFMH"
#: Config keys of the loss weights of Eq. 11 that the sensitivity table varies.
LOSS_KEYS = {"loss_alpha": "pfmh.alpha", "loss_beta": "pfmh.beta"}
#: Metrics of a row, as named in rounds.jsonl / summary.json.
LOCAL = LOCAL_MAP_ALL
LOCAL_K = LOCAL_MAP_AT_K
SQ_CDB = SQ_CLIENT_DB_MAP_ALL
UNION = "map_all"
PRECISION = "precision_at_k"  # {K: global-protocol P@K averaged over clients}
#: The form of the prototype contrast (Eqs. 9-10) and the prototype terms' weight
#: a row ran with; rows written before ``pfmh.contrast`` existed lack both and ran
#: the paper's printed (decoupled) form at weight 1.
LOSS_FORM = {"contrast": "decoupled", "prototype_weight": 1.0}


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
    if args.only in (None, "sensitivity"):
        default_a, default_b = loss_defaults(args.base)
        grid = [(a, default_b) for a in args.loss_alphas if a != default_a]
        grid += [(default_a, b) for b in args.loss_betas if b != default_b]
        for seed in args.seeds:
            for a, b in grid:
                out.append(
                    {
                        "table": "sensitivity",
                        "method": SENSITIVITY_METHOD,
                        "alpha": args.base["dirichlet-alpha"],
                        "bits": args.sensitivity_bits,
                        "seed": seed,
                        "loss_alpha": a,
                        "loss_beta": b,
                    }
                )
    return out


def loss_defaults(base: dict[str, Any]) -> tuple[float, float]:
    """Return the run's (alpha, beta) loss weights of Eq. 11 (preset or defaults)."""
    from experiments.lib.overrides import resolved_settings

    pfmh = resolved_settings(base).pfmh
    return pfmh.alpha, pfmh.beta


def loss_form(cfg: dict[str, Any]) -> dict[str, Any]:
    """Return the contrast form and prototype weight the config ``cfg`` trains."""
    from experiments.lib.overrides import resolved_settings

    pfmh = resolved_settings(cfg).pfmh
    return {"contrast": pfmh.contrast, "prototype_weight": pfmh.prototype_weight}


def row_form(row: dict[str, Any]) -> dict[str, Any]:
    """Return a row's loss form (``LOSS_FORM`` for rows that predate the keys)."""
    return {k: row.get(k, v) for k, v in LOSS_FORM.items()}


def form_text(form: dict[str, Any]) -> str:
    """Return ``form`` as the protocol paragraph names it."""
    return f"{form['contrast']}, weight {form['prototype_weight']:g}"


def check_resumed_form(rows: list[dict[str, Any]], base: dict[str, Any]) -> None:
    """Exit before any run if resumed rows ran another loss form than ``base``."""
    want = loss_form(base)
    for row in rows:
        if row_form(row) != want:
            raise SystemExit(
                f"--resume: row {row['name']} ran the prototype contrast "
                f"{form_text(row_form(row))}, the run config trains "
                f"{form_text(want)}; accepted is one form per output folder "
                "(use another --out)"
            )


def job_name(job: dict[str, Any]) -> str:
    """Directory name of one run."""
    method = job["method"].lower()
    for ch in " ()/":
        method = method.replace(ch, "-" if ch == "/" else "")
    loss = ""
    if "loss_alpha" in job:
        loss = f"-la{job['loss_alpha']:g}-lb{job['loss_beta']:g}"
    return f"{method}-a{job['alpha']}{loss}-{job['bits']}b-s{job['seed']}"


def run_job(
    job: dict[str, Any],
    args: argparse.Namespace,
    *,
    overrides: dict[str, Any] | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """Run one simulation (or centralized training); return its row.

    ``overrides`` are run-config keys set last (a tuned rate, a validation
    file); ``name`` names the run and its directory (default :func:`job_name`).
    """
    cfg = {
        **args.base,
        **METHODS[job["method"]],
        "code-length": job["bits"],
        "dirichlet-alpha": job["alpha"],
        "seed": job["seed"],
        "min-train-nodes": min(args.clients, 2),
        **{key: job[field] for field, key in LOSS_KEYS.items() if field in job},
        **(overrides or {}),
    }
    name = name or job_name(job)
    run_dir = args.out / "runs" / name
    t0 = time.perf_counter()
    if job["method"] == CENTRALIZED:
        run_dir.mkdir(parents=True, exist_ok=True)  # its JSON is overwritten
        out = run_dir / "centralized.json"
        cmd = [sys.executable, "-m", "experiments.centralized", "--out", str(out)]
        cmd += ["--clients", str(args.clients), "--threads", str(args.cpus)]
        _run(cmd + set_flags(cfg))
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
        "name": name,
        **job,
        "learning_rate": cfg["learning-rate"],
        **loss_form(cfg),
        LOCAL: per_client.get(LOCAL),
        LOCAL_K: per_client.get(LOCAL_K),
        SQ_CDB: per_client.get(SQ_CDB),
        UNION: final.get(UNION),
        PRECISION: {
            k[len(PRECISION_PREFIX) :]: v
            for k, v in per_client.items()
            if k.startswith(PRECISION_PREFIX) and v is not None
        },
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
    """Mean and sample std over seeds per (table, method, alpha, bits[, loss]).

    Tuning runs (``kind`` "tune") are left out.
    """
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("kind") == TUNE:
            continue
        key = (r["table"], r["method"], r["alpha"], r["bits"])
        key += tuple(r.get(f) for f in LOSS_KEYS)
        groups.setdefault(key, []).append(r)
    out = []
    for (table, method, alpha, bits, *loss), rs in groups.items():
        entry: dict[str, Any] = {
            "table": table,
            "method": method,
            "alpha": alpha,
            "bits": bits,
            "seeds": sorted(r["seed"] for r in rs),
        }
        if loss[0] is not None:
            entry.update(zip(LOSS_KEYS, loss, strict=True))
        curves = [r[PRECISION] for r in rs if r.get(PRECISION)]
        if curves:
            ks = sorted(set.intersection(*(set(c) for c in curves)), key=int)
            entry[PRECISION] = {k: _mean_std([c[k] for c in curves]) for k in ks}
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
            entry[key] = _mean_std(vals) if vals else None
        out.append(entry)
    return out


def _mean_std(vals: list[float]) -> list[float]:
    """[mean, sample std] of a non-empty list (std 0 for one value)."""
    return list(mean_sd(vals))


def _cell(a: dict[str, Any] | None, key: str, seeds: int) -> str:
    """Return ``mean ± std`` in %, ``(n=k)`` added where k is not ``seeds``.

    ``seeds``: the count most cells of the table hold (:func:`typical_seeds`).
    """
    if a is None or a.get(key) is None:
        return MISSING
    return pm(*a[key], scale=100) + n_note(len(a["seeds"]), seeds, any_count=True)


def typical_seeds(agg: list[dict[str, Any]]) -> int:
    """Return the seed count most cells hold (3 for an empty table)."""
    counts = Counter(len(a["seeds"]) for a in agg)
    return max(counts, key=lambda n: (counts[n], n)) if counts else 3


def seeds_line(agg: list[dict[str, Any]]) -> str:
    """Which seeds the tables average, and how a cell over another count says so."""
    seeds = sorted({s for a in agg for s in a["seeds"]})
    listed = ", ".join(str(s) for s in seeds) or "none"
    return (
        f"Seeds: {listed}; each cell is the mean over {typical_seeds(agg)} of them "
        "unless it says (n=k)."
    )


def protocol(args: argparse.Namespace, rows: list[dict[str, Any]]) -> str:
    """Return the protocol paragraph above the tables (data, federation, floor)."""
    from experiments.lib.overrides import resolved_settings
    from server.experiment import prepare_data, protocol_text

    settings = resolved_settings({**args.base, "seed": args.seeds[0]})
    data = prepare_data(settings)
    text = protocol_text(settings, data, args.clients).rstrip(".")
    forms = "; ".join(
        sorted(
            {form_text(row_form(r)) for r in rows} or {form_text(loss_form(args.base))}
        )
    )
    if args.validation is None:
        rate = f"lr {settings.learning_rate:g} for every method (not tuned)"
    else:
        rate = "lr tuned per method and code length (below)"
    tuning = ""
    if args.validation is not None:
        tuning = " " + tuning_text(
            args.validation, args.lr_grid, args.tune_seed, args.max_extensions
        )
    return (
        f"Protocol: {text}. For the methods that are one model (fedavg mode, FedAvg, "
        "centralized) also the union protocol: the server's queries against all "
        f"partitions. Federation: {args.clients} clients, Dirichlet "
        f"{settings.dirichlet_alpha} (the seed also draws the partition), "
        f"{settings.rounds} rounds of {settings.local_epochs} local epochs, "
        f"{rate}, batch {settings.batch_size}. Prototype "
        f"contrast (Eqs. 9-10) and the prototype terms' weight: {forms}. Floor: the "
        "untrained network (round 0). Ceiling: 'centralized', the same network "
        "trained on the union of the clients' local databases for the same number "
        f"of epochs.{tuning}"
    )


def tables(
    agg: list[dict[str, Any]], args: argparse.Namespace, rows: list[dict[str, Any]]
) -> str:
    """Markdown tables: one per metric, methods x bits; completion; cost."""
    main = {(a["method"], a["bits"]): a for a in agg if a["table"] == "main"}
    alpha = args.base["dirichlet-alpha"]
    n = typical_seeds(agg)
    lines: list[str] = [protocol(args, rows), "", seeds_line(agg), ""]
    titles = (
        (LOCAL, "Ours (per-client, local queries): local queries vs local database"),
        (SQ_CDB, "Server queries vs each client's own database, averaged over clients"),
        (UNION, "Union protocol (one model only): server queries vs all partitions"),
    )
    header = table_head("method", *(f"{b} bits" for b in args.bits))
    for key, title in titles:
        lines += [
            f"**{title}** (mAP@ALL %, mean ± std over seeds; {args.clients} clients, "
            f"Dirichlet {alpha})",
            "",
            *header,
        ]
        first = next(iter(METHODS))
        if key != UNION:  # the untrained network (round 0 of the PFMH runs)
            cells = [
                _cell(main.get((first, b)), "initial_" + key, n) for b in args.bits
            ]
            lines.append(table_row("untrained (round 0)", *cells))
        for method in METHODS:
            cells = [_cell(main.get((method, b)), key, n) for b in args.bits]
            if all(c == MISSING for c in cells):
                continue
            lines.append(table_row(method, *cells))
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
            *table_head("method", *(f"Dirichlet {x}" for x in [alpha, *alphas])),
        ]
        for method in COMPLETION_METHODS:
            cells = [_cell(main.get((method, args.completion_bits)), LOCAL, n)]
            cells += [_cell(find.get((method, x)), LOCAL, n) for x in alphas]
            lines.append(table_row(method, *cells))
        lines.append("")
    if args.validation is not None:
        lines += tuning_table(rows, args.grids, chosen_rates(rows, args.grids))
    lines += precision_table(main, args)
    lines += sensitivity_table(agg, args, n)
    lines += [
        "**Cost per round** (means over runs)",
        "",
        *table_head(
            "method", "bits", "train s/round", "down KiB/client", "up KiB/client"
        ),
    ]
    for method in METHODS:
        for b in args.bits:
            a = main.get((method, b))
            if a is None or a.get("train_round_s_mean") is None:
                continue
            lines.append(
                table_row(
                    method,
                    b,
                    f"{a['train_round_s_mean'][0]:.2f}",
                    f"{a['down_bytes_per_client_mean'][0] / 1024:.1f}",
                    f"{a['up_bytes_per_client_mean'][0] / 1024:.1f}",
                )
            )
    return "\n".join(lines)


def precision_table(
    main: dict[tuple[str, int], dict[str, Any]], args: argparse.Namespace
) -> list[str]:
    """Top-K precision of the global protocol per code length (paper Fig. 4)."""
    lines: list[str] = []
    for bits in args.bits:
        have = {
            m: main[(m, bits)]
            for m in METHODS
            if main.get((m, bits), {}).get(PRECISION)
        }
        if not have:
            continue
        ks = sorted({k for a in have.values() for k in a[PRECISION]}, key=int)
        lines += [
            f"**Top-K precision, {bits} bits** (global protocol: server queries vs "
            "each client's database, P@K averaged over clients, %; K above a "
            "client's database size is clipped to it)",
            "",
            *table_head("method", *(f"P@{k}" for k in ks)),
        ]
        for method, a in have.items():
            cells = []
            for k in ks:
                v = a[PRECISION].get(k)
                cells.append(MISSING if v is None else pm(*v, scale=100))
            lines.append(table_row(method, *cells))
        lines.append("")
    return lines


def sensitivity_table(
    agg: list[dict[str, Any]], args: argparse.Namespace, n: int = 3
) -> list[str]:
    """Tabulate mAP against alpha (beta at its default), then beta, per code length.

    ``n``: the table's typical seed count (a cell over another count says so).
    """
    from experiments.tables.pfmh_figures import sensitivity_bits, sensitivity_points

    defaults = loss_defaults(args.base)
    lines: list[str] = []
    for bits in sensitivity_bits(agg):
        points = sensitivity_points(agg, bits=bits, defaults=defaults)
        lines += [
            f"**Sensitivity to the loss weights of Eq. 11** ({SENSITIVITY_METHOD}, "
            f"{bits} bits, mAP@ALL %; one weight varied, the other at its default; "
            "the point at both defaults is the main table's run)",
            "",
            *table_head(
                "varied",
                "value",
                "global protocol (per client)",
                "ours (per-client, local)",
            ),
        ]
        for name, idx in (("alpha", 0), ("beta", 1)):
            fixed = defaults[1 - idx]
            for key in sorted(k for k in points if k[1 - idx] == fixed):
                a = points[key]
                mark = " (default)" if key == defaults else ""
                lines.append(
                    table_row(
                        name,
                        f"{key[idx]:g}{mark}",
                        _cell(a, SQ_CDB, n),
                        _cell(a, LOCAL, n),
                    )
                )
        lines.append("")
    return lines


def write_outputs(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """Write summary.json and table.md from the rows so far; return the tables.

    ``rows`` holds every run, tuning runs included; the tables aggregate only
    :func:`experiments.tables.pfmh_tuned.table_rows` (each cell at its rate).
    """
    chosen = chosen_rates(rows, args.grids)
    agg = aggregate(table_rows(rows, chosen))
    summary = {
        "grid": "pfmh",
        "base_config": args.base,
        "clients": args.clients,
        "metric": "mAP@ALL (mean, sample std over seeds; fractions)",
        "tuning": (
            None
            if args.validation is None
            else tuning_record(args.validation, args.grids, chosen, args.tune_seed)
        ),
        "rows": rows,
        "aggregate": agg,
    }
    return write_tables(args.out, summary, tables(agg, args, rows))


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    grids = load_grids(
        "pfmh",
        "tables",
        ("seeds", "bits", "completion-alphas", "loss-alphas", "loss-betas"),
    )
    parser.add_argument("--seeds", default=csv(grids["seeds"]))
    parser.add_argument("--bits", default=csv(grids["bits"]))
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--cpus", type=int, default=1, help="Ray CPUs per run")
    parser.add_argument(
        "--only", choices=["main", "completion", "sensitivity"], default=None
    )
    parser.add_argument("--completion-alphas", default=csv(grids["completion-alphas"]))
    parser.add_argument("--completion-bits", type=int, default=32)
    parser.add_argument("--sensitivity-bits", type=int, default=64)
    parser.add_argument("--loss-alphas", default=csv(grids["loss-alphas"]))
    parser.add_argument("--loss-betas", default=csv(grids["loss-betas"]))
    parser.add_argument(
        "--lr-grid",
        default=None,
        help="tune each main-table cell's learning rate over these rates on a "
        "validation split (experiments/tables/pfmh_tuned.py); needs --only main and "
        "a data-path with a fixed split. Without it every run uses the run "
        "config's rate",
    )
    parser.add_argument("--tune-seed", type=int, default=99)
    parser.add_argument("--val-fraction", type=float, default=VALIDATION_FRACTION)
    parser.add_argument("--max-extensions", type=int, default=2)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    from experiments.lib.overrides import checked_overrides

    args.seeds = flag_list(parser, "--seeds", args.seeds, SEEDS)
    args.bits = flag_list(parser, "--bits", args.bits, COUNTS)
    args.completion_alphas = flag_list(
        parser, "--completion-alphas", args.completion_alphas, POSITIVE
    )
    args.loss_alphas = flag_list(parser, "--loss-alphas", args.loss_alphas, POSITIVE)
    args.loss_betas = flag_list(parser, "--loss-betas", args.loss_betas, POSITIVE)
    args.base = checked_overrides(args.set, preset())  # fails before any run
    args.out = args.out or ROOT / "docs" / "results" / "pfmh"
    check_tuning_flags(parser, args)
    args.out.mkdir(parents=True, exist_ok=True)
    rows_path = args.out / "rows.jsonl"
    known = load_rows(rows_path) if args.resume else []
    if args.resume:
        check_resumed_form(known, args.base)
        if args.lr_grid is None and any(r.get("kind") in (TUNE, TABLE) for r in known):
            parser.error(
                f"--resume into {args.out}, a table tuned on validation, without "
                "--lr-grid would add untuned runs to it; accepted: the same "
                "--lr-grid, or another --out"
            )
    args.validation = None
    if args.lr_grid is not None:
        try:
            args.validation = write_validation_file(
                Path(args.base["data-path"]),
                args.out / "runs" / "validation",
                fraction=args.val_fraction,
                seed=args.tune_seed,
            )
        except (ValueError, OSError) as exc:
            parser.error(str(exc))
    args.grids = (
        {cell_name(m, b): Grid(list(args.lr_grid)) for b in args.bits for m in METHODS}
        if args.validation is not None
        else {}
    )
    sweep = sweep_parts(args, known)
    rows, failed = run_tuning(
        [("tune", c, lr, e) for c, g in args.grids.items() for lr, e in g.settings()],
        known,
        args.grids,
        max_extensions=args.max_extensions,
        resume=args.resume,
        metric=SQ_CDB,
        **sweep,
    )
    rows, more_failed = run_sweep(jobs(args), resume=True, **sweep)
    failed += more_failed
    print(write_outputs(rows, args))
    from experiments.tables.pfmh_figures import (
        plot_map_per_round,
        plot_precision_at_k,
        plot_sensitivity,
        sensitivity_bits,
    )

    kept = table_rows(rows, chosen_rates(rows, args.grids))
    agg = aggregate(kept)
    for bits in args.bits:
        path = plot_map_per_round(kept, args.out, bits=bits)
        print(f"mAP per round, {bits} bits: {path or 'no kept run directory'}")
        path = plot_precision_at_k(agg, args.out, bits=bits)
        print(f"top-K precision, {bits} bits: {path or 'no row with precision@K'}")
    for bits in sensitivity_bits(agg):
        path = plot_sensitivity(
            agg, args.out, bits=bits, defaults=loss_defaults(args.base)
        )
        print(f"sensitivity to alpha and beta, {bits} bits: {path}")
    exit_if_failed(failed)  # the tables hold what finished


def check_tuning_flags(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> None:
    """Parse the tuning flags; one clear line before any run when they do not fit."""
    if args.lr_grid is None:
        return
    args.lr_grid = flag_list(parser, "--lr-grid", args.lr_grid, POSITIVE)
    if args.only != "main":
        parser.error(
            f"--lr-grid with --only {args.only}: only the main table is tuned; "
            "accepted: --only main"
        )
    error = tuning_flags_error(
        tune_seed=args.tune_seed,
        seeds=args.seeds,
        val_fraction=args.val_fraction,
        max_extensions=args.max_extensions,
    )
    if error is not None:
        parser.error(error)
    if args.base.get("dataset") != "npz" or not args.base.get("data-path"):
        parser.error(
            f"--lr-grid on dataset {args.base.get('dataset')!r}: tuning draws its "
            "validation split from a data file with a fixed query split; accepted: "
            "--set dataset=npz --set data-path=<such an .npz> (docs/data.md)"
        )


def sweep_parts(args: argparse.Namespace, known: list[dict[str, Any]]) -> dict:
    """``run_sweep``'s arguments for the tuning and the table runs.

    A tuning job is ``("tune", cell, lr, epochs)``; a table job is a
    :func:`jobs` dict. In a tuned sweep a main-table run is named with its cell's
    chosen rate, so a resumed sweep whose choice moved runs it anew.
    """

    def rate(job: dict[str, Any]) -> float | None:
        if not args.grids or job["table"] != "main":
            return None
        cell = cell_name(job["method"], job["bits"])
        chosen = tuned_setting(known, cell, args.grids[cell], metric=SQ_CDB)
        if chosen is None:
            raise RuntimeError(f"{cell}: tuning runs missing for its grid")
        return chosen[0]

    def name(job: tuple | dict[str, Any]) -> str:
        if isinstance(job, tuple):
            return f"tune-{job[1]}-lr{job[2]:g}".replace(", ", "-").replace(" ", "")
        lr = rate(job)
        return job_name(job) if lr is None else f"{job_name(job)}-lr{lr:g}"

    def run(job: tuple | dict[str, Any]) -> dict[str, Any]:
        if isinstance(job, tuple):
            row = run_tune(job, name(job))
        else:
            lr = rate(job)
            overrides = {} if lr is None else {"learning-rate": lr}
            row = {
                **run_job(job, args, overrides=overrides, name=name(job)),
                **({} if lr is None else {"kind": TABLE}),
            }
        known.append(row)
        return row

    def run_tune(job: tuple, run_name: str) -> dict[str, Any]:
        _, cell, lr, _epochs = job
        assert args.validation is not None  # tuning runs only with a split
        method, bits = next(
            (m, b) for m in METHODS for b in args.bits if cell_name(m, b) == cell
        )
        spec = {
            "table": "tune",
            "method": method,
            "alpha": args.base["dirichlet-alpha"],
            "bits": bits,
            "seed": args.tune_seed,
        }
        overrides = {"learning-rate": lr, "data-path": args.validation.path}
        row = run_job(spec, args, overrides=overrides, name=run_name)
        return {
            **row,
            "kind": TUNE,
            "method": cell,
            "pfmh_method": method,
            "scored_on": "validation",
        }

    def describe(row: dict[str, Any]) -> str:
        score = row.get(SQ_CDB)
        text = "-" if score is None else f"{score:.4f}"
        return f"global-protocol mAP@ALL {text} ({row['seconds']:.0f} s)"

    return {
        "run": run,
        "rows_path": args.out / "rows.jsonl",
        "name": name,
        "describe": describe,
        "after_row": lambda rows: write_outputs(rows, args),
        "workers": args.jobs,
    }

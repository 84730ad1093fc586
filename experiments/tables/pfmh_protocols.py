"""PFMH against its baselines under three protocols, each rate tuned on validation.

``python -m experiments.pfmh protocols --seeds 0,1,2,3,4 --lr-grid 1e-4,3e-4
--out docs/results/pfmh-protocols --set dataset=npz --set 'data-path="wiki.npz"'
--set 'modalities="image,text"'`` runs, per method, learning rate and seed, one
in-process mini-federation built on the library
(:func:`experiments.tables.pfmh_contrast.mini_federation`: the same partitions,
local splits and initial weights as a Flower run of that config) and scores every
client's model three ways:

* **validation** (every choice is made here): the clients' local queries (drawn
  from the training side, seeded, never trained on) against each client's local
  database, mAP@ALL averaged over clients without weights;
* **global** (reported): the server's queries (the file's fixed split) against each
  client's whole partition -- PFMH's global protocol;
* **paper** (reported): the server's queries against *every* training item of the
  file (2,173 on Wikipedia), both encoded with each client's model, averaged over
  clients -- the protocol closest to the paper's ("the trained model on each
  client" encodes the queries; the retrieval set is the training set). It needs
  every training input on every client: an evaluation of a simulation, not
  something a deployment could run.

Methods (``--methods``): ``pfmh`` (personalized, every loss term), ``wo-p`` (the
same model and losses without prototypes, personalized: each client trains alone),
``fedavg`` (``wo-p``'s model and losses, averaged every round, weighted by rows),
``central`` (the tuned centralized ceiling: one client holding every training row,
the same epochs), and the Table 2 ablations ``wo-pe``, ``wo-ls``, ``wo-ll``
(``pfmh.variant``), and ``pfmh-g0.3`` / ``pfmh-g0.1``: PFMH with both prototype
terms weighted by gamma = 0.3 / 0.1 (``pfmh.prototype-weight``; the paper's is 1),
each at its own tuned rate, so that the weight is chosen on validation too
(``summary.json["tuning"]["prototype_weight"]``). The untrained floor is each seed's
initial model (0 rounds).

Each method's rate is the grid value with the best mean validation mAP over the
seeds (``chosen_on_edge`` is recorded when it is a grid end); the reported numbers
are that rate's runs. Paired verdicts (:mod:`experiments.lib.verdict`) of PFMH
against each baseline on both reported protocols go to ``<out>/summary.json`` and
``<out>/table.md``; rows to ``<out>/rows.jsonl`` (``--resume`` skips those there).
``--jobs 2`` runs two mini-federations at a time (a process and one torch thread
each).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from experiments.lib.grids import POSITIVE, SEEDS, csv, flag_list, load_grids
from experiments.lib.overrides import parse_overrides, resolved_settings
from experiments.lib.runner import load_rows, run_sweep, write_tables
from experiments.lib.tables import MISSING, mean_sd_cell, table_head, table_row
from experiments.lib.verdict import paired_verdict
from experiments.tables.pfmh_contrast import BASE, mini_federation

#: Method -> (config overrides, clients: None = --clients).
METHODS: dict[str, tuple[dict[str, Any], int | None]] = {
    "pfmh": ({"pfmh.mode": "personalized", "pfmh.variant": "full"}, None),
    "wo-p": ({"pfmh.mode": "personalized", "pfmh.variant": "wo-p"}, None),
    "fedavg": ({"pfmh.mode": "fedavg", "pfmh.variant": "wo-p"}, None),
    "central": ({"pfmh.mode": "personalized", "pfmh.variant": "wo-p"}, 1),
    "wo-pe": ({"pfmh.mode": "personalized", "pfmh.variant": "wo-pe"}, None),
    "wo-ls": ({"pfmh.mode": "personalized", "pfmh.variant": "wo-ls"}, None),
    "wo-ll": ({"pfmh.mode": "personalized", "pfmh.variant": "wo-ll"}, None),
}
#: PFMH with its prototype terms (Eqs. 9-10) weighted by gamma: the tuned weight.
PROTOTYPE_WEIGHTS = (0.3, 0.1)


def weighted(g: float) -> str:
    """Return the method name of PFMH at prototype weight ``g`` (``pfmh-g0.3``)."""
    return f"pfmh-g{g:g}"


METHODS.update(
    {
        weighted(g): (
            {
                "pfmh.mode": "personalized",
                "pfmh.variant": "full",
                "pfmh.prototype-weight": g,
            },
            None,
        )
        for g in PROTOTYPE_WEIGHTS
    }
)
LABELS = {
    "floor": "untrained (initial model, floor)",
    "pfmh": "PFMH (personalized)",
    "wo-p": "w/o-P (local only)",
    "fedavg": "FedAvg (same model, w/o-P losses)",
    "central": "centralized (ceiling)",
    "wo-pe": "w/o-PE (no prototype enhancement, FedProto-like)",
    "wo-ls": "w/o-Ls (no similarity matching)",
    "wo-ll": "w/o-Ll (no information preservation)",
    **{weighted(g): f"PFMH, prototype terms x {g:g}" for g in PROTOTYPE_WEIGHTS},
}
PROTOCOLS = ("validation_map_all", "test_map_all", "paper_map_all")
#: Job: (method, learning rate, seed); the floor's rate is 0 (no training).
Job = tuple[str, float, int]


def run_job(job: Job, base: dict[str, Any], clients: int, threads: int) -> dict:
    """One mini-federation (or the floor: 0 rounds) -> its row."""
    torch.set_num_threads(threads)
    method, lr, seed = job
    over, n = METHODS.get(method, ({"pfmh.variant": "full"}, None))
    config = {**base, **over, "seed": seed}
    if method != "floor":
        config["learning-rate"] = lr
    settings = resolved_settings(config)
    return {
        "name": job_name(job),
        "method": method,
        "learning_rate": lr,
        "seed": seed,
        **mini_federation(settings, n or clients, train=method != "floor"),
    }


def job_name(job: Job) -> str:
    """Return the job's unique name (progress lines, rows)."""
    method, lr, seed = job
    return f"{method} s{seed}" if method == "floor" else f"{method} lr{lr:g} s{seed}"


def choose_rates(rows: list[dict], seeds: Sequence[int]) -> dict[str, dict]:
    """Per method: the rate with the best mean validation mAP over ``seeds``.

    Only rates run on every seed count; ``chosen_on_edge``: the choice is the
    smallest or largest of the method's rates (with more than one).
    """
    out = {}
    for method in sorted({r["method"] for r in rows} - {"floor"}):
        means = {}
        for lr in sorted({r["learning_rate"] for r in rows if r["method"] == method}):
            vals = {
                r["seed"]: r["validation_map_all"]
                for r in rows
                if r["method"] == method and r["learning_rate"] == lr
            }
            if set(seeds) <= set(vals):
                means[lr] = float(np.mean([vals[s] for s in seeds]))
        if not means:
            continue
        best = max(means, key=lambda v: (means[v], -v))
        out[method] = {
            "chosen": best,
            "validation_means": {f"{k:g}": v for k, v in means.items()},
            "rates": sorted(means),
            "chosen_on_edge": len(means) > 1 and best in (min(means), max(means)),
        }
    return out


def choose_prototype_weight(chosen: dict[str, dict]) -> dict[str, Any] | None:
    """PFMH's prototype weight: the best validation mean, each at its chosen rate.

    ``None`` unless PFMH ran at weight 1 and at least one other weight.
    """
    runs = {1.0: "pfmh", **{g: weighted(g) for g in PROTOTYPE_WEIGHTS}}
    means = {
        g: chosen[m]["validation_means"][f"{chosen[m]['chosen']:g}"]
        for g, m in runs.items()
        if m in chosen
    }
    if "pfmh" not in chosen or len(means) < 2:
        return None
    best = max(means, key=lambda g: (means[g], g))
    return {"chosen": best, "validation": {f"{g:g}": v for g, v in means.items()}}


def extension(chosen: dict[str, dict]) -> dict[str, float]:
    """Return method -> the next rate past the grid end its choice sits on."""
    out = {}
    for method, c in chosen.items():
        tried = c["rates"]
        if not c["chosen_on_edge"]:
            continue
        if c["chosen"] == tried[0]:
            out[method] = tried[0] * tried[0] / tried[1]
        else:
            out[method] = tried[-1] * tried[-1] / tried[-2]
    return out


def write(
    rows: list[dict],
    base: dict[str, Any],
    args: Any,
    grid: list[float],
    seeds: list[int],
) -> str:
    """Table and summary from every row there."""
    chosen = choose_rates(rows, seeds)
    picked = [r for r in rows if r["method"] == "floor" and r["seed"] in seeds] + [
        r
        for r in rows
        if r["method"] in chosen
        and r["seed"] in seeds
        and r["learning_rate"] == chosen[r["method"]]["chosen"]
    ]
    order = ["floor", *[m for m in METHODS if m in chosen]]
    lines = [
        "Protocol: in-process mini-federation on the library (no Flower), "
        f"{args.clients} clients, {base}. Each method's learning rate chosen on "
        f"validation from {grid} (mean over seeds), a choice on a grid end extended "
        f"by the grid's step at most {args.max_extensions} time(s) (the rates each "
        "method tried are in summary.json); validation = the clients' local "
        "queries against each client's local database; global = the server's "
        "queries against each client's partition (PFMH's global protocol); paper = "
        "the server's queries against every training item of the file, each "
        "client's model (the paper's protocol). mAP@ALL %, mean ± std over seeds, "
        "averaged over clients without weights.",
        "",
        *table_head("method", "rate", "seeds", "validation", "global", "paper"),
    ]
    for method in order:
        got = [r for r in picked if r["method"] == method]
        if not got:
            continue
        rate = "-" if method == "floor" else f"{chosen[method]['chosen']:g}"
        if method != "floor" and chosen[method]["chosen_on_edge"]:
            rate += " (grid edge)"
        lines.append(
            table_row(
                LABELS[method],
                rate,
                ",".join(str(r["seed"]) for r in sorted(got, key=lambda r: r["seed"])),
                *(
                    mean_sd_cell([r[p] for r in got], scale=100) or MISSING
                    for p in PROTOCOLS
                ),
            )
        )
    verdicts: dict[str, Any] = {}

    def claim(a: str, b: str, text: str) -> None:
        """Paired verdict of ``a > b`` on both reported protocols, if both ran."""
        if a not in chosen or b not in chosen:
            return
        for metric, what in (("paper_map_all", "paper"), ("test_map_all", "global")):
            x = {r["seed"]: 100 * r[metric] for r in picked if r["method"] == a}
            y = {r["seed"]: 100 * r[metric] for r in picked if r["method"] == b}
            if set(x) & set(y):
                v = paired_verdict(x, y, "greater")
                verdicts[f"{a}>{b} ({what})"] = v.to_dict()
                lines.extend(["", f"{text}, {what} protocol: {v.text()}."])

    for other in ("fedavg", "wo-p", "wo-pe", "wo-ls", "wo-ll"):
        claim("pfmh", other, f"PFMH > {LABELS[other]}")
    weight = choose_prototype_weight(chosen)
    if weight:
        lines += [
            "",
            f"PFMH's prototype weight chosen on validation (each weight at its own "
            f"tuned rate): {weight['chosen']:g} (validation means "
            + ", ".join(f"{g}: {100 * v:.2f}" for g, v in weight["validation"].items())
            + ").",
        ]
    for g in PROTOTYPE_WEIGHTS:
        method = weighted(g)
        claim(method, "pfmh", f"{LABELS[method]} > PFMH (x 1)")
    secs = sum(r["train_seconds"] for r in rows)
    lines += ["", f"Training wall time: {secs / 60:.1f} min over {len(rows)} runs."]
    summary = {
        "setup": {**base, "clients": args.clients},
        "tuning": {
            "split": "the clients' local queries (clients.data.local_query_split, "
            "seeded by the run seed) against their local databases",
            "grid": {"learning-rate": grid},
            "max_extensions": args.max_extensions,
            "seeds": sorted({r["seed"] for r in rows}),
            "chosen": chosen,
            "prototype_weight": weight,
        },
        "rows": rows,
        "verdicts": verdicts,
    }
    return write_tables(args.out, summary, "\n".join(lines))


def main() -> None:
    """CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    grids = load_grids("pfmh", "protocols", ("seeds", "lr-grid"))
    parser.add_argument("--seeds", default=csv(grids["seeds"]))
    parser.add_argument("--lr-grid", default=csv(grids["lr-grid"]))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=1, choices=(1, 2))
    parser.add_argument(
        "--max-extensions",
        type=int,
        default=1,
        help="a method whose chosen rate is a grid end tries the next rate past it "
        "(the grid's step), at most this often",
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    seeds = flag_list(parser, "--seeds", args.seeds, SEEDS)
    grid = flag_list(parser, "--lr-grid", args.lr_grid, POSITIVE)
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        parser.error(f"--methods {unknown}: accepted are {', '.join(METHODS)}")
    base = {**BASE, "rounds": args.rounds, **parse_overrides(args.set)}
    resolved_settings({**base, "seed": seeds[0]})  # a bad value fails here
    args.out.mkdir(parents=True, exist_ok=True)
    jobs: list[Job] = [("floor", 0.0, s) for s in seeds] + [
        (m, lr, s) for m in methods for lr in grid for s in seeds
    ]
    # each run in its own process (one torch thread): the sweep's threads only wait
    with ProcessPoolExecutor(args.jobs) as pool:

        def run(job: Job) -> dict[str, Any]:
            return pool.submit(run_job, job, base, args.clients, 1).result()

        def sweep(todo: list[Job], resume: bool) -> None:
            run_sweep(
                todo,
                run,
                rows_path=args.out / "rows.jsonl",
                resume=resume,
                name=job_name,
                describe=lambda r: (
                    f"val {r['validation_map_all']:.4f} global "
                    f"{r['test_map_all']:.4f} paper {r['paper_map_all']:.4f} "
                    f"({r['train_seconds']:.0f} s)"
                ),
                workers=args.jobs,
            )

        sweep(jobs, args.resume)
        for _ in range(args.max_extensions):
            rows = [
                r
                for r in load_rows(args.out / "rows.jsonl")
                if r["method"] in methods or r["method"] == "floor"
            ]
            chosen = choose_rates(rows, seeds)
            # a method extends at most --max-extensions times in all (resumes too)
            more = {
                m: lr
                for m, lr in extension(chosen).items()
                if sum(r not in grid for r in chosen[m]["rates"]) < args.max_extensions
            }
            if not more:
                break
            print(f"grid edges: extending {more}", flush=True)
            sweep([(m, lr, s) for m, lr in more.items() for s in seeds], True)
    print(write(load_rows(args.out / "rows.jsonl"), base, args, grid, seeds))

"""DPHE against the number of users (the shape of the paper's Fig. 4): mAP and cost.

``python -m experiments.dphe users --users 5,10,25,50,100 --seeds 0,1,2 [--panel left]``
runs, for each number of users N, the plaintext / DPHE pair of
:mod:`experiments.tables.dphe_map` with N IID clients: FedAvg of DPSH on digits (the
``mlp``, 32 bits), 90% element-wise top-k sparsity, the same updates once in
plaintext and once summed under DPHE with a fresh 2048-bit key per run (DJN
obfuscators). Two panels, as the paper's Fig. 4:

``--panel right`` (default)
    The digits database is split into N disjoint parts, so each user holds fewer
    samples as N grows ("users own the decreasing number of non-duplicated images").
``--panel left``
    N = 5k users: k differently seeded IID five-way splits of the database
    (``partition-repeats = k``), so each user holds a fixed fifth of it and every
    sample is held by k users ("users own the fixed number of partially duplicated
    images"). Only the first split's five users publish database codes, so the
    retrieval database holds every sample once for every N. N must be a multiple
    of 5; written to ``docs/results/dphe-digits-users-repeated`` by default.

The paper trains a linear SVM on ResNet-152 features of Caltech101 (not available
here; nothing is downloaded); this is its experiment's shape on this project's
task, not its numbers.

Beside them, per seed, the untrained floor and the centralized ceiling
(:func:`experiments.tables.dphe_map.run_reference`; neither depends on N).

Writes ``<out>/rows.jsonl`` (resumable), ``<out>/reference.jsonl``, ``<out>/table.md``
and ``<out>/users.png`` (mAP@ALL and the mean round wall time against N, plaintext
and DPHE, the floor and the ceiling as lines).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crypto.keys import PRODUCTION_KEY_BITS
from experiments.lib.grids import COUNTS, SEEDS, csv, flag_list, load_grids
from experiments.lib.overrides import resolved_settings
from experiments.lib.runner import exit_if_failed, load_rows, run_sweep
from experiments.lib.runs import ROOT
from experiments.lib.tables import table_head, table_row
from experiments.tables.dphe_map import (
    COMMON,
    mean_std,
    reference_table,
    run_pair,
    run_references,
)


def job_name(users: int, seed: int) -> str:
    """``n<users>-s<seed>``: one (N, seed) pair's name."""
    return f"n{users}-s{seed}"


def run_users(users: int, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Run the plaintext / DPHE pair with ``users`` clients; return its row."""
    pair_args = argparse.Namespace(
        rounds=args.rounds,
        clients=users,
        key_bits=args.key_bits,
        # element-wise top-k without error feedback, as its published table ran
        layout="element",
        error_feedback="off",
        dense=False,
        obfuscators=args.obfuscators,
        out=args.out / "runs" / f"n{users}",  # git-ignored, as every runs/ folder
    )
    repeats = repeats_of(users, args.panel)
    config = {"partition-repeats": repeats} if repeats > 1 else None
    row = run_pair(seed, args.sparsity, pair_args, config)
    return {"users": users, "panel": args.panel, "repeats": repeats, **row}


#: Users per split in the left panel (the paper: random five-way splits).
LEFT_SPLIT = 5


def repeats_of(users: int, panel: str) -> int:
    """``partition-repeats`` of N users: N / 5 in the left panel, else 1."""
    return users // LEFT_SPLIT if panel == "left" else 1


def table(
    rows: list[dict[str, Any]],
    args: argparse.Namespace,
    refs: Sequence[dict[str, Any]] = (),
) -> str:
    """Markdown: the protocol, per N mAP plain vs DPHE, difference, costs; the refs."""
    split = (
        "split IID into N disjoint client partitions (each holds ~1/N of the "
        "database: the paper's Fig. 4 right panel)"
        if args.panel == "right"
        else f"split IID into {LEFT_SPLIT} parts N/{LEFT_SPLIT} times, differently "
        f"seeded (`partition-repeats` = N/{LEFT_SPLIT}), so each of the N users holds "
        f"~1/{LEFT_SPLIT} of the database and every sample is held by "
        f"N/{LEFT_SPLIT} users (the paper's Fig. 4 left panel); only the first "
        f"split's {LEFT_SPLIT} users publish database codes, so the retrieval "
        "database holds every sample once"
    )
    per_user = LEFT_SPLIT if args.panel == "left" else None
    lines = [
        f"Protocol: digits (scikit-learn), 10% of it the server's queries, the rest "
        f"{split}; FedAvg of DPSH, `mlp`, 32 bits, "
        f"{args.rounds} rounds, {args.sparsity:.0%} element-wise top-k sparsity; "
        f"DPHE with {args.key_bits}-bit keys, {args.obfuscators} obfuscators, "
        "num-examples weights; every client trains each round. Flower simulation "
        "(Ray) on this machine's CPU. mAP@ALL %, mean ± std over seeds.",
        "",
        *table_head(
            "users N",
            "seeds",
            "samples per user",
            "plaintext mAP@ALL %",
            "DPHE mAP@ALL %",
            "DPHE - plain (points), per seed",
            "round s plain -> DPHE",
            "upload KB/user plain -> DPHE",
        ),
    ]
    for users in sorted({r["users"] for r in rows}):
        rs = sorted((r for r in rows if r["users"] == users), key=lambda r: r["seed"])
        diffs = ", ".join(f"{r['diff_points']:+.3f}" for r in rs)
        lines.append(
            table_row(
                users,
                ",".join(str(r["seed"]) for r in rs),
                f"~{round(args.num_database / (per_user or users))}",
                mean_std(rs, "plain_map_all", 100),
                mean_std(rs, "dphe_map_all", 100),
                diffs,
                f"{mean_std(rs, 'plain_train_round_s', 1)} -> "
                f"{mean_std(rs, 'dphe_train_round_s', 1)}",
                f"{mean_std(rs, 'plain_up_bytes_per_client', 1e-3)} -> "
                f"{mean_std(rs, 'dphe_up_bytes_per_client', 1e-3)}",
            )
        )
    return "\n".join(lines + reference_table(refs))


def plot(
    rows: list[dict[str, Any]], path: Path, refs: Sequence[dict[str, Any]] = ()
) -> None:
    """mAP@ALL and round time against N, plaintext and DPHE (mean ± std).

    The floor and the ceiling (``refs``), which do not depend on N, are lines.
    """
    import numpy as np

    from server.plots import plt, save_figure

    users = sorted({r["users"] for r in rows})
    fig, (acc, cost) = plt.subplots(1, 2, figsize=(10, 4))
    for name, style in (("plain", "o-"), ("dphe", "s--")):
        for ax, key, scale in (
            (acc, f"{name}_map_all", 100.0),
            (cost, f"{name}_train_round_s", 1.0),
        ):
            vals = [
                [scale * r[key] for r in rows if r["users"] == n and r.get(key)]
                for n in users
            ]
            ax.errorbar(
                users,
                [np.mean(v) for v in vals],
                yerr=[np.std(v) for v in vals],
                fmt=style,
                capsize=3,
                label="plaintext" if name == "plain" else "DPHE",
            )
    for key, style, label in (
        (
            ("ceiling_map_all", ":", "centralized (ceiling)"),
            ("floor_map_all", "-.", "untrained (floor)"),
        )
        if refs
        else ()
    ):
        acc.axhline(
            100 * np.mean([r[key] for r in refs]),
            linestyle=style,
            color="grey",
            label=label,
        )
    acc.set(xlabel="users N", ylabel="mAP@ALL %", title="retrieval quality")
    cost.set(xlabel="users N", ylabel="round wall time (s)", title="cost")
    for ax in (acc, cost):
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(users, [str(n) for n in users])
        ax.legend()
        ax.grid(alpha=0.3)
    save_figure(fig, path)


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    grids = load_grids("dphe", "users", ("seeds", "users"))
    parser.add_argument("--users", default=csv(grids["users"]))
    parser.add_argument("--seeds", default=csv(grids["seeds"]))
    parser.add_argument("--sparsity", type=float, default=0.9)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--key-bits", type=int, default=2048, choices=PRODUCTION_KEY_BITS
    )
    parser.add_argument("--obfuscators", default="djn", choices=("full", "djn"))
    parser.add_argument(
        "--panel",
        choices=("right", "left"),
        default="right",
        help="right: N disjoint parts; left: N = 5k users, k repeated 5-way splits",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    users = flag_list(parser, "--users", args.users, COUNTS)
    if min(users) < 3:
        parser.error(f"--users {args.users}: DPHE needs at least 3 users per round")
    if args.panel == "left" and any(n % LEFT_SPLIT for n in users):
        parser.error(
            f"--users {args.users} with --panel left: every N must be a multiple of "
            f"{LEFT_SPLIT} (N = {LEFT_SPLIT}k users, k repeated {LEFT_SPLIT}-way "
            "splits)"
        )
    if args.out is None:
        name = "dphe-digits-users" + ("-repeated" if args.panel == "left" else "")
        args.out = ROOT / "docs" / "results" / name
    if not 0.0 <= args.sparsity < 1.0:
        parser.error(f"--sparsity {args.sparsity}: must be in [0, 1)")
    rows_path = args.out / "rows.jsonl"
    done = load_rows(rows_path) if rows_path.exists() else []
    other = {r.get("panel", "right") for r in done} - {args.panel}
    if other:
        parser.error(
            f"--out {args.out} holds rows of the {other.pop()} panel; --panel "
            f"{args.panel} resumes by N and seed, so it needs its own folder"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    from server.experiment import prepare_data

    args.num_database = prepare_data(resolved_settings(COMMON)).num_database
    seeds = flag_list(parser, "--seeds", args.seeds, SEEDS)
    refs = run_references(sorted(set(seeds)), args.rounds, args.out)
    jobs = [(n, s) for s in seeds for n in users]

    def write(rows: list[dict[str, Any]]) -> None:
        (args.out / "table.md").write_text(table(rows, args, refs) + "\n")
        plot(rows, args.out / "users.png", refs)

    rows, failed = run_sweep(
        jobs,
        lambda job: run_users(*job, args),
        rows_path=rows_path,
        resume=True,  # always: a rerun skips the pairs already done
        name=lambda job: job_name(*job),
        row_name=lambda row: job_name(row["users"], row["seed"]),
        describe=lambda row: (
            f"plain {100 * row['plain_map_all']:.2f}, DPHE "
            f"{100 * row['dphe_map_all']:.2f} ({row['diff_points']:+.3f} points)"
        ),
        after_row=write,
    )
    write(rows)
    print(table(rows, args, refs))
    exit_if_failed(failed)

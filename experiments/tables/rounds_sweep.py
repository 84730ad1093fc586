"""mAP against rounds: whether the tuned baselines catch up when trained longer.

``python -m experiments.fedhap rounds --data-path ../shared/data/mirflickr25k_tags.npz
--train-size 10000 --tuned-from docs/results/fedhap-mirflickr-paper --rounds 30
--eval-every 5 --seeds 0 --out docs/results/fedhap-mirflickr-paper-rounds`` runs each
federated method of :mod:`experiments.tables.real_data_table` (FedHAP and the FedAvg
baselines) once per seed and partitioning for ``--rounds`` rounds, evaluating every
``--eval-every`` rounds, with the learning rates that table tuned (read from
``<tuned-from>/summary.json``; FedHAP keeps its default unless that table tuned it
too) and the same data, clients and code length. Beside them, the centralized
ceiling of the same network and loss as the table's (DPSH) for ``--rounds`` x its
local epochs, at the table's tuned rate and local epochs for it (the defaults where
that table did not tune them; tuned epochs can differ from the federated methods').

One long run per method gives its whole curve: the mAP after r rounds of a 30-round
run is the mAP a run stopped at r would have (the learning rate is constant, and
nothing in a round depends on the total number of rounds), so no run is repeated
per budget.

Writes ``<out>/rows.jsonl`` (resumable: ``--resume`` skips the rows there whose
learning rate is still the tuned one; the others stay in the file, out of the table),
``<out>/table.md`` (mAP@ALL % per method and evaluation round, mean ± std over
seeds, the protocol above), ``<out>/summary.json`` and ``<out>/rounds.png``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from experiments.lib.grids import SEEDS, flag_list, split_names
from experiments.lib.runner import (
    check_resume_setup,
    exit_if_failed,
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
from experiments.lib.tables import mean_sd_cell, seeds_run, table_head, table_row
from experiments.tables.real_data_setup import (
    BASELINES,
    CENTRALIZED,
    DEFAULT_LR,
    FEDHAP_METHODS,
    METHODS,
    PARTITIONS,
    base_config,
    partition_configs,
    setup_of,
)

FEDERATED = tuple(m for m, cfg in METHODS.items() if cfg is not None)


def read_tuned(folder: Path) -> tuple[dict[str, float], dict[str, Any]]:
    """Return a real_data_table folder's tuned learning rates and its setup.

    The setup is empty where the folder records none (written before setups were).

    Raises
    ------
    SystemExit
        The folder has no ``summary.json`` with ``tuned_learning_rates``.
    """
    path = folder / "summary.json"
    try:
        summary = json.loads(path.read_text())
        tuned = summary["tuned_learning_rates"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(
            f"--tuned-from {folder}: no tuned learning rates in {path} ({exc!r}); "
            "run experiments.tables.real_data_table there first"
        ) from None
    setup = summary.get("setup")
    rates = {m: float(lr) for m, lr in tuned.items()}
    return rates, setup if isinstance(setup, dict) else {}


def read_tuned_epochs(folder: Path) -> dict[str, int]:
    """Return a real_data_table folder's tuned local epochs (none where not recorded).

    A folder tuned before local epochs were tuned records none: its runs used the
    run config's local epochs, and so do the runs here.
    """
    try:
        summary = json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    epochs = summary.get("tuned_local_epochs") or {}
    return {m: int(e) for m, e in epochs.items()}


def sweep_setup(args: argparse.Namespace) -> dict[str, Any]:
    """Return this table's setup, with the tuning of the table its rates come from.

    A ``--tuned-from`` table tuned on a validation split records it (``tuning``);
    one without that entry chose its rates on the queries it reports. The setup
    carries it on, so :mod:`experiments.tables.across_table` combines this table
    only with tables tuned the same way.
    """
    inherited = args.tuned_setup.get("tuning")
    return {**setup_of(args), **({"tuning": inherited} if inherited else {})}


def setting_of(method: str, tuned: Mapping[str, Any]) -> str:
    """Return whose tuned setting ``method`` runs at: its own, else FedHAP's.

    A FedHAP option or ablation the ``--tuned-from`` table did not tune runs at
    FedHAP's tuned rate and epochs (an ablation at FedHAP's setting); every other
    method at its own (a baseline without one is refused before any run).
    """
    if method in tuned or method not in FEDHAP_METHODS:
        return method
    return "FedHAP"


def tuning_words(tuned_setup: dict[str, Any]) -> str:
    """Return where the ``--tuned-from`` table scored its tuning runs."""
    tuning = tuned_setup.get("tuning")
    return f"on its {tuning}" if tuning else "on the queries it reports"


def retuning_note(tuned: dict[str, Any], args: argparse.Namespace) -> str:
    """Return ``", at 48 bits, not retuned at 12 bits"`` where the setups differ."""
    keys = [
        k for k in ("bits", "clients") if k in tuned and tuned[k] != getattr(args, k)
    ]
    if not keys:
        return ""
    there = " and ".join(f"{tuned[k]} {k}" for k in keys)
    here = " and ".join(f"{getattr(args, k)} {k}" for k in keys)
    return f", at {there}, not retuned at {here}"


def rounds_of(run_dir: str) -> dict[int, float]:
    """``{round: mAP@ALL}`` of a run's evaluated rounds (round 0: untrained)."""
    out = {}
    for line in (Path(run_dir) / "rounds.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("map_all") is not None:
            out[int(row["round"])] = float(row["map_all"])
    return out


def ceiling_budget(rounds: int, tuned_epochs: dict[str, int]) -> str:
    """Return the ceiling's epoch budget in words, against the federated runs'.

    The ceiling trains ``rounds`` x its own local epochs: its tuned ones where the
    ``--tuned-from`` table tuned them, which need not be the longest federated run's.
    """
    if CENTRALIZED in tuned_epochs:
        epochs = tuned_epochs[CENTRALIZED]
        return (
            f"{rounds} x {epochs} = {rounds * epochs} epochs (its local epochs tuned "
            f"there; each federated method trains {rounds} rounds x its own)"
        )
    if tuned_epochs:
        return (
            f"{rounds} x the run config's local-epochs epochs (the methods with "
            f"tuned local epochs train {rounds} rounds x their own)"
        )
    return f"{rounds} x local-epochs epochs (the federated runs' budget)"


def _inherited_words(rows: list[dict[str, Any]], tuned: Mapping[str, Any]) -> str:
    """Name the FedHAP options and ablations run at FedHAP's setting, if any."""
    names = sorted(
        {r["method"] for r in rows if setting_of(r["method"], tuned) != r["method"]}
    )
    if not names:
        return ""
    return f"{', '.join(names)} at FedHAP's rate and epochs (not tuned on their own); "


def _epochs_words(rows: list[dict[str, Any]], tuned_epochs: Mapping[str, int]) -> str:
    """Name the tuned local epochs of the methods this table ran, if any."""
    ran = {r["method"] for r in rows}
    mine = sorted((m, e) for m, e in tuned_epochs.items() if m in ran)
    if not mine:
        return ""
    return (
        "local epochs tuned there too ("
        + ", ".join(f"{m} {e}" for m, e in mine)
        + "); "
    )


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """Markdown: the protocol, then per partitioning mAP@ALL % per method and round."""
    evals = sorted({int(r) for row in rows for r in row.get("map_per_round", {})})
    ceiling = [r["map_all"] for r in rows if r["method"] == CENTRALIZED]
    lines = [
        f"Protocol: {args.data_path.name}, {args.clients} clients, {args.bits} bits, "
        f"{args.rounds} rounds, mAP@ALL evaluated every {args.eval_every} rounds "
        "(round 0 = the untrained floor) in one run per method and seed; "
        + (
            f"training on a seeded random {args.train_size} of the database rows; "
            if args.train_size
            else ""
        )
        + "learning rates: the baselines' and the ceiling's tuned in "
        f"{args.tuned_from} (its tune seed, scored {tuning_words(args.tuned_setup)}"
        f"{retuning_note(args.tuned_setup, args)}), "
        + (
            "FedHAP's tuned there too; "
            if "FedHAP" in args.tuned
            else f"FedHAP's the default {DEFAULT_LR:g}; "
        )
        + _inherited_words(rows, args.tuned)
        + _epochs_words(rows, args.tuned_epochs)
        + "non-iid = "
        f"{args.classes_per_client} label shards per client; centralized = the same "
        "network trained with DPSH's loss on the training rows for "
        f"{ceiling_budget(args.rounds, args.tuned_epochs)}; mean ± sample std over "
        f"the seeds run (seeds {seeds_run(rows)}; each row's count in column seeds).",
    ]
    for part in shown_in_table(PARTITIONS, args.partitions, rows, "partitioning"):
        mine = [r for r in rows if r.get("partitioning") == part]
        if not mine:
            continue
        lines += [
            "",
            f"**{part}** (mAP@ALL % after r rounds)",
            "",
            *table_head("method", "lr", "seeds", *(f"r = {r}" for r in evals)),
        ]
        for method in FEDERATED:
            runs = [r for r in mine if r["method"] == method]
            if not runs:
                continue
            cells = [
                mean_sd_cell(
                    [
                        run["map_per_round"][str(r)]
                        for run in runs
                        if str(r) in run["map_per_round"]
                    ],
                    scale=100,
                )
                for r in evals
            ]
            lr = runs[0]["learning_rate"]
            n = len(runs)
            lines.append(table_row(method, f"{lr:g}", n, *cells))
    lr = next((r["learning_rate"] for r in rows if r["method"] == CENTRALIZED), None)
    at = f" (lr {lr:g})" if lr is not None else ""
    lines += [
        "",
        f"Centralized ceiling (DPSH){at}: {mean_sd_cell(ceiling, scale=100)} mAP@ALL % "
        f"({len(ceiling)} seeds).",
    ]
    walls = [r["seconds"] for r in rows]
    if walls:
        lines.append(
            f"Wall time: {sum(walls) / 60:.0f} min over {len(walls)} runs (mean "
            f"{statistics.mean(walls) / 60:.1f} min per run)."
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path, partitions: list[str]) -> None:
    """mAP@ALL against rounds, one panel per partitioning, the ceiling dashed."""
    from server.plots import plt, save_figure

    fig, axes = plt.subplots(1, len(partitions), figsize=(5 * len(partitions), 4))
    axes = [axes] if len(partitions) == 1 else list(axes)
    ceiling = [r["map_all"] for r in rows if r["method"] == CENTRALIZED]
    for ax, part in zip(axes, partitions, strict=True):
        for method in FEDERATED:
            runs = [
                r for r in rows if r["method"] == method and r["partitioning"] == part
            ]
            if not runs:
                continue
            xs = sorted({int(x) for run in runs for x in run["map_per_round"]})
            ys = [
                100
                * statistics.mean(
                    run["map_per_round"][str(x)]
                    for run in runs
                    if str(x) in run["map_per_round"]
                )
                for x in xs
            ]
            ax.plot(xs, ys, marker="o", label=method)
        if ceiling:
            ax.axhline(
                100 * statistics.mean(ceiling),
                linestyle="--",
                color="grey",
                label="centralized (ceiling)",
            )
        ax.set(xlabel="rounds", ylabel="mAP@ALL %", title=part)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a partitioning not run yet is empty
            ax.legend(fontsize=8)
    save_figure(fig, path)


def main() -> None:
    """CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-path", type=Path, required=True)
    parser.add_argument("--tuned-from", type=Path, required=True)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--bits", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--train-size", type=int, default=0)
    parser.add_argument("--classes-per-client", type=int, default=3)
    parser.add_argument("--partitions", default="iid")
    parser.add_argument("--methods", default=",".join(FEDERATED))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=Path, default=ROOT / "results/rounds-sweep")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    if not args.data_path.is_file():
        parser.error(f"--data-path {args.data_path}: no such file")
    if args.rounds < 1 or not 1 <= args.eval_every <= args.rounds:
        parser.error(
            f"--rounds {args.rounds} --eval-every {args.eval_every}: need rounds >= 1 "
            "and 1 <= eval-every <= rounds"
        )
    args.partitions = split_names(args.partitions)
    methods = split_names(args.methods)
    for p in args.partitions:
        if p not in PARTITIONS:
            accepted = ", ".join(PARTITIONS)
            parser.error(f"--partitions: unknown {p!r}; accepted: {accepted}")
    for m in methods:
        if m not in FEDERATED:
            parser.error(f"--methods: unknown {m!r}; accepted: {', '.join(FEDERATED)}")
    tuned, args.tuned_setup = read_tuned(args.tuned_from)
    args.tuned = tuned
    tuned_epochs = args.tuned_epochs = read_tuned_epochs(args.tuned_from)
    untuned = [m for m in methods if m in BASELINES and m not in tuned]
    if untuned:
        parser.error(
            f"--tuned-from {args.tuned_from} has no tuned learning rate for "
            f"{', '.join(untuned)}; tune there first or leave them out with --methods"
        )
    if args.resume:
        try:
            check_resume_setup(args.out, sweep_setup(args))
        except ValueError as exc:
            parser.error(str(exc))
    seeds = flag_list(parser, "--seeds", args.seeds, SEEDS)
    base = base_config(
        args.data_path, args.bits, args.rounds, args.train_size, args.eval_every
    )
    parts = partition_configs(args.classes_per_client)
    try:  # an impossible partitioning fails here, not in every run
        check_partitions(
            ({**base, "seed": s, **parts[p]} for p in args.partitions for s in seeds),
            args.clients,
        )
    except ValueError as exc:
        parser.error(str(exc))
    args.out.mkdir(parents=True, exist_ok=True)
    jobs = [(p, seed, m) for p in args.partitions for seed in seeds for m in methods]
    jobs += [("-", seed, CENTRALIZED) for seed in seeds]

    def lr_of(method: str) -> float:
        return float(tuned.get(setting_of(method, tuned), DEFAULT_LR))

    def key(method: str, part: str, seed: int, lr: float) -> str:
        return f"{method} {part} s{seed} lr={lr:g}"

    def name(job: tuple[str, int, str]) -> str:
        part, seed, method = job
        return key(method, part, seed, lr_of(method))

    def row_name(row: dict[str, Any]) -> str:
        return key(
            row["method"], row["partitioning"], row["seed"], row["learning_rate"]
        )

    def run(job: tuple[str, int, str]) -> dict[str, Any]:
        part, seed, method = job
        cfg = {**base, "seed": seed, "learning-rate": lr_of(method)}
        whose = setting_of(method, tuned)  # its rate's owner owns its epochs too
        if whose in tuned_epochs:
            cfg["local-epochs"] = tuned_epochs[whose]
        label = f"{method} {part} s{seed}"
        safe = safe_name(label)
        t0 = time.perf_counter()
        if method == CENTRALIZED:
            cfg["loss"] = "dpsh"
            out = run_centralized(cfg, args.runs / f"{safe}.json")
            curve: dict[str, float] = {}
        else:
            cfg.update(parts[part])
            cfg.update(METHODS[method] or {})
            out = run_federated(cfg, args.clients, args.runs / safe)
            curve = {str(r): v for r, v in rounds_of(out["run_dir"]).items()}
        return {
            "name": label,
            "method": method,
            "partitioning": part,
            "seed": seed,
            "learning_rate": cfg["learning-rate"],
            "local_epochs": cfg.get("local-epochs"),
            "map_all": out["final"]["map_all"],
            "map_per_round": curve,
            "seconds": time.perf_counter() - t0,
        }

    def write(rows: list[dict[str, Any]]) -> None:
        # rows run at a learning rate that is no longer tuned (the table's grid grew)
        # stay in rows.jsonl, out of the table
        current = [r for r in rows if r["learning_rate"] == lr_of(r["method"])]
        summary = {
            "setup": sweep_setup(args),
            "rows": current,
            "tuned_learning_rates": tuned,
            "tuned_local_epochs": tuned_epochs,
        }
        write_tables(args.out, summary, table(current, args))
        parts = shown_in_table(PARTITIONS, args.partitions, current, "partitioning")
        plot(current, args.out / "rounds.png", parts)

    rows, failed = run_sweep(
        jobs,
        run,
        rows_path=args.out / "rows.jsonl",
        resume=args.resume,
        name=name,
        row_name=row_name,
        describe=lambda r: f"mAP@ALL {r['map_all']:.4f} ({r['seconds']:.0f} s)",
        after_row=write,
    )
    write(rows)
    print((args.out / "table.md").read_text())
    exit_if_failed(failed)

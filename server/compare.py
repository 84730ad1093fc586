"""Compare finished runs: ``python -m server.results compare RUN [RUN ...]``.

Prints one table (a column per run; a row per field: method, loss, data,
partitioning, bits, seed, rounds, final and best mAP@ALL, seconds per round,
versions, commit; a field where the runs differ is marked ``*``) and writes one
overlay plot of mAP@ALL and train loss per round (``--plot``, default
``compare.png`` in the current folder).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hashing.pfmh.metric_names import LOCAL_MAP_ALL
from server.run_files import INCOMPLETE, read_rounds


class RunError(ValueError):
    """A folder that is not a finished run."""


def load_run(folder: str | Path) -> dict[str, Any]:
    """``config.json``, ``summary.json`` and ``rounds.jsonl`` of one finished run."""
    path = Path(folder)
    if not path.is_dir():
        raise RunError(
            f"{folder!r} is not a folder; accepted: a run folder (results/<run-id>)"
        )
    if path.name.endswith(INCOMPLETE):
        raise RunError(
            f"{folder!r} is an unfinished run; accepted: a finished run folder"
        )
    missing = [
        n
        for n in ("config.json", "summary.json", "rounds.jsonl")
        if not (path / n).is_file()
    ]
    if missing:
        raise RunError(
            f"{folder!r} has no {', '.join(missing)}; accepted: a finished run folder"
        )
    return {
        "name": path.name,
        "config": json.loads((path / "config.json").read_text()),
        "summary": json.loads((path / "summary.json").read_text()),
        "rounds": read_rounds(path),
    }


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value, spec) if spec else str(value)


def summary_row(run: dict[str, Any]) -> dict[str, str]:
    """Return the compared fields of one run, as text."""
    cfg = run["config"].get("config", {})
    summ = run["summary"]
    final = (summ.get("final") or {}).get("map_all")
    if final is None:
        final = (summ.get("final_per_client") or {}).get(LOCAL_MAP_ALL)
    best = summ.get("best_map_all", summ.get(f"best_{LOCAL_MAP_ALL}"))
    prov = run["config"].get("provenance") or {}
    vers = prov.get("versions") or {"torch": run["config"].get("torch")}
    git = prov.get("git") or {}
    commit = (
        git.get("commit", "")[:9] + ("+dirty" if git.get("dirty") else "")
        if git
        else "-"
    )
    return {
        "run": run["name"],
        "method": str(cfg.get("strategy")),
        "loss": str(cfg.get("loss")),
        "dataset": str(cfg.get("dataset")),
        "partitioning": str(cfg.get("partitioning")),
        "bits": _fmt(cfg.get("code-length")),
        "seed": _fmt(cfg.get("seed")),
        "rounds": _fmt(summ.get("final_round")),
        "final mAP@ALL": _fmt(final, ".4f"),
        "best mAP@ALL": _fmt(best, ".4f"),
        "best round": _fmt(summ.get("best_round")),
        "s/round": _fmt(summ.get("train_round_s_mean"), ".2f"),
        "flwr": _fmt(vers.get("flwr")),
        "torch": _fmt(vers.get("torch")),
        "commit": commit,
    }


def table(runs: Sequence[dict[str, Any]]) -> Any:
    """Build a rich Table: a row per field, a column per run (``#1``, ``#2`` ...).

    A field whose value differs between the runs is marked ``*``.
    """
    from rich.table import Table

    rows = [summary_row(r) for r in runs]
    result = Table(title=f"{len(rows)} runs")
    result.add_column("field")
    for i in range(len(rows)):
        result.add_column(f"#{i + 1}", justify="right")
    for field in rows[0]:
        if field == "run":
            continue
        values = [r[field] for r in rows]
        differs = len(set(values)) > 1
        result.add_row(field + (" *" if differs else ""), *values)
    return result


def plot(runs: Sequence[dict[str, Any]], path: Path) -> Path:
    """mAP@ALL (left) and train loss (right) per round, one line per run."""
    from matplotlib.ticker import MaxNLocator

    from server.plots import plt, save_figure

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for run in runs:
        rows = run["rounds"]
        evaluated = [r for r in rows if r.get("map_all") is not None]
        (line,) = left.plot(
            [r["round"] for r in evaluated],
            [r["map_all"] for r in evaluated],
            "o-",
            markersize=3,
            label=run["name"],
        )
        trained = [r for r in rows if r.get("train_loss") is not None]
        right.plot(
            [r["round"] for r in trained],
            [r["train_loss"] for r in trained],
            "-",
            color=line.get_color(),
        )
    left.set(xlabel="round", ylabel="mAP@ALL", ylim=(0, 1), title="mAP@ALL")
    right.set(
        xlabel="round", ylabel="train loss", title="train loss (clients, weighted mean)"
    )
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.legend(fontsize=7, loc="lower right")
    return save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (2: a folder that is not a finished run)."""
    parser = argparse.ArgumentParser(
        prog="python -m server.results",
        description="Compare finished runs: a table and one overlay plot.",
    )
    parser.add_argument("command", choices=["compare"])
    parser.add_argument("runs", nargs="+", help="run folders (results/<run-id>)")
    parser.add_argument("--plot", default="compare.png", help="overlay plot (PNG)")
    args = parser.parse_args(argv)
    try:
        runs = [load_run(r) for r in args.runs]
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from rich.console import Console

    for i, folder in enumerate(args.runs, 1):
        print(f"#{i}: {folder}")
    Console().print(table(runs))
    print(f"plot: {plot(runs, Path(args.plot))}")
    return 0

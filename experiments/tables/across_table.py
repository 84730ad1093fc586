"""One table across code lengths or client counts, from one table run at each.

``python -m experiments.fedhap across --across bits --table
docs/results/fedhap-mirflickr-paper-12bits --table
docs/results/fedhap-mirflickr-paper-24bits --table docs/results/fedhap-mirflickr-paper
--out docs/results/fedhap-mirflickr-paper-bits`` (the shape of FedHAP's Tables 2-3;
``--across clients``: its Table 6) reads each folder's ``summary.json`` (written by
:mod:`experiments.tables.real_data_table` or
:mod:`experiments.tables.rounds_sweep`, both of which record their ``setup``),
refuses folders whose setups differ in anything but the
``--across`` setting, and writes ``<out>/table.md`` (mAP@ALL % per method and value
for each partitioning, with FedHAP minus the best baseline, the untrained floor and
the centralized ceiling), ``<out>/summary.json`` and ``<out>/<across>.png``. It runs
nothing: the runs, their protocols and their wall times are in the source folders.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from experiments.lib.grids import split_names
from experiments.lib.runner import write_tables
from experiments.lib.tables import MISSING, mean_sd_cell, table_head, table_row
from experiments.tables.real_data_setup import BASELINES, CENTRALIZED

FEDHAP = "FedHAP"
METHOD_ORDER = (FEDHAP, *BASELINES)
#: ``--across`` setting -> (column unit, figure axis label).
ACROSS = {"bits": ("bits", "code length (bits)"), "clients": ("clients", "clients")}


def load_table(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Return a table folder's setup and its final rows.

    A row is ``method``, ``partitioning`` (``-`` for the ceiling), ``seed``,
    ``learning_rate``, ``map_all`` (after the last round) and ``floor`` (round 0,
    None for the ceiling). Tuning and superseded rows are left out.

    Raises
    ------
    ValueError
        The folder has no readable ``summary.json``, or it records no setup.
    """
    path = folder / "summary.json"
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--table {folder}: cannot read {path} ({exc})") from None
    setup = summary.get("setup")
    if not isinstance(setup, dict) or not set(ACROSS) <= set(setup):
        raise ValueError(
            f"--table {folder}: {path} records no setup; rewrite it with the "
            "current `python -m experiments.fedhap real-data` or `... rounds` "
            "(--resume reruns nothing that is done)"
        )
    rows = []
    for row in summary.get("rows", []):
        if row.get("kind", "table") != "table":
            continue
        floor = row.get("floor_map_all")
        if floor is None:
            floor = row.get("map_per_round", {}).get("0")
        rows.append(
            {
                "method": row["method"],
                "partitioning": row["partitioning"],
                "seed": row["seed"],
                "learning_rate": row["learning_rate"],
                "map_all": row["map_all"],
                "floor": floor,
            }
        )
    return setup, rows


def check_setups(setups: dict[Path, dict[str, Any]], across: str) -> dict[str, Any]:
    """Return the shared setup (without ``across``) of tables that differ only in it.

    Raises
    ------
    ValueError
        Two tables differ in another setting, or share a value of ``across``; the
        message names both folders and the values.
    """
    items = list(setups.items())
    first_folder, first = items[0]
    shared = {k: v for k, v in first.items() if k != across}
    seen: dict[int, Path] = {}
    for folder, setup in items:
        value = int(setup[across])
        if value in seen:
            raise ValueError(
                f"--table {seen[value]} and --table {folder} both have {across} = "
                f"{value}; give one table per value of --across {across}"
            )
        seen[value] = folder
        for key in sorted(set(shared) | set(setup) - {across}):
            if setup.get(key) != shared.get(key):
                raise ValueError(
                    f"--table {folder} has {key} = {setup.get(key)!r} but --table "
                    f"{first_folder} has {shared.get(key)!r}; only {across} may differ "
                    f"(--across {across})"
                )
    return shared


def maps_at(rows: list[dict[str, Any]], method: str, at: int, part: str) -> list[float]:
    """Return ``method``'s mAP@ALL values at ``at`` under partitioning ``part``.

    The ceiling's rows (partitioning ``-``) count under every partitioning.
    """
    return [
        r["map_all"]
        for r in rows
        if (r["method"], r["at"]) == (method, at) and r["partitioning"] in (part, "-")
    ]


def fedhap_margin(
    rows: list[dict[str, Any]], part: str, at: int
) -> tuple[float, str] | None:
    """Return FedHAP's mean mAP minus the best baseline's, in points, and that one."""
    means = {}
    for method in METHOD_ORDER:
        vals = maps_at(rows, method, at, part)
        if vals:
            means[method] = statistics.mean(vals)
    baselines = {m: v for m, v in means.items() if m != FEDHAP}
    if FEDHAP not in means or not baselines:
        return None
    best = max(baselines, key=lambda m: baselines[m])
    return 100 * (means[FEDHAP] - baselines[best]), best


def _floor_cells(mine: list[dict[str, Any]], values: list[int], cell: Any) -> list[str]:
    """Return the untrained floor per value: per seed round 0, then over seeds."""
    cells = []
    for at in values:
        floored = [r for r in mine if r["at"] == at and r["floor"] is not None]
        seeds = sorted({r["seed"] for r in floored})
        cells.append(
            cell(
                [
                    statistics.mean(r["floor"] for r in floored if r["seed"] == s)
                    for s in seeds
                ]
            )
        )
    return cells


def table(
    rows: list[dict[str, Any]],
    shared: dict[str, Any],
    sources: dict[int, Path],
    across: str,
) -> str:
    """Markdown: the protocol, then per partitioning mAP@ALL % per method and value."""
    unit = ACROSS[across][0]
    values = sorted(sources)
    parts = [p for p in ("iid", "non-iid") if any(r["partitioning"] == p for r in rows)]
    groups = {(r["method"], r["partitioning"], r["at"]) for r in rows}
    most = max(
        (
            sum((r["method"], r["partitioning"], r["at"]) == g for r in rows)
            for g in groups
        ),
        default=0,
    )

    def cell(vals: list[float]) -> str:
        return mean_sd_cell(vals, scale=100, expected=most)

    train = (
        f"training on a seeded random {shared['train_size']} of the database rows, "
        if shared.get("train_size")
        else "every client training on its whole partition, "
    )
    fixed = [f"{shared[k]} {k}" for k in ("clients", "bits", "rounds") if k in shared]
    lines = [
        f"Protocol: {shared.get('data')}, {', '.join(fixed)}, {train}non-iid = "
        f"{shared.get('classes_per_client')} label shards per client; one table per "
        f"number of {unit}, each with its own protocol and learning rates: "
        + "; ".join(f"{v} {unit}: {sources[v]}" for v in values)
        + "; mAP@ALL % after the last round, mean ± sample std over seeds (n = "
        f"seeds where under {most}).",
    ]
    header = table_head("method", *(f"{v} {unit}" for v in values))
    for part in parts:
        mine = [r for r in rows if r["partitioning"] == part]
        lines += ["", f"**{part}** (mAP@ALL %)", "", *header]
        for method in METHOD_ORDER:
            cells = [cell(maps_at(rows, method, v, part)) for v in values]
            if any(c != MISSING for c in cells):
                lines.append(table_row(method, *cells))
        margins = []
        for v in values:
            m = fedhap_margin(rows, part, v)
            margins.append(MISSING if m is None else f"{m[0]:+.2f} ({m[1]})")
        lines.append(table_row("FedHAP minus the best baseline (points)", *margins))
        floors = _floor_cells(mine, values, cell)
        lines.append(table_row("untrained floor (round 0)", *floors))
        ceiling = [cell(maps_at(rows, CENTRALIZED, v, part)) for v in values]
        lines.append(table_row(f"ceiling: {CENTRALIZED}", *ceiling))
    lrs = []
    for method in (*METHOD_ORDER, CENTRALIZED):
        per = {
            v: sorted(
                {
                    r["learning_rate"]
                    for r in rows
                    if (r["method"], r["at"]) == (method, v)
                }
            )
            for v in values
        }
        flat = sorted({lr for lr_set in per.values() for lr in lr_set})
        if len(flat) == 1:
            lrs.append(f"{method} {flat[0]:g}")
        elif flat:
            lrs.append(
                f"{method} "
                + ", ".join(
                    f"{'/'.join(f'{x:g}' for x in lr_set)} at {v} {unit}"
                    for v, lr_set in per.items()
                    if lr_set
                )
            )
    lines += ["", "Learning rates: " + "; ".join(lrs) + "."]
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path, across: str) -> None:
    """mAP@ALL against the ``across`` setting per method, a panel per partitioning."""
    from server.plots import plt, save_figure

    parts = [p for p in ("iid", "non-iid") if any(r["partitioning"] == p for r in rows)]
    if not parts:
        return
    values = sorted({r["at"] for r in rows})
    fig, axes = plt.subplots(1, len(parts), figsize=(5 * len(parts), 4), squeeze=False)
    for ax, part in zip(axes[0], parts, strict=True):
        for method in (*METHOD_ORDER, CENTRALIZED):
            pts = [
                (v, 100 * statistics.mean(vals))
                for v in values
                if (vals := maps_at(rows, method, v, part))
            ]
            if pts:
                style = (
                    {"linestyle": "--", "color": "grey"}
                    if method == CENTRALIZED
                    else {}
                )
                ax.plot(*zip(*pts, strict=True), marker="o", label=method, **style)
        ax.set(xlabel=ACROSS[across][1], ylabel="mAP@ALL %", title=part, xticks=values)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    save_figure(fig, path)


def keep_only(
    rows: list[dict[str, Any]], partitions: list[str], methods: list[str]
) -> list[dict[str, Any]]:
    """Keep the rows of the given partitionings and methods (empty: all).

    The ceiling's rows (partitioning ``-``) stay whatever the filter. Raises
    ``ValueError`` naming a partitioning or method no table has, and the ones
    they have.
    """
    have_parts = sorted({r["partitioning"] for r in rows} - {"-"})
    have_methods = sorted({r["method"] for r in rows if r["method"] != CENTRALIZED})
    for flag, asked, have, what in (
        ("--partitions", partitions, have_parts, "partitioning"),
        ("--methods", methods, have_methods, "method"),
    ):
        unknown = [x for x in asked if x not in have]
        if unknown:
            raise ValueError(
                f"{flag} {unknown[0]!r}: no table has this {what}; they have: "
                + ", ".join(have)
            )
    return [
        r
        for r in rows
        if (
            r["partitioning"] == "-"
            or not partitions
            or r["partitioning"] in partitions
        )
        and (r["method"] == CENTRALIZED or not methods or r["method"] in methods)
    ]


def main() -> None:
    """CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--across",
        choices=sorted(ACROSS),
        default="bits",
        help="the one setting the tables differ in (default: bits)",
    )
    parser.add_argument(
        "--table",
        type=Path,
        action="append",
        required=True,
        help="a folder written by real_data_table or rounds_sweep (repeat, one "
        "per value of --across)",
    )
    parser.add_argument(
        "--partitions",
        default="",
        help="comma-separated partitionings to keep (iid, non-iid; default: all "
        "the tables have), e.g. iid for the paper's client-count table",
    )
    parser.add_argument(
        "--methods",
        default="",
        help="comma-separated methods to keep (default: all; the ceiling and the "
        "floor always stay)",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    try:
        loaded = {folder: load_table(folder) for folder in args.table}
        shared = check_setups({f: s for f, (s, _) in loaded.items()}, args.across)
    except ValueError as exc:
        parser.error(str(exc))
    sources = {int(setup[args.across]): f for f, (setup, _) in loaded.items()}
    rows = [
        {**row, "at": int(setup[args.across])}
        for setup, table_rows in loaded.values()
        for row in table_rows
    ]
    try:
        rows = keep_only(rows, split_names(args.partitions), split_names(args.methods))
    except ValueError as exc:
        parser.error(str(exc))
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {
        "across": args.across,
        "setup": shared,
        "sources": {str(v): str(f) for v, f in sorted(sources.items())},
        "rows": rows,
    }
    text = write_tables(args.out, summary, table(rows, shared, sources, args.across))
    plot(rows, args.out / f"{args.across}.png", args.across)
    print(text)

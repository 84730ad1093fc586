"""One table across code lengths (the shape of FedHAP's Tables 2-3) from one table each.

``python -m experiments.bits_table --table docs/results/fedhap-mirflickr-paper-12bits
--table docs/results/fedhap-mirflickr-paper-24bits --table
docs/results/fedhap-mirflickr-paper --out docs/results/fedhap-mirflickr-paper-bits``
reads each folder's ``summary.json`` (written by :mod:`experiments.real_data_table`
or :mod:`experiments.rounds_sweep`, both of which record their ``setup``), refuses
folders whose setups differ in anything but the code length, and writes
``<out>/table.md`` (mAP@ALL % per method and code length for each partitioning,
with FedHAP minus the best baseline, the untrained floor and the centralized
ceiling), ``<out>/summary.json`` and ``<out>/bits.png``. It runs nothing: the runs,
their protocol and their wall times are in the source folders.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from experiments.real_data_table import BASELINES, CENTRALIZED, percent_cell
from experiments.sweep_runner import write_tables

FEDHAP = "FedHAP"
METHOD_ORDER = (FEDHAP, *BASELINES)


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
    if not isinstance(setup, dict) or "bits" not in setup:
        raise ValueError(
            f"--table {folder}: {path} records no setup; rewrite it with the "
            "current experiments.real_data_table or experiments.rounds_sweep "
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


def check_setups(setups: dict[Path, dict[str, Any]]) -> dict[str, Any]:
    """Return the shared setup (without ``bits``) of tables that differ only in it.

    Raises
    ------
    ValueError
        Two tables differ in another setting, or share a code length; the message
        names both folders and the values.
    """
    items = list(setups.items())
    first_folder, first = items[0]
    shared = {k: v for k, v in first.items() if k != "bits"}
    seen: dict[int, Path] = {}
    for folder, setup in items:
        bits = int(setup["bits"])
        if bits in seen:
            raise ValueError(
                f"--table {seen[bits]} and --table {folder} are both {bits} bits; "
                "give one table per code length"
            )
        seen[bits] = folder
        for key in sorted(set(shared) | set(setup) - {"bits"}):
            if setup.get(key) != shared.get(key):
                raise ValueError(
                    f"--table {folder} has {key} = {setup.get(key)!r} but --table "
                    f"{first_folder} has {shared.get(key)!r}; only the code length "
                    "may differ"
                )
    return shared


def fedhap_margin(
    rows: list[dict[str, Any]], part: str, bits: int
) -> tuple[float, str] | None:
    """Return FedHAP's mean mAP minus the best baseline's, in points, and that one."""
    means = {}
    for method in METHOD_ORDER:
        vals = [
            r["map_all"]
            for r in rows
            if r["bits"] == bits and r["partitioning"] == part and r["method"] == method
        ]
        if vals:
            means[method] = statistics.mean(vals)
    baselines = {m: v for m, v in means.items() if m != FEDHAP}
    if FEDHAP not in means or not baselines:
        return None
    best = max(baselines, key=lambda m: baselines[m])
    return 100 * (means[FEDHAP] - baselines[best]), best


def table(
    rows: list[dict[str, Any]],
    shared: dict[str, Any],
    sources: dict[int, Path],
) -> str:
    """Markdown: the protocol, then per partitioning mAP@ALL % per method and bits."""
    bits = sorted(sources)
    parts = [p for p in ("iid", "non-iid") if any(r["partitioning"] == p for r in rows)]
    most = max(
        (
            len([r for r in rows if (r["method"], r["partitioning"], r["bits"]) == k])
            for k in {(r["method"], r["partitioning"], r["bits"]) for r in rows}
        ),
        default=0,
    )

    def cell(vals: list[float]) -> str:
        if not vals:
            return "-"
        return percent_cell(vals) + (f" (n={len(vals)})" if len(vals) < most else "")

    train = (
        f"training on a seeded random {shared['train_size']} of the database rows, "
        if shared.get("train_size")
        else "every client training on its whole partition, "
    )
    lines = [
        f"Protocol: {shared.get('data')}, {shared.get('clients')} clients, "
        f"{shared.get('rounds')} rounds, {train}non-iid = "
        f"{shared.get('classes_per_client')} label shards per client; one table per "
        "code length, each with its own protocol and learning rates: "
        + "; ".join(f"{b} bits: {sources[b]}" for b in bits)
        + f"; mAP@ALL % after the last round, mean ± sample std over seeds (n = "
        f"seeds where under {most}).",
    ]
    header = "| method | " + " | ".join(f"{b} bits" for b in bits) + " |"
    rule = "|---|" + "---|" * len(bits)
    for part in parts:
        mine = [r for r in rows if r["partitioning"] == part]
        lines += ["", f"**{part}** (mAP@ALL %)", "", header, rule]
        for method in METHOD_ORDER:
            cells = [
                cell(
                    [
                        r["map_all"]
                        for r in mine
                        if (r["method"], r["bits"]) == (method, b)
                    ]
                )
                for b in bits
            ]
            if any(c != "-" for c in cells):
                lines.append(f"| {method} | " + " | ".join(cells) + " |")
        margins = []
        for b in bits:
            m = fedhap_margin(rows, part, b)
            margins.append("-" if m is None else f"{m[0]:+.2f} ({m[1]})")
        lines.append(
            "| FedHAP minus the best baseline (points) | " + " | ".join(margins) + " |"
        )
        floors = [
            cell(
                [
                    statistics.mean(
                        r["floor"]
                        for r in mine
                        if r["bits"] == b and r["seed"] == s and r["floor"] is not None
                    )
                    for s in sorted(
                        {
                            r["seed"]
                            for r in mine
                            if r["bits"] == b and r["floor"] is not None
                        }
                    )
                ]
            )
            for b in bits
        ]
        lines.append("| untrained floor (round 0) | " + " | ".join(floors) + " |")
        ceiling = [
            cell(
                [
                    r["map_all"]
                    for r in rows
                    if r["method"] == CENTRALIZED and r["bits"] == b
                ]
            )
            for b in bits
        ]
        lines.append(f"| ceiling: {CENTRALIZED} | " + " | ".join(ceiling) + " |")
    lrs = []
    for method in (*METHOD_ORDER, CENTRALIZED):
        per = {
            b: sorted(
                {
                    r["learning_rate"]
                    for r in rows
                    if (r["method"], r["bits"]) == (method, b)
                }
            )
            for b in bits
        }
        flat = sorted({lr for v in per.values() for lr in v})
        if len(flat) == 1:
            lrs.append(f"{method} {flat[0]:g}")
        elif flat:
            lrs.append(
                f"{method} "
                + ", ".join(
                    f"{'/'.join(f'{x:g}' for x in v)} at {b}"
                    for b, v in per.items()
                    if v
                )
            )
    lines += ["", "Learning rates: " + "; ".join(lrs) + "."]
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """mAP@ALL against code length per method, one panel per partitioning."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = [p for p in ("iid", "non-iid") if any(r["partitioning"] == p for r in rows)]
    if not parts:
        return
    bits = sorted({r["bits"] for r in rows})
    fig, axes = plt.subplots(1, len(parts), figsize=(5 * len(parts), 4), squeeze=False)
    for ax, part in zip(axes[0], parts, strict=True):
        for method in (*METHOD_ORDER, CENTRALIZED):
            pts = [
                (
                    b,
                    [
                        r["map_all"]
                        for r in rows
                        if r["method"] == method
                        and r["bits"] == b
                        and r["partitioning"] in (part, "-")
                    ],
                )
                for b in bits
            ]
            pts = [(b, 100 * statistics.mean(v)) for b, v in pts if v]
            if pts:
                style = (
                    {"linestyle": "--", "color": "grey"}
                    if method == CENTRALIZED
                    else {}
                )
                ax.plot(*zip(*pts, strict=True), marker="o", label=method, **style)
        ax.set(xlabel="code length (bits)", ylabel="mAP@ALL %", title=part, xticks=bits)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    """CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--table",
        type=Path,
        action="append",
        required=True,
        help="a folder written by real_data_table or rounds_sweep (repeat, one "
        "per code length)",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    try:
        loaded = {folder: load_table(folder) for folder in args.table}
        shared = check_setups({f: setup for f, (setup, _) in loaded.items()})
    except ValueError as exc:
        parser.error(str(exc))
    sources = {int(setup["bits"]): f for f, (setup, _) in loaded.items()}
    rows = [
        {**row, "bits": int(setup["bits"])}
        for setup, table_rows in loaded.values()
        for row in table_rows
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {
        "setup": shared,
        "sources": {str(b): str(f) for b, f in sorted(sources.items())},
        "rows": rows,
    }
    text = write_tables(args.out, summary, table(rows, shared, sources))
    plot(rows, args.out / "bits.png")
    print(text)


if __name__ == "__main__":
    main()

"""PFMH's mAP per round (the paper's Fig. 6 shape) from a sweep's kept run directories.

:func:`map_per_round` reads ``<out>/runs/<job>/<run>/rounds.jsonl`` of every
federated run of the main table and :func:`plot_map_per_round` draws, per code
length, the global protocol (server queries against each client's database, the
primary one) and our per-client protocol against the round, one line per method,
the mean over seeds. The run directories are git-ignored: the figure can be drawn
only where the runs were made.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

#: rounds.jsonl keys of the two PFMH protocols.
GLOBAL = "server_queries_client_db_map_all"
LOCAL = "local_map_all"


def map_per_round(run_root: Path) -> dict[str, dict[int, float]]:
    """``{metric: {round: mAP}}`` of one run directory (the evaluated rounds)."""
    out: dict[str, dict[int, float]] = {GLOBAL: {}, LOCAL: {}}
    for line in (run_root / "rounds.jsonl").read_text().splitlines():
        row = json.loads(line)
        for key in out:
            if row.get(key) is not None:
                out[key][int(row["round"])] = float(row[key])
    return out


def _run_dir(job_dir: Path) -> Path | None:
    """Return the newest finished run under one job's directory, if any."""
    done = sorted(
        (p for p in job_dir.iterdir() if (p / "summary.json").is_file()),
        key=lambda p: p.name,
    )
    return done[-1] if done else None


def plot_map_per_round(
    rows: list[dict[str, Any]], out: Path, *, bits: int
) -> Path | None:
    """Write ``<out>/map_per_round-<bits>b.png``; ``None`` when no run is kept."""
    curves: dict[str, list[dict[str, dict[int, float]]]] = {}
    for r in rows:
        if r.get("table") != "main" or r.get("bits") != bits:
            continue
        job_dir = out / "runs" / r["name"]
        run = _run_dir(job_dir) if job_dir.is_dir() else None
        if run is None:
            continue
        curves.setdefault(r["method"], []).append(map_per_round(run))
    if not curves:
        return None
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    titles = {
        GLOBAL: "global protocol (primary): server queries vs each client's database",
        LOCAL: "ours (per-client): local queries vs local database",
    }
    for ax, key in zip(axes, (GLOBAL, LOCAL), strict=True):
        for method, runs in curves.items():
            rounds = sorted(set.intersection(*(set(c[key]) for c in runs)))
            if not rounds:
                continue
            mean = np.mean([[c[key][t] for t in rounds] for c in runs], axis=0)
            ax.plot(rounds, 100 * mean, marker="o", label=f"{method} ({len(runs)})")
        ax.set(xlabel="round", ylabel="mAP@ALL %", title=titles[key])
        ax.title.set_fontsize(9)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"PFMH, {bits} bits, mean over seeds (number of seeds in brackets)")
    fig.tight_layout()
    path = out / f"map_per_round-{bits}b.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

"""PFMH's figures (the paper's Figs. 4, 6 and 7 shapes) from a sweep's results.

:func:`map_per_round` reads ``<out>/runs/<job>/<run>/rounds.jsonl`` of every
federated run of the main table and :func:`plot_map_per_round` draws, per code
length, the global protocol (server queries against each client's database, the
primary one) and our per-client protocol against the round, one line per method,
the mean over seeds (Fig. 6). The run directories are git-ignored: that figure can
be drawn only where the runs were made.

:func:`plot_precision_at_k` (Fig. 4, top-K precision of the global protocol) and
:func:`plot_sensitivity` (Fig. 7, mAP against the loss weights alpha and beta) read
the sweep's aggregate (``summary.json``), so they can be redrawn anywhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from hashing.pfmh.metric_names import LOCAL_MAP_ALL, SQ_CLIENT_DB_MAP_ALL

#: rounds.jsonl keys of the two PFMH protocols.
GLOBAL = SQ_CLIENT_DB_MAP_ALL
LOCAL = LOCAL_MAP_ALL


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


def _pyplot() -> Any:
    from server.plots import plt  # noqa: PLC0415

    return plt


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
    plt = _pyplot()
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
    path = out / f"map_per_round-{bits}b.png"
    from server.plots import save_figure  # noqa: PLC0415

    save_figure(fig, path, dpi=110)
    return path


def plot_precision_at_k(
    agg: list[dict[str, Any]], out: Path, *, bits: int
) -> Path | None:
    """Write ``<out>/precision_at_k-<bits>b.png``; ``None`` without P@K rows.

    One line per method of the main table: precision@K of the server's queries
    against each client's database, averaged over clients, mean over seeds with
    the seed std as a band.
    """
    rows = [
        a
        for a in agg
        if a["table"] == "main" and a["bits"] == bits and a.get("precision_at_k")
    ]
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for a in rows:
        ks = sorted(a["precision_at_k"], key=int)
        mean = np.array([a["precision_at_k"][k][0] for k in ks])
        std = np.array([a["precision_at_k"][k][1] for k in ks])
        xs = [int(k) for k in ks]
        (line,) = ax.plot(xs, 100 * mean, marker="o", label=a["method"])
        ax.fill_between(
            xs,
            100 * (mean - std),
            100 * (mean + std),
            alpha=0.15,
            color=line.get_color(),
        )
    ax.set(
        xlabel="K (top-K retrieved from one client's database)",
        ylabel="precision@K %",
        title=f"PFMH top-K precision, {bits} bits: global protocol, mean over clients",
    )
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    path = out / f"precision_at_k-{bits}b.png"
    from server.plots import save_figure  # noqa: PLC0415

    save_figure(fig, path, dpi=110)
    return path


def sensitivity_points(
    agg: list[dict[str, Any]], *, bits: int, defaults: tuple[float, float]
) -> dict[tuple[float, float], dict[str, Any]]:
    """``{(alpha, beta): aggregate}`` of the sensitivity table at ``bits``.

    The point at both defaults is the main table's PFMH run at the same code
    length. Empty without sensitivity rows at ``bits``.
    """
    rows = [a for a in agg if a["table"] == "sensitivity" and a["bits"] == bits]
    if not rows:
        return {}
    points = {(a["loss_alpha"], a["loss_beta"]): a for a in rows}
    for a in agg:
        if a["table"] == "main" and a["method"] == "PFMH" and a["bits"] == bits:
            points[defaults] = a
    return points


def sensitivity_bits(agg: list[dict[str, Any]]) -> list[int]:
    """Code lengths that have sensitivity rows, ascending."""
    return sorted({a["bits"] for a in agg if a["table"] == "sensitivity"})


def plot_sensitivity(
    agg: list[dict[str, Any]],
    out: Path,
    *,
    bits: int,
    defaults: tuple[float, float],
) -> Path | None:
    """Write ``<out>/sensitivity-<bits>b.png`` (mAP against alpha, and against beta).

    The point at both defaults is the main table's PFMH run at the same code
    length; ``None`` without sensitivity rows at ``bits``.
    """
    points = sensitivity_points(agg, bits=bits, defaults=defaults)
    if not points:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.0), sharey=True)
    labels = {GLOBAL: "global protocol (per client)", LOCAL: "ours (per-client, local)"}
    for ax, (name, idx) in zip(axes, (("alpha", 0), ("beta", 1)), strict=True):
        fixed = defaults[1 - idx]
        keys = sorted(k for k in points if k[1 - idx] == fixed)
        xs = [k[idx] for k in keys]
        for metric, label in labels.items():
            vals = [points[k].get(metric) for k in keys]
            got = [(x, v) for x, v in zip(xs, vals, strict=True) if v is not None]
            if not got:
                continue
            ax.errorbar(
                [x for x, _ in got],
                [100 * v[0] for _, v in got],
                yerr=[100 * v[1] for _, v in got],
                marker="o",
                capsize=3,
                label=label,
            )
        ax.axvline(defaults[idx], color="grey", ls=":", lw=1)
        other = "beta" if idx == 0 else "alpha"
        ax.set(
            xscale="log",
            xlabel=f"{name} ({other} = {fixed:g})",
            ylabel="mAP@ALL %",
            title=f"PFMH, {bits} bits: {name} of Eq. 11",
        )
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    path = out / f"sensitivity-{bits}b.png"
    from server.plots import save_figure  # noqa: PLC0415

    save_figure(fig, path, dpi=110)
    return path

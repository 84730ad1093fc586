"""PNG plots of a run: mAP and loss per round, precision-recall curve, precision@K.

Every plot of a run is titled by :func:`run_title` (method, dataset, partitioning,
bits, seed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

from hashing.pfmh.metric_names import LOCAL_MAP_ALL

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def save_figure(fig: Any, path: Path, *, dpi: int = 120) -> Path:
    """Lay out, write and close ``fig``: every figure of the project is saved here.

    The PNG is written beside ``path`` and renamed over it, so an interrupted run
    leaves the previous figure or the new one, never half a file. The folder is made
    if missing. Returns ``path``.
    """
    path = Path(path)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.part")
    try:
        fig.savefig(part, dpi=dpi, format=path.suffix.lstrip(".") or "png")
        part.replace(path)
    finally:
        plt.close(fig)
        part.unlink(missing_ok=True)
    return path


def run_title(config: Mapping[str, Any], last_round: int | None = None) -> str:
    """``fedhap · digits · pathological (3 classes/client) · 32 bits · seed 42``."""
    parts = config.get("partitioning", "?")
    if parts == "pathological":
        parts += f" ({config.get('classes-per-client')} classes/client)"
    elif parts == "dirichlet":
        parts += f" (alpha {config.get('dirichlet-alpha')})"
    title = (
        f"{config.get('strategy')} · {config.get('dataset')} · {parts} · "
        f"{config.get('code-length')} bits · seed {config.get('seed')}"
    )
    return title if last_round is None else f"{title} · round {last_round}"


def plot_map_per_round(
    rounds: Sequence[dict[str, Any]], top_k: int, path: Path, title: str = ""
) -> None:
    """mAP@ALL and mAP@K of every evaluated round (+ PFMH's per-client mAP)."""
    evaluated = [r for r in rounds if r.get("map_all") is not None]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    xs = [r["round"] for r in evaluated]
    ax.plot(xs, [r["map_all"] for r in evaluated], "o-", label="mAP@ALL")
    ax.plot(xs, [r["map_at_k"] for r in evaluated], "s--", label=f"mAP@{top_k}")
    local = [r for r in rounds if r.get(LOCAL_MAP_ALL) is not None]  # PFMH
    if local:
        ax.plot(
            [r["round"] for r in local],
            [r[LOCAL_MAP_ALL] for r in local],
            "^-.",
            label="per-client mAP@ALL (local queries)",
        )
    ax.set_xlabel("round")
    ax.set_ylabel("mAP")
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, path)


def plot_loss_per_round(
    rounds: Sequence[dict[str, Any]], title: str, path: Path
) -> bool:
    """Plot the clients' mean train loss per round; False if none was reported."""
    trained = [r for r in rounds if r.get("train_loss") is not None]
    if not trained:
        return False
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([r["round"] for r in trained], [r["train_loss"] for r in trained], "o-")
    ax.set_xlabel("round")
    ax.set_ylabel("train loss (clients, weighted mean)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    save_figure(fig, path)
    return True


def plot_pr_curve(pr: dict[str, Sequence[float]], title: str, path: Path) -> None:
    """Precision against recall over Hamming radius 0..bits."""
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    ax.plot(pr["recall"], pr["precision"], "o-", markersize=3)
    ax.set_xlabel("recall")
    ax.set_ylabel("precision")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def plot_precision_at_k(
    ks: Sequence[int], precision: Sequence[float], title: str, path: Path
) -> None:
    """Precision of the top-K list against K."""
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    ax.plot(list(ks), list(precision), "o-")
    ax.set_xscale("log")
    ax.set_xlabel("K (top retrieved)")
    ax.set_ylabel("precision@K")
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    save_figure(fig, path)

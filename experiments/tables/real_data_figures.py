"""Retrieval curves of several methods in one figure (FedHAP Figs. 5-6 shape).

:func:`plot_curves` draws, from rows that carry the final evaluation's ``curves``
(``pr``: precision and recall of Hamming-ball retrieval per radius; ``ks`` with
``precision_at_k`` and ``recall_at_k``), three panels: the precision-recall curve,
P@K and recall@K against K; one line per method, the mean over its seeds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def report_curves(report: dict[str, Any]) -> dict[str, Any]:
    """Return the curves of a retrieval report dict (``RetrievalReport.to_dict()``).

    What a row keeps under ``curves`` for :func:`plot_curves`: ``pr`` (radius,
    precision, recall), ``ks``, ``precision_at_k`` and ``recall_at_k``.
    """
    return {
        "pr": {k: list(v) for k, v in report["pr"].items()},
        "ks": list(report["ks"]),
        "precision_at_k": list(report["precision_at_k"]),
        "recall_at_k": list(report["recall_at_k"]),
    }


def mean_curves(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Mean over rows of each curve (rows of one method, equal code lengths)."""
    keys = ("precision", "recall")
    out = {k: np.mean([r["curves"]["pr"][k] for r in rows], axis=0) for k in keys}
    for k in ("precision_at_k", "recall_at_k"):
        out[k] = np.mean([r["curves"][k] for r in rows], axis=0)
    out["ks"] = np.asarray(rows[0]["curves"]["ks"])
    return out


def plot_curves(
    rows: list[dict[str, Any]], partitioning: str, path: Path, *, bits: int
) -> Path | None:
    """Write the three-panel PNG of ``partitioning`` (and the ceiling) to ``path``.

    Rows with ``partitioning == "-"`` (the centralized ceiling) are drawn in every
    figure, dashed. Returns ``None`` when no row has curves.
    """
    from server.plots import plt, save_figure  # noqa: PLC0415

    mine = [
        r for r in rows if r.get("curves") and r["partitioning"] in (partitioning, "-")
    ]
    if not mine:
        return None
    methods = list(dict.fromkeys(r["method"] for r in mine))
    # one colour per method across every figure drawn from the same rows
    every = sorted({r["method"] for r in rows})
    colors = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(every)}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for method in methods:
        sel = [r for r in mine if r["method"] == method]
        c = mean_curves(sel)
        style = "--" if sel[0]["partitioning"] == "-" else "-"
        label = f"{method} ({len(sel)} seeds)"
        # radius 0 can retrieve nothing (precision 0 by convention): start where
        # something is retrieved
        keep = c["recall"] > 0
        kw = {"color": colors[method], "label": label}
        axes[0].plot(c["recall"][keep], c["precision"][keep], style, **kw)
        axes[1].plot(c["ks"], c["precision_at_k"], style, marker="o", **kw)
        axes[2].plot(c["ks"], c["recall_at_k"], style, marker="o", **kw)
    axes[0].set(xlabel="recall", ylabel="precision", title="PR (Hamming radius)")
    axes[1].set(xlabel="K", ylabel="precision@K", title="P@K", xscale="log")
    axes[2].set(xlabel="K", ylabel="recall@K", title="recall@K", xscale="log")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{partitioning}, {bits} bits")
    save_figure(fig, path, dpi=110)
    return path

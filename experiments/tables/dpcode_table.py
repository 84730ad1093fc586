"""DPcode vs the direct approach and NoisyCut (paper Figs. 3-8 shape), centrally.

``python -m experiments.dpcode figures`` runs, for every dataset present, three
sweeps of one-client releases (``privacy.dpcode``), each for seeds 0, 1, 2:

* epsilon in {0.5, 1, 2, 4, 8, 16} at k = 100 (the paper's figures), every method;
* k in {1, 5, 10, 50, 100, 200} at epsilon = 4, every method;
* split eps_1 / eps in {0.1, ..., 0.9} at k = 100, epsilon = 4, the two DPcode rows.

Methods: DPcode as the paper specifies it, with the repairs that make its epsilon
hold (Alg. 1 primitive noise, Eq. 6 on); DPcode (pruned): no primitive noise and
Eq. 6 replaced by anti-monotone pruning (same epsilon); Direct; NoisyCut; and the
floor, a release that reads no data: k distinct patterns drawn uniformly from every
pattern of at most the maximum length over the public vocabulary (epsilon 0, no
supports, so no RE), in the epsilon and k sweeps. Metrics:
F-score (Def. 3) and median relative error (Def. 4, absolute) against the exact
top-k (mlxtend FP-growth). Datasets: digits (sklearn, 1,797 8x8 images, 9 patch
primitives each, Hadamard-16 codebook, patterns of <= 3 words) and MIRFlickr-25K
tag sets (``<data-dir>/mirflickr25k_tags.npz``, 20,015 frames, 1,386 tags as
words, frames truncated to 10 tags, patterns of <= 2 words; skipped if absent).

Privacy noise is SEEDED (simulation only), so a rerun gives the same tables.
Every finished run is appended to ``<out>/rows.jsonl``; ``--resume`` skips the
runs already there. ``--quick`` is a smoke run (one seed, two values per sweep)
into ``results/dpcode-quick``. Writes ``table.md``, ``summary.json`` and PNG plots.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass
from functools import cache
from math import comb
from pathlib import Path
from typing import Any

import numpy as np

from experiments.lib.grids import SEEDS, csv, flag_list, load_grids
from experiments.lib.runner import exit_if_failed, run_sweep, write_tables
from experiments.lib.tables import MISSING, mean_sd, mean_sd_cell, table_head, table_row
from privacy.dpcode import (
    Frames,
    HadamardCodebook,
    Release,
    Transactions,
    direct_release,
    dpcode_release,
    f_score,
    ground_truth,
    noisycut_release,
    patch_descriptors,
    relative_error,
)
from privacy.dpcode.itemsets import supports_of
from privacy.noise import NoiseSource

ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = ROOT.parent / "shared" / "data"
METHODS = ("DPcode", "DPcode (pruned)", "Direct", "NoisyCut")
#: the untrained floor of a release: k patterns that depend on no frame
FLOOR = "random patterns (floor)"
#: the rows of the epsilon and k tables and plots
WITH_FLOOR = (*METHODS, FLOOR)
FIXED_EPS, FIXED_K, DPCODE_SPLIT = 4.0, 100, 0.65


@dataclass(frozen=True)
class Job:
    """One release: sweep, dataset, method, epsilon, k, split, seed."""

    sweep: str
    dataset: str
    method: str
    eps: float
    k: int
    split: float
    seed: int

    @property
    def name(self) -> str:
        """Unique run name."""
        return (
            f"{self.sweep}/{self.dataset}/{self.method}/eps={self.eps:g}/k={self.k}"
            f"/split={self.split:g}/seed={self.seed}"
        )


@dataclass(frozen=True)
class Dataset:
    """A client's data as the mechanisms take it, with its public parameters."""

    name: str
    transactions: Transactions
    frames: Frames | None
    codebook: HadamardCodebook | None
    max_words: int
    max_length: int


@cache
def load(name: str, data_dir: str) -> Dataset:
    """Build (once per process) the frames/transactions of a dataset."""
    if name == "digits":
        from sklearn.datasets import load_digits  # noqa: PLC0415

        codebook = HadamardCodebook(16)
        frames = Frames.from_arrays(patch_descriptors(load_digits().images / 16.0))
        from privacy.dpcode import frames_to_transactions  # noqa: PLC0415

        tx = frames_to_transactions(frames, codebook)
        return Dataset(name, tx, frames, codebook, max_words=9, max_length=3)
    data = np.load(Path(data_dir) / "mirflickr25k_tags.npz")
    tx = Transactions(data["x_text"] > 0, "mirflickr25k-tags-1386")
    return Dataset(name, tx, None, None, max_words=10, max_length=2)


@cache
def truth(name: str, data_dir: str, k: int) -> tuple[tuple[int, ...], ...]:
    """Exact top-k (non-private, cached)."""
    ds = load(name, data_dir)
    patterns, _ = ground_truth(ds.transactions, k=k, max_length=ds.max_length)
    return tuple(patterns)


def random_patterns(
    n_words: int, k: int, max_length: int, rng: np.random.Generator
) -> tuple[tuple[int, ...], ...]:
    """``k`` distinct patterns, uniform over all sets of 1..max_length of n_words.

    The floor of a top-k release: it reads no data (every pattern of the universe
    equally likely), so its F-score is what chance gives.
    """
    sizes = np.arange(1, max_length + 1)
    weight = np.array([comb(n_words, int(s)) for s in sizes], dtype=np.float64)
    total = int(weight.sum())
    if k > total:
        raise ValueError(f"k={k}: only {total} patterns of <= {max_length} words exist")
    chosen: set[tuple[int, ...]] = set()
    out: list[tuple[int, ...]] = []
    while len(out) < k:
        size = int(rng.choice(sizes, p=weight / weight.sum()))
        pattern = tuple(
            sorted(int(w) for w in rng.choice(n_words, size, replace=False))
        )
        if pattern not in chosen:
            chosen.add(pattern)
            out.append(pattern)
    return tuple(out)


def release(job: Job, ds: Dataset) -> Release:
    """Run one method on one dataset with SEEDED noise (simulation only)."""
    noise = NoiseSource.seeded(
        "dpcode-table",
        job.dataset,
        job.method,
        round(job.eps * 1000),
        job.k,
        round(job.split * 1000),
        job.seed,
    )
    common: dict[str, Any] = {
        "k": job.k,
        "epsilon": job.eps,
        "noise": noise,
        "max_words": ds.max_words,
        "max_length": ds.max_length,
    }
    if job.method == "DPcode":
        data: Any = ds.frames if ds.frames is not None else ds.transactions
        return dpcode_release(
            data,
            codebook=ds.codebook,
            split=job.split,
            primitive_noise="paper",
            infrequent="laplace",
            **common,
        )
    if job.method == "DPcode (pruned)":
        return dpcode_release(
            ds.transactions,
            split=job.split,
            primitive_noise="off",
            infrequent="prune",
            **common,
        )
    if job.method == "Direct":
        return direct_release(ds.transactions, **common)
    return noisycut_release(ds.transactions, split=0.5, **common)


def run_job(job: Job, data_dir: str) -> dict[str, Any]:
    """One row: the job, F-score, RE, published count, epsilon spent, seconds."""
    ds = load(job.dataset, data_dir)
    true = truth(job.dataset, data_dir, job.k)
    if job.method == FLOOR:
        rng = NoiseSource.seeded(
            "dpcode-table", job.dataset, job.method, job.k, job.seed
        ).numpy_generator()
        start = time.perf_counter()
        n_words = ds.transactions.matrix.shape[1]
        patterns = random_patterns(n_words, job.k, ds.max_length, rng)
        return {
            "name": job.name,
            **asdict(job),
            "f_score": f_score(true, patterns),
            "re": float("nan"),  # no supports published
            "published": len(patterns),
            "epsilon_spent": 0.0,
            "unit": "per frame",
            "seconds": time.perf_counter() - start,
        }
    start = time.perf_counter()
    r = release(job, ds)
    seconds = time.perf_counter() - start
    exact = supports_of(ds.transactions, list(r.patterns))
    return {
        "name": job.name,
        **asdict(job),
        "f_score": f_score(true, r.patterns),
        "re": relative_error(r.supports, exact),
        "published": len(r.patterns),
        "epsilon_spent": r.epsilon_spent,
        "unit": r.unit,
        "seconds": seconds,
    }


#: the grids of the three sweeps (``experiments/grids/dpcode.toml``)
SWEEP_GRIDS = ("epsilons", "ks", "splits")


def jobs(datasets: list[str], seeds: list[int], grids: dict[str, Any]) -> list[Job]:
    """Every run of the three sweeps over ``grids`` (epsilons, ks, splits)."""
    eps_grid, k_grid, split_grid = (grids[k] for k in SWEEP_GRIDS)
    out = []
    for ds in datasets:
        for seed in seeds:
            for m in WITH_FLOOR:
                split = DPCODE_SPLIT if m.startswith("DPcode") else 0.5
                out += [Job("eps", ds, m, e, FIXED_K, split, seed) for e in eps_grid]
                out += [Job("k", ds, m, FIXED_EPS, k, split, seed) for k in k_grid]
            for m in METHODS[:2]:
                out += [
                    Job("split", ds, m, FIXED_EPS, FIXED_K, s, seed) for s in split_grid
                ]
    return out


def _cell(values: list[float]) -> str:
    return mean_sd_cell([v for v in values if v == v])  # drop nan (empty releases)


def aggregate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and std over seeds per (sweep, dataset, method, eps, k, split)."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        key = (r["sweep"], r["dataset"], r["method"], r["eps"], r["k"], r["split"])
        groups.setdefault(key, []).append(r)
    out = []
    for (sweep, ds, m, eps, k, split), rs in sorted(groups.items()):
        f = mean_sd([r["f_score"] for r in rs])
        re_vals = [r["re"] for r in rs if r["re"] == r["re"]]
        re = mean_sd(re_vals) if re_vals else (float("nan"), 0.0)
        out.append(
            {
                "sweep": sweep,
                "dataset": ds,
                "method": m,
                "eps": eps,
                "k": k,
                "split": split,
                "seeds": len(rs),
                "f_score_mean": f[0],
                "f_score_std": f[1],
                "re_mean": re[0],
                "re_std": re[1],
                "epsilon_spent_max": max(r["epsilon_spent"] for r in rs),
            }
        )
    return out


def _grid(
    rows: list[dict[str, Any]],
    ds: str,
    sweep: str,
    column: str,
    metric: str,
    methods: tuple[str, ...],
) -> str:
    values = sorted(
        {r[column] for r in rows if r["sweep"] == sweep and r["dataset"] == ds}
    )
    lines = table_head("method", *(f"{column} = {v:g}" for v in values))
    for m in methods:
        cells = []
        for v in values:
            sel = [
                r[metric]
                for r in rows
                if (r["sweep"], r["dataset"], r["method"], r[column])
                == (sweep, ds, m, v)
            ]
            cells.append(_cell(sel))
        if any(c != MISSING for c in cells):
            lines.append(table_row(m, *cells))
    return "\n".join(lines)


PROTOCOL = {
    "digits": "digits (sklearn, 1,797 frames; 9 primitives per frame: 4x4 patches, "
    "stride 2, centred, unit norm; public Hadamard-16 codebook, 32 words; L = 9 "
    "words per frame; patterns of <= 3 words)",
    "mirflickr": "MIRFlickr-25K tag sets (20,015 frames, 1,386 tags as words, no "
    "primitives: DPcode's Alg. 1 does not apply; frames truncated to L = 10 tags "
    "(lowest ids); patterns of <= 2 words)",
}


def tables(rows: list[dict[str, Any]], seeds: list[int]) -> str:
    """Markdown tables with the protocol above each."""
    seed_text = ", ".join(str(s) for s in seeds)
    out = [
        "Privacy noise is SEEDED (`NoiseSource.seeded`: a reproducible simulation, "
        "not a release private against anyone who knows the seed). Every epsilon "
        f"is per frame (one frame added or removed), delta = 0. Seeds {seed_text}; "
        "cells are mean ± std over seeds. F-score: Def. 3 against the exact top-k "
        "(mlxtend FP-growth, ties by length then word ids); RE: median over "
        "published patterns of |noisy - true| / max(true, 1). DPcode: split "
        f"eps_1 / eps = {DPCODE_SPLIT}, Alg. 1 primitive noise (digits) and Eq. 6; "
        "DPcode (pruned): no primitive noise, Eq. 6 replaced by pruning; NoisyCut: "
        "half of eps for the cut; random patterns (floor): k patterns drawn "
        "uniformly, reading no data (epsilon 0, no supports).",
    ]
    datasets = [
        d for d in ("digits", "mirflickr") if any(r["dataset"] == d for r in rows)
    ]
    for ds in datasets:
        out += [
            "",
            f"### {ds}",
            "",
            PROTOCOL[ds],
            "",
            f"**F-score vs epsilon** (k = {FIXED_K})",
            "",
            _grid(rows, ds, "eps", "eps", "f_score", WITH_FLOOR),
            "",
            f"**RE vs epsilon** (k = {FIXED_K})",
            "",
            _grid(rows, ds, "eps", "eps", "re", METHODS),
            "",
            f"**F-score vs k** (epsilon = {FIXED_EPS:g})",
            "",
            _grid(rows, ds, "k", "k", "f_score", WITH_FLOOR),
            "",
            f"**RE vs k** (epsilon = {FIXED_EPS:g})",
            "",
            _grid(rows, ds, "k", "k", "re", METHODS),
            "",
            f"**F-score vs split eps_1 / eps** (k = {FIXED_K}, "
            f"epsilon = {FIXED_EPS:g})",
            "",
            _grid(rows, ds, "split", "split", "f_score", METHODS[:2]),
            "",
            f"**RE vs split eps_1 / eps** (k = {FIXED_K}, epsilon = {FIXED_EPS:g})",
            "",
            _grid(rows, ds, "split", "split", "re", METHODS[:2]),
        ]
    return "\n".join(out)


def plots(agg: list[dict[str, Any]], out: Path) -> list[str]:
    """F-score / RE against eps, k and split; one PNG per sweep and metric."""
    from server.plots import plt, save_figure  # noqa: PLC0415

    written = []
    datasets = sorted({a["dataset"] for a in agg})
    for sweep, column, log in (
        ("eps", "eps", True),
        ("k", "k", True),
        ("split", "split", False),
    ):
        for metric, label in (("f_score", "F-score"), ("re", "RE (median)")):
            fig, axes = plt.subplots(
                1, len(datasets), figsize=(5 * len(datasets), 3.6), squeeze=False
            )
            for ax, ds in zip(axes[0], datasets, strict=True):
                for m in WITH_FLOOR:
                    sel = [
                        a
                        for a in agg
                        if (a["sweep"], a["dataset"], a["method"]) == (sweep, ds, m)
                    ]
                    if not sel:
                        continue
                    sel.sort(key=lambda a: a[column])
                    x = [a[column] for a in sel]
                    y = np.array([a[f"{metric}_mean"] for a in sel])
                    e = np.array([a[f"{metric}_std"] for a in sel])
                    style = "--" if m == FLOOR else "-"
                    ax.errorbar(
                        x, y, yerr=e, marker="o", capsize=3, label=m, linestyle=style
                    )
                if log:
                    ax.set_xscale("log")
                if metric == "re":
                    ax.set_yscale("log")
                ax.set_title(ds)
                ax.set_xlabel(
                    {"eps": "epsilon (per frame)", "k": "k", "split": "eps_1 / eps"}[
                        sweep
                    ]
                )
                ax.set_ylabel(label)
                ax.grid(alpha=0.3)
            axes[0][0].legend(fontsize=8)
            name = f"{metric}_vs_{sweep}.png"
            save_figure(fig, out / name, dpi=110)
            written.append(name)
    return written


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    grids = load_grids("dpcode", "figures", ("seeds", *SWEEP_GRIDS))
    quick_grids = load_grids("dpcode", "figures-quick", SWEEP_GRIDS)
    parser.add_argument("--seeds", default=csv(grids["seeds"]))
    parser.add_argument("--datasets", default="digits,mirflickr")
    parser.add_argument("--data-dir", default=str(DATA_DIR))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="smoke run")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once")
    args = parser.parse_args()
    seeds = flag_list(parser, "--seeds", args.seeds, SEEDS)
    if args.quick:
        seeds = seeds[:1]
    out = args.out or (
        ROOT / "results" / "dpcode-quick"
        if args.quick
        else ROOT / "docs" / "results" / "dpcode"
    )
    out.mkdir(parents=True, exist_ok=True)
    datasets = []
    for ds in args.datasets.split(","):
        if (
            ds == "mirflickr"
            and not (Path(args.data_dir) / "mirflickr25k_tags.npz").exists()
        ):
            print(
                f"skipping mirflickr: {args.data_dir}/mirflickr25k_tags.npz not found"
            )
            continue
        datasets.append(ds)
    started = time.perf_counter()
    rows, failed = run_sweep(
        jobs(datasets, seeds, quick_grids if args.quick else grids),
        lambda job: run_job(job, args.data_dir),
        rows_path=out / "rows.jsonl",
        resume=args.resume,
        name=lambda job: job.name,
        describe=lambda r: (
            f"F={r['f_score']:.3f} RE={r['re']:.3f} "
            f"eps={r['epsilon_spent']:.3g} ({r['seconds']:.2f} s)"
        ),
        workers=args.jobs,
    )
    agg = aggregate(rows)
    images = plots(agg, out)
    text = tables(rows, seeds)
    summary = {
        "command": "python -m experiments.dpcode figures"
        + (" --quick" if args.quick else ""),
        "noise": "seeded (simulation only)",
        "unit": "per frame",
        "seeds": seeds,
        "wall_seconds_this_invocation": round(time.perf_counter() - started, 1),
        "plots": images,
        "aggregate": agg,
    }
    print(write_tables(out, summary, text))
    exit_if_failed(failed)

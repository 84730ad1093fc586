"""The paper-shaped suite: one command over the experiment drivers.

``python -m experiments.suite --paper fedhap|pfmh|phashing|dphe|dpcode|all
[--dataset NAME | --dataset PAPER=NAME ...] [--seeds 0,1,2] [--quick] [--out DIR]
[--resume] [--data-dir DIR] [--jobs N] [--dry-run] [-- DRIVER ARGS]``

Each paper is one table of its paper's driver, run as ``python -m
experiments.<paper> <table>`` (:mod:`experiments.lib.driver`) in its own process
with the suite's seeds, results
directory, resume flag and dataset (``--set dataset=npz --set data-path=...`` for
the Flower drivers, ``--datasets``/``--data-dir`` for DPcode). The suite only
orchestrates: the grids, tables and ``summary.json`` / ``rows.jsonl`` are the
drivers' own. It adds, per paper, ``suite.json`` (driver command, seeds,
dataset, the driver's protocol text, wall time, git commit, exit code, whether
it completed) and ``suite.log`` (the driver's output).

Every argument, dataset name and data file is checked before the first run
starts. ``--resume`` passes ``--resume`` to the drivers that take it and skips a
paper whose ``suite.json`` says it completed with the same driver arguments.
``--quick`` is a smoke run: one seed and each driver's smallest grid (see
``Paper.quick``), into a temporary directory unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import ast
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from experiments.lib.driver import driver_command
from hashdata.recipes import missing_file_hint

ROOT = Path(__file__).resolve().parents[1]
#: ``../shared/data`` relative to the repository (the shared read-only datasets).
DEFAULT_DATA_DIR = ROOT.parent / "shared" / "data"
#: Full-budget results go to ``docs/results/<paper>[-<dataset>]/``.
DEFAULT_OUT = ROOT / "docs" / "results"
SUITE_FILE = "suite.json"
LOG_FILE = "suite.log"
#: Files a driver may write; a paper is complete when its driver exited 0 and
#: wrote ``table.md``.
DRIVER_OUTPUTS = ("table.md", "summary.json", "rows.jsonl")
REQUIRED_OUTPUT = "table.md"
ALL = "all"
RESUME_FLAG = "--resume"


class SuiteError(ValueError):
    """A bad suite argument or a missing data file (raised before any run)."""


@dataclass(frozen=True)
class Dataset:
    """A dataset a paper's driver can run on.

    ``file`` is a file name under ``--data-dir`` that must exist; ``args`` are
    the driver arguments that select the dataset, with ``{path}`` standing for
    the file's path (JSON-quoted, i.e. a TOML string for ``--set``) and
    ``{data_dir}`` for the data directory. ``module``: this dataset's own driver
    instead of the paper's (e.g. FedHAP on MIRFlickr-25K, a real-data table with
    tuned baselines instead of the digits-sized Tables 2-7 grid).
    """

    name: str
    description: str
    file: str | None = None
    args: tuple[str, ...] = ()
    #: A driver of its own for this dataset (``None``: the paper's), with its own
    #: smoke-run arguments; such a driver takes ``--resume`` but not ``--jobs``.
    module: str | None = None
    quick: tuple[str, ...] = ()
    #: ``(queries, database)``: ``--quick`` runs on a class-balanced subset of
    #: ``file`` of this size (``hashdata.subset``, written into the output folder),
    #: not on the whole file. ``None``: quick runs read the file itself.
    quick_subset: tuple[int, int] | None = None

    def paths(self, data_dir: Path) -> list[Path]:
        """Return the data files this dataset needs."""
        return [data_dir / self.file] if self.file else []

    def driver_args(self, data_dir: Path, path: Path | None = None) -> list[str]:
        """Driver arguments selecting this dataset (``path``: another file for it)."""
        actual = (
            path if path is not None else data_dir / self.file if self.file else None
        )
        quoted = json.dumps(str(actual)) if actual is not None else ""
        whole = "{data_dir}/" + self.file if self.file else None
        return [
            (str(actual) if whole and a == whole else a)
            .replace("{path}", quoted)
            .replace("{data_dir}", str(data_dir))
            for a in self.args
        ]

    def subset_path(self, out: Path) -> Path:
        """Where a ``--quick`` run's subset of ``file`` is written (under ``out``)."""
        assert self.file is not None and self.quick_subset is not None
        q, d = self.quick_subset
        return out / "quick-data" / f"{Path(self.file).stem}_q{q}_d{d}_s0.npz"


def _npz(*extra: str) -> tuple[str, ...]:
    """``--set`` arguments for an ``.npz`` dataset file (plus ``extra`` pairs)."""
    sets = ("dataset=npz", "data-path={path}", *extra)
    return tuple(x for pair in sets for x in ("--set", pair))


MIRFLICKR = "mirflickr25k_tags.npz"
WIKI = "wiki.npz"
CIFAR10 = "cifar10_jpeg.npz"
#: CIFAR-10 (JPEG copy) as frozen EfficientNet-Lite0 features, made once by
#: ``python -m hashdata.features --backbone efficientnet-lite0 --data
#: ../shared/data/cifar10_jpeg.npz --out <data-dir>/cifar10_effnet-lite0_160.npz
#: --image-size 160`` (never in git; pass its folder as ``--data-dir``).
CIFAR10_FEATURES = "cifar10_effnet-lite0_160.npz"
#: ``--quick`` on the features: 200 queries, 1,000 database rows, class-balanced
QUICK_FEATURES_SUBSET = (200, 1000)
_FEATURES_DESCRIPTION = (
    "CIFAR-10 (JPEG copy) as 1,280-d features of the frozen ImageNet-pretrained "
    "EfficientNet-Lite0 at 160 px (the papers' feature protocol; the file "
    f"{CIFAR10_FEATURES} from `python -m hashdata.features`, in --data-dir), the "
    "file's 10,000 test images as queries and 50,000 training images as database"
)

# the CIFAR-10 features' tuning: rates scored on a validation split of the database
_FEATURES_TUNING = (
    *("--lr-grid", "5e-4,2e-3", "--fedhap-lr-grid", "5e-4,2e-3,5e-3"),
    *("--ceiling-lr-grid", "5e-4,2e-3", "--epochs-grid", "3"),
)


@dataclass(frozen=True)
class Paper:
    """One paper's driver and how the suite calls it.

    ``datasets[0]`` is the default. ``takes_resume``: the driver has
    ``--resume`` (DPHE's always resumes, PHashing's cannot). ``quick``: the
    driver arguments of the smoke run (with one seed).
    """

    name: str
    module: str
    runs: str
    datasets: tuple[Dataset, ...]
    quick: tuple[str, ...]
    takes_resume: bool = True
    takes_jobs: bool = True
    resume_note: str = ""

    def dataset(self, name: str | None) -> Dataset:
        """Return the dataset called ``name`` (``None``: the default)."""
        if name is None:
            return self.datasets[0]
        for ds in self.datasets:
            if ds.name == name:
                return ds
        raise SuiteError(
            f"unknown dataset {name!r} for paper {self.name}; accepted: "
            + ", ".join(self.dataset_names())
        )

    def dataset_names(self) -> list[str]:
        """Return the accepted dataset names, the default marked."""
        return [
            ds.name + (" (default)" if i == 0 else "")
            for i, ds in enumerate(self.datasets)
        ]

    def protocol(self, module: str | None = None) -> str:
        """Return the driver's module docstring: what it runs, how it measures."""
        module = module or self.module
        source = (ROOT / Path(*module.split("."))).with_suffix(".py")
        return ast.get_docstring(ast.parse(source.read_text())) or ""


#: FedHAP Table 1's MIRFlickr split and the learning-rate grids every method of
#: docs/results/fedhap-mirflickr-paper peaks inside.
PAPER_SPLIT_ARGS = (
    "--train-size",
    "10000",
    "--lr-grid",
    "0.002,0.005,0.01,0.02,0.05",
    "--ceiling-lr-grid",
    "0.0002,0.0005,0.002,0.005,0.01",
)
#: The MIRFlickr smoke run: 2 clients, 1 round, one learning rate.
_MIRFLICKR_QUICK = (
    "--clients",
    "2",
    "--rounds",
    "1",
    "--bits",
    "16",
    "--lr-grid",
    "0.0005",
    "--epochs-grid",
    "3",
    "--methods",
    "DPSH (FedAvg),FedHAP,centralized (DPSH)",
)
DIGITS = Dataset("digits", "scikit-learn digits (embedded, 1,797 8x8 images)")
_ONE_ROUND = ("--set", "rounds=1", "--set", "eval-every=1", "--set", "local-epochs=1")

PAPERS: dict[str, Paper] = {
    p.name: p
    for p in (
        Paper(
            name="fedhap",
            module="experiments.tables.fedhap_sweep",
            runs="FedHAP Tables 2-7: DPSH (FedAvg), DPSH (FedProx), FedHAP-1/2/3 and "
            "FedHAP, IID and non-IID (3 classes per client), 20 clients, 12/24/48 "
            "bits; 20/40/60/100 clients (IID, 48 bits); Euclidean triplet distance",
            datasets=(
                DIGITS,
                Dataset(
                    "mirflickr",
                    "MIRFlickr-25K tags (20,015 x 1,386 binary tag vectors, 24 "
                    "multi-hot labels; text modality only), every database row "
                    "training (ours): FedHAP against DPSH, CSQ, HashNet, DCH and "
                    "GreedyHash under FedAvg (each rate the best of a 3-rate grid "
                    "that stops at 2e-3, too low for some), IID and label shards, "
                    "20 clients, 48 bits, the centralized ceiling, PR / P@K / "
                    "recall@K curves",
                    file=MIRFLICKR,
                    args=("--data-path", "{data_dir}/" + MIRFLICKR),
                    module="experiments.tables.real_data_table",
                    quick=_MIRFLICKR_QUICK,
                ),
                Dataset(
                    "mirflickr-paper",
                    "MIRFlickr-25K tags with FedHAP Table 1's split (a seeded "
                    "10,000 of the database rows train, every row is retrieved): "
                    "the same methods, each baseline's rate tuned over 2e-3 to "
                    "5e-2 and the ceiling's over 2e-4 to 1e-2, IID and label "
                    "shards, 20 clients, 48 bits, PR / P@K / recall@K curves",
                    file=MIRFLICKR,
                    args=(
                        "--data-path",
                        "{data_dir}/" + MIRFLICKR,
                        *PAPER_SPLIT_ARGS,
                    ),
                    module="experiments.tables.real_data_table",
                    quick=(*_MIRFLICKR_QUICK, "--ceiling-lr-grid", "0.0005"),
                ),
                Dataset(
                    "cifar10-features",
                    _FEATURES_DESCRIPTION + ": FedHAP against DPSH, CSQ and DCH "
                    "under FedAvg, IID and 3 classes per client, 10 clients, 32 "
                    "bits, 10 rounds, the centralized ceiling; each method's rate "
                    "tuned on a validation split of the database (2 rates, FedHAP "
                    "also the paper's 5e-3; 3 local epochs)",
                    file=CIFAR10_FEATURES,
                    quick_subset=QUICK_FEATURES_SUBSET,
                    args=(
                        "--data-path",
                        "{data_dir}/" + CIFAR10_FEATURES,
                        "--clients",
                        "10",
                        "--bits",
                        "32",
                        "--rounds",
                        "10",
                        "--methods",
                        "FedHAP,DPSH (FedAvg),CSQ (FedAvg),DCH (FedAvg),"
                        "centralized (DPSH)",
                        *_FEATURES_TUNING,
                    ),
                    module="experiments.tables.real_data_table",
                    quick=("--clients", "2", "--rounds", "1", "--bits", "16"),
                ),
            ),
            # the distance table alone: one simulation
            quick=(
                "--only",
                "distance",
                "--bits",
                "12",
                "--sweep-bits",
                "12",
                "--clients",
                "2",
                "--client-counts",
                "2",
                *_ONE_ROUND,
            ),
        ),
        Paper(
            name="pfmh",
            module="experiments.tables.pfmh_sweep",
            runs="PFMH Tables 1-2: PFMH, PFMH (fedavg mode), FedAvg (same model), "
            "w/o-PE, w/o-P, w/o-Ls, w/o-Ll and centralized, 10 clients, Dirichlet "
            "0.1, 16/32/64/128 bits, with top-K precision (Fig. 4); completion "
            "check at Dirichlet 1.0, 32 bits; sensitivity to the loss weights alpha "
            "and beta, one at a time, 64 bits (Fig. 7)",
            datasets=(
                Dataset(
                    "multiview-digits",
                    "digits as two views: raw pixels and gradient histograms",
                ),
                Dataset(
                    "wiki",
                    "Wikipedia image-text (2,866 pairs, 10 classes), the paper's two "
                    "modalities: SIFT BoVW 128-d images and LDA 10-d text topics "
                    "(the file's TF-IDF array is left out)",
                    file=WIKI,
                    args=_npz('modalities="image,text"'),
                ),
            ),
            # the completion check alone: two simulations (PFMH, w/o-PE)
            quick=(
                "--only",
                "completion",
                "--completion-alphas",
                "1.0",
                "--completion-bits",
                "16",
                "--bits",
                "16",
                "--clients",
                "2",
                *_ONE_ROUND,
            ),
        ),
        Paper(
            name="phashing",
            module="experiments.tables.phashing_table",
            runs="PHashing Table 1 and Fig. 2: DPSH (FedAvg) and FedHAP, 10 IID "
            "clients, 30 rounds, 16/32/64 bits; database codes flipped at epsilon 0 "
            "(none), 1, 2, 4 (paper calibration), replayed on the final models; "
            "untrained floor, centralized ceiling, PR curves per epsilon",
            datasets=(
                DIGITS,
                Dataset(
                    "cifar10",
                    "CIFAR-10 (JPEG copy), 60,000 32x32 RGB images, ResNet-18",
                    file=CIFAR10,
                    args=_npz("image-shape=32,32,3"),
                ),
                Dataset(
                    "cifar10-features",
                    _FEATURES_DESCRIPTION + " (model auto: the mlp hash head), the "
                    "paper's 12/24/32/48 bits, 10 rounds, each method's rate tuned "
                    "at 32 bits on a validation split of the database",
                    file=CIFAR10_FEATURES,
                    quick_subset=QUICK_FEATURES_SUBSET,
                    args=(
                        *_npz("map-top-k=1000", "precision-k=100,500,1000"),
                        *("--bits", "12,24,32,48", "--rounds", "10"),
                        *("--lr-grid", "5e-4,2e-3", "--tune-bits", "32"),
                    ),
                ),
            ),
            quick=("--bits", "16", "--clients", "2", "--rounds", "1")
            + ("--epsilons", "0,1", "--set", "local-epochs=1"),
        ),
        Paper(
            name="dphe",
            module="experiments.tables.dphe_map",
            runs="DPHE: FedAvg (DPSH, mlp, 32 bits, 5 IID clients, 10 rounds) with "
            "plaintext vs DPHE-summed sparse updates (2048-bit keys) at sparsity "
            "90% and 0%",
            datasets=(
                DIGITS,
                Dataset(
                    "digits-users",
                    "digits split over 5, 10, 25, 50 and 100 users (Fig. 4 shape, its "
                    "right panel): the plaintext / DPHE pair per number of users, "
                    "90% sparsity, DJN obfuscators; mAP and round time against N",
                    module="experiments.tables.dphe_users",
                    quick=("--users", "3", "--rounds", "1"),
                ),
                Dataset(
                    "digits-users-repeated",
                    "digits, 5, 10, 25, 50 and 100 users as k repeated IID five-way "
                    "splits (Fig. 4 shape, its left panel: each user a fixed fifth, "
                    "every sample held by k users, only split 0 publishes codes)",
                    module="experiments.tables.dphe_users",
                    args=("--panel", "left"),
                    quick=("--users", "5", "--rounds", "1"),
                ),
            ),
            quick=("--sparsity", "0.9", "--rounds", "1", "--clients", "3"),
            takes_resume=False,
            takes_jobs=False,
            resume_note="the driver always skips the pairs already in rows.jsonl",
        ),
        Paper(
            name="dpcode",
            module="experiments.tables.dpcode_table",
            runs="DPcode Figs. 3-8: DPcode, DPcode (pruned), Direct and NoisyCut, "
            "F-score and relative error vs epsilon, k and the budget split "
            "(central one-client releases, no Flower); tables and PNG plots",
            datasets=(
                Dataset(
                    "digits+mirflickr",
                    "digits (patch primitives) and MIRFlickr-25K tag sets",
                    file=MIRFLICKR,
                    args=("--datasets", "digits,mirflickr", "--data-dir", "{data_dir}"),
                ),
                Dataset(
                    "digits",
                    "digits (patch primitives, Hadamard-16 codebook)",
                    args=("--datasets", "digits"),
                ),
                Dataset(
                    "mirflickr",
                    "MIRFlickr-25K tag sets (1,386 tags as words)",
                    file=MIRFLICKR,
                    args=("--datasets", "mirflickr", "--data-dir", "{data_dir}"),
                ),
            ),
            quick=("--quick",),
        ),
    )
}


@dataclass(frozen=True)
class PaperRun:
    """One paper as the suite will run it."""

    paper: Paper
    dataset: Dataset
    seeds: tuple[int, ...]
    out: Path
    argv: tuple[str, ...]
    quick: bool
    data_dir: Path
    #: ``(source, subset file, queries, database)`` to write before the driver
    #: starts (a ``--quick`` run on a dataset with ``quick_subset``), else ``None``.
    subset: tuple[Path, Path, int, int] | None = None

    @property
    def module(self) -> str:
        """The driver's module: the dataset's own, else the paper's."""
        return self.dataset.module or self.paper.module

    @property
    def command(self) -> list[str]:
        """The driver command (run in the repository root)."""
        return [sys.executable, *driver_command(self.module), *self.argv]

    def shown(self) -> str:
        """Return the command as a user would type it."""
        return shlex.join(["python", *driver_command(self.module), *self.argv])

    def key(self) -> list[str]:
        """Driver arguments that decide the results (``--resume`` left out)."""
        return [a for a in self.argv if a != RESUME_FLAG]


@dataclass
class Plan:
    """Every paper to run, in order, and the suite's settings."""

    runs: list[PaperRun]
    out: Path
    data_dir: Path
    resume: bool
    temporary_out: bool = False
    notes: list[str] = field(default_factory=list)


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"0,1,2"`` -> ``(0, 1, 2)``; anything else is a :class:`SuiteError`."""
    try:
        seeds = tuple(int(s) for s in text.split(","))
    except ValueError:
        raise SuiteError(
            f"--seeds: expected comma-separated integers, got {text!r}"
        ) from None
    if len(set(seeds)) != len(seeds):
        raise SuiteError(f"--seeds: repeated seed in {text!r}")
    return seeds


def select_papers(name: str) -> list[Paper]:
    """Return the papers ``--paper name`` runs."""
    if name == ALL:
        return list(PAPERS.values())
    if name not in PAPERS:
        raise SuiteError(
            f"unknown paper {name!r}; accepted: {', '.join([*PAPERS, ALL])}"
        )
    return [PAPERS[name]]


def select_datasets(papers: list[Paper], specs: Sequence[str]) -> dict[str, Dataset]:
    """Resolve ``--dataset NAME`` / ``--dataset PAPER=NAME`` for ``papers``."""
    chosen: dict[str, str] = {}
    names = [p.name for p in papers]
    for spec in specs:
        paper_name, sep, ds_name = spec.rpartition("=")
        if not sep:
            if len(papers) != 1:
                raise SuiteError(
                    f"--dataset {spec!r}: with several papers, name the paper: "
                    "--dataset PAPER=NAME (e.g. --dataset fedhap=mirflickr); "
                    + "; ".join(
                        f"{p.name}: {', '.join(p.dataset_names())}" for p in papers
                    )
                )
            paper_name = papers[0].name
        if paper_name not in names:
            raise SuiteError(
                f"--dataset {spec!r}: paper {paper_name!r} is not run here; "
                f"papers run: {', '.join(names)}"
            )
        if paper_name in chosen:
            raise SuiteError(f"--dataset: paper {paper_name} given twice")
        chosen[paper_name] = ds_name
    return {p.name: p.dataset(chosen.get(p.name)) for p in papers}


def build_plan(args: argparse.Namespace) -> Plan:
    """Check every argument and data file; return the runs (nothing is written).

    Raises
    ------
    SuiteError
        An unknown paper or dataset (naming the accepted values), bad seeds, or
        a data file that does not exist (naming its path).
    """
    papers = select_papers(args.paper)
    driver_extra = list(getattr(args, "driver_args", []) or [])
    if driver_extra and len(papers) > 1:
        raise SuiteError(
            f"driver arguments after `--` ({shlex.join(driver_extra)}) need exactly "
            f"one --paper; got {', '.join(p.name for p in papers)}"
        )
    datasets = select_datasets(papers, args.dataset)
    seeds = parse_seeds(args.seeds)
    if args.quick:
        seeds = seeds[:1]
    if args.jobs is not None and args.jobs < 1:
        raise SuiteError(f"--jobs must be >= 1, got {args.jobs}")
    data_dir = Path(args.data_dir).resolve()
    missing = [
        f"{path} (paper {p.name}, dataset {datasets[p.name].name}"
        f"{missing_file_hint(str(path))})"
        for p in papers
        for path in datasets[p.name].paths(data_dir)
        if not path.is_file()
    ]
    if missing:
        raise SuiteError(
            "data file not found: "
            + "; ".join(missing)
            + f". --data-dir is {data_dir}; pick another dataset with --dataset "
            "(the defaults need no file, except dpcode's: --dataset dpcode=digits)"
        )
    out = Path(args.out).resolve() if args.out else DEFAULT_OUT
    runs = []
    for p in papers:
        ds = datasets[p.name]
        folder = p.name if ds is p.datasets[0] else f"{p.name}-{ds.name}"
        argv = ["--seeds", ",".join(map(str, seeds)), "--out", str(out / folder)]
        subset = None
        if args.quick and ds.quick_subset and ds.file:
            sub = ds.subset_path(out)
            subset = (data_dir / ds.file, sub, *ds.quick_subset)
            argv += ds.driver_args(data_dir, sub)
        else:
            argv += ds.driver_args(data_dir)
        if args.quick:
            argv += ds.quick if ds.module else p.quick
        if args.jobs is not None and p.takes_jobs and not ds.module:
            argv += ["--jobs", str(args.jobs)]
        argv += driver_extra
        if args.resume and p.takes_resume:
            argv.append(RESUME_FLAG)
        runs.append(
            PaperRun(
                p, ds, seeds, out / folder, tuple(argv), args.quick, data_dir, subset
            )
        )
    plan = Plan(runs, out, data_dir, args.resume)
    if args.resume:
        plan.notes += [
            f"{r.paper.name}: {r.paper.resume_note}"
            for r in runs
            if r.paper.resume_note
        ]
    return plan


def git_state() -> dict[str, Any]:
    """``{"commit": sha, "dirty": bool}`` of the repository (``None`` without git).

    The runs' own reading (:func:`server.provenance.git_state`), in the suite's shape.
    """
    from server.provenance import git_state as checkout_state  # noqa: PLC0415

    return checkout_state(ROOT) or {"commit": None, "dirty": None}


def read_record(run: PaperRun) -> dict[str, Any] | None:
    """Read the paper's ``suite.json``; ``None`` if missing or unreadable."""
    try:
        return json.loads((run.out / SUITE_FILE).read_text())
    except (OSError, ValueError):
        return None


def is_complete(record: dict[str, Any] | None, run: PaperRun) -> bool:
    """Whether ``record`` is a completed run of the same driver arguments."""
    return bool(
        record
        and record.get("complete")
        and record.get("driver_args") == run.key()
        and (run.out / REQUIRED_OUTPUT).is_file()
    )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _fmt(seconds: float) -> str:
    """``3 min 4 s`` (the drivers' format; imported late: it loads the settings)."""
    from experiments.lib.progress import format_seconds  # noqa: PLC0415

    return format_seconds(seconds)


def _summary_protocol(out: Path) -> dict[str, Any]:
    """Protocol entries of the driver's summary.json (metric, calibration, ...)."""
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    keys = ("metric", "calibration", "noise", "unit", "clients", "rounds")
    return {k: summary[k] for k in keys if k in summary}


def run_paper(run: PaperRun, suite_command: str, git: dict[str, Any]) -> dict[str, Any]:
    """Run one paper's driver, streaming its output; write and return suite.json."""
    run.out.mkdir(parents=True, exist_ok=True)
    if run.subset is not None:
        from hashdata.subset import is_subset_of, write_subset

        source, sub, q, d = run.subset
        if not is_subset_of(sub, source, queries=q, database=d, seed=0):  # stale
            write_subset(source, sub, queries=q, database=d, seed=0)
    record: dict[str, Any] = {
        "paper": run.paper.name,
        "runs": run.paper.runs,
        "command": run.shown(),
        "driver": run.module,
        "driver_args": run.key(),
        "suite_command": suite_command,
        "seeds": list(run.seeds),
        "dataset": {
            "name": run.dataset.name,
            "description": run.dataset.description,
            "files": [str(p) for p in run.dataset.paths(run.data_dir)],
            **({"quick_subset": str(run.subset[1])} if run.subset else {}),
        },
        "quick": run.quick,
        "protocol": {"driver": run.paper.protocol(run.module)},
        "git": git,
        "started_at": _now(),
        "finished_at": None,
        "wall_seconds": None,
        "returncode": None,
        "complete": False,
        "outputs": [],
    }
    _write_record(run, record)
    started = time.perf_counter()
    with (
        (run.out / LOG_FILE).open("a") as log,
        subprocess.Popen(
            run.command,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        ) as proc,
    ):
        log.write(f"# {_now()} {run.shown()}\n")
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            print(f"  {run.paper.name} | {line}", end="", flush=True)
        rc = proc.wait()
    outputs = [f for f in DRIVER_OUTPUTS if (run.out / f).is_file()]
    record.update(
        finished_at=_now(),
        wall_seconds=round(time.perf_counter() - started, 1),
        returncode=rc,
        complete=rc == 0 and REQUIRED_OUTPUT in outputs,
        outputs=outputs,
    )
    record["protocol"].update(_summary_protocol(run.out))
    _write_record(run, record)
    return record


def _write_record(run: PaperRun, record: dict[str, Any]) -> None:
    tmp = run.out / (SUITE_FILE + ".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(run.out / SUITE_FILE)


class SuiteProgress:
    """Papers started/finished, elapsed time and an overall ETA.

    A paper's expected time is its previous ``suite.json`` wall time when that
    record ran the same driver arguments, else the mean wall time of the papers
    finished in this invocation; without either the ETA is unknown.
    """

    def __init__(self, runs: list[PaperRun]) -> None:
        self.runs = runs
        self.started = time.perf_counter()
        self.previous: dict[str, float] = {}
        for r in runs:
            rec = read_record(r)
            if rec and rec.get("driver_args") == r.key() and rec.get("wall_seconds"):
                self.previous[r.paper.name] = float(rec["wall_seconds"])
        self.walls: list[float] = []

    def eta(self, left: list[PaperRun]) -> str:
        """Estimate the time the papers in ``left`` will take."""
        total = 0.0
        for r in left:
            guess = self.previous.get(r.paper.name)
            if guess is None and self.walls:
                guess = statistics.fmean(self.walls)
            if guess is None:
                return "unknown"
            total += guess
        return _fmt(total) if left else "done"

    def line(self, i: int, text: str, left: list[PaperRun]) -> None:
        """Print ``[suite i/n] text (elapsed ..., ETA ...)``."""
        elapsed = _fmt(time.perf_counter() - self.started)
        print(
            f"[suite {i}/{len(self.runs)}] {text} (elapsed {elapsed}, "
            f"ETA {self.eta(left)})",
            flush=True,
        )


def execute(plan: Plan, suite_command: str) -> int:
    """Run every paper of ``plan``; return 0, or 1 if any paper failed."""
    progress = SuiteProgress(plan.runs)
    git = git_state()
    failed = []
    for note in plan.notes:
        print(f"[suite] note: {note}", flush=True)
    for i, run in enumerate(plan.runs, start=1):
        rest = plan.runs[i - 1 :]
        if plan.resume and is_complete(read_record(run), run):
            progress.line(
                i,
                f"{run.paper.name}: complete in {run.out / SUITE_FILE}, skipped",
                rest[1:],
            )
            continue
        seeds = ",".join(map(str, run.seeds))
        progress.line(
            i,
            f"{run.paper.name} started: dataset {run.dataset.name}, seeds {seeds}"
            f" -> {run.out}",
            rest,
        )
        print(f"  $ {run.shown()}", flush=True)
        record = run_paper(run, suite_command, git)
        progress.walls.append(record["wall_seconds"])
        status = "finished" if record["complete"] else "FAILED"
        if not record["complete"]:
            failed.append(run.paper.name)
        written = ", ".join(record["outputs"]) or "no output"
        progress.line(
            i,
            f"{run.paper.name} {status} in {_fmt(record['wall_seconds'])} "
            f"(exit {record['returncode']}; wrote {written})",
            rest[1:],
        )
    if failed:
        print(f"[suite] error: paper(s) failed: {', '.join(failed)}", flush=True)
        return 1
    print(f"[suite] done: results under {plan.out}", flush=True)
    return 0


def parser() -> argparse.ArgumentParser:
    """Build the suite's command line."""
    accepted = "; ".join(
        f"{p.name}: {', '.join(p.dataset_names())}" for p in PAPERS.values()
    )
    ap = argparse.ArgumentParser(
        prog="python -m experiments.suite",
        description="Run the paper-shaped benchmarks through the experiment drivers. "
        "Arguments after `--` go to the one paper's driver as they are (e.g. "
        "`-- --bits 32`), after the suite's own; suite.json records them.",
    )
    ap.add_argument(
        "--paper", required=True, help=f"one of {', '.join(PAPERS)}, or {ALL}"
    )
    ap.add_argument(
        "--dataset",
        action="append",
        default=[],
        metavar="[PAPER=]NAME",
        help=f"dataset per paper (PAPER= needed with several papers). {accepted}",
    )
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated (default 0,1,2)")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: one seed, each driver's smallest grid, temporary --out",
    )
    ap.add_argument(
        "--out",
        default=None,
        help="results root; each paper writes to <out>/<paper>[-<dataset>] "
        "(default docs/results, or a temporary directory with --quick)",
    )
    ap.add_argument(
        "--resume",
        action="store_true",
        help="pass --resume to the drivers; skip papers whose suite.json is complete",
    )
    ap.add_argument(
        "--data-dir",
        default=str(DEFAULT_DATA_DIR),
        help="where the .npz datasets are (default ../shared/data)",
    )
    ap.add_argument(
        "--jobs", type=int, default=None, help="runs at once, for drivers with --jobs"
    )
    ap.add_argument(
        "--dry-run", action="store_true", help="print the driver commands and stop"
    )
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit code (2: bad arguments, before any run)."""
    ap = parser()
    raw = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in raw:
        cut = raw.index("--")
        raw, extra = raw[:cut], raw[cut + 1 :]
    args = ap.parse_args(raw)
    args.driver_args = extra
    try:
        plan = build_plan(args)
    except SuiteError as exc:
        ap.error(str(exc))
    if args.quick and args.out is None:
        if args.dry_run:
            out = Path(tempfile.gettempdir()) / "fedhash-bench-quick-XXXXXXXX"
        else:
            out = Path(tempfile.mkdtemp(prefix="fedhash-bench-quick-"))
        args.out = str(out)
        plan = build_plan(args)
        plan.temporary_out = True
        print(f"[suite] --quick results in {out}", flush=True)
    if args.dry_run:
        for run in plan.runs:
            print(run.shown())
        return 0
    shown = sys.argv[1:] if argv is None else list(argv)
    return execute(plan, shlex.join(["python", "-m", "experiments.suite", *shown]))


if __name__ == "__main__":
    sys.exit(main())

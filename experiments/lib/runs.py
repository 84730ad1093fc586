"""One run of a table, each in its own process: federated or the centralized ceiling.

:func:`run_federated` runs ``python -m experiments.simulate`` and
:func:`run_centralized` ``python -m experiments.centralized`` with a run config
(``--set key=value``, :func:`set_flags`) and return the run's summary;
:func:`check_partitions` refuses, before any run, a partitioning the data cannot
give. Every table of :mod:`experiments.tables` runs its runs through these.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from experiments.lib.overrides import resolved_settings

ROOT = Path(__file__).resolve().parents[2]

PARTITIONS = {
    "iid": {"partitioning": "iid"},
    "non-iid (3 cls/client)": {"partitioning": "pathological", "classes-per-client": 3},
}


def safe_name(name: str) -> str:
    """Return a run name as a folder name (no spaces, parentheses or commas)."""
    return name.replace(" ", "_").translate(str.maketrans("", "", "(),"))


def set_flags(cfg: dict[str, Any]) -> list[str]:
    """Return ``cfg`` as ``--set key=value`` flags (strings JSON-quoted)."""
    out = []
    for k, v in cfg.items():
        out += ["--set", f"{k}={json.dumps(v) if isinstance(v, str) else v}"]
    return out


def check_partitions(configs: Iterable[dict[str, Any]], clients: int) -> None:
    """Partition each run config's database over ``clients`` once, before any run.

    A partitioning the data cannot give (three label shards per client over 100
    clients, where a class has fewer rows than the clients that draw it) refuses
    every ClientApp of every run at discovery, a few minutes into each. This finds
    it in the driver, in seconds. Configs with the same data, partitioning and
    seed are checked once.

    Raises
    ------
    ValueError
        The message names the config keys, the seed and what the data allows.
    """
    from clients.data import data_key, database_partition, load_key_split

    checked: set[Any] = set()
    for cfg in configs:
        settings = resolved_settings(cfg)
        key = data_key(settings)
        if key in checked:
            continue
        checked.add(key)
        split = load_key_split(key)
        try:
            # as a ClientApp cuts its partition (partition 0 computes them all)
            database_partition(split, key, 0, clients)
        except ValueError as exc:
            scheme = {
                "partitioning": key.partitioning,
                "dirichlet-alpha": key.dirichlet_alpha,
                "classes-per-client": key.classes_per_client,
                "partition-repeats": key.partition_repeats,
            }
            read = {
                "dirichlet": "dirichlet-alpha",
                "pathological": "classes-per-client",
            }
            named = {
                k: v
                for k, v in scheme.items()
                if k == "partitioning"
                or k == read.get(settings.partitioning)
                or (k == "partition-repeats" and v != 1)
            }
            raise ValueError(
                f"{clients} clients, seed {settings.seed}, "
                + ", ".join(f"{k} = {v!r}" for k, v in named.items())
                + f": {exc}"
            ) from None


def run_federated(
    cfg: dict[str, Any], clients: int, run_dir: Path, *, cpus: int | None = None
) -> dict[str, Any]:
    """One simulation in a subprocess; returns its summary.json (plus ``run_dir``).

    ``cpus``: the CPUs its Ray instance may use (``experiments.simulate --cpus``;
    ``None``: that command's default).

    ``run_dir`` belongs to this one run, and a sweep runs it only for a job not in
    its rows, so anything already in it was left by an interrupted attempt (an
    ``.incomplete`` directory, or a run killed before its row was written): it is
    removed first, else the new run would find two run directories and fail.
    """
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    cmd = [sys.executable, "-m", "experiments.simulate", "--clients", str(clients)]
    if cpus is not None:
        cmd += ["--cpus", str(cpus)]
    cmd += set_flags({**cfg, "results-dir": str(run_dir)})
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"run failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    final = Path(proc.stdout.strip().splitlines()[-1])
    summary = json.loads((final / "summary.json").read_text())
    summary["run_dir"] = str(final)
    return summary


def run_centralized(cfg: dict[str, Any], out: Path) -> dict[str, Any]:
    """Centralized ceiling in a subprocess; returns its JSON."""
    cmd = [sys.executable, "-m", "experiments.centralized", "--out", str(out)]
    cmd += set_flags(cfg)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"run failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())

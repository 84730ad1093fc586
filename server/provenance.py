"""What produced a run: library versions, the machine, the app's code (FAB, commit).

``config.json`` of every run gets :func:`run_provenance`. The machine matters: the
same seed repeats exactly on one machine, but the same command, code and data gave
rows up to 2.4 points apart on another (FedHAP on digits, 15 rounds), most likely
because another CPU or torch build rounds floating-point sums differently. The git
commit is read
from the folder the app runs from; ``flwr run`` runs an installed FAB (a copy
without ``.git``), so there the commit is ``None`` and the FAB hash names the code.
``python -m server.provenance stamp RUN_DIR`` (``make run`` calls it) then records
the checkout's commit, but only when a FAB built from the checkout has the run's
FAB hash: the code that ran is then exactly that checkout's working tree.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

APP_DIR = Path(__file__).resolve().parent.parent
PACKAGES = ("flwr", "torch", "numpy", "fedhash")


def versions() -> dict[str, str | None]:
    """Python and the installed versions of flwr, torch, numpy and this app."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def cpu_model() -> str:
    """Return the CPU model name (``/proc/cpuinfo``, else ``platform``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """Return the server process's machine: CPU model and count, torch threads.

    In a simulation every client runs there too; in a deployment the clients'
    machines are their own.
    """
    threads = None
    if "torch" in sys.modules:  # never import torch just to ask
        threads = sys.modules["torch"].get_num_threads()
    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": threads,
        "platform": platform.platform(),
    }


def git_state(folder: str | Path = APP_DIR) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the git checkout whose top level is ``folder``.

    ``None`` when ``folder`` is not the top of a checkout (not a repository, or a
    folder inside another one, as a FAB installed under a checkout's ``.flwr/``).

    ``dirty``: tracked files differ from the commit (untracked files do not count).
    """

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(folder), *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()

    try:
        top = Path(git("rev-parse", "--show-toplevel")).resolve()
        if top != Path(folder).resolve():
            # e.g. an installed FAB under an ignored .flwr/ of some checkout: that
            # checkout's commit would not name the code that runs
            return None
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": dirty}


def run_provenance(run: Any | None = None) -> dict[str, Any]:
    """``{"versions", "machine", "git", "fab"}`` for ``config.json``.

    ``run`` is Flower's ``grid.run`` (its FAB hash and version, the run id), or
    ``None`` where there is none (a test's fake grid).
    """
    fab = None
    if run is not None and getattr(run, "fab_hash", ""):
        fab = {
            "hash": run.fab_hash,
            "version": getattr(run, "fab_version", None),
            "run_id": int(run.run_id),
        }
    return {
        "versions": versions(),
        "machine": machine(),
        "git": git_state(),
        "fab": fab,
    }


def checkout_fab_hash(checkout: str | Path) -> str:
    """SHA-256 of the FAB that ``flwr run`` would build from ``checkout`` now."""
    import hashlib

    from flwr.cli.build import build_fab_from_disk

    return hashlib.sha256(build_fab_from_disk(Path(checkout))).hexdigest()


def stamp(run_dir: str | Path, checkout: str | Path = APP_DIR) -> str:
    """Record ``checkout``'s git state in ``run_dir/config.json`` if its FAB matches.

    Returns a one-line message. Nothing is written unless the run's FAB hash equals
    the hash of a FAB built from ``checkout`` and the run has no commit yet.
    """
    path = Path(run_dir) / "config.json"
    config = json.loads(path.read_text())
    prov = config.get("provenance") or {}
    if prov.get("git"):
        return f"{path}: git commit already recorded"
    fab = prov.get("fab") or {}
    state = git_state(checkout)
    if state is None:
        return f"{path}: {checkout} is not a git checkout; commit not recorded"
    if not fab.get("hash"):
        return f"{path}: the run has no FAB hash; commit not recorded"
    if checkout_fab_hash(checkout) != fab["hash"]:
        return (
            f"{path}: the checkout changed since the run started (FAB hash differs); "
            "commit not recorded"
        )
    prov["git"] = {**state, "matched_by": "fab_hash"}
    config["provenance"] = prov
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(config, indent=2) + "\n")
    tmp.replace(path)
    dirty = " (dirty)" if state["dirty"] else ""
    return f"{path}: git commit {state['commit'][:12]}{dirty} recorded"


def results_dir_from_log(log_file: str | Path) -> Path | None:
    """Return the last ``Results written to DIR`` of a ``flwr run --stream`` log."""
    marker = "Results written to "
    found = None
    for line in Path(log_file).read_text(errors="replace").splitlines():
        if marker in line:
            found = Path(line.split(marker, 1)[1].strip())
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m server.provenance stamp (RUN_DIR | --log FILE)``."""
    parser = argparse.ArgumentParser(prog="python -m server.provenance")
    parser.add_argument("command", choices=["stamp"])
    parser.add_argument("run_dir", nargs="?", help="a finished run's folder")
    parser.add_argument("--log", help="or: the flwr run log naming the run's folder")
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir) if args.run_dir else None
    if run_dir is None and args.log:
        run_dir = results_dir_from_log(args.log)
    if run_dir is None or not (run_dir / "config.json").is_file():
        print(
            f"provenance: no run folder with a config.json ({run_dir})", file=sys.stderr
        )
        return 1
    print(stamp(run_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())

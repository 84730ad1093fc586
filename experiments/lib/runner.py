"""One resumable sweep runner for the experiment drivers.

:func:`run_sweep` runs a list of jobs (``--jobs`` at once, each in a worker
thread that usually starts its own process), appends every finished run's row to
``rows.jsonl`` at once -- an interrupted sweep loses nothing -- and prints one
progress line per run (:class:`experiments.lib.progress.SweepProgress`). With
``resume`` the rows already in ``rows.jsonl`` are kept and their jobs skipped;
without it the file starts empty. A failed run is reported and the sweep goes
on; :func:`exit_if_failed` then ends the process with code 1, after the caller
has written its tables from what finished.

Used by ``experiments/tables/fedhap_sweep.py``, ``experiments/tables/pfmh_sweep.py`` and
``experiments/tables/dphe_map.py``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, TypeVar

from experiments.lib.progress import SweepProgress
from server.provenance import cpu_model, versions

Job = TypeVar("Job")
Row = dict[str, Any]


def load_rows(path: Path) -> list[Row]:
    """Read the rows of a ``rows.jsonl`` file (blank lines skipped; none if missing)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rewrite_rows(path: Path, rows: Sequence[Row]) -> None:
    """Replace ``path`` by ``rows``, one JSON line each, atomically.

    The rows go to a temporary file beside it, then a rename: an interrupted
    rewrite leaves the old file whole.
    """
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(path)


def run_sweep(
    jobs: Sequence[Job],
    run: Callable[[Job], Row],
    *,
    rows_path: Path,
    resume: bool,
    name: Callable[[Job], str],
    describe: Callable[[Row], str],
    row_name: Callable[[Row], str] = lambda row: row["name"],
    after_row: Callable[[list[Row]], object] | None = None,
    workers: int = 1,
) -> tuple[list[Row], list[str]]:
    """Run the jobs not done yet; append each finished run's row to ``rows_path``.

    Parameters
    ----------
    jobs : sequence
        Every run of the sweep, in the order to start them.
    run : callable
        ``run(job)`` runs one job and returns its row (JSON-serialisable).
    rows_path : Path
        The ``rows.jsonl`` file.
    resume : bool
        Keep the rows already in ``rows_path`` and skip their jobs; ``False``
        starts the file empty.
    name : callable
        ``name(job)``: the job's unique name (progress lines, failures).
    describe : callable
        ``describe(row)``: the result part of a progress line.
    row_name : callable
        ``row_name(row)``: the name of the job a row came from (default: its
        ``name`` entry); a job whose name is among the rows is done.
    after_row : callable, optional
        ``after_row(rows)`` after every finished run (e.g. rewrite the tables).
        Each new row gets ``machine``: the CPU model and torch version of the
        machine the sweep runs on (on a Ray cluster, the driver's; the clients'
        nodes may differ).
    workers : int
        Runs at once.

    Returns
    -------
    rows : list of dict
        Every row, resumed ones first, then in the order the runs finished.
    failed : list of str
        Names of the jobs whose run raised.
    """
    rows = load_rows(rows_path) if resume else []
    if not resume:
        rows_path.write_text("")
    done = {row_name(r) for r in rows}
    todo = [j for j in jobs if name(j) not in done]
    print(f"{len(todo)} runs to do ({len(rows)} already done)", flush=True)
    # the same seed repeats on one machine, not necessarily across machines: each
    # new row names the machine the sweep ran on
    stamp = {"cpu_model": cpu_model(), "torch": versions()["torch"]}
    progress = SweepProgress(len(todo) + len(rows), done=len(rows))
    failed: list[str] = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(run, j): j for j in todo}
        for fut in as_completed(futures):
            job = futures[fut]
            try:
                row = fut.result()
            except Exception as exc:  # one failed run must not end the sweep
                failed.append(name(job))
                progress.report(f"FAILED {name(job)}: {exc}")
                continue
            row.setdefault("machine", stamp)
            rows.append(row)
            with rows_path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            progress.report(f"{name(job)}: {describe(row)}")
            if after_row is not None:
                after_row(rows)
    return rows, failed


def write_tables(out: Path, summary: dict[str, Any], text: str) -> str:
    """Write ``summary`` to ``out/summary.json`` and ``text`` to ``out/table.md``.

    Returns
    -------
    str
        ``text`` (the Markdown tables), for printing.
    """
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "table.md").write_text(text + "\n")
    return text


def shown_in_table(
    order: Sequence[str], asked: Sequence[str], rows: list[Row], field: str
) -> list[str]:
    """Return the names of ``order`` asked for or found in the rows' ``field``.

    A ``--resume`` that asks for fewer methods or partitionings, or other ones,
    keeps the folder's others in its table.
    """
    have = set(asked) | {r.get(field) for r in rows}
    return [name for name in order if name in have]


def setup_differences(
    there: dict[str, Any], here: dict[str, Any], ignore: tuple[str, ...] = ()
) -> list[tuple[str, Any, Any]]:
    """Return ``(setting, value there, value here)`` for each setting that differs.

    A setting one side lacks differs (its value there is ``None``); settings in
    ``ignore`` are not compared. Sorted by setting name.
    """
    return [
        (key, there.get(key), here.get(key))
        for key in sorted((set(there) | set(here)) - set(ignore))
        if there.get(key) != here.get(key)
    ]


def resume_refusal(out: Path, key: str, there: Any, here: Any) -> str:
    """Return the message refusing ``--resume`` into ``out`` over one setting."""
    return (
        f"--resume into {out}: its runs have {key} = {there!r}, this command "
        f"{here!r}; resume with the same settings or give another --out"
    )


def check_resume_setup(out: Path, setup: dict[str, Any]) -> None:
    """Refuse to resume into ``out`` when its recorded setup differs from ``setup``.

    Runs are identified by method, partitioning, seed (and learning rate), not by
    the settings every run shares, so resuming with another code length, client
    count or round budget would table old runs as new ones. A folder without a
    recorded setup (written before setups were recorded) is not checked.

    Raises
    ------
    ValueError
        A setting differs; the message names it, both values and the way out.
    """
    try:
        recorded = json.loads((out / "summary.json").read_text()).get("setup")
    except (OSError, ValueError, AttributeError):
        return
    if not isinstance(recorded, dict):
        return
    differ = setup_differences(recorded, setup)
    if differ:
        raise ValueError(resume_refusal(out, *differ[0]))


def exit_if_failed(failed: list[str]) -> None:
    """End with exit code 1 naming the failed runs, if any (tables are written)."""
    if failed:
        print(f"error: {len(failed)} run(s) failed: {', '.join(failed)}", flush=True)
        sys.exit(1)

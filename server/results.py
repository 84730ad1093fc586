"""The results directory of one run.

Layout (``results/<run-id>/``): ``config.json`` (resolved config, protocol, data,
nodes, versions and code: :mod:`server.provenance`), ``rounds.jsonl`` (one JSON
object per round) with ``rounds.csv`` and ``clients.csv`` beside it
(:mod:`server.rounds_csv`), ``summary.json`` (final and best metrics, PR curve,
precision@K), PNG plots, and with ``logger = "tensorboard"`` event files
(:mod:`server.tracking`). While the run is going, and if
it fails, the directory is ``results/<run-id>.incomplete/`` (a failed run also gets
``error.txt``); only a finished run is renamed to ``results/<run-id>/``, so a
directory without the suffix is always complete.
"""

from __future__ import annotations

import json
import math
import os
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from server.rounds_csv import write_clients_csv, write_rounds_csv
from server.run_files import INCOMPLETE, read_rounds
from server.tracking import RoundLogger, open_logger


def _jsonable(value: Any) -> Any:
    """Numpy scalars/arrays and NaN to plain JSON values."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RunResults:
    """Writes one run's files; :meth:`finish` makes the directory final.

    Parameters
    ----------
    root : str or Path
        The ``results-dir``.
    run_id : str
        Directory name of this run (must not exist yet).
    """

    def __init__(self, root: str | Path, run_id: str) -> None:
        self.root = Path(root)
        self.run_id = run_id
        self.final_dir = self.root / run_id
        self.dir = self.root / f"{run_id}{INCOMPLETE}"
        if self.final_dir.exists() or self.dir.exists():
            raise FileExistsError(f"results directory {self.final_dir} already exists")
        self.dir.mkdir(parents=True)
        self.rows: list[dict[str, Any]] = []
        self.logger: RoundLogger | None = None

    @classmethod
    def reopen(cls, incomplete_dir: str | Path) -> RunResults:
        """Continue writing into an existing ``<run-id>.incomplete`` directory.

        An ``error.txt`` left by the failure is kept, renamed
        ``error-before-resume-<n>.txt``.
        """
        path = Path(incomplete_dir)
        if not path.name.endswith(INCOMPLETE) or not path.is_dir():
            raise FileNotFoundError(f"{path} is no existing *{INCOMPLETE} directory")
        self = cls.__new__(cls)
        self.root = path.parent
        self.run_id = path.name[: -len(INCOMPLETE)]
        self.final_dir = self.root / self.run_id
        self.dir = path
        if self.final_dir.exists():
            raise FileExistsError(f"results directory {self.final_dir} already exists")
        self.rows = read_rounds(path) if (path / "rounds.jsonl").exists() else []
        self.logger = None
        error = path / "error.txt"
        if error.exists():
            n = len(list(path.glob("error-before-resume-*.txt"))) + 1
            os.replace(error, path / f"error-before-resume-{n}.txt")
        return self

    def rewrite_rounds(self, rows: list[dict[str, Any]]) -> None:
        """Replace ``rounds.jsonl`` by ``rows`` atomically.

        Resume: the rounds after the checkpoint are dropped.
        """
        path = self.dir / "rounds.jsonl"
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(_jsonable(r)) + "\n" for r in rows))
        os.replace(tmp, path)
        self.rows = [_jsonable(r) for r in rows]
        self._write_csv()

    def set_logger(self, name: str) -> None:
        """Also send every appended round to the run config's ``logger``."""
        self.logger = open_logger(name, self.dir)

    def _write_csv(self) -> None:
        write_rounds_csv(self.rows, self.dir / "rounds.csv")
        if any(r.get("clients") for r in self.rows):
            write_clients_csv(self.rows, self.dir / "clients.csv")

    def write_json(self, name: str, payload: dict[str, Any]) -> Path:
        """Write ``name`` atomically (temp file + rename)."""
        path = self.dir / name
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(_jsonable(payload), indent=2) + "\n")
        os.replace(tmp, path)
        return path

    def append_round(self, payload: dict[str, Any]) -> None:
        """Append one line to ``rounds.jsonl`` (flushed, so a crash keeps it)."""
        with (self.dir / "rounds.jsonl").open("a") as fh:
            fh.write(json.dumps(_jsonable(payload)) + "\n")
            fh.flush()
        self.rows.append(_jsonable(payload))
        self._write_csv()
        if self.logger is not None:
            self.logger.log_round(self.rows[-1])

    def path(self, name: str) -> Path:
        """Path of a file inside the (current) run directory."""
        return self.dir / name

    def finish(self) -> Path:
        """Rename to the final directory name; returns it."""
        self._close_logger()
        os.replace(self.dir, self.final_dir)
        self.dir = self.final_dir
        return self.final_dir

    def fail(self, exc: BaseException) -> None:
        """Record the error; the directory keeps its ``.incomplete`` suffix."""
        self._close_logger()
        text = "".join(traceback.format_exception(exc))
        (self.dir / "error.txt").write_text(text)


    def _close_logger(self) -> None:
        if self.logger is not None:
            self.logger.close()
            self.logger = None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m server.results compare RUN [RUN ...]`` (:mod:`server.compare`)."""
    from server.compare import main as compare_main

    return compare_main(argv)


if __name__ == "__main__":
    import sys

    sys.exit(main())

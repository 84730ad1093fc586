"""Progress of a sweep: runs done / total and an ETA; one-line config errors.

:class:`SweepProgress` prints ``[ 7/36, ETA 41 min 3 s] <name>: <result>`` after
each finished run; the ETA is the runs left times the mean time of the runs this
process finished (runs resumed from disk do not count towards the mean). In a
terminal a tqdm progress bar stays below those lines (tqdm turns itself off when
stderr is not a terminal, so log files get only the lines).
:func:`cli` wraps an experiment's ``main`` so that a bad config or ``--set`` value
or a bad grid file (:mod:`experiments.lib.grids`) ends it with one ``error:`` line
and exit code 2 instead of a traceback.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from tqdm import tqdm

from experiments.lib.grids import GridError
from settings.run_settings import ConfigError

EXIT_BAD_CONFIG = 2


class SweepProgress:
    """Count finished runs of a sweep and estimate the time left.

    Parameters
    ----------
    total : int
        Runs in the sweep, including those already done.
    done : int
        Runs already done (e.g. resumed from a previous invocation).
    """

    def __init__(self, total: int, done: int = 0) -> None:
        self.total = total
        self.done = done
        self._started = time.perf_counter()
        self._finished_here = 0
        # disable=None: a bar only where stderr is a terminal
        self.bar = tqdm(total=total, initial=done, unit="run", disable=None)

    def line(self, text: str) -> str:
        """Count one finished run; return ``[done/total, ETA ...] text``."""
        self.done += 1
        self._finished_here += 1
        mean = (time.perf_counter() - self._started) / self._finished_here
        left = max(self.total - self.done, 0)
        eta = format_seconds(left * mean) if left else "done"
        width = len(str(self.total))
        return f"[{self.done:>{width}}/{self.total}, ETA {eta}] {text}"

    def report(self, text: str) -> None:
        """Print :meth:`line` (flushed) above the progress bar, and advance the bar."""
        line = self.line(text)
        if self.bar.disable:
            print(line, flush=True)
        else:
            tqdm.write(line)
            self.bar.update(1)
            if self.done >= self.total:
                self.bar.close()


def format_seconds(seconds: float) -> str:
    """``1 h 2 min``, ``3 min 4 s`` or ``5 s``."""
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def cli(main: Callable[[], None]) -> None:
    """Run an experiment's ``main``; a config or grid file error is one line, exit 2."""
    try:
        main()
    except ConfigError as exc:
        print(f"error: run config: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_CONFIG)
    except GridError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_CONFIG)

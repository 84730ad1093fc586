"""The one table writer of the experiment drivers: Markdown rows and their cells.

Every driver's ``table.md`` is built from these pieces, so a table's layout and
its "mean ± std" cells read the same in every result file:

- :func:`table_row` and :func:`table_head` write a pipe-table row and a header
  with its rule;
- :func:`mean_sd` is the mean and sample standard deviation over seeds (0 for one
  value), :func:`pm` writes ``mean ± std``, :func:`mean_sd_cell` both at once for
  a list of values (``-`` when there is none, ``(n=k)`` when fewer than asked);
- :func:`paired_interval` writes a paired difference with its 95% interval.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

#: the cell of a table entry without any value
MISSING = "-"


def table_row(*cells: object) -> str:
    """Return one Markdown table row: ``| a | b | c |``."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def rule(columns: int) -> str:
    """Return the rule under a header of ``columns`` columns: ``|---|---|``."""
    return "|" + "---|" * columns


def table_head(*names: object) -> list[str]:
    """Return a table's header row and the rule under it."""
    return [table_row(*names), rule(len(names))]


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Return the mean and sample std of ``values`` (std 0 for one value).

    Raises
    ------
    statistics.StatisticsError
        ``values`` is empty.
    """
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return statistics.fmean(values), sd


def pm(mean: float, sd: float, *, scale: float = 1.0, fmt: str = ".2f") -> str:
    """``mean ± sd``, both multiplied by ``scale`` and written with ``fmt``."""
    return f"{scale * mean:{fmt}} ± {scale * sd:{fmt}}"


def n_note(n: int, expected: int | None, *, any_count: bool = False) -> str:
    """`` (n=k)`` when a cell holds fewer than ``expected`` runs, else nothing.

    ``any_count``: also when it holds more (a cell over another count than most,
    e.g. a second look's seeds beside the first look's).
    """
    if expected is None or n == expected or (n > expected and not any_count):
        return ""
    return f" (n={n})"


def mean_sd_cell(
    values: Sequence[float],
    *,
    scale: float = 1.0,
    fmt: str = ".2f",
    expected: int | None = None,
) -> str:
    """``mean ± sample std`` of ``values`` (see :func:`pm`); ``-`` when empty.

    With ``expected``, a cell of fewer values says how many (:func:`n_note`).
    """
    if not values:
        return MISSING
    return pm(*mean_sd(values), scale=scale, fmt=fmt) + n_note(len(values), expected)


def paired_interval(
    mean: float, low: float, high: float, *, confidence: float = 0.95
) -> str:
    """Return a paired difference in points with its interval (95% by default).

    For example ``+1.20 points, 95% CI [+0.40, +2.00]``.
    """
    return f"{mean:+.2f} points, {confidence * 100:g}% CI [{low:+.2f}, {high:+.2f}]"


def seeds_run(rows: Sequence[Mapping[str, Any]]) -> str:
    """Return the rows' seeds, e.g. ``0, 1, 2, 3, 4`` (``none`` without rows).

    A table's protocol names these, not its last invocation's ``--seeds``: a
    resumed folder may hold more seeds, or some methods at fewer.
    """
    return ", ".join(str(s) for s in sorted({int(r["seed"]) for r in rows})) or "none"

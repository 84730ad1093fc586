"""The drivers' default grids, read from ``experiments/grids/<paper>.toml``.

Each file holds one TOML table per driver (``[table1]``, ``[users]`` ...); each
key of a table is one grid of that driver -- seeds, code lengths, epsilons,
learning rates -- as a non-empty list of numbers. A driver names the keys it
reads, so a missing, unknown or malformed grid is refused with one line naming
the file, the table, the key and what is accepted, before any run starts.

Command-line flags still override every grid (:func:`csv` writes a grid as the
flag's default; :func:`parse_csv` reads a flag's comma-separated values back, item
by item, and names the first bad one; :func:`flag_list` does so for a driver's
flag of one :class:`Items` kind, ``SEEDS``, ``COUNTS``, ``POSITIVE``,
``NON_NEGATIVE`` or ``FRACTIONS``, and stops the driver with one line).
"""

from __future__ import annotations

import argparse
import math
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: where the grid files live
GRIDS_DIR = Path(__file__).resolve().parents[1] / "grids"

Grid = list[int | float]


class GridError(ValueError):
    """A grid file that is missing, not TOML, or not the grids a driver reads."""


class BadItem(ValueError):
    """One item of a comma-separated flag value that :func:`parse_csv` refused."""

    def __init__(self, item: str) -> None:
        super().__init__(item)
        self.item = item


def _is_grid(value: object) -> bool:
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    )


def load_grids(
    paper: str, table: str, keys: Sequence[str], *, folder: Path = GRIDS_DIR
) -> dict[str, Grid]:
    """Return ``[table]`` of ``<folder>/<paper>.toml``: exactly ``keys``, each a grid.

    Raises
    ------
    GridError
        The file is missing or not TOML, it has no ``[table]``, the table lacks
        one of ``keys`` or has another, or a value is not a non-empty list of
        numbers. The message is one line and names what is accepted.
    """
    path = folder / f"{paper}.toml"
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise GridError(f"grid file {path}: cannot be read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise GridError(f"grid file {path}: not TOML ({exc})") from None
    section = data.get(table)
    if not isinstance(section, dict):
        have = ", ".join(f"[{name}]" for name in data) or "none"
        raise GridError(f"grid file {path}: no table [{table}] (tables: {have})")
    missing = [k for k in keys if k not in section]
    unknown = [k for k in section if k not in keys]
    if missing or unknown:
        what = f"lacks {', '.join(missing)}" if missing else ""
        what += ("; " if missing and unknown else "") + (
            f"has unknown {', '.join(unknown)}" if unknown else ""
        )
        raise GridError(
            f"grid file {path}: [{table}] {what}; accepted keys: {', '.join(keys)}"
        )
    for key, value in section.items():
        if not _is_grid(value):
            raise GridError(
                f"grid file {path}: [{table}] {key} = {value!r}; accepted: a "
                "non-empty list of numbers, e.g. [0, 1, 2]"
            )
    return section


def csv(grid: Sequence[int | float]) -> str:
    """Write a grid as a comma-separated flag value: ``[0, 1, 2]`` -> ``"0,1,2"``."""
    return ",".join(str(v) for v in grid)


def split_names(text: str) -> list[str]:
    """Split a comma-separated flag of names (methods, partitionings), stripped.

    Empty items are dropped. A comma inside parentheses belongs to the name:
    ``"FedHAP (projection D, sign input),FedHAP"`` is two names.
    """
    names, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth <= 0:
            names.append(text[start:i])
            start = i + 1
    names.append(text[start:])
    return [n.strip() for n in names if n.strip()]


def parse_csv(
    text: str, convert: Callable[[str], T], accept: Callable[[T], bool]
) -> list[T]:
    """Read a comma-separated flag value: ``convert`` each item, ``accept`` it.

    Raises
    ------
    BadItem
        The first item (stripped) that ``convert`` refuses with a ValueError or
        ``accept`` rejects; an empty item (``"1,,2"``, ``""``) is one. The caller
        words the message: the flag, the item and what is accepted.
    """
    values = []
    for item in text.split(","):
        try:
            value = convert(item)
        except ValueError:
            raise BadItem(item.strip()) from None
        if not accept(value):
            raise BadItem(item.strip())
        values.append(value)
    return values


@dataclass(frozen=True)
class Items:
    """What one comma-separated flag accepts, item by item."""

    convert: Callable[[str], Any]
    accept: Callable[[Any], bool]
    accepted: str  # the words of the error line


SEEDS = Items(int, lambda v: v >= 0, "comma-separated integers >= 0, e.g. 0,1,2")
COUNTS = Items(int, lambda v: v >= 1, "comma-separated integers >= 1, e.g. 16,32,64")
POSITIVE = Items(
    float,
    lambda v: math.isfinite(v) and v > 0,
    "comma-separated positive numbers, e.g. 0.001,0.01",
)
NON_NEGATIVE = Items(
    float,
    lambda v: math.isfinite(v) and v >= 0,
    "comma-separated numbers >= 0, e.g. 0,0.5,1",
)
FRACTIONS = Items(
    float, lambda v: 0 <= v < 1, "comma-separated numbers in [0, 1), e.g. 0,0.9,0.99"
)


def flag_list(
    parser: argparse.ArgumentParser, flag: str, text: str, items: Items
) -> list[Any]:
    """Read the comma-separated value ``text`` of ``flag``, or stop with one line.

    ``parser.error`` names the flag, the first bad item, the whole value and what
    ``items`` accepts (exit status 2), before the driver starts any work.
    """
    try:
        return parse_csv(text, items.convert, items.accept)
    except BadItem as bad:
        parser.error(f"{flag}: {bad.item!r} in {text!r}; accepted: {items.accepted}")

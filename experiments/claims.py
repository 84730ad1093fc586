"""Apply the verdict rule to the rows of a results folder.

``python -m experiments.claims docs/results/fedhap-mirflickr-paper/rows.jsonl
--a method=FedHAP --b "method=DCH (FedAvg)" --where kind=table --where
partitioning=iid --direction greater`` pairs the rows matching ``--a`` and ``--b``
(and every ``--where``) by seed, and prints :func:`experiments.lib.verdict.
paired_verdict` on ``--metric`` (default ``map_all``, a fraction, shown in points:
``--scale 100``; a dotted name reads a nested entry, e.g. ``map_per_round.15``).
``--look 2`` decides a comparison that was not resolved and got one block of more
seeds (the verdict rule's second look: a 97.5% interval); ``--seeds 0,1,2,3,4``
keeps the first look's seeds, for a comparison the first look decided in a folder
that holds more.
The claims sections of the method pages quote these lines.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.lib.grids import SEEDS, flag_list
from experiments.lib.runner import load_rows
from experiments.lib.verdict import DIRECTIONS, Verdict, paired_verdict


def parse_filter(text: str) -> tuple[str, str]:
    """``key=value`` -> ``(key, value)``.

    Raises
    ------
    ValueError
        No ``=`` in ``text``.
    """
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"filter {text!r}: accepted is key=value, e.g. method=FedHAP")
    return key.strip(), value.strip()


def matches(row: dict[str, Any], filters: Sequence[tuple[str, str]]) -> bool:
    """Whether ``row[key]`` reads as ``value`` for every filter."""
    return all(k in row and _text(row[k]) == v for k, v in filters)


def scores(
    rows: Sequence[dict[str, Any]],
    filters: Sequence[tuple[str, str]],
    metric: str,
    scale: float,
) -> dict[int, float]:
    """Seed -> ``scale * row[metric]`` of the matching rows (one per seed).

    Raises
    ------
    ValueError
        Two matching rows share a seed (the filters do not pick one run per seed).
    """
    out: dict[int, float] = {}
    for row in rows:
        value = metric_value(row, metric)
        if not matches(row, filters) or value is None:
            continue
        seed = int(row["seed"])
        if seed in out:
            raise ValueError(
                f"two rows match {dict(filters)} at seed {seed}; add a --where "
                "that picks one run per seed"
            )
        out[seed] = scale * float(value)
    return out


def metric_value(row: dict[str, Any], metric: str) -> Any:
    """``row[metric]``; a dotted name reads nested entries (``map_per_round.15``)."""
    value: Any = row
    for part in metric.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def claim(
    rows: Sequence[dict[str, Any]],
    a: Sequence[tuple[str, str]],
    b: Sequence[tuple[str, str]],
    *,
    where: Sequence[tuple[str, str]] = (),
    metric: str = "map_all",
    direction: str = "greater",
    margin: float = 0.0,
    scale: float = 100.0,
    look: int = 1,
    seeds: Sequence[int] | None = None,
) -> Verdict:
    """Decide "a <direction> b" over the rows (see the module docstring).

    ``seeds``: only these seeds' rows count (``None``: every seed).
    """
    if seeds is not None:
        rows = [r for r in rows if int(r["seed"]) in set(seeds)]
    return paired_verdict(
        scores(rows, [*where, *a], metric, scale),
        scores(rows, [*where, *b], metric, scale),
        direction,
        margin=margin,
        look=look,
    )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def main(argv: Sequence[str] | None = None) -> None:
    """CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", type=Path, help="a rows.jsonl")
    parser.add_argument("--a", action="append", required=True, metavar="KEY=VALUE")
    parser.add_argument("--b", action="append", required=True, metavar="KEY=VALUE")
    parser.add_argument("--where", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--metric", default="map_all")
    parser.add_argument("--direction", default="greater", choices=DIRECTIONS)
    parser.add_argument("--margin", type=float, default=0.0)
    parser.add_argument("--scale", type=float, default=100.0)
    parser.add_argument(
        "--look",
        type=int,
        default=1,
        help="2: the verdict after one block of seeds added to a not-resolved one "
        "(a 97.5%% interval; docs/methods/verdicts.md)",
    )
    parser.add_argument(
        "--seeds",
        default=None,
        help="comma-separated seeds: only their rows count (default: every seed)",
    )
    args = parser.parse_args(argv)
    if not args.rows.is_file():
        parser.error(f"{args.rows}: no such file")
    seeds = (
        None if args.seeds is None else flag_list(parser, "--seeds", args.seeds, SEEDS)
    )
    try:
        verdict = claim(
            load_rows(args.rows),
            [parse_filter(f) for f in args.a],
            [parse_filter(f) for f in args.b],
            where=[parse_filter(f) for f in args.where],
            metric=args.metric,
            direction=args.direction,
            margin=args.margin,
            scale=args.scale,
            look=args.look,
            seeds=seeds,
        )
    except ValueError as exc:
        parser.error(str(exc))
    diffs = ", ".join(f"{d:+.2f}" for d in verdict.differences)
    print(f"{verdict.text()} (per seed {diffs}; {verdict.reason})")


if __name__ == "__main__":
    main()

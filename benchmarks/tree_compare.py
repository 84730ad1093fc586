"""The command line shared by the static benchmarks that measure two checkouts.

``--baseline-root DIR`` measures another checkout (e.g. the commit before a change)
in the same run; ``--out FILE`` is where the JSON goes (default
``docs/results/benchmarks/<name>.json``). Used by :mod:`benchmarks.import_closure`
and :mod:`benchmarks.settings_path`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def compare_trees(
    argv: list[str] | None,
    *,
    name: str,
    description: str,
    marker: str,
    measure: Callable[[Path], dict],
    line: Callable[[dict], str],
    report: Callable[[dict[str, dict]], dict],
) -> dict:
    """Measure this checkout (and ``--baseline-root``), write the JSON, print.

    ``marker``: a file every checkout has (a baseline root without it is refused);
    ``measure(root)``: one checkout's result; ``line(result)``: its headline;
    ``report({"this": ..., "baseline": ...})``: the JSON written. Returns the JSON.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--baseline-root", type=Path, default=None)
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "docs" / "results" / "benchmarks" / f"{name}.json",
    )
    args = parser.parse_args(argv)
    roots = {"this": ROOT}
    if args.baseline_root is not None:
        if not (args.baseline_root / marker).is_file():
            parser.error(f"--baseline-root {args.baseline_root}: no {marker} there")
        roots["baseline"] = args.baseline_root.resolve()
    results = {which: measure(root) for which, root in roots.items()}
    out = report(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    for which, result in results.items():
        print(f"{which}: {line(result)}")
    print(args.out)
    return out

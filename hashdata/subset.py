"""A class-balanced, seeded subset of a dataset ``.npz`` with a fixed split.

``python -m hashdata.subset --data FILE.npz --out OUT.npz --subset Q,D [--seed S]``
keeps Q queries (``split == 1``) and D database rows (``split == 0``), each divided
over the classes as evenly as possible (:func:`hashdata.features.balanced_subset`,
the same draw as ``python -m hashdata.features --subset``), and writes them as a
file of the same format: every array with one row per sample is cut to the chosen
rows (database first, then queries, as ``--subset`` extraction orders them), the
others are copied, and ``subset_of`` / ``subset_sha256`` / ``subset_seed`` record
where the rows came from. Used for quick runs on a large features file (the
suite's ``--quick`` on ``cifar10-features``) without extracting features again.

Pure numpy; no torch, no Flower.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from hashdata.features import FeatureInputError, balanced_subset, parse_subset
from hashdata.recipes.common import file_sha256


def write_subset(
    source: Path, out: Path, *, queries: int, database: int, seed: int = 0
) -> Path:
    """Write the subset of ``source`` to ``out`` (atomically); return ``out``.

    Raises
    ------
    FeatureInputError
        ``source`` has no ``labels`` or ``split`` array, or a class has fewer rows
        in a part than asked for (the message names the class and the count).
    """
    with np.load(source, allow_pickle=False) as src:
        arrays = {name: src[name] for name in src.files}
    for name in ("labels", "split"):
        if name not in arrays:
            raise FeatureInputError(
                f"{source}: no `{name}` array; a subset needs `labels` and `split` "
                "(1 = query, 0 = database)"
            )
    n = len(arrays["labels"])
    rows = balanced_subset(
        arrays["labels"], arrays["split"], queries=queries, database=database, seed=seed
    )
    kept = {
        name: (arr[rows] if arr.ndim >= 1 and len(arr) == n else arr)
        for name, arr in arrays.items()
    }
    kept["split"] = np.concatenate(
        [
            np.zeros(database, arrays["split"].dtype),
            np.ones(queries, arrays["split"].dtype),
        ]
    )
    kept["subset_of"] = np.array(source.name)
    kept["subset_sha256"] = np.array(file_sha256(source))
    kept["subset_seed"] = np.array(seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    with tmp.open("wb") as fh:
        np.savez(fh, **kept)
    os.replace(tmp, out)
    return out


def is_subset_of(
    subset: Path, source: Path, *, queries: int, database: int, seed: int = 0
) -> bool:
    """Whether ``subset`` was written by :func:`write_subset` from this ``source``.

    Compares the recorded source checksum, the split's sizes and the draw's seed,
    so a stale file (another source, size or seed) is written again instead of
    being reused.
    """
    try:
        with np.load(subset, allow_pickle=False) as sub:
            recorded = str(sub["subset_sha256"])
            recorded_seed = int(sub["subset_seed"])
            split = sub["split"]
    except (OSError, KeyError, ValueError, TypeError):
        return False
    sizes = (int((split == 1).sum()), int((split == 0).sum()))
    return (
        sizes == (queries, database)
        and recorded_seed == seed
        and recorded == file_sha256(source)
    )


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; exit status 2 on bad input (one line naming the value)."""
    p = argparse.ArgumentParser(prog="python -m hashdata.subset", description=__doc__)
    p.add_argument("--data", type=Path, required=True, help="source .npz with a split")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--subset", required=True, help="Q,D: queries, database rows")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        if not args.data.is_file():
            raise FeatureInputError(f"--data {args.data}: no such file")
        q, d = parse_subset(args.subset)
        out = write_subset(args.data, args.out, queries=q, database=d, seed=args.seed)
    except FeatureInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{out}: {q} queries, {d} database rows of {args.data.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A class-balanced subset of the CIFAR-10 JPEG copy, in the same ``.npz`` format.

``python -m experiments.cifar_subset --out .gpu/cifar10_q1000_db10000.npz`` draws,
with a seeded generator, ``--queries-per-class`` images of each class from the
file's test split (``split == 1``, the queries) and ``--database-per-class`` from its
training split (``split == 0``, the database), and writes ``x_image``, ``labels``,
``split`` and ``file_index`` of those rows (database first, each part sorted by
class, then by row). It exists because the whole file (170 MB) is too large to send
to the GPU machine this project is sometimes lent (64 MiB per call): a table run on
the subset says so in its protocol ("1,000 queries / 10,000 database", against the
PHashing paper's 10,000 / 50,000). Never commit the output: it is the dataset.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT.parent / "shared" / "data" / "cifar10_jpeg.npz"


def subset_rows(
    labels: np.ndarray, split: np.ndarray, *, queries: int, database: int, seed: int
) -> np.ndarray:
    """Row indices: ``database`` per class from split 0, then ``queries`` from 1."""
    rng = np.random.default_rng(seed)
    parts = []
    for part, per_class in ((0, database), (1, queries)):
        for c in np.unique(labels):
            pool = np.flatnonzero((split == part) & (labels == c))
            if per_class > len(pool):
                raise ValueError(
                    f"{per_class} per class requested from split {part}, class {c}, "
                    f"which has {len(pool)} rows"
                )
            parts.append(np.sort(rng.choice(pool, per_class, replace=False)))
    return np.concatenate(parts)


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=SOURCE)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--queries-per-class", type=int, default=100)
    parser.add_argument("--database-per-class", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not args.src.is_file():
        parser.error(f"--src {args.src}: no such file (../shared/data/README.md)")
    src = np.load(args.src)
    rows = subset_rows(
        src["labels"],
        src["split"],
        queries=args.queries_per_class,
        database=args.database_per_class,
        seed=args.seed,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    arrays = {k: src[k][rows] for k in ("x_image", "labels", "split", "file_index")}
    np.savez_compressed(args.out, **arrays)
    digest = hashlib.sha256(args.out.read_bytes()).hexdigest()
    print(
        f"{args.out}: {int((arrays['split'] == 1).sum())} queries, "
        f"{int((arrays['split'] == 0).sum())} database rows (seed {args.seed}); "
        f"sha256 {digest[:16]}"
    )


if __name__ == "__main__":
    main()

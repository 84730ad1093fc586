"""scikit-learn's digits as a ``.npz`` with a fixed query split.

The built-in ``dataset = "digits"`` draws its queries per run seed, so no validation
split keeps clear of every seed's queries and a tuned table cannot use it
(docs/methods/verdicts.md). This file fixes the split once:
``python -m hashdata.digits_file --out data/digits-fixed.npz`` writes

* ``x_image``: (1797, 1, 8, 8) float32, the images divided by 16 (the built-in
  loader's values);
* ``labels``: (1797,) int64;
* ``split``: (1797,) int8, 1 for the queries: the built-in loader's stratified
  split (:func:`hashdata.protocol.split_query_database`) at ``--query-fraction``
  (default 10%: 180 queries) and ``--seed`` (default 0), 0 for the database.

Under ``feature-scaling = "auto"`` an ``.npz`` image is standardised per channel from
its database rows (docs/data.md), where the built-in digits stay in [0, 1]: a run on
this file is not bit-identical to one on ``dataset = "digits"``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from hashdata.protocol import SPLIT_ARRAY, split_query_database


def digits_arrays(
    *, query_fraction: float = 0.1, seed: int = 0
) -> dict[str, np.ndarray]:
    """Return the file's arrays: ``x_image``, ``labels`` and the fixed ``split``."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = (np.asarray(bunch.images, dtype=np.float32) / np.float32(16.0))[:, None]
    labels = np.asarray(bunch.target, dtype=np.int64)
    query_idx, _ = split_query_database(
        labels, query_fraction=query_fraction, seed=seed
    )
    split = np.zeros(len(labels), dtype=np.int8)
    split[query_idx] = 1
    return {
        "x_image": np.ascontiguousarray(images),
        "labels": labels,
        SPLIT_ARRAY: split,
    }


def write_digits_npz(out: Path, *, query_fraction: float = 0.1, seed: int = 0) -> Path:
    """Write :func:`digits_arrays` to ``out`` (uncompressed) and return it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, Any] = digits_arrays(query_fraction=query_fraction, seed=seed)
    np.savez(out, **arrays)
    return out


def main() -> None:
    """CLI: ``--out PATH [--query-fraction F] [--seed S]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--query-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not str(args.out).endswith(".npz"):
        parser.error(f"--out {args.out}: accepted is a path ending in .npz")
    path = write_digits_npz(
        args.out, query_fraction=args.query_fraction, seed=args.seed
    )
    split = np.load(path)[SPLIT_ARRAY]
    print(
        f"wrote {path}: {int(split.sum())} queries, {int((split == 0).sum())} database"
    )


if __name__ == "__main__":
    main()

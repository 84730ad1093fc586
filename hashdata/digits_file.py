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

``--multiview`` writes ``multiview-digits`` (:mod:`hashdata.multiview`) instead, for
PFMH's tuned table: ``x_image`` (1797, 64) and ``x_hog`` (1797, 32) float32 feature
rows (its two views), ``labels`` and the same ``split``. Both views lie in [0, 1], so
``"auto"`` keeps them as given: a run reads exactly the built-in views.
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


def multiview_arrays(
    *, query_fraction: float = 0.1, seed: int = 0
) -> dict[str, np.ndarray]:
    """Return ``x_image`` and ``x_hog`` (the two views), ``labels`` and the ``split``.

    The split is :func:`digits_arrays`' (the same labels, fraction and seed).
    """
    from hashdata.multiview import load_multiview_digits

    ds = load_multiview_digits()
    fixed = digits_arrays(query_fraction=query_fraction, seed=seed)
    if not np.array_equal(ds.labels, fixed["labels"]):  # both read load_digits()
        raise RuntimeError("multiview-digits and digits disagree on the labels")
    return {
        **{f"x_{name}": np.ascontiguousarray(x) for name, x in ds.inputs.items()},
        "labels": fixed["labels"],
        SPLIT_ARRAY: fixed[SPLIT_ARRAY],
    }


def write_digits_npz(
    out: Path, *, query_fraction: float = 0.1, seed: int = 0, multiview: bool = False
) -> Path:
    """Write :func:`digits_arrays` (or :func:`multiview_arrays`) to ``out``.

    Uncompressed; returns ``out``.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    make = multiview_arrays if multiview else digits_arrays
    arrays: dict[str, Any] = make(query_fraction=query_fraction, seed=seed)
    np.savez(out, **arrays)
    return out


def main() -> None:
    """CLI: ``--out PATH [--query-fraction F] [--seed S] [--multiview]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--query-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--multiview",
        action="store_true",
        help="write multiview-digits' two views (x_image, x_hog) instead",
    )
    args = parser.parse_args()
    if not str(args.out).endswith(".npz"):
        parser.error(f"--out {args.out}: accepted is a path ending in .npz")
    path = write_digits_npz(
        args.out,
        query_fraction=args.query_fraction,
        seed=args.seed,
        multiview=args.multiview,
    )
    split = np.load(path)[SPLIT_ARRAY]
    print(
        f"wrote {path}: {int(split.sum())} queries, {int((split == 0).sum())} database"
    )


if __name__ == "__main__":
    main()

"""Linear probe of a features ``.npz``: how well frozen features separate the classes.

``python -m experiments.linear_probe --data FEATURES.npz --train-per-class 500
[--seed 0] [--out FILE.json]`` fits a multinomial logistic regression
(scikit-learn, features standardised with the training rows' mean and std) on a
class-balanced, seeded draw of ``--train-per-class`` database rows per class
(``split == 0``) and reports its accuracy on every query row (``split == 1``). It
checks that pretrained weights load right (a wrong layer or input scaling drops it
far) and compares backbones; it is not a hashing result.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def linear_probe(
    x: np.ndarray,
    labels: np.ndarray,
    split: np.ndarray,
    *,
    train_per_class: int,
    seed: int,
) -> dict[str, Any]:
    """Fit on a class-balanced draw of database rows; score on every query row.

    Parameters
    ----------
    x : numpy.ndarray
        (n, d) features.
    labels : numpy.ndarray
        (n,) class indices.
    split : numpy.ndarray
        (n,) 0 = database, 1 = query.

    Returns
    -------
    dict
        ``accuracy`` (fraction of queries), ``train_rows``, ``test_rows``.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(seed)
    train = []
    for c in np.unique(labels):
        pool = np.flatnonzero((split == 0) & (labels == c))
        if train_per_class > len(pool):
            raise ValueError(
                f"--train-per-class {train_per_class}: class {c} has {len(pool)} "
                "database rows"
            )
        train.append(rng.choice(pool, train_per_class, replace=False))
    tr = np.sort(np.concatenate(train))
    te = np.flatnonzero(split == 1)
    scaler = StandardScaler().fit(x[tr])
    clf = LogisticRegression(max_iter=2000).fit(scaler.transform(x[tr]), labels[tr])
    acc = float((clf.predict(scaler.transform(x[te])) == labels[te]).mean())
    return {"accuracy": acc, "train_rows": len(tr), "test_rows": len(te)}


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--train-per-class", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not args.data.is_file():
        parser.error(f"--data {args.data}: no such file")
    d = np.load(args.data)
    if "split" not in d.files or np.asarray(d["labels"]).ndim != 1:
        parser.error(f"--data {args.data}: needs single `labels` and a `split` array")
    t0 = time.perf_counter()
    try:
        result = linear_probe(
            d["x_image"], d["labels"], d["split"],
            train_per_class=args.train_per_class, seed=args.seed,
        )  # fmt: skip
    except ValueError as exc:
        parser.error(str(exc))
    result.update(
        data=args.data.name,
        train_per_class=args.train_per_class,
        seed=args.seed,
        seconds=round(time.perf_counter() - t0, 1),
        **{k: d[k].item() for k in ("backbone", "image_size") if k in d.files},
    )
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``mirflickr25k_tags.npz``: MIRFlickr-25K tags and concepts, DCMH-style cleaned set.

Source: the repository LonganWANG-cs/NRCH at commit c2ec2e85, folder ``data/``:
``mirflickr25k-yall.mat`` (variable ``YAll``, 20,015 x 1,386 binary tag vectors)
and ``mirflickr25k-lall.mat`` (``LAll``, 20,015 x 24 multi-hot concepts). The
image features (``mirflickr25k-iall-vgg.mat``) are not used.

Result: ``x_text`` float32, ``labels`` uint8, ``split`` int8 with the first 2,000
rows the queries (1), the rest the database (0): the split those papers use.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hashdata.recipes.common import Recipe, RecipeError, need_file

TAGS = ("mirflickr25k-yall.mat", "YAll")
CONCEPTS = ("mirflickr25k-lall.mat", "LAll")
QUERIES = 2000


def _variable(source: Path, file_name: str, name: str) -> np.ndarray:
    from scipy.io import loadmat

    mat = loadmat(need_file(source, file_name, "mirflickr"))
    if name not in mat:
        have = sorted(k for k in mat if not k.startswith("__"))
        raise RecipeError(f"{file_name}: no variable {name} (it has {', '.join(have)})")
    return np.asarray(mat[name])


def convert(source: Path) -> dict[str, np.ndarray]:
    """Return the arrays of ``mirflickr25k_tags.npz`` from the files in ``source``."""
    tags = _variable(source, *TAGS)
    concepts = _variable(source, *CONCEPTS)
    if tags.ndim != 2 or concepts.ndim != 2 or len(tags) != len(concepts):
        raise RecipeError(
            f"{TAGS[0]} {TAGS[1]} {tags.shape} and {CONCEPTS[0]} {CONCEPTS[1]} "
            f"{concepts.shape} must be 2-D with one row per sample each"
        )
    if len(tags) <= QUERIES:
        raise RecipeError(f"{len(tags)} rows; the split needs more than {QUERIES}")
    if not np.isin(concepts, (0, 1)).all() or (concepts.sum(axis=1) == 0).any():
        raise RecipeError(
            f"{CONCEPTS[0]}: {CONCEPTS[1]} must be multi-hot 0/1 with at least one "
            "concept per row (the cleaned set)"
        )
    split = np.zeros(len(tags), np.int8)
    split[:QUERIES] = 1
    return {
        "x_text": tags.astype(np.float32),
        "labels": concepts.astype(np.uint8),
        "split": split,
    }


RECIPE = Recipe(
    name="mirflickr",
    file_name="mirflickr25k_tags.npz",
    source=(
        "git clone https://github.com/LonganWANG-cs/NRCH && git -C NRCH checkout "
        "c2ec2e85; --source NRCH/data (mirflickr25k-yall.mat, "
        "mirflickr25k-lall.mat)",
    ),
    convert=convert,
    file_sha256="d5ae7c3ed6f390e647bea89f8e34efa7bcc928137fd229bd25340f85d3b11a2d",
    arrays={
        "x_text": "e0ac928a4827fb140e1d0619d78210701da129acd18e1c1b34ec0deaa999ea4e",
        "labels": "dfb8da1396e76dcee51ed0c225c71a11895cf7f15f1672daba96930b33fabb45",
        "split": "7d7d0ea2ec71e0b7fd052e4fa097b57cff45427d91e806b8cf401fd119e286ec",
    },
)

"""``wiki.npz``: the Wikipedia image-text dataset (Rasiwasia et al., ACM MM 2010).

Source: the SVCL release's features and split as kept in the repository
azrealwang/sph at commit d6d090f4, folder ``data/``:

* ``raw_features.mat`` -- ``I_tr`` / ``I_te`` (n x 128 SIFT bag of visual words),
  ``T_tr`` / ``T_te`` (n x 10 LDA topic proportions), ``T_tfidf_tr`` /
  ``T_tfidf_te`` (n x 1000 TF-IDF);
* ``trainset_txt_img_cat.list`` / ``testset_txt_img_cat.list`` -- one line per
  pair, ``<text id> <image id> <category 1..10>``, in the rows' order.

Result: ``x_image``, ``x_text``, ``x_text_tfidf`` float32, ``labels`` int64
(category - 1), ``split`` int8 (0 = the 2,173 training pairs, then 1 = the 693
test pairs), rows as the lists order them, values as stored.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hashdata.recipes.common import Recipe, RecipeError, need_file

MAT = "raw_features.mat"
LISTS = ("trainset_txt_img_cat.list", "testset_txt_img_cat.list")
#: npz array <- .mat variable prefix (``<prefix>_tr`` then ``<prefix>_te``)
VARIABLES = {"x_image": "I", "x_text": "T", "x_text_tfidf": "T_tfidf"}


def read_categories(path: Path) -> np.ndarray:
    """Third column of a ``*_txt_img_cat.list`` file (1..10) as 0..9 int64."""
    labels: list[int] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split()
        try:
            category = int(fields[2])
        except (IndexError, ValueError):
            raise RecipeError(
                f"{str(path)!r} line {number}: expected `<text id> <image id> "
                f"<category 1..10>`, got {line!r}"
            ) from None
        if not 1 <= category <= 10:
            raise RecipeError(
                f"{str(path)!r} line {number}: category {category} is outside 1..10"
            )
        labels.append(category - 1)
    return np.asarray(labels, dtype=np.int64)


def convert(source: Path) -> dict[str, np.ndarray]:
    """Return the arrays of ``wiki.npz`` from the files in ``source``."""
    from scipy.io import loadmat

    mat = loadmat(need_file(source, MAT, "wiki"))
    train, test = (read_categories(need_file(source, n, "wiki")) for n in LISTS)
    out: dict[str, np.ndarray] = {}
    for key, prefix in VARIABLES.items():
        parts = []
        for suffix, labels in (("tr", train), ("te", test)):
            name = f"{prefix}_{suffix}"
            if name not in mat:
                have = sorted(k for k in mat if not k.startswith("__"))
                raise RecipeError(
                    f"{MAT}: no variable {name} (it has {', '.join(have)}); the wiki "
                    "recipe reads azrealwang/sph's data/raw_features.mat"
                )
            part = np.asarray(mat[name])
            if part.ndim != 2 or len(part) != len(labels):
                raise RecipeError(
                    f"{MAT}: {name} has shape {part.shape}, expected one row per "
                    f"line of its list ({len(labels)} rows)"
                )
            parts.append(part)
        out[key] = np.concatenate(parts).astype(np.float32)
    out["labels"] = np.concatenate([train, test])
    out["split"] = np.concatenate(
        [np.zeros(len(train), np.int8), np.ones(len(test), np.int8)]
    )
    return out


RECIPE = Recipe(
    name="wiki",
    file_name="wiki.npz",
    source=(
        "git clone https://github.com/azrealwang/sph && git -C sph checkout "
        "d6d090f4; --source sph/data (raw_features.mat, "
        "trainset_txt_img_cat.list, testset_txt_img_cat.list)",
    ),
    convert=convert,
    file_sha256="5bb447c75848d3f1f57a55dd12c4295960ca6de1437b1aaf627a7b84c69ed2c2",
    arrays={
        "x_image": "e78ecd913ffa858271a490fb7c1b09cb7f92d97781434e5019df7f26c99508b6",
        "x_text": "507ceee03b016228ac5263f6c20c2865643a0f67428d28dfe9fc9ea079bd2ab0",
        "x_text_tfidf": (
            "0663be2c5d9de9136266d339fa11277587cee5d9404b176666f94c224c93e678"
        ),
        "labels": "9ea948330f6e6f62c79f3eb8e0e1fc50f4a013ae7a6335b3146e29584dcc0e50",
        "split": "a6db051f60740a19fcfdc06de6efab9754008b0090c9a63e445e6f25b6730f25",
    },
)

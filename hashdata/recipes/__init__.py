"""Recipes that make the project's real-data ``.npz`` files from public downloads.

One module per dataset, each with ``SOURCE`` (what to download, from where),
``EXPECTED`` (the known result's checksums) and ``convert(source_dir)`` returning
the arrays in the file's order. ``python -m hashdata.prepare`` runs them, writes
the file atomically and verifies it (docs/data.md, "Making the real-data files").
Nothing here downloads anything.
"""

from hashdata.recipes import cifar10, mirflickr, wiki
from hashdata.recipes.common import Recipe, RecipeError

RECIPES: dict[str, Recipe] = {
    "wiki": wiki.RECIPE,
    "mirflickr": mirflickr.RECIPE,
    "cifar10": cifar10.RECIPE,
}

__all__ = ["RECIPES", "Recipe", "RecipeError"]

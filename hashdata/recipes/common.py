"""What every recipe shares: its description, checksums, atomic write, verification."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


class RecipeError(ValueError):
    """A source folder or file that does not hold what the recipe converts."""


@dataclass(frozen=True)
class Recipe:
    """How one dataset file is made."""

    name: str
    #: the file name the project's docs and presets use (under /work/shared/data)
    file_name: str
    #: what to download and from where, one line each (docs/data.md repeats it)
    source: tuple[str, ...]
    convert: Callable[[Path], dict[str, np.ndarray]]
    #: sha256 of the known result file (numpy.savez_compressed, zlib dependent)
    file_sha256: str
    #: :func:`content_digest` of each array of the known result, in file order
    arrays: Mapping[str, str] = field(default_factory=dict)


def content_digest(name: str, array: np.ndarray) -> str:
    """sha256 of one array's name, dtype, shape and bytes (not of the zip bytes)."""
    a = np.ascontiguousarray(array)
    digest = hashlib.sha256(f"{name}|{a.dtype.str}|{a.shape}|".encode())
    digest.update(a.tobytes())
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def mismatches(recipe: Recipe, arrays: Mapping[str, np.ndarray]) -> list[str]:
    """Arrays that differ from the known result (names, order or contents)."""
    if list(arrays) != list(recipe.arrays):
        return [f"array names {list(arrays)} (expected {list(recipe.arrays)})"]
    return [
        f"`{name}` {arrays[name].dtype}{list(arrays[name].shape)}"
        for name, want in recipe.arrays.items()
        if content_digest(name, arrays[name]) != want
    ]


def write_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """``numpy.savez_compressed`` to ``path`` atomically (a temporary name, renamed).

    An interrupted write leaves no ``path``; an existing ``path`` is replaced only
    by a complete file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with tmp.open("wb") as fh:
            np.savez_compressed(fh, **dict(arrays))  # type: ignore[arg-type]
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def need_file(source: Path, name: str, recipe: str) -> Path:
    """``source / name``, or a :class:`RecipeError` saying what is missing."""
    path = source / name
    if not path.is_file():
        raise RecipeError(
            f"--source {str(source)!r}: no {name} there; the {recipe} recipe needs "
            "the files listed by `python -m hashdata.prepare --list`"
        )
    return path

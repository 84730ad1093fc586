"""A client's local data: its partition of the database, cached per process.

The same seeded protocol runs on every node: load the dataset, split the stratified
query set off (the server's), partition the remaining database with the configured
flwr-datasets partitioner, keep partition ``partition_id``.

For ``strategy = "pfmh"`` the inputs are every modality, as a dict modality name ->
tensor (``hashdata.require_multimodal`` checks there are >= 2 of equal length), and
the partition is further split into PFMH's *local queries* and *local database*
(:func:`local_query_split`, seeded by run seed and partition id): the client trains
on its local database only, and the per-client retrieval protocol ranks its local
database for its local queries (docs/methods/pfmh.md).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from clients import partition_cache
from hashdata import (
    ProtocolSplit,
    load_split,
    partition_indices,
    primary_labels,
    publishes_codes,
    require_multimodal,
)
from settings.run_settings import RunSettings

#: Purpose tag of the seed of :func:`local_query_split` (see ``SeedSequence``).
LOCAL_SPLIT_PURPOSE = 3


@dataclass(frozen=True)
class LocalData:
    """One client's training/database data.

    Attributes
    ----------
    inputs : torch.Tensor or dict of str to torch.Tensor
        (n, ...) float32 samples of the primary modality; for PFMH a dict of every
        modality, each (n, ...).
    labels : torch.Tensor
        (n,) int64 class ids or (n, C) uint8 multi-hot.
    database_index : torch.Tensor
        (n,) int64 positions of these samples in the full dataset.
    num_classes : int
        Size of the label space.
    local_queries : torch.Tensor or None
        PFMH only: (nq,) int64 positions (into this partition) of the local
        queries; the other positions are the local database.
    train_positions : torch.Tensor or None
        With ``train-size``: (nt,) int64 positions (into this partition) of the
        rows trained on; ``None``: every row (see :meth:`training_view`).
    publishes : bool
        Whether this client publishes its database codes for retrieval: ``False``
        for the clients of the repeated splits (``partition-repeats > 1``, see
        :func:`hashdata.publishes_codes`), whose rows split 0 already publishes.
    """

    inputs: torch.Tensor | dict[str, torch.Tensor]
    labels: torch.Tensor
    database_index: torch.Tensor
    num_classes: int
    local_queries: torch.Tensor | None = None
    train_positions: torch.Tensor | None = None
    publishes: bool = True

    def training_view(self) -> LocalData:
        """Return the rows this client trains on (itself without ``train-size``).

        Trainers get this view; encoding for retrieval uses the whole partition.
        """
        if self.train_positions is None:
            return self
        if len(self.train_positions) == 0:
            raise ValueError(
                f"train-size: none of this partition's {self.num_samples} database "
                "rows is among the run's training rows, so this client has nothing "
                "to train on; use a larger train-size (several times the number of "
                "clients) or fewer clients"
            )
        inputs, labels = self.take(self.train_positions)
        return LocalData(
            inputs=inputs,
            labels=labels,
            database_index=self.database_index[self.train_positions],
            num_classes=self.num_classes,
        )

    @property
    def input_shape(self) -> tuple[int, ...] | dict[str, int]:
        """Shape of one sample; for dict inputs modality -> flattened size."""
        if isinstance(self.inputs, dict):
            return {m: int(np.prod(x.shape[1:])) for m, x in self.inputs.items()}
        return tuple(self.inputs.shape[1:])

    @property
    def num_samples(self) -> int:
        """Number of samples in the partition."""
        return int(len(self.labels))

    def local_database(self) -> torch.Tensor:
        """(n - nq,) int64 positions of the local database (PFMH: the train set)."""
        keep = torch.ones(self.num_samples, dtype=torch.bool)
        if self.local_queries is not None:
            keep[self.local_queries] = False
        return torch.nonzero(keep).flatten()

    def take(
        self, positions: torch.Tensor
    ) -> tuple[torch.Tensor | dict[str, torch.Tensor], torch.Tensor]:
        """Return ``(inputs, labels)`` at ``positions`` (into this partition)."""
        if isinstance(self.inputs, dict):
            inputs = {m: x[positions] for m, x in self.inputs.items()}
            return inputs, self.labels[positions]
        return self.inputs[positions], self.labels[positions]


class DataKey(NamedTuple):
    """The settings that determine a client's data (hashable, for caching)."""

    multimodal: bool
    dataset: str
    data_path: str
    download: bool
    feature_scaling: str
    image_shape: tuple[int, int, int] | None
    modalities: tuple[str, ...] | None
    train_size: int
    query_fraction: float
    seed: int
    partitioning: str
    dirichlet_alpha: float
    classes_per_client: int
    partition_repeats: int


def data_key(settings: RunSettings) -> DataKey:
    """Return the settings that determine the data (hashable, for caching)."""
    return DataKey(
        multimodal=settings.method.multimodal,
        dataset=settings.dataset,
        data_path=settings.data_path,
        download=settings.download,
        feature_scaling=settings.feature_scaling,
        image_shape=settings.image_hwc(),
        modalities=settings.modality_names(),
        train_size=settings.train_size,
        query_fraction=settings.query_fraction,
        seed=settings.seed,
        partitioning=settings.partitioning,
        dirichlet_alpha=settings.dirichlet_alpha,
        classes_per_client=settings.classes_per_client,
        partition_repeats=settings.partition_repeats,
    )


def source_stamp(data_path: str) -> tuple:
    """Identity of the files behind ``data-path`` (size, mtime, inode), for the key.

    A file replaced or rewritten under the same path gets a new stamp, so a cached
    load is never served for it. A file: its own stat; a folder (the CIFAR-10 root):
    every entry in it and in its ``cifar-10-batches-py/`` (not recursive beyond
    that); empty or missing path: ``()`` / ``("missing",)``.
    """
    text = str(data_path).strip()
    if not text:
        return ()
    path = Path(text).expanduser()
    try:
        st = path.stat()
    except OSError:
        return ("missing",)
    if not path.is_dir():
        return (st.st_size, st.st_mtime_ns, st.st_ino)
    stamps = []
    for folder in (path, path / "cifar-10-batches-py"):
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            try:
                est = entry.stat()
            except OSError:
                continue
            stamps.append((folder.name, entry.name, est.st_size, est.st_mtime_ns))
    return (st.st_mtime_ns, tuple(stamps))


def load_local_data(
    settings: RunSettings, *, partition_id: int, num_partitions: int
) -> LocalData:
    """Return this node's partition of the database (cached per process and on disk).

    The dataset is loaded, split and scaled once per process and data key
    (:func:`data_key` plus :func:`source_stamp` of ``data-path``); each partition is
    then cut from it once and kept. Only the :data:`CACHED_KEYS` most recently used
    keys are kept (a process holds at most that many datasets and their
    partitions); different keys never share an entry. For data read from
    ``data-path``, a partition is also written to the node's disk and memory-mapped
    by later processes (:mod:`clients.partition_cache`: a fresh ClientApp process per
    message then skips the load). The arrays are the same values a fresh load gives
    (tests/unit/test_data_cache.py).
    """
    key = (data_key(settings), source_stamp(settings.data_path))
    part = (int(partition_id), int(num_partitions))
    with _LOCK:
        entry = _CACHE.get(key)
        if entry is not None:
            _CACHE.move_to_end(key)
            hit = entry.partitions.get(part)
            if hit is not None:
                return hit
    disk = partition_cache.cache_root() if key[1] not in ((), ("missing",)) else None
    name = partition_cache.entry_name(key[0], key[1], part) if disk else ""
    if disk is not None:
        fields = partition_cache.read(disk, name)
        if fields is not None:
            return _keep(key, part, LocalData(**fields), split=None)
    if entry is None or entry.split is None:
        split = load_key_split(key[0])
        with _LOCK:
            entry = _CACHE.setdefault(key, _CacheEntry(split=split, partitions={}))
            if entry.split is None:
                entry.split = split
    local = _cut_partition(entry.split, key[0], *part)
    if disk is not None:
        partition_cache.write(disk, name, vars(local))
    return _keep(key, part, local, split=entry.split)


def _keep(
    key: tuple, part: tuple[int, int], local: LocalData, *, split: ProtocolSplit | None
) -> LocalData:
    """Keep ``local`` in the process cache (at most :data:`CACHED_KEYS` keys)."""
    with _LOCK:
        entry = _CACHE.setdefault(key, _CacheEntry(split=split, partitions={}))
        _CACHE.move_to_end(key)
        while len(_CACHE) > CACHED_KEYS:
            _CACHE.popitem(last=False)
        return entry.partitions.setdefault(part, local)


#: Data keys a process keeps loaded (each: the dataset and the partitions cut).
CACHED_KEYS = 2


@dataclass
class _CacheEntry:
    split: ProtocolSplit | None  # None: only partitions read from the disk cache
    partitions: dict[tuple[int, int], LocalData]


_CACHE: OrderedDict[tuple, _CacheEntry] = OrderedDict()
_LOCK = threading.Lock()


def clear_cache() -> None:
    """Forget every cached dataset and partition (tests; as a fresh process)."""
    with _LOCK:
        _CACHE.clear()


def load_key_split(key: DataKey) -> ProtocolSplit:
    """Load, split and scale the dataset of ``key`` (:func:`data_key`), uncached."""
    return load_split(
        key.dataset,
        data_path=key.data_path,
        download=key.download,
        query_fraction=key.query_fraction,
        seed=key.seed,
        feature_scaling=key.feature_scaling,
        image_shape=key.image_shape,
        modalities=key.modalities,
        train_size=key.train_size,
    )


def database_partition(
    split: ProtocolSplit, key: DataKey, partition_id: int, num_partitions: int
) -> np.ndarray:
    """Dataset indices of partition ``partition_id`` of ``split``'s database.

    Raises ``ValueError`` (from :func:`hashdata.partition.partition_indices`) where
    the data cannot be partitioned so.
    """
    db_idx = split.database_index
    return db_idx[
        partition_indices(
            split.dataset.labels[db_idx],
            scheme=key.partitioning,
            num_partitions=num_partitions,
            partition_id=partition_id,
            seed=key.seed,
            alpha=key.dirichlet_alpha,
            classes_per_client=key.classes_per_client,
            repeats=key.partition_repeats,
        )
    ]


def _cut_partition(
    split: ProtocolSplit, key: DataKey, partition_id: int, num_partitions: int
) -> LocalData:
    labels, db_idx = split.dataset.labels, split.database_index
    local = database_partition(split, key, partition_id, num_partitions)
    publishes = publishes_codes(partition_id, num_partitions, key.partition_repeats)
    if not key.multimodal:
        train = None
        if split.train_mask is not None:
            in_database = np.searchsorted(db_idx, local)
            train = torch.from_numpy(np.flatnonzero(split.train_mask[in_database]))
        return LocalData(
            inputs=torch.from_numpy(split.inputs[local]),
            labels=torch.from_numpy(labels[local]),
            database_index=torch.from_numpy(local),
            num_classes=split.dataset.num_classes,
            train_positions=train,
            publishes=publishes,
        )
    data = split.dataset
    require_multimodal(data)
    queries, _ = local_query_split(
        labels[local],
        query_fraction=key.query_fraction,
        seed=key.seed,
        partition_id=partition_id,
    )
    return LocalData(
        inputs={m: torch.from_numpy(data.inputs[m][local]) for m in data.modalities},
        labels=torch.from_numpy(labels[local]),
        database_index=torch.from_numpy(local),
        num_classes=data.num_classes,
        local_queries=torch.from_numpy(queries),
    )


def local_query_split(
    labels: np.ndarray, *, query_fraction: float, seed: int, partition_id: int
) -> tuple[np.ndarray, np.ndarray]:
    """Split one client's samples into local queries and local database (PFMH).

    Stratified by primary label: from every class with ``n_c >= 2`` samples,
    ``round(query_fraction * n_c)`` seeded draws become queries (a class with one
    sample stays in the database, so no query is without a same-class item by
    construction of the split alone). If that gives no query at all and the client
    has >= 2 samples, one sample of its largest class is drawn.

    Parameters
    ----------
    labels : np.ndarray
        (n,) class ids or (n, C) multi-hot of the client's partition.
    query_fraction : float
        Share of the partition to hold out as queries (``query-fraction``).
    seed : int
        Run seed.
    partition_id : int
        The client's partition id (each client draws its own split).

    Returns
    -------
    queries, database : np.ndarray
        Sorted int64 positions into ``labels``; together a partition of
        ``0..n-1``.
    """
    primary = primary_labels(np.asarray(labels))
    rng = np.random.default_rng(
        np.random.SeedSequence([int(seed), int(partition_id), LOCAL_SPLIT_PURPOSE])
    )
    chosen: list[np.ndarray] = []
    for c in np.unique(primary):
        members = np.flatnonzero(primary == c)
        if len(members) < 2:
            continue
        q = int(np.floor(query_fraction * len(members) + 0.5))
        q = min(q, len(members) - 1)
        if q:
            chosen.append(rng.choice(members, size=q, replace=False))
    queries = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
    if not len(queries) and len(primary) >= 2:
        counts = np.bincount(primary)
        members = np.flatnonzero(primary == int(np.argmax(counts)))
        if len(members) >= 2:
            queries = rng.choice(members, size=1)
    queries = np.sort(queries.astype(np.int64))
    database = np.setdiff1d(np.arange(len(primary), dtype=np.int64), queries)
    return queries, database

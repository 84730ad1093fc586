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

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from hashdata import (
    load_split,
    partition_indices,
    primary_labels,
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
    """

    inputs: torch.Tensor | dict[str, torch.Tensor]
    labels: torch.Tensor
    database_index: torch.Tensor
    num_classes: int
    local_queries: torch.Tensor | None = None

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


def data_key(settings: RunSettings) -> tuple:
    """Return the settings that determine the data (hashable, for caching)."""
    return (
        settings.strategy == "pfmh",
        settings.dataset,
        settings.data_path,
        settings.download,
        settings.feature_scaling,
        settings.image_hwc(),
        settings.query_fraction,
        settings.seed,
        settings.partitioning,
        settings.dirichlet_alpha,
        settings.classes_per_client,
    )


def load_local_data(
    settings: RunSettings, *, partition_id: int, num_partitions: int
) -> LocalData:
    """Return this node's partition of the database (cached per process)."""
    return _load_local_data(data_key(settings), partition_id, num_partitions)


@lru_cache(maxsize=16)
def _load_local_data(key: tuple, partition_id: int, num_partitions: int) -> LocalData:
    (
        multi, dataset, data_path, download, scaling, image_shape,
        query_fraction, seed, scheme, alpha, cpc,
    ) = key
    split = load_split(
        dataset,
        data_path=data_path,
        download=download,
        query_fraction=query_fraction,
        seed=seed,
        feature_scaling=scaling,
        image_shape=image_shape,
    )
    labels, db_idx = split.dataset.labels, split.database_index
    local = db_idx[
        partition_indices(
            labels[db_idx],
            scheme=scheme,
            num_partitions=num_partitions,
            partition_id=partition_id,
            seed=seed,
            alpha=alpha,
            classes_per_client=cpc,
        )
    ]
    if not multi:
        return LocalData(
            inputs=torch.from_numpy(split.inputs[local]),
            labels=torch.from_numpy(labels[local]),
            database_index=torch.from_numpy(local),
            num_classes=split.dataset.num_classes,
        )
    data = split.dataset
    require_multimodal(data)
    queries, _ = local_query_split(
        labels[local],
        query_fraction=query_fraction,
        seed=seed,
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

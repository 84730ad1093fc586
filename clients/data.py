"""A client's local data: its partition of the database, cached per process.

The same seeded protocol runs on every node: load the dataset, split the stratified
query set off (the server's), partition the remaining database with the configured
flwr-datasets partitioner, keep partition ``partition_id``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from hashdata import load_split, partition_indices
from settings.run_settings import RunSettings


@dataclass(frozen=True)
class LocalData:
    """One client's training/database data.

    Attributes
    ----------
    inputs : torch.Tensor
        (n, ...) float32 samples of the primary modality.
    labels : torch.Tensor
        (n,) int64 class ids or (n, C) uint8 multi-hot.
    database_index : torch.Tensor
        (n,) int64 positions of these samples in the full dataset.
    num_classes : int
        Size of the label space.
    """

    inputs: torch.Tensor
    labels: torch.Tensor
    database_index: torch.Tensor
    num_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample."""
        return tuple(self.inputs.shape[1:])


def data_key(settings: RunSettings) -> tuple:
    """Return the settings that determine the data (hashable, for caching)."""
    return (
        settings.dataset,
        settings.data_path,
        settings.download,
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
    (dataset, data_path, download, query_fraction, seed, scheme, alpha, cpc) = key
    split = load_split(
        dataset,
        data_path=data_path,
        download=download,
        query_fraction=query_fraction,
        seed=seed,
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
    return LocalData(
        inputs=torch.from_numpy(split.inputs[local]),
        labels=torch.from_numpy(labels[local]),
        database_index=torch.from_numpy(local),
        num_classes=split.dataset.num_classes,
    )

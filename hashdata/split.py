"""A dataset loaded and split by the retrieval protocol, in one call.

Server (query set), clients (their database partition) and the centralized ceiling
all need the same three steps: load the dataset, split the seeded stratified query
set off, take the primary modality. :func:`load_split` does them once, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hashdata.dataset import HashDataset
from hashdata.loaders import load_dataset
from hashdata.protocol import split_query_database


@dataclass(frozen=True, eq=False)
class ProtocolSplit:
    """A dataset with its query / database split.

    Attributes
    ----------
    dataset : HashDataset
        The whole dataset.
    query_index : numpy.ndarray
        ``(n_query,)`` int64 sorted rows of the server's query set.
    database_index : numpy.ndarray
        ``(n_database,)`` int64 sorted rows of the database.
    """

    dataset: HashDataset
    query_index: np.ndarray
    database_index: np.ndarray

    @property
    def inputs(self) -> np.ndarray:
        """``(n, ...)`` float32 samples of the primary modality (the model's input)."""
        return self.dataset.inputs[self.dataset.modalities[0]]


def load_split(
    name: str,
    *,
    data_path: str = "",
    download: bool = False,
    query_fraction: float,
    seed: int,
) -> ProtocolSplit:
    """Load ``name`` and split it with :func:`split_query_database`."""
    data = load_dataset(name, data_path=data_path, download=download)
    query_index, database_index = split_query_database(
        data.labels, query_fraction=query_fraction, seed=seed
    )
    return ProtocolSplit(
        dataset=data, query_index=query_index, database_index=database_index
    )

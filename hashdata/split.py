"""A dataset loaded and split by the retrieval protocol, in one call.

Server (query set), clients (their database partition) and the centralized ceiling
all need the same steps: load the dataset, split the seeded stratified query set off,
scale the inputs with statistics of the database part (``feature-scaling``,
:mod:`hashdata.scaling`), take the primary modality. :func:`load_split` does them
once, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hashdata.dataset import HashDataset
from hashdata.loaders import load_dataset
from hashdata.protocol import split_query_database
from hashdata.scaling import scale_inputs


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
    scaling : tuple of str
        One ``"<modality>: <what was done>"`` line per modality that
        ``feature-scaling`` changed; empty when the inputs are as loaded.
    """

    dataset: HashDataset
    query_index: np.ndarray
    database_index: np.ndarray
    scaling: tuple[str, ...] = ()

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
    feature_scaling: str = "auto",
    image_shape: tuple[int, int, int] | None = None,
) -> ProtocolSplit:
    """Load ``name``, split it with :func:`split_query_database`, scale the inputs.

    ``feature_scaling`` (the ``feature-scaling`` key, one of
    :data:`hashdata.scaling.FEATURE_SCALINGS`) is applied with statistics of the
    database rows only, the same map for queries and every client; ``image_shape``
    is :func:`load_dataset`'s.
    """
    data = load_dataset(
        name, data_path=data_path, download=download, image_shape=image_shape
    )
    query_index, database_index = split_query_database(
        data.labels, query_fraction=query_fraction, seed=seed
    )
    data, applied = scale_inputs(
        data, database_index, mode=feature_scaling, source=data_path
    )
    return ProtocolSplit(
        dataset=data,
        query_index=query_index,
        database_index=database_index,
        scaling=applied,
    )

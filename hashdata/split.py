"""A dataset loaded and split by the retrieval protocol, in one call.

Server (query set), clients (their database partition) and the centralized ceiling
all need the same steps: load the dataset, split the query set off (the file's own
fixed split when it carries one, else the seeded stratified ``query-fraction``),
scale the inputs with statistics of the database part (``feature-scaling``,
:mod:`hashdata.scaling`), take the primary modality. :func:`load_split` does them
once, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hashdata.dataset import HashDataset
from hashdata.loaders import load_dataset
from hashdata.protocol import (
    SPLIT_ARRAY,
    split_query_database,
    validate_query_fraction,
    validate_seed,
)
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
    query_text : str
        How the query set was chosen, for the protocol text after ``"query set: "``:
        ``"stratified 10% of digits (seed 42)"`` for the seeded split, or
        ``"the file's fixed split: 693 queries, 2173 database (array `split` of
        wiki.npz)"``.
    fixed : bool
        Whether the split is the file's own (``query-fraction`` and ``seed`` did
        not choose it).
    """

    dataset: HashDataset
    query_index: np.ndarray
    database_index: np.ndarray
    scaling: tuple[str, ...] = ()
    query_text: str = ""
    fixed: bool = False

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
    modalities: tuple[str, ...] | None = None,
    use_file_split: bool = True,
) -> ProtocolSplit:
    """Load ``name``, split off the query set, scale the inputs.

    The split is the data file's own when it carries one (an ``.npz`` ``split``
    array, :attr:`HashDataset.fixed_split`) and ``use_file_split`` is true: its
    query rows are the server's queries, all other rows the database, whatever
    ``query_fraction`` and ``seed`` say (both are still validated: the seed also
    drives the partitioning, the fraction PFMH's per-client local split). Otherwise
    it is :func:`split_query_database` with ``query_fraction`` and ``seed``.

    ``feature_scaling`` (the ``feature-scaling`` key, one of
    :data:`hashdata.scaling.FEATURE_SCALINGS`) is applied with statistics of the
    database rows only, the same map for queries and every client; ``image_shape``
    and ``modalities`` are :func:`load_dataset`'s.
    """
    fraction = validate_query_fraction(query_fraction)
    seed = validate_seed(seed)
    data = load_dataset(
        name,
        data_path=data_path,
        download=download,
        image_shape=image_shape,
        modalities=modalities,
    )
    mask = data.fixed_split if use_file_split else None
    if mask is not None:
        query_index = np.flatnonzero(mask).astype(np.int64)
        database_index = np.flatnonzero(~mask).astype(np.int64)
        query_text = (
            f"the file's fixed split: {len(query_index)} queries, "
            f"{len(database_index)} database (array `{SPLIT_ARRAY}` of "
            f"{Path(str(data_path)).name})"
        )
    else:
        query_index, database_index = split_query_database(
            data.labels, query_fraction=fraction, seed=seed
        )
        query_text = f"stratified {fraction:.0%} of {name} (seed {seed})"
    data, applied = scale_inputs(
        data, database_index, mode=feature_scaling, source=data_path
    )
    return ProtocolSplit(
        dataset=data,
        query_index=query_index,
        database_index=database_index,
        scaling=applied,
        query_text=query_text,
        fixed=mask is not None,
    )

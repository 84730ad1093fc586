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
    train_mask : numpy.ndarray or None
        ``(n_database,)`` bool, aligned with ``database_index``: the rows the
        clients (and the centralized ceiling) train on, a seeded random subset of
        ``train-size`` rows; ``None`` when every database row is trained on. All
        database rows are still encoded and retrieved.
    """

    dataset: HashDataset
    query_index: np.ndarray
    database_index: np.ndarray
    scaling: tuple[str, ...] = ()
    query_text: str = ""
    fixed: bool = False
    train_mask: np.ndarray | None = None

    @property
    def train_text(self) -> str:
        """How the training rows were chosen, for the protocol text."""
        if self.train_mask is None:
            return "every database row is trained on"
        return (
            f"training on a seeded random {int(self.train_mask.sum())} of the "
            f"{len(self.train_mask)} database rows (train-size), all of them encoded"
        )

    @property
    def inputs(self) -> np.ndarray:
        """``(n, ...)`` float32 samples of the primary modality (the model's input)."""
        return self.dataset.inputs[self.dataset.modalities[0]]


#: Purpose tag of the seed of :func:`training_mask` (see ``SeedSequence``).
TRAIN_SUBSET_PURPOSE = 5


def training_mask(num_database: int, train_size: int, seed: int) -> np.ndarray | None:
    """Return which database rows are trained on: ``train_size`` of them, seeded.

    The same seeded draw on every node (a function of the database size, the size
    and the run seed only), so the clients' training rows are consistent with the
    server's and the centralized ceiling's. ``train_size = 0``: ``None`` (all).

    Raises
    ------
    ValueError
        ``train_size`` negative or larger than the database (naming the key).
    """
    if train_size == 0:
        return None
    if not 0 < train_size <= num_database:
        raise ValueError(
            f"train-size={train_size}: accepted is 0 (train on the whole database) "
            f"or 1..{num_database}, the database size of this split"
        )
    rng = np.random.default_rng([TRAIN_SUBSET_PURPOSE, validate_seed(seed)])
    mask = np.zeros(num_database, dtype=bool)
    mask[rng.choice(num_database, size=train_size, replace=False)] = True
    return mask


def protocol_indices(
    labels: np.ndarray,
    fixed_split: np.ndarray | None,
    *,
    query_fraction: float,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Query and database row indices of a run's protocol.

    The file's fixed split (a boolean query mask) when there is one, else the
    seeded stratified draw :func:`split_query_database`. :func:`load_split` and the
    pre-flight check (``python -m settings check``) both use it.
    """
    if fixed_split is not None:
        return (
            np.flatnonzero(fixed_split).astype(np.int64),
            np.flatnonzero(~fixed_split).astype(np.int64),
        )
    return split_query_database(labels, query_fraction=query_fraction, seed=seed)


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
    train_size: int = 0,
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
    and ``modalities`` are :func:`load_dataset`'s; ``train_size`` > 0 marks the
    database rows trained on (:func:`training_mask`).
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
    query_index, database_index = protocol_indices(
        data.labels, mask, query_fraction=fraction, seed=seed
    )
    if mask is not None:
        query_text = (
            f"the file's fixed split: {len(query_index)} queries, "
            f"{len(database_index)} database (array `{SPLIT_ARRAY}` of "
            f"{Path(str(data_path)).name})"
        )
    else:
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
        train_mask=training_mask(len(database_index), train_size, seed),
    )

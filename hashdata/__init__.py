"""Data for federated deep hashing: loaders, retrieval protocol and partitioning.

Framework-free (no ``flwr`` import); partitioning uses ``flwr_datasets``.

Typical use::

    ds = load_dataset("digits")
    query_idx, db_idx = split_query_database(ds.labels, query_fraction=0.1, seed=42)
    local = partition_indices(
        ds.labels[db_idx], scheme="iid", num_partitions=10, partition_id=3, seed=42
    )
    client_rows = db_idx[local]  # rows of ``ds`` held by client 3

:func:`load_split` does the load and split in one call and scales the inputs
(``feature-scaling``) with statistics of the database part. A ``.npz`` file with a
``split`` array (:func:`fixed_split_mask`) is split that way instead of by
``query-fraction`` and ``seed``.
"""

from hashdata.dataset import HashDataset
from hashdata.loaders import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    DATASETS,
    load_dataset,
)
from hashdata.multiview import (
    load_multiview_digits,
    modality_dims,
    require_multimodal,
)
from hashdata.partition import (
    DIRICHLET_MIN_PARTITION_SIZE,
    PARTITION_SCHEMES,
    dirichlet_min_partition_size,
    partition_indices,
    publishes_codes,
    validate_partitioning,
)
from hashdata.protocol import (
    MAX_QUERY_FRACTION,
    SPLIT_ARRAY,
    fixed_split_mask,
    primary_labels,
    split_query_database,
    validate_query_fraction,
    validate_seed,
)
from hashdata.scaling import FEATURE_SCALINGS, scale_inputs
from hashdata.split import ProtocolSplit, load_split, training_mask

__all__ = [
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "DATASETS",
    "DIRICHLET_MIN_PARTITION_SIZE",
    "FEATURE_SCALINGS",
    "MAX_QUERY_FRACTION",
    "PARTITION_SCHEMES",
    "SPLIT_ARRAY",
    "HashDataset",
    "ProtocolSplit",
    "dirichlet_min_partition_size",
    "fixed_split_mask",
    "load_dataset",
    "load_multiview_digits",
    "load_split",
    "training_mask",
    "modality_dims",
    "partition_indices",
    "primary_labels",
    "publishes_codes",
    "require_multimodal",
    "scale_inputs",
    "split_query_database",
    "validate_partitioning",
    "validate_query_fraction",
    "validate_seed",
]

"""``partition-repeats``: the database split k times (the DPHE paper's Fig. 4 left).

Each of the k splits covers the database once over N / k clients; split 0 is the
plain split; only split 0's clients publish database codes, so the retrieval
database holds every row once however many clients hold it.
"""

from __future__ import annotations

import numpy as np
import pytest

from hashdata import (
    load_dataset,
    partition_indices,
    publishes_codes,
    split_query_database,
    validate_partitioning,
)
from hashdata.partition import repeat_seed
from settings.run_settings import RunSettings
from settings.schema import ConfigError
from tests.integration.attacks.clientapp_calls import query_encode_at


@pytest.fixture(scope="module")
def db_labels() -> np.ndarray:
    labels = load_dataset("digits").labels
    _, db = split_query_database(labels, query_fraction=0.1, seed=0)
    return labels[db]


def parts(labels, scheme, n, repeats, seed=5):
    return [
        partition_indices(
            labels,
            scheme=scheme,
            num_partitions=n,
            partition_id=i,
            seed=seed,
            alpha=0.5,
            repeats=repeats,
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("scheme", ["iid", "dirichlet"])
def test_each_split_covers_the_database_once_and_split_0_is_the_plain_split(
    db_labels, scheme
):
    n, k = 10, 5
    got = parts(db_labels, scheme, n, k)
    per = n // k
    for group in range(k):
        joined = np.concatenate(got[group * per : (group + 1) * per])
        np.testing.assert_array_equal(np.sort(joined), np.arange(len(db_labels)))
    # every row is held by exactly k clients
    counts = np.bincount(np.concatenate(got), minlength=len(db_labels))
    assert set(counts.tolist()) == {k}
    # split 0 is the split of N / k clients without repeats; the others differ
    plain = parts(db_labels, scheme, per, 1)
    for a, b in zip(got[:per], plain, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(got[0], got[per])
    assert len({repeat_seed(5, g) for g in range(k)}) == k


def test_repeats_must_divide_the_clients(db_labels):
    with pytest.raises(ValueError, match=r"`partition-repeats`=3 does not divide"):
        validate_partitioning(db_labels, scheme="iid", num_partitions=10, repeats=3)
    with pytest.raises(ValueError, match=r"`partition-repeats` must be an integer"):
        parts(db_labels, "iid", 4, 0)


def test_only_the_first_split_publishes():
    assert [publishes_codes(p, 10, 5) for p in range(10)] == [True] * 2 + [False] * 8
    assert all(publishes_codes(p, 7, 1) for p in range(7))


@pytest.mark.parametrize(
    "extra, match",
    [
        ({"strategy": "pfmh"}, "PFMH splits each partition.*ranks each client's own"),
        ({"strategy": "dpcode"}, "DPcode trains nothing and counts every held row"),
        ({"dp-sgd.enabled": True, "strategy": "fedhap"}, "epsilon would understate"),
        ({"partition-repeats": 0}, "partition-repeats"),
    ],
)
def test_settings_refuse_what_duplicated_rows_would_break(extra, match):
    config = {"partition-repeats": 2, **extra}
    with pytest.raises(ConfigError, match=match):
        RunSettings.from_config(config)


def test_clients_of_the_repeated_splits_publish_no_codes():
    # 4 clients, 2 splits: clients 0 and 1 publish the whole database once
    config = {"model": "mlp", "code-length": 16, "seed": 3, "partition-repeats": 2}
    published = [query_encode_at(config, pid) for pid in range(4)]
    assert [len(labels) for _, labels in published[2:]] == [0, 0]
    assert all(codes.shape == (0, 16) for codes, _ in published[2:])
    plain = {**config, "partition-repeats": 1}
    whole = [query_encode_at(plain, pid, num_partitions=2) for pid in range(2)]
    for (codes, labels), (want_codes, want_labels) in zip(
        published[:2], whole, strict=True
    ):
        np.testing.assert_array_equal(codes, want_codes)
        np.testing.assert_array_equal(labels, want_labels)
    assert sum(len(labels) for _, labels in published) == 1617  # digits database

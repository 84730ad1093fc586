"""Split the database across clients with Flower Datasets partitioners.

Only the database labels are partitioned: a Hugging Face ``datasets.Dataset`` with a
``label`` column (the primary label, see :func:`hashdata.primary_labels`) and an
``idx`` column (row index into the database) is handed to a ``flwr_datasets``
partitioner, and the ``idx`` column of each partition is returned.

Schemes (config key ``partitioning``):

``iid``
    ``IidPartitioner`` on a seeded permutation of the rows. (``IidPartitioner``
    itself takes contiguous shards without shuffling, so the rows are shuffled
    first with ``np.random.default_rng(seed)``.) Sizes differ by at most one.
``dirichlet``
    ``DirichletPartitioner(alpha=dirichlet-alpha)``: per-class proportions drawn
    from ``Dir(alpha)``; smaller alpha means more skew. Every client gets at least
    :func:`dirichlet_min_partition_size` samples (``min(10, n // (2 *
    num_partitions))``, at least 1); flwr-datasets redraws up to 10 times and we
    raise a ``ValueError`` naming ``dirichlet-alpha`` if it still fails.
``pathological``
    ``PathologicalPartitioner(num_classes_per_partition=classes-per-client,
    class_assignment_mode="first-deterministic")`` - FedHAP's non-IID setting: each
    client holds exactly ``k`` classes. Client ``i`` always gets class
    ``i % num_classes`` plus ``k - 1`` further classes drawn with the seed; the
    samples of a class are split evenly among the clients that hold it. With at
    least as many clients as classes every class is used. Otherwise the classes no
    client drew are **left unassigned**: their samples stay in the database (they
    are still retrieved and evaluated) but no client holds them, and a
    ``UserWarning`` reports how many samples that is.

Repeated splits (config key ``partition-repeats``, ``k >= 1``, default 1): the
clients form ``k`` groups of ``num_partitions / k``; group ``r`` splits the whole
database with the scheme above, seeded by :func:`repeat_seed` (group 0 with the run
seed itself, so it is the plain split over ``num_partitions / k`` clients). Client
``p`` holds part ``p mod (num_partitions / k)`` of group ``p div (num_partitions /
k)``, so each row is held by ``k`` clients: the DPHE paper's Fig. 4 left panel ("users
own the fixed number of partially duplicated images", N = 5k). Only group 0 covers
the database once; :func:`publishes_codes` says which clients publish database codes
for retrieval, so the retrieval database holds each row once.

For ``iid`` and ``dirichlet`` the partitions are disjoint and cover the database;
for ``pathological`` they are disjoint and cover all but the unassigned classes.
Every client computes only its own partition, but the result is a deterministic
function of ``(labels, scheme, num_partitions, seed, alpha / classes_per_client)``
so the partitions of separately computed clients are consistent. The full
assignment is cached per process (``functools.lru_cache``), so asking for each of
the ``num_partitions`` partitions does the work once.
"""

from __future__ import annotations

import functools
import logging
import math
import warnings
from numbers import Integral, Real

import numpy as np

from hashdata.protocol import primary_labels, validate_seed

PARTITION_SCHEMES: tuple[str, ...] = ("iid", "dirichlet", "pathological")

#: Upper bound on the minimum number of samples per client for ``dirichlet``.
DIRICHLET_MIN_PARTITION_SIZE = 10

_log = logging.getLogger(__name__)


def dirichlet_min_partition_size(num_samples: int, num_partitions: int) -> int:
    """Return the minimum samples per client asked of the Dirichlet partitioner.

    ``min(DIRICHLET_MIN_PARTITION_SIZE, num_samples // (2 * num_partitions))``, but
    at least 1, so that tiny databases stay partitionable while no client is ever
    empty.

    Parameters
    ----------
    num_samples : int
        Number of database samples.
    num_partitions : int
        Number of clients.

    Returns
    -------
    int
        The ``min_partition_size`` passed to ``DirichletPartitioner``.

    """
    return max(
        1, min(DIRICHLET_MIN_PARTITION_SIZE, num_samples // (2 * num_partitions))
    )


def _check_scheme(scheme: str) -> str:
    key = str(scheme).strip().lower()
    if key not in PARTITION_SCHEMES:
        raise ValueError(
            f"Unknown `partitioning` scheme {scheme!r}; accepted: "
            f"{', '.join(PARTITION_SCHEMES)}"
        )
    return key


def _check_alpha(alpha: float) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, Real):
        raise ValueError(f"`dirichlet-alpha` must be a number > 0, got {alpha!r}")
    value = float(alpha)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"`dirichlet-alpha` must be a finite number > 0 (smaller = more skewed "
            f"client class mixes), got {alpha!r}"
        )
    return value


def validate_partitioning(
    labels: np.ndarray,
    *,
    scheme: str,
    num_partitions: int,
    alpha: float = 0.5,
    classes_per_client: int = 3,
    repeats: int = 1,
) -> None:
    """Check a partitioning configuration before any work is done.

    ``alpha`` is checked only for ``dirichlet`` and ``classes_per_client`` only for
    ``pathological`` (the keys the scheme actually reads).

    Parameters
    ----------
    labels : numpy.ndarray
        Database labels: ``(n,)`` int class indices or ``(n, C)`` multi-hot.
    scheme : str
        One of ``PARTITION_SCHEMES`` (config key ``partitioning``).
    num_partitions : int
        Number of clients, ``1 <= num_partitions <= n``.
    alpha : float, optional
        Dirichlet concentration (config key ``dirichlet-alpha``), ``> 0``.
    classes_per_client : int, optional
        Classes per client for ``pathological`` (config key
        ``classes-per-client``), ``1 <= k <=`` number of distinct primary labels in
        the database.
    repeats : int, optional
        ``partition-repeats``: how many times the database is split (see the
        module docstring); it must divide ``num_partitions``. Default 1.

    Raises
    ------
    ValueError
        The message names the offending config key and the accepted values.

    """
    key = _check_scheme(scheme)
    primary = primary_labels(labels)
    n = len(primary)
    if (
        isinstance(num_partitions, bool)
        or not isinstance(num_partitions, Integral)
        or num_partitions < 1
    ):
        raise ValueError(
            "the number of clients (`num-partitions`, i.e. the federation's "
            f"num-supernodes) must be an integer >= 1, got {num_partitions!r}"
        )
    num_partitions = split_size(num_partitions, repeats)
    if num_partitions > n:
        raise ValueError(
            f"more clients than samples: {num_partitions} clients (`num-partitions`, "
            f"i.e. the federation's num-supernodes) but the database has only {n} "
            f"samples; use at most {n} clients, more data, or a smaller "
            "`query-fraction`"
        )
    if key == "dirichlet":
        _check_alpha(alpha)
    if key == "pathological":
        validate_classes_per_client(classes_per_client, len(np.unique(primary)))


def validate_classes_per_client(classes_per_client: int, present: int) -> None:
    """Check ``classes-per-client`` against the ``present`` distinct classes.

    Raises
    ------
    ValueError
        Naming the key, the value and the accepted range.
    """
    if (
        isinstance(classes_per_client, bool)
        or not isinstance(classes_per_client, Integral)
        or not 1 <= classes_per_client <= present
    ):
        raise ValueError(
            f"`classes-per-client` must be an integer in 1..{present} (the "
            f"database has {present} distinct classes), got "
            f"{classes_per_client!r}"
        )


def partition_indices(
    labels: np.ndarray,
    *,
    scheme: str,
    num_partitions: int,
    partition_id: int,
    seed: int,
    alpha: float = 0.5,
    classes_per_client: int = 3,
    repeats: int = 1,
) -> np.ndarray:
    """Return the database rows held by client ``partition_id``.

    Parameters
    ----------
    labels : numpy.ndarray
        Database labels: ``(n,)`` int class indices or ``(n, C)`` multi-hot
        (multi-hot rows are partitioned by their lowest positive class).
    scheme : str
        One of ``PARTITION_SCHEMES`` (config key ``partitioning``).
    num_partitions : int
        Number of clients.
    partition_id : int
        This client's id, ``0 <= partition_id < num_partitions``.
    seed : int
        Non-negative seed; same inputs and seed -> same partitions in every process.
    alpha : float, optional
        ``dirichlet-alpha`` (``dirichlet`` only). Default 0.5.
    classes_per_client : int, optional
        ``classes-per-client`` (``pathological`` only). Default 3.
    repeats : int, optional
        ``partition-repeats``: the database is split this many times, each split
        over ``num_partitions / repeats`` clients (module docstring). Default 1.

    Returns
    -------
    numpy.ndarray
        ``(m,)`` int64 sorted indices into ``labels``; ``m >= 1``.

    Raises
    ------
    ValueError
        Invalid configuration (see :func:`validate_partitioning`), a bad
        ``partition-id``, or a Dirichlet / pathological draw that cannot be
        satisfied for this data.

    """
    validate_partitioning(
        labels,
        scheme=scheme,
        num_partitions=num_partitions,
        alpha=alpha,
        classes_per_client=classes_per_client,
        repeats=repeats,
    )
    seed = validate_seed(seed)
    if (
        isinstance(partition_id, bool)
        or not isinstance(partition_id, Integral)
        or not 0 <= partition_id < num_partitions
    ):
        raise ValueError(
            f"`partition-id` must be an integer in 0..{num_partitions - 1}, got "
            f"{partition_id!r}"
        )
    key = _check_scheme(scheme)
    per_split = split_size(num_partitions, repeats)
    group, part = divmod(int(partition_id), per_split)
    primary = np.ascontiguousarray(primary_labels(labels), dtype=np.int64)
    parts = _all_partitions(
        primary.tobytes(),
        key,
        per_split,
        repeat_seed(seed, group),
        _check_alpha(alpha) if key == "dirichlet" else None,
        int(classes_per_client) if key == "pathological" else None,
    )
    return parts[part].copy()


def split_size(num_partitions: int, repeats: int) -> int:
    """Clients per split with ``partition-repeats = repeats``; checks that it divides.

    Raises
    ------
    ValueError
        ``repeats`` is not an integer >= 1 or does not divide ``num_partitions``.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, Integral) or repeats < 1:
        raise ValueError(
            f"`partition-repeats` must be an integer >= 1 (1 = one split of the "
            f"database), got {repeats!r}"
        )
    if num_partitions % repeats:
        raise ValueError(
            f"`partition-repeats`={repeats} does not divide the {num_partitions} "
            "clients (the federation's num-supernodes): each of the repeated splits "
            f"needs the same number of clients; use a multiple of {repeats} clients "
            "or another `partition-repeats`"
        )
    return int(num_partitions) // int(repeats)


def repeat_seed(seed: int, group: int) -> int:
    """Seed of split ``group`` of a repeated partitioning (group 0: ``seed`` itself).

    The other groups draw a non-negative 31-bit seed from ``SeedSequence([seed,
    group])``: deterministic, so every client computes the same splits.
    """
    if group == 0:
        return int(seed)
    state = np.random.SeedSequence([int(seed), int(group)]).generate_state(1)
    return int(state[0] >> 1)


def publishes_codes(partition_id: int, num_partitions: int, repeats: int) -> bool:
    """Whether client ``partition_id`` publishes database codes for retrieval.

    With ``partition-repeats = k > 1`` only the clients of split 0 do (together they
    hold every row once); with ``k = 1`` every client does.
    """
    return int(partition_id) < split_size(num_partitions, repeats)


@functools.lru_cache(maxsize=16)
def _all_partitions(
    label_bytes: bytes,
    scheme: str,
    num_partitions: int,
    seed: int,
    alpha: float | None,
    classes_per_client: int | None,
) -> tuple[np.ndarray, ...]:
    """Compute every partition once; arguments are hashable (labels as bytes).

    ``label_bytes`` is the int64 primary-label array as bytes, so the cache key is
    the label content itself. Returned arrays are read-only; callers copy them.
    """
    import datasets
    from flwr_datasets.partitioner import (
        DirichletPartitioner,
        IidPartitioner,
        PathologicalPartitioner,
    )

    primary = np.frombuffer(label_bytes, dtype=np.int64)
    n = len(primary)
    if scheme == "iid":
        order = np.random.default_rng(seed).permutation(n)
        partitioner = IidPartitioner(num_partitions=num_partitions)
    elif scheme == "dirichlet":
        assert alpha is not None
        order = np.arange(n)
        partitioner = DirichletPartitioner(
            num_partitions=num_partitions,
            partition_by="label",
            alpha=alpha,
            min_partition_size=dirichlet_min_partition_size(n, num_partitions),
            self_balancing=False,
            shuffle=False,
            seed=seed,
        )
    else:
        assert classes_per_client is not None
        order = np.arange(n)
        partitioner = PathologicalPartitioner(
            num_partitions=num_partitions,
            partition_by="label",
            num_classes_per_partition=classes_per_client,
            class_assignment_mode="first-deterministic",
            shuffle=False,
            seed=seed,
        )
    partitioner.dataset = datasets.Dataset.from_dict(
        {"label": primary[order].tolist(), "idx": order.tolist()}
    )

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            parts = [
                np.sort(np.asarray(partitioner.load_partition(pid)["idx"], np.int64))
                for pid in range(num_partitions)
            ]
        except ValueError as err:
            raise _explain_failure(
                err, scheme, n, num_partitions, alpha, classes_per_client
            ) from err
    if caught:
        _log.debug(
            "flwr-datasets %s partitioner warnings: %s",
            scheme,
            "; ".join(str(w.message) for w in caught),
        )

    for pid, part in enumerate(parts):
        if part.size == 0:  # defensive: the partitioners above never return empty
            raise ValueError(
                f"client {pid} received no samples with `partitioning`={scheme!r}; "
                "use fewer clients or more data"
            )
        part.setflags(write=False)
    if scheme == "pathological":
        assigned = sum(p.size for p in parts)
        if assigned < n:
            used = np.unique(primary[np.concatenate(parts)])
            unused = sorted(set(np.unique(primary).tolist()) - set(used.tolist()))
            warnings.warn(
                f"pathological partitioning: classes {unused} were drawn by no "
                f"client; their {n - assigned} of {n} database samples are not held "
                f"by any client (they stay in the database). Use at least as many "
                f"clients as classes, or a larger `classes-per-client`, to use all",
                UserWarning,
                stacklevel=4,
            )
    return tuple(parts)


def _explain_failure(
    err: ValueError,
    scheme: str,
    n: int,
    num_partitions: int,
    alpha: float | None,
    classes_per_client: int | None,
) -> ValueError:
    """Turn a flwr-datasets partitioner error into one naming the config keys."""
    if scheme == "dirichlet":
        return ValueError(
            f"Dirichlet partitioning with `dirichlet-alpha`={alpha} could not give "
            f"each of the {num_partitions} clients at least "
            f"{dirichlet_min_partition_size(n, num_partitions)} of the {n} database "
            "samples after 11 draws; increase `dirichlet-alpha`, use fewer clients, "
            f"or use more data ({err})"
        )
    if scheme == "pathological":
        return ValueError(
            f"pathological partitioning with `classes-per-client`={classes_per_client}"
            f" over {num_partitions} clients is impossible for this data: {err} Use "
            "fewer "
            "clients or a smaller `classes-per-client`"
        )
    return ValueError(f"`partitioning`={scheme!r} failed: {err}")

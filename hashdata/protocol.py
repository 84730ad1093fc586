"""Retrieval protocol: primary labels and the query / database split.

The whole dataset is split once, with a fixed seed, into a *query* set (held by the
server, used to evaluate retrieval) and a *database* (partitioned across clients,
encoded into hash codes); a data file that carries its own fixed split (a ``split``
array, :func:`fixed_split_mask`) is split that way instead. The seeded split is
stratified by the *primary label*:

* single-label data: the label itself;
* multi-label data (multi-hot rows): the **lowest positive class index** of the row
  (``argmax`` of the row, i.e. the first 1). The same rule drives the non-IID
  partitioning (:mod:`hashdata.partition`), so a multi-label sample is treated as a
  member of its lowest-indexed class wherever one class per sample is needed.
"""

from __future__ import annotations

import math
import warnings
from numbers import Integral, Real

import numpy as np

#: Accepted range of ``query-fraction``: ``0 < query_fraction <= MAX_QUERY_FRACTION``.
MAX_QUERY_FRACTION = 0.5


def primary_labels(labels: np.ndarray) -> np.ndarray:
    """Return one class index per sample.

    Parameters
    ----------
    labels : numpy.ndarray
        ``(n,)`` non-negative integer class indices (single-label) or ``(n, C)``
        multi-hot ``{0, 1}`` rows (multi-label).

    Returns
    -------
    numpy.ndarray
        ``(n,)`` int64. Single-label: the label itself. Multi-label: the lowest
        positive class index of each row.

    Raises
    ------
    ValueError
        Negative or non-integer single labels, a multi-hot row without a positive
        class, or labels that are neither 1-D nor 2-D.

    """
    arr = np.asarray(labels)
    if arr.ndim == 1:
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(
                f"single-label `labels` must be integers, got dtype {arr.dtype}"
            )
        out = arr.astype(np.int64)
        if out.size and out.min() < 0:
            raise ValueError(f"`labels` must be non-negative, found {int(out.min())}")
        return out
    if arr.ndim == 2:
        positive = arr > 0
        has_positive = positive.any(axis=1)
        if not has_positive.all():
            missing = int(np.count_nonzero(~has_positive))
            raise ValueError(
                f"{missing} of {len(arr)} multi-hot label rows have no positive "
                "class; drop those samples"
            )
        return np.argmax(positive, axis=1).astype(np.int64)
    raise ValueError(
        f"`labels` must be (n,) class indices or (n, C) multi-hot, got shape "
        f"{arr.shape}"
    )


def validate_query_fraction(query_fraction: float) -> float:
    """Check ``query-fraction`` and return it as a float.

    Parameters
    ----------
    query_fraction : float
        Share of samples drawn as queries; must be in ``(0, 0.5]``.

    Returns
    -------
    float
        The validated fraction.

    Raises
    ------
    ValueError
        When the value is not a real number in ``(0, 0.5]``.

    """
    if isinstance(query_fraction, bool) or not isinstance(query_fraction, Real):
        raise ValueError(
            f"`query-fraction` must be a number in (0, {MAX_QUERY_FRACTION}], got "
            f"{query_fraction!r}"
        )
    value = float(query_fraction)
    if not (math.isfinite(value) and 0.0 < value <= MAX_QUERY_FRACTION):
        raise ValueError(
            f"`query-fraction` must be in (0, {MAX_QUERY_FRACTION}] (share of the "
            f"samples used as retrieval queries), got {query_fraction!r}"
        )
    return value


def validate_seed(seed: int) -> int:
    """Check that ``seed`` is a non-negative integer and return it as ``int``.

    Raises
    ------
    ValueError
        When the value is not a non-negative integer.

    """
    if isinstance(seed, bool) or not isinstance(seed, Integral) or seed < 0:
        raise ValueError(f"`seed` must be a non-negative integer, got {seed!r}")
    return int(seed)


def _strata(primary: np.ndarray) -> np.ndarray:
    """Merge classes too small to stratify (< 2 samples) into valid strata.

    Classes with a single sample are pooled into one "rare" stratum; if that pool
    itself has one sample, it joins the largest class.
    """
    strata = primary.copy()
    classes, counts = np.unique(primary, return_counts=True)
    rare = classes[counts < 2]
    if rare.size:
        rare_mask = np.isin(primary, rare)
        if rare_mask.sum() >= 2:
            strata[rare_mask] = -1
        else:
            strata[rare_mask] = classes[np.argmax(counts)]
    return strata


def split_query_database(
    labels: np.ndarray, *, query_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Split sample indices into a query set and a database, stratified by class.

    Stratification uses :func:`primary_labels` and scikit-learn's
    ``train_test_split`` (``test_size=query_fraction``, so the query set has
    ``ceil(query_fraction * n)`` samples). Classes with a single sample cannot be
    stratified and are pooled (see the module docstring); if there are more classes
    than query (or database) samples, the split falls back to a plain random split
    and warns.

    Parameters
    ----------
    labels : numpy.ndarray
        ``(n,)`` int class indices or ``(n, C)`` multi-hot rows, ``n >= 2``.
    query_fraction : float
        Share of samples used as queries, in ``(0, 0.5]`` (config key
        ``query-fraction``).
    seed : int
        Non-negative seed; the same seed always gives the same split.

    Returns
    -------
    query_idx : numpy.ndarray
        ``(n_query,)`` int64, sorted.
    database_idx : numpy.ndarray
        ``(n - n_query,)`` int64, sorted; disjoint from ``query_idx``, together they
        cover ``0..n-1``.

    Raises
    ------
    ValueError
        Bad ``query-fraction`` or ``seed``, fewer than 2 samples, or malformed
        labels.

    """
    fraction = validate_query_fraction(query_fraction)
    seed = validate_seed(seed)
    primary = primary_labels(labels)
    n = len(primary)
    if n < 2:
        raise ValueError(
            f"need at least 2 samples to split queries from the database, got {n}"
        )
    n_query = math.ceil(fraction * n)
    strata = _strata(primary)
    n_strata = len(np.unique(strata))
    stratify: np.ndarray | None = strata
    if n_query < n_strata or n - n_query < n_strata:
        warnings.warn(
            f"cannot stratify {n} samples of {n_strata} classes with "
            f"`query-fraction`={fraction} ({n_query} queries); using a plain random "
            "split",
            UserWarning,
            stacklevel=2,
        )
        stratify = None
    # imported here: scikit-learn costs a second or two to import, and a deployed
    # ClientApp (a fresh process per message) with a file's own split never needs it
    from sklearn.model_selection import train_test_split

    database_idx, query_idx = train_test_split(
        np.arange(n, dtype=np.int64),
        test_size=n_query,
        random_state=seed,
        shuffle=True,
        stratify=stratify,
    )
    return np.sort(query_idx).astype(np.int64), np.sort(database_idx).astype(np.int64)


#: ``.npz`` array that fixes the query / database split (one value per sample).
SPLIT_ARRAY = "split"
#: Values of a string ``split`` array (case and surrounding blanks ignored).
SPLIT_QUERY_NAMES: tuple[str, ...] = ("query", "test")
SPLIT_DATABASE_NAMES: tuple[str, ...] = ("database", "db", "retrieval", "train")


def fixed_split_mask(values: np.ndarray, *, n: int, where: str) -> np.ndarray:
    """Read a fixed query / database split: one value per sample.

    Accepted encodings (the shared data files store int8 0/1):

    * integers 0 / 1 (or bool): **1 = query**, 0 = database; this is the
      "test / train" convention of the original splits (test = query, train =
      database);
    * strings: ``"query"`` or ``"test"`` = query; ``"database"``, ``"db"``,
      ``"retrieval"`` or ``"train"`` = database (case-insensitive).

    A three-way split (queries / training subset / retrieval set, as some papers
    use) is not expressible: the database is what the clients train on and encode.

    Parameters
    ----------
    values : numpy.ndarray
        The ``split`` array as stored.
    n : int
        Number of samples (rows of ``labels``).
    where : str
        Names the source in errors, e.g. ``"`data-path` 'wiki.npz'"``.

    Returns
    -------
    numpy.ndarray
        ``(n,)`` bool, True for query rows.

    Raises
    ------
    ValueError
        Not 1-D of length ``n``, a value outside the encodings above, no query row
        or no database row. The message names ``where`` and the array.

    """
    arr = np.asarray(values)
    field = f"{where}: array `{SPLIT_ARRAY}`"
    if arr.ndim != 1 or len(arr) != n:
        raise ValueError(
            f"{field} must have one value per sample, shape ({n},), got shape "
            f"{arr.shape}"
        )
    if arr.dtype == np.bool_:
        mask = arr.copy()
    elif np.issubdtype(arr.dtype, np.integer):
        bad = ~np.isin(arr, (0, 1))
        if bad.any():
            odd = np.unique(arr[bad])[:5].tolist()
            raise ValueError(
                f"{field} must hold 1 (query) or 0 (database) per sample, found "
                f"e.g. {odd} in {int(np.count_nonzero(bad))} rows"
            )
        mask = arr == 1
    elif arr.dtype.kind in "US":
        text = arr.astype(str)
        names = np.char.lower(np.char.strip(text))
        is_query = np.isin(names, SPLIT_QUERY_NAMES)
        bad = ~(is_query | np.isin(names, SPLIT_DATABASE_NAMES))
        if bad.any():
            odd = np.unique(text[bad])[:5].tolist()
            raise ValueError(
                f"{field} has unknown values, e.g. {odd} in "
                f"{int(np.count_nonzero(bad))} rows; accepted: "
                f"{', '.join(SPLIT_QUERY_NAMES)} (query) or "
                f"{', '.join(SPLIT_DATABASE_NAMES)} (database)"
            )
        mask = is_query
    else:
        raise ValueError(
            f"{field} must be integers 0/1 (1 = query), bool or strings "
            f"('query' / 'database'), got dtype {arr.dtype}"
        )
    n_query = int(np.count_nonzero(mask))
    if n_query == 0:
        raise ValueError(f"{field} marks no sample as a query; it needs at least one")
    if n_query == n:
        raise ValueError(
            f"{field} marks every sample as a query; the database needs at least one"
        )
    return np.ascontiguousarray(mask, dtype=np.bool_)

"""Tuning on a validation split drawn from the training side, and grids that grow.

Every tuning step of the experiment drivers scores on a **validation split**, never
on the queries a table reports:

* :func:`validation_rows` draws the validation queries from a data file's
  *database* rows (stratified by primary label, seeded); the file's own queries are
  left out entirely;
* :func:`write_validation_file` writes that split as an ``.npz`` beside the runs
  (the same arrays, only the database rows, a ``split`` array marking the
  validation queries), so a tuning run is an ordinary run with another
  ``data-path``; its record (:class:`ValidationSplit`) goes into ``summary.json``.

A chosen value on the edge of its grid says the grid was too narrow:
:func:`grid_extension` returns the next value beyond that edge (geometric for
learning rates, arithmetic for epochs), which the driver runs before choosing.

A driver keeps one :class:`Grid` (learning rates times local epochs) per tuned
method; :func:`tuned_setting` picks the best setting from its tuning rows and
:func:`extend_grids` grows every grid whose choice sits on an edge.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hashdata import SPLIT_ARRAY, fixed_split_mask, split_query_database

#: Share of the database rows drawn as validation queries (the file's query share
#: in MIRFlickr-25K tags: 2,000 of 20,015).
VALIDATION_FRACTION = 0.1
#: Local epochs of a tuning row that records none (tuned before epochs were): the
#: run config's default (pyproject.toml).
DEFAULT_EPOCHS = 3


@dataclass(frozen=True)
class ValidationSplit:
    """Where a tuning run's validation split comes from (``summary.json``).

    Attributes
    ----------
    source : str
        File name of the data file the split was drawn from.
    source_sha256 : str
        Its SHA-256.
    seed : int
        Seed of the stratified draw.
    fraction : float
        Share of the file's database rows drawn as validation queries.
    queries : int
        Validation queries.
    database : int
        Validation database rows (the file's other database rows).
    left_out : int
        The file's own query rows, in no tuning run.
    query_rows_sha256 : str
        SHA-256 of the validation query rows (row numbers of the source file,
        int64, sorted): the same split gives the same digest.
    path : str
        The written validation file (not committed; rebuilt from the above).
    """

    source: str
    source_sha256: str
    seed: int
    fraction: float
    queries: int
    database: int
    left_out: int
    query_rows_sha256: str
    path: str

    def text(self) -> str:
        """One phrase for a table's protocol line."""
        return (
            f"validation split: {self.queries} queries drawn (stratified, seed "
            f"{self.seed}) from the {self.queries + self.database} database rows of "
            f"{self.source}, ranked against the other {self.database}; the file's "
            f"{self.left_out} queries are in no tuning run"
        )

    def to_dict(self) -> dict[str, object]:
        """JSON-able form."""
        return asdict(self)


def tuning_flags_error(
    *,
    tune_seed: int,
    seeds: Sequence[int],
    val_fraction: float | None,
    max_extensions: int,
) -> str | None:
    """Return the one-line error for tuning flags that do not fit, or ``None``.

    The flags every tuned table shares: ``--max-extensions`` (>= 0),
    ``--val-fraction`` (in (0, 1); ``None`` for a table without the flag) and
    ``--tune-seed`` (none of ``--seeds``: a table seed must never be the one its
    rates were chosen on).
    """
    if max_extensions < 0:
        return f"--max-extensions {max_extensions}: accepted is >= 0"
    if val_fraction is not None and not 0 < val_fraction < 1:
        return f"--val-fraction {val_fraction}: accepted is in (0, 1)"
    if tune_seed in seeds:
        listed = ",".join(str(s) for s in seeds)
        return f"--tune-seed {tune_seed} is one of --seeds {listed}"
    return None


def validation_rows(
    labels: np.ndarray, query_mask: np.ndarray, *, fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Return the validation queries and database, rows of the file's database.

    Parameters
    ----------
    labels : np.ndarray
        (n,) class ids or (n, C) multi-hot of every row of the file.
    query_mask : np.ndarray
        (n,) bool, True for the file's own (reported) queries.
    fraction : float
        Share of the database rows to draw as validation queries.
    seed : int
        Seed of the stratified draw (:func:`hashdata.split_query_database`).

    Returns
    -------
    queries, database : np.ndarray
        Sorted int64 row numbers; disjoint, together the file's database rows.
    """
    database = np.flatnonzero(~np.asarray(query_mask, dtype=bool))
    q, db = split_query_database(labels[database], query_fraction=fraction, seed=seed)
    return np.sort(database[q]), np.sort(database[db])


def write_validation_file(
    data_path: Path, folder: Path, *, fraction: float = VALIDATION_FRACTION, seed: int
) -> ValidationSplit:
    """Write the validation split of ``data_path`` into ``folder``; return its record.

    The written ``.npz`` holds every array of the source restricted to its
    database rows (per-row arrays; others copied), with ``split`` = 1 on the
    validation queries. An existing file with the same record is reused.

    Raises
    ------
    ValueError
        The source is not an ``.npz`` with a fixed ``split`` array: with a seeded
        split the queries differ per seed, and no one validation split keeps clear
        of all of them.
    """
    data_path = Path(data_path)
    if data_path.suffix != ".npz":
        raise ValueError(
            f"--data-path {data_path}: a validation split is drawn from an .npz file "
            "with a fixed `split` array; accepted: such a file (docs/data.md)"
        )
    digest = _sha256(data_path)
    with np.load(data_path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    if SPLIT_ARRAY not in arrays or "labels" not in arrays:
        raise ValueError(
            f"--data-path {data_path}: no `{SPLIT_ARRAY}` array (or no `labels`), so "
            "its queries change with the seed and no validation split avoids them; "
            "accepted: an .npz with a fixed split (docs/data.md)"
        )
    labels = arrays["labels"]
    n = len(labels)
    mask = fixed_split_mask(arrays[SPLIT_ARRAY], n=n, where=f"`data-path` {data_path}")
    queries, database = validation_rows(labels, mask, fraction=fraction, seed=seed)
    keep = np.flatnonzero(~mask)
    rows_digest = hashlib.sha256(queries.astype(np.int64).tobytes()).hexdigest()
    out = Path(folder) / f"{data_path.stem}-validation-s{seed}-f{fraction:g}.npz"
    record = ValidationSplit(
        source=data_path.name,
        source_sha256=digest,
        seed=int(seed),
        fraction=float(fraction),
        queries=len(queries),
        database=len(database),
        left_out=int(mask.sum()),
        query_rows_sha256=rows_digest,
        path=str(out.resolve()),
    )
    stamp = out.with_suffix(".json")
    if (
        out.exists()
        and stamp.exists()
        and json.loads(stamp.read_text()) == (record.to_dict())
    ):
        return record
    out.parent.mkdir(parents=True, exist_ok=True)
    written = {
        k: (v[keep] if v.ndim >= 1 and len(v) == n else v)
        for k, v in arrays.items()
        if k != SPLIT_ARRAY
    }
    written[SPLIT_ARRAY] = np.isin(keep, queries).astype(np.int8)
    tmp = out.with_name(out.stem + ".tmp.npz")
    np.savez(tmp, **written)
    tmp.replace(out)
    stamp.write_text(json.dumps(record.to_dict(), indent=2) + "\n")
    return record


def grid_extension(
    grid: Sequence[float], best: float, *, geometric: bool, lowest: float = 0.0
) -> float | None:
    """Return the next value beyond the grid edge where ``best`` sits, or ``None``.

    Parameters
    ----------
    grid : sequence of float
        The values tried (any order, at least two for an extension).
    best : float
        The chosen value (one of ``grid``).
    geometric : bool
        Step by the ratio of the edge value to its neighbour (learning rates), or
        by their difference (epochs).
    lowest : float
        Values at or below this are never proposed (e.g. 0 epochs).

    Returns
    -------
    float or None
        ``None`` when ``best`` is interior, the grid has fewer than two values, or
        the step would cross ``lowest``.
    """
    values = sorted(set(float(v) for v in grid))
    if len(values) < 2 or float(best) not in values:
        return None
    if float(best) == values[-1]:
        edge, near = values[-1], values[-2]
    elif float(best) == values[0]:
        edge, near = values[0], values[1]
    else:
        return None
    # 3 significant digits: 2e-3 * 4 is 0.008, not 0.008000000000000002
    nxt = float(f"{edge * edge / near:.3g}") if geometric else edge + (edge - near)
    return nxt if nxt > lowest else None


@dataclass
class Grid:
    """One method's tuning grid: learning rates times local epochs.

    ``extended`` lists the values added because the choice sat on an edge,
    as ``(axis, value)`` with axis ``"lr"`` or ``"epochs"``; ``rounds`` counts
    the extension rounds that added them (one round may add a rate and an epoch
    count).
    """

    lrs: list[float]
    epochs: list[int] = field(default_factory=lambda: [DEFAULT_EPOCHS])
    extended: list[tuple[str, float]] = field(default_factory=list)
    rounds: int = 0

    def settings(self) -> list[tuple[float, int]]:
        """Every ``(lr, epochs)`` of the grid."""
        return [(lr, e) for e in self.epochs for lr in self.lrs]


def as_grid(grid: Grid | Sequence[float]) -> Grid:
    """Return a :class:`Grid`; a plain sequence is rates at the default epochs."""
    return grid if isinstance(grid, Grid) else Grid(list(grid))


def choice_on_edge(grid: Grid, lr: float, epochs: int) -> bool:
    """Whether a chosen ``(lr, epochs)`` sits on an edge of ``grid``.

    A learning rate at either end of two or more rates is on an edge; so is an
    epoch count at either end of two or more counts, except one epoch at the
    bottom, below which there is no count to try.
    """
    lr_edge = len(grid.lrs) > 1 and lr in (min(grid.lrs), max(grid.lrs))
    low, high = min(grid.epochs), max(grid.epochs)
    epochs_edge = len(grid.epochs) > 1 and (epochs == high or epochs == low > 1)
    return lr_edge or epochs_edge


def tuning_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the tuning runs among ``rows`` (``kind`` "tune")."""
    return [r for r in rows if r.get("kind") == "tune"]


def row_epochs(row: Mapping[str, Any]) -> int:
    """Return a row's local epochs (``DEFAULT_EPOCHS`` where it records none)."""
    return int(row.get("local_epochs", DEFAULT_EPOCHS))


def tuned_setting(
    rows: list[dict[str, Any]],
    method: str,
    grid: Grid | Sequence[float],
    *,
    metric: str = "map_all",
) -> tuple[float, int] | None:
    """``method``'s tuned ``(lr, local epochs)`` over ``grid`` (``None`` until all run).

    Only tuning rows at a setting of the grid count; the best validation score
    (the rows' ``metric``, mAP@ALL by default) wins, ties to the smallest learning
    rate, then the fewest epochs.
    """
    grid = as_grid(grid)
    want = set(grid.settings())
    mine = {
        (r["learning_rate"], row_epochs(r)): r[metric]
        for r in tuning_rows(rows)
        if r["method"] == method and (r["learning_rate"], row_epochs(r)) in want
    }
    if set(mine) != want:
        return None
    return max(sorted(mine), key=lambda s: mine[s])


def extend_grids(
    rows: list[dict[str, Any]],
    grids: Mapping[str, Grid],
    *,
    metric: str = "map_all",
    max_rounds: int | None = None,
) -> list[tuple[str, str, float, int]]:
    """Grow every grid whose choice sits on an edge; return the new tuning jobs.

    A learning rate on an edge adds the next rate beyond it
    (:func:`grid_extension`, geometric) at every epoch count of
    the grid; epochs on an edge add the next count (arithmetic, >= 1) at every
    rate. ``grids`` is changed in place (``Grid.extended`` records the additions,
    ``Grid.rounds`` counts the rounds); a grid already grown ``max_rounds`` times
    is left as it is.
    """
    jobs: list[tuple[str, str, float, int]] = []
    for method, grid in grids.items():
        if max_rounds is not None and grid.rounds >= max_rounds:
            continue
        chosen = tuned_setting(rows, method, grid, metric=metric)
        if chosen is None:
            continue
        lr, epochs = chosen
        new_lr = grid_extension(grid.lrs, lr, geometric=True)
        new_epochs = grid_extension(grid.epochs, epochs, geometric=False, lowest=0)
        grown = len(jobs)
        if new_lr is not None and new_lr not in grid.lrs:
            grid.lrs.append(new_lr)
            grid.extended.append(("lr", new_lr))
            jobs += [("tune", method, new_lr, e) for e in grid.epochs]
        if new_epochs is not None and int(new_epochs) not in grid.epochs:
            grid.epochs.append(int(new_epochs))
            grid.extended.append(("epochs", int(new_epochs)))
            jobs += [("tune", method, r, int(new_epochs)) for r in grid.lrs]
        if len(jobs) > grown:
            grid.rounds += 1
    return jobs


def replay_extensions(
    rows: list[dict[str, Any]],
    grids: Mapping[str, Grid],
    *,
    max_extensions: int,
    metric: str = "map_all",
) -> None:
    """Grow each grid as an earlier sweep grew it, from the tuning runs in ``rows``.

    A resumed sweep starts from the grids as given, so until its extension rounds
    come round again every choice is made over the unextended grids, and the tables
    it writes meanwhile leave out the runs at an extended rate. Each grid's rounds
    of :func:`extend_grids` are replayed here while every tuning run a round asks
    for is already among ``rows``; the first round that asks for a run not done
    yet is undone, and the sweep runs it as usual.
    """
    done = {(r["method"], r["learning_rate"], row_epochs(r)) for r in tuning_rows(rows)}
    for method, grid in grids.items():
        while True:
            before = (list(grid.lrs), list(grid.epochs), list(grid.extended))
            more = extend_grids(
                rows, {method: grid}, metric=metric, max_rounds=max_extensions
            )
            if not more:
                break
            if any((m, lr, e) not in done for _, m, lr, e in more):
                grid.lrs[:], grid.epochs[:], grid.extended[:] = before
                grid.rounds -= 1
                break


def run_tuning(
    jobs: Sequence[tuple[Any, ...]],
    known: list[dict[str, Any]],
    grids: Mapping[str, Grid],
    *,
    max_extensions: int,
    resume: bool,
    metric: str = "map_all",
    **sweep: Any,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Run the tuning ``jobs``, then grow every grid whose choice sits on an edge.

    ``sweep`` is :func:`experiments.lib.runner.run_sweep`'s other arguments (its
    ``run`` appends each row to ``known``, which :func:`extend_grids` reads). Each
    grid grows at most ``max_extensions`` times, each round resumed into the same
    rows file; ``metric`` is the rows' validation score. A resumed sweep first
    replays the extensions its rows already hold (:func:`replay_extensions`), so
    that its tables use the grown grids from the first row on. Returns the rows and
    the failed runs' names, as ``run_sweep``.
    """
    from experiments.lib.runner import run_sweep

    if resume:
        replay_extensions(known, grids, max_extensions=max_extensions, metric=metric)
    rows, failed = run_sweep(jobs, resume=resume, **sweep)
    while True:  # each grid grows at most max_extensions times
        more = extend_grids(known, grids, metric=metric, max_rounds=max_extensions)
        if not more:
            break
        names = [sweep["name"](job) for job in more]
        print(f"grid edge: {len(more)} more tuning runs {names}")
        rows, more_failed = run_sweep(more, resume=True, **sweep)
        failed += more_failed
    return rows, failed


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()

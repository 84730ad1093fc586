"""The PFMH main table's learning rates, tuned on a validation split.

``python -m experiments.pfmh tables --only main --lr-grid 1e-4,3e-4,1e-3`` tunes
one rate per **cell** (a method at one code length), the same way for every
method, the centralized ceiling included (:mod:`experiments.lib.tuning`):

* the validation split is drawn from the data file's database rows (seeded,
  stratified); the file's own queries are in no tuning run;
* a tuning run is the cell's ordinary run on that split with ``--tune-seed``,
  scored on the global protocol (the validation queries against each client's
  database, averaged over clients: :data:`SCORE`), the table's primary protocol;
* the best validation score is the cell's rate; a choice on an end of the grid
  extends the grid (``--max-extensions``);
* the table then runs every cell at its rate for each ``--seeds`` seed.

This module holds the pieces the driver (:mod:`experiments.tables.pfmh_sweep`)
wires: the cell names, the rows the table keeps, the tuning table and the
summary's record of grids and choices.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from experiments.lib.tables import MISSING, table_head, table_row
from experiments.lib.tuning import Grid, ValidationSplit, choice_on_edge, tuned_setting
from hashing.pfmh.metric_names import SQ_CLIENT_DB_MAP_ALL

#: The validation score of a tuning run: the global protocol's mAP@ALL, mean over
#: clients (``server_queries_client_db_map_all`` of a row).
SCORE = SQ_CLIENT_DB_MAP_ALL
#: ``kind`` of a tuning row (``experiments.lib.tuning.tuning_rows``).
TUNE = "tune"
#: ``kind`` of a main-table row of a tuned sweep (untuned rows have no ``kind``).
TABLE = "table"


def cell_name(method: str, bits: int) -> str:
    """Return the name of one tuned cell: a method at one code length."""
    return f"{method}, {bits} bits"


def chosen_rates(
    rows: list[dict[str, Any]], grids: Mapping[str, Grid]
) -> dict[str, float | None]:
    """Return each cell's chosen rate (``None`` while its grid has not all run)."""
    out: dict[str, float | None] = {}
    for cell, grid in grids.items():
        setting = tuned_setting(rows, cell, grid, metric=SCORE)
        out[cell] = None if setting is None else setting[0]
    return out


def table_rows(
    rows: list[dict[str, Any]], chosen: Mapping[str, float | None]
) -> list[dict[str, Any]]:
    """Return the rows the tables aggregate: no tuning run, each cell at its rate.

    In a tuned table (``chosen`` not empty) only the main-table rows a tuned sweep
    ran (``kind`` "table") at their cell's chosen rate count. A row run at a rate
    that is no longer its cell's choice (the grid grew on a resumed sweep) stays
    in ``rows.jsonl`` and out of the tables, as does an untuned row.
    """
    keep = []
    for r in rows:
        if r.get("kind") == TUNE:
            continue
        if r["table"] == "main" and chosen:
            rate = chosen.get(cell_name(r["method"], r["bits"]))
            if r.get("kind") != TABLE or rate is None or r["learning_rate"] != rate:
                continue
        keep.append(r)
    return keep


def tuning_text(
    split: ValidationSplit, lr_grid: list[float], tune_seed: int, extensions: int
) -> str:
    """Return the protocol sentence on how the rates were chosen."""
    start = ", ".join(f"{v:g}" for v in sorted(lr_grid))
    return (
        f"Learning rates: tuned per method and code length, the same way for every "
        f"method and the ceiling, over {start} (a choice on an end of the grid "
        f"extends it, at most {extensions} times; the grids as run are in "
        f"summary.json), scored on the global protocol of a {split.text()}, tune "
        f"seed {tune_seed}; each cell's chosen rate is in the tuning table."
    )


def tuning_table(
    rows: list[dict[str, Any]],
    grids: Mapping[str, Grid],
    chosen: Mapping[str, float | None],
) -> list[str]:
    """Markdown: each cell's validation score per rate tried, the chosen one bold."""
    rates = sorted({lr for g in grids.values() for lr in g.lrs})
    score = {
        (r["method"], r["learning_rate"]): r.get(SCORE)
        for r in rows
        if r.get("kind") == TUNE
    }
    lines = [
        "**Tuning** (validation split, global protocol, mAP@ALL %, one run per rate; "
        'bold: the chosen rate; - : not tried; "edge": the choice is still on an '
        "end of its grid after the last extension)",
        "",
        *table_head("method", *(f"lr {lr:g}" for lr in rates), "chosen"),
    ]
    for cell, grid in grids.items():
        cells = []
        for lr in rates:
            v = score.get((cell, lr)) if lr in grid.lrs else None
            text = MISSING if v is None else f"{100 * v:.2f}"
            cells.append(f"**{text}**" if lr == chosen.get(cell) else text)
        pick = chosen.get(cell)
        text = MISSING if pick is None else f"{pick:g}"
        if pick is not None and choice_on_edge(grid, pick, grid.epochs[0]):
            text += " (edge)"
        lines.append(table_row(cell, *cells, text))
    return [*lines, ""]


def tuning_record(
    split: ValidationSplit,
    grids: Mapping[str, Grid],
    chosen: Mapping[str, float | None],
    tune_seed: int,
) -> dict[str, Any]:
    """Return the ``summary.json`` record: the split, each cell's grid and choice."""
    return {
        "split": split.to_dict(),
        "tune_seed": tune_seed,
        "score": f"{SCORE} on the validation split",
        "grids": {
            cell: {
                "learning_rates": grid.lrs,
                "added": [v for axis, v in grid.extended if axis == "lr"],
                "chosen_learning_rate": chosen.get(cell),
            }
            for cell, grid in grids.items()
        },
    }

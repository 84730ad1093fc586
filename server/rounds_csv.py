"""``rounds.csv`` and ``clients.csv``: the per-round records as spreadsheets.

``rounds.jsonl`` stays the full record; the CSVs are derived from it and rewritten
whole after every round (a few hundred rows at most), so a row that gains a column
(an evaluation round) never misaligns the file. ``rounds.csv``: one row per round,
nested values flattened (``precision_at_k.10``, ``dphe.encrypt_s``), columns in
first-seen order. ``clients.csv``: the per-client train metrics, long format
(``round, partition_id, metric, value``).
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

CLIENTS_KEY = "clients"


def flatten(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings to dotted keys; lists as ``;``-joined text; no per-client."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if not prefix and key == CLIENTS_KEY:
            continue  # clients.csv
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        elif isinstance(value, list | tuple):
            out[name] = ";".join(str(v) for v in value)
        else:
            out[name] = value
    return out


def _write(path: Path, header: list[str], rows: list[dict[str, Any]]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=header, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in rows)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(buf.getvalue())
    os.replace(tmp, path)


def write_rounds_csv(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write ``rounds.csv`` from the rows of ``rounds.jsonl`` (atomically)."""
    flat = [flatten(r) for r in rows]
    header: list[str] = []
    for r in flat:
        header += [k for k in r if k not in header]
    _write(Path(path), header, flat)
    return Path(path)


def write_clients_csv(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write ``clients.csv``: ``round, partition_id, metric, value`` rows."""
    long = [
        {"round": r["round"], "partition_id": pid, "metric": name, "value": value}
        for r in rows
        for pid, metrics in (r.get(CLIENTS_KEY) or {}).items()
        for name, value in metrics.items()
    ]
    _write(Path(path), ["round", "partition_id", "metric", "value"], long)
    return Path(path)

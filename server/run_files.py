"""What a run's results folder is called and holds, for readers of it.

``<results-dir>/<run-id>`` once finished, ``<run-id>.incomplete`` while running or
after a crash (:class:`server.results.RunResults` writes both); ``rounds.jsonl``
holds one JSON record per round.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

INCOMPLETE = ".incomplete"
#: The per-round fields that are wall time: the only ones a seed does not fix.
TIMING_FIELDS = frozenset({"train_round_s", "elapsed_s", "eval_seconds"})


def read_rounds(run_dir: str | Path) -> list[dict[str, Any]]:
    """Read the per-round records of a run directory."""
    path = Path(run_dir) / "rounds.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def without_timing(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-round records without their wall-time fields.

    What two runs of one seed must agree on: every metric, loss and count.
    """
    return [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in rows]

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


def read_rounds(run_dir: str | Path) -> list[dict[str, Any]]:
    """Read the per-round records of a run directory."""
    path = Path(run_dir) / "rounds.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line]

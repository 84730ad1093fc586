"""The name of a run's results directory."""

from __future__ import annotations

from datetime import UTC, datetime

from settings.run_settings import RunSettings


def default_run_id(settings: RunSettings) -> str:
    """``<run-name or strategy-dataset-bits-partitioning-seed>-<UTC time>``."""
    name = settings.run_name or (
        f"{settings.strategy}-{settings.dataset}-{settings.code_length}b-"
        f"{settings.partitioning}-s{settings.seed}"
    )
    return f"{name}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S-%f')}"

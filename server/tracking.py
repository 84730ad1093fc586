"""Opt-in experiment tracking: ``logger = "tensorboard"`` (run config).

Each round's scalars (``rounds.jsonl``'s numbers: loss, mAP, bytes, times; the
per-client train metrics under ``clients/<partition>/``) are written as TensorBoard
event files into the run directory (``tensorboard/``), through
``torch.utils.tensorboard`` (it needs the ``tensorboard`` package: the ``tracking``
extra). ``tensorboard --logdir results/`` then shows every run. ``"none"`` (the
default) writes nothing more than the result files.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from settings.run_settings import ConfigError, RunSettings

SUBDIR = "tensorboard"


class RoundLogger(Protocol):
    """Receives every row appended to ``rounds.jsonl``."""

    def log_round(self, row: Mapping[str, Any]) -> None:
        """Record one round's row."""
        ...

    def close(self) -> None:
        """Flush and release files."""
        ...


def require_logger(name: str) -> None:
    """Raise :class:`ConfigError` (one line) if ``name`` cannot run here."""
    if name == "tensorboard" and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError(
            f"{RunSettings.key('logger')}='tensorboard' needs the tensorboard package, "
            "which is not installed; accepted: 'none', or install it "
            "(pip install -e '.[tracking]')"
        )


def scalars(row: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """``(tag, value)`` of every finite number in ``row``, nested keys joined by /."""
    for key, value in row.items():
        tag = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from scalars(value, f"{tag}/")
        elif isinstance(value, bool):
            continue
        elif isinstance(value, int | float) and math.isfinite(value):
            yield tag, float(value)


class TensorBoardLogger:
    """TensorBoard event files of one run, in ``<run dir>/tensorboard/``."""

    def __init__(self, run_dir: str | Path) -> None:
        require_logger("tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / SUBDIR))

    def log_round(self, row: Mapping[str, Any]) -> None:
        """One scalar per number of the row, at step = round."""
        step = int(row["round"])
        for tag, value in scalars(row):
            if tag != "round":
                self.writer.add_scalar(tag, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        """Close the event file."""
        self.writer.close()


def open_logger(name: str, run_dir: str | Path) -> RoundLogger | None:
    """Open the logger the run config names; ``None`` for ``"none"``."""
    if name == "none":
        return None
    if name == "tensorboard":
        return TensorBoardLogger(run_dir)
    raise ConfigError(
        f"{RunSettings.key('logger')}={name!r}: accepted: none, tensorboard"
    )

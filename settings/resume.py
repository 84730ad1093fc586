"""Which run directory ``resume`` names, and whether it holds a checkpoint.

Shared by the ServerApp (:mod:`server.checkpoint`, which reads the checkpoint) and
the pre-flight check (``python -m settings check``), so a wrong ``resume`` is the
same one line in both, and the check needs neither flwr nor torch.
"""

from __future__ import annotations

from pathlib import Path

from server.run_files import INCOMPLETE
from settings.run_settings import ConfigError, RunSettings

#: the commit point a run writes after each completed round before its last
CHECKPOINT = "checkpoint.json"

_RESUME = RunSettings.key("resume")


def resume_dir(settings: RunSettings) -> Path:
    """Return the ``.incomplete`` directory ``resume`` names (suffix optional).

    Raises
    ------
    ConfigError
        If it does not exist or if the run finished (a method that cannot be
        resumed is refused when the settings are read).
    """
    path = Path(settings.resume)
    if not path.name.endswith(INCOMPLETE):
        if path.is_dir() and (path / "summary.json").is_file():
            raise ConfigError(
                f"{_RESUME}={settings.resume!r}: that run finished; nothing to resume"
            )
        path = path.with_name(path.name + INCOMPLETE)
    if not path.is_dir():
        raise ConfigError(
            f"{_RESUME}={settings.resume!r}: no such run directory ({path})"
        )
    return path


def checkpoint_file(run_dir: Path) -> Path:
    """``run_dir``'s ``checkpoint.json``.

    Raises
    ------
    ConfigError
        When there is none (the run stopped before its first checkpoint).
    """
    path = run_dir / CHECKPOINT
    if not path.is_file():
        raise ConfigError(
            f"{_RESUME}={str(run_dir)!r}: no {CHECKPOINT} there (a run writes one "
            "after each completed round before its last)"
        )
    return path

"""``--set key=value`` parsing on top of the pyproject defaults."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from settings.check import app_config_defaults, file_problems
from settings.run_settings import RENAMED, ConfigError, RunSettings
from settings.schema import unknown_key

ROOT = Path(__file__).resolve().parents[2]


def app_defaults() -> dict[str, Any]:
    """``[tool.flwr.app.config]`` of this project (flattened)."""
    return app_config_defaults(ROOT)


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """Parse ``key=value`` strings with TOML value syntax (bare words as strings)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {pair!r}: expected key=value")
        try:
            out[key] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = raw
    defaults = app_defaults()
    unknown = sorted(set(out) - set(defaults))
    if unknown:
        raise ConfigError(unknown_key(unknown[0], list(defaults), RENAMED))
    return out


def resolved_settings(overrides: dict[str, Any]) -> RunSettings:
    """Validate pyproject defaults updated by ``overrides``; check named files.

    Raises
    ------
    ConfigError
        A bad value (naming the key, the value and what is accepted) or a file the
        config names that does not exist or is not readable.
    """
    settings = RunSettings.from_config({**app_defaults(), **overrides})
    problems = file_problems(settings)
    if problems:
        raise ConfigError(problems[0])
    return settings


def checked_overrides(
    pairs: list[str], preset: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``preset`` updated by the ``--set`` ``pairs``, validated before any run.

    Raises
    ------
    ConfigError
        As :func:`parse_overrides` and :func:`resolved_settings`.
    """
    overrides = {**(preset or {}), **parse_overrides(pairs)}
    resolved_settings(overrides)
    return overrides

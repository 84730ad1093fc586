"""``--set key=value`` parsing on top of the pyproject defaults."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from settings.run_settings import RunSettings

ROOT = Path(__file__).resolve().parents[1]


def app_defaults() -> dict[str, Any]:
    """``[tool.flwr.app.config]`` of this project."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return dict(data["tool"]["flwr"]["app"]["config"])


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """Parse ``key=value`` strings with TOML value syntax (bare words as strings)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {pair!r}: expected key=value")
        try:
            out[key] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = raw
    unknown = sorted(set(out) - set(app_defaults()))
    if unknown:
        raise ValueError(f"unknown config key(s) {unknown}; see pyproject.toml")
    return out


def resolved_settings(overrides: dict[str, Any]) -> RunSettings:
    """Validate pyproject defaults updated by ``overrides``."""
    return RunSettings.from_config({**app_defaults(), **overrides})

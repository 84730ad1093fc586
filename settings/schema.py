"""Config sections: frozen dataclasses whose fields *are* the run-config keys.

A section's keys are derived from its field names (``scale_bits`` of the section
``dphe`` is the key ``dphe.scale-bits``; Flower flattens the nested TOML table
``[tool.flwr.app.config.dphe]`` to those dotted keys). Each field carries its
documentation and its simple range checks in its metadata (:func:`option`); a
section's :meth:`Section.check` adds the checks that involve other keys. The
configuration reference (``docs/configuration.md``) is generated from the same
fields, so keys, defaults, checks and documentation are written once.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

S = TypeVar("S", bound="Section")


class ConfigError(ValueError):
    """A run-config value is invalid; the message names the key."""


def option(
    default: Any,
    doc: str,
    *,
    choices: Sequence[str] | None = None,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    note: str = "",
) -> Any:
    """Declare a config field: its default, one-line doc and range checks.

    ``choices`` are the accepted strings; ``low``/``high`` bound a number
    (inclusive unless ``low_open``/``high_open``); every number must be finite.
    ``note`` is appended to a range error (why the bound is there).
    """
    meta = {
        "doc": doc,
        "choices": tuple(choices) if choices is not None else None,
        "low": low,
        "high": high,
        "low_open": low_open,
        "high_open": high_open,
        "note": note,
    }
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True)
class Section:
    """Base of every config section (and of the top-level run settings)."""

    NAME: ClassVar[str] = ""
    """Table name: keys are ``<NAME>.<field>``; empty for top-level keys."""
    TITLE: ClassVar[str] = ""
    """Heading of the section in the configuration reference."""

    @classmethod
    def key(cls, name: str) -> str:
        """Return the config key of field ``name`` (a typo: ``AttributeError``)."""
        if name not in {f.name for f in cls.option_fields()}:
            raise AttributeError(f"{cls.__name__} has no config field {name!r}")
        dashed = name.rstrip("_").replace("_", "-")  # lambda_ -> "lambda"
        return f"{cls.NAME}.{dashed}" if cls.NAME else dashed

    @classmethod
    def option_fields(cls) -> tuple[dataclasses.Field[Any], ...]:
        """Return the fields that are config keys (not nested sections)."""
        return tuple(f for f in dataclasses.fields(cls) if "doc" in f.metadata)

    @classmethod
    def keys(cls) -> dict[str, dataclasses.Field[Any]]:
        """``{config key: field}`` of this section."""
        return {cls.key(f.name): f for f in cls.option_fields()}

    @classmethod
    def from_keys(cls: type[S], values: Mapping[str, Any]) -> S:
        """Build from ``{config key: raw value}`` (keys of this section only).

        Types are coerced and ranges checked; an unknown key raises ``KeyError``.
        """
        fields = cls.keys()
        kwargs = {
            fields[key].name: _coerce(key, raw, type(fields[key].default))
            for key, raw in values.items()
        }
        section = cls(**kwargs)
        section.check_ranges()
        return section

    def check_ranges(self) -> None:
        """Raise :class:`ConfigError` for the first value outside its field's range."""
        for f in self.option_fields():
            value = getattr(self, f.name)
            meta = f.metadata
            key = self.key(f.name)
            if meta["choices"] is not None and value not in meta["choices"]:
                raise ConfigError(
                    f"{key}={value!r}: accepted are {', '.join(meta['choices'])}"
                )
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if not math.isfinite(value):
                raise ConfigError(f"{key}={value}: must be a finite number")
            low, high = meta["low"], meta["high"]
            too_low = low is not None and (
                value <= low if meta["low_open"] else value < low
            )
            too_high = high is not None and (
                value >= high if meta["high_open"] else value > high
            )
            if too_low or too_high:
                note = f" ({meta['note']})" if meta["note"] else ""
                raise ConfigError(f"{key}={value}: {_must(meta, value)}{note}")

    def check(self, run: Any) -> None:
        """Check what involves other keys of the run (``run``: the RunSettings)."""


def range_text(f: dataclasses.Field[Any]) -> str:
    """Describe what a field accepts, for the configuration reference."""
    meta = f.metadata
    if meta["choices"] is not None:
        return ", ".join(f"`{c}`" for c in meta["choices"])
    if meta["low"] is None and meta["high"] is None:
        return ""
    return _range_text(meta)


def _must(meta: Mapping[str, Any], value: float) -> str:
    if meta["high"] is None and meta["low"] == 1 and isinstance(value, int):
        return "must be a positive integer"
    if meta["high"] is None:
        return f"must be {_range_text(meta)}"
    return f"accepted is {_range_text(meta)}"


def _range_text(meta: Mapping[str, Any]) -> str:
    low, high = meta["low"], meta["high"]
    if high is None:
        return f"{'>' if meta['low_open'] else '>='} {low:g}"
    if low is None:
        return f"{'<' if meta['high_open'] else '<='} {high:g}"
    left = "(" if meta["low_open"] else "["
    right = ")" if meta["high_open"] else "]"
    return f"{left}{low:g}, {high:g}{right}"


def unknown_key(key: str, known: Sequence[str], renamed: Mapping[str, str]) -> str:
    """Return the error for an unknown key, with the closest valid key suggested."""
    if key in renamed:
        return f"config key {key!r} was renamed: use {renamed[key]!r}"
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return (
        f"unknown config key {key!r}{hint} (accepted keys: docs/configuration.md, "
        "or `python -m settings check`)"
    )


def _coerce(key: str, raw: Any, kind: type) -> Any:
    """Convert a config value to the field's type, or raise naming the key."""
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("true", "false"):
            return raw.lower() == "true"
        raise ConfigError(f"{key}={raw!r}: must be true or false")
    if kind is int:
        if isinstance(raw, bool) or not (
            isinstance(raw, int) or (isinstance(raw, float) and raw.is_integer())
        ):
            raise ConfigError(f"{key}={raw!r}: must be an integer")
        return int(raw)
    if kind is float:
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise ConfigError(f"{key}={raw!r}: must be a number")
        return float(raw)
    if kind is str:
        if not isinstance(raw, str):
            raise ConfigError(f"{key}={raw!r}: must be a string")
        return raw
    raise TypeError(f"unsupported settings field type {kind} for {key}")

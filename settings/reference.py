"""The configuration reference page (``docs/configuration.md``), generated.

Built from the config dataclasses themselves, so the documented keys, defaults and
descriptions can never drift from what the code accepts.
"""

from __future__ import annotations

import dataclasses

from settings.run_settings import RunSettings


def config_reference_markdown() -> str:
    """Markdown tables of every run-config key: key, default, type, description."""
    lines = ["| key | default | type |", "|---|---|---|"]
    for f in dataclasses.fields(RunSettings):
        key = f.name.replace("_", "-")
        lines.append(f"| `{key}` | `{f.default!r}` | {type(f.default).__name__} |")
    return "\n".join(lines) + "\n"

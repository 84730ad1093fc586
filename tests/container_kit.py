"""What the container test builds without an engine: run-config files and app variants.

``tests/e2e/test_containers.py`` (``make test-containers``) submits run configs and
app folders to a real deployment; both are built here so that
``tests/integration/test_container_kit.py`` (part of ``make test``) checks them with
Flower's own parser and builder, no docker needed:

* :func:`run_config_file`: a preset plus overrides, written as a run-config file
  that ``flwr run --run-config`` parses back to the same flat keys (a nested table
  such as ``dphe`` was once written in JSON syntax, which is not TOML);
* :func:`app_from_fab`: an app folder rebuilt from a FAB, plus one file, so that it
  has a hash of its own (the SuperLink keeps one signature set per FAB hash). A FAB
  holds only the app's files, so ``fab-exclude`` patterns that excluded files it
  does not hold (``docs/**``...) match nothing there, and Flower 1.42 refuses such a
  pattern ("did not match any files"): those patterns are dropped; they excluded
  nothing the FAB has, so the rebuilt FAB holds the same files.
"""

from __future__ import annotations

import json
import tomllib
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomli_w

from settings.check import parse_run_config

SCALARS = (str, int, float, bool)


def write_run_config(path: Path, config: Mapping[str, Any]) -> Path:
    """Write flat ``key = value`` lines (dotted keys stay dotted); return ``path``.

    Raises
    ------
    ValueError
        For a value that is not a TOML scalar (str, int, float, bool), naming the key:
        a run config's values are scalars once flattened.
    """
    lines = []
    for key, value in config.items():
        if not isinstance(value, SCALARS):
            raise ValueError(
                f"run-config key {key!r}: {type(value).__name__} value {value!r}; "
                "accepted: str, int, float or bool (flatten nested tables first)"
            )
        lines.append(f"{key} = {json.dumps(value)}\n")  # JSON scalars are TOML
    path.write_text("".join(lines))
    return path


def run_config_file(base: Path, out: Path, **extra: Any) -> Path:
    """``base`` (a run-config ``.toml``), flattened as Flower does, plus ``extra``."""
    config = parse_run_config([str(base)])
    config.update(extra)
    return write_run_config(out, config)


def app_from_fab(fab: Path, folder: Path, marker: str) -> Path:
    """Extract ``fab``'s app into ``folder``, add ``VARIANT.md``; Flower can build it.

    ``fab-exclude`` patterns that match no file of the folder are dropped from its
    ``pyproject.toml`` (the key too, if none is left): see the module docstring.
    """
    from flwr.cli.utils import build_pathspec  # noqa: PLC0415

    with zipfile.ZipFile(fab) as bundle:
        for member in bundle.namelist():
            if not member.startswith(".info/"):
                bundle.extract(member, folder)
    (folder / "VARIANT.md").write_text(f"{marker}\n")
    files = [
        p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()
    ]
    pyproject = folder / "pyproject.toml"
    config = tomllib.loads(pyproject.read_text())
    app = config["tool"]["flwr"]["app"]
    patterns = app.get("fab-exclude")
    if patterns is not None:
        kept = [
            p for p in patterns if any(build_pathspec([p]).match_file(f) for f in files)
        ]
        if kept:
            app["fab-exclude"] = kept
        else:
            del app["fab-exclude"]
        pyproject.write_text(tomli_w.dumps(config))
    return folder

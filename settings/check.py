r"""Check a run config before anything starts: ``python -m settings check``.

Resolves the run config exactly as ``flwr run`` does (the defaults of
``[tool.flwr.app.config]`` in ``pyproject.toml`` fused with ``--run-config``
overrides, with Flower's syntax), validates it with the code the ServerApp
uses (:meth:`settings.run_settings.RunSettings.from_config`), and checks that every
file the config names exists and is readable on this machine, then reads the data
the run will read (:func:`check_data`: a ``.npz`` against the loader's rules,
``classes-per-client`` against the class count, the ``resume`` checkpoint). On
success it prints the resolved config and exits 0; on the first problem it prints
one line naming the key, the value and what is accepted, and exits 2.

``make run`` and the experiment runners call this first, so a bad value costs well
under two seconds, not a SuperLink and a Ray start.

Usage::

    python -m settings check [--run-config "code-length=64 strategy='fedhap'"]
    python -m settings check --run-config conf/fedhap.toml --quiet
    python -m settings check --run-config conf/fedhap.toml --run-config "rounds=5" \
        --write-overrides .flwr/run-config.toml   # then flwr run . --run-config FILE
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tomllib
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from settings.resume import checkpoint_file, resume_dir
from settings.run_settings import PATH_DATASETS, RENAMED, ConfigError, RunSettings
from settings.schema import unknown_key

EXIT_BAD_CONFIG = 2
PROJECT_DIR = Path(__file__).resolve().parent.parent

#: Flower 1.42's ``key=value`` pattern (``flwr.common.config.parse_config_args``)
_PAIR = re.compile(r"(\S+?)=(\'[^\']*\'|\"[^\"]*\"|\S+)")



def parse_run_config(run_config: Sequence[str] | None) -> dict[str, Any]:
    """Parse ``--run-config`` values as ``flwr run`` does, without importing flwr.

    Same syntax as Flower 1.42's ``flwr.common.config.parse_config_args`` (a
    ``.toml`` file, or ``key=value`` pairs whose values are TOML scalars; nested
    tables flattened with dots); ``tests/integration/test_fail_fast.py`` checks that
    both parse alike. One addition: a preset takes overrides. Flower refuses a
    ``.toml`` beside ``key=value`` pairs; here a ``.toml`` may come first and the
    pairs after it override its keys (``--run-config conf/fedhap.toml --run-config
    "rounds=5"``); :func:`write_overrides` turns the result into the one file
    ``flwr run`` accepts. Importing flwr alone takes longer than the whole check may.

    Raises
    ------
    ConfigError
        A missing TOML file, a string that does not parse, or a ``.toml`` after
        ``key=value`` pairs.
    """
    if not run_config:
        return {}
    items = [item for item in run_config if item]
    overrides: dict[str, Any] = {}
    if items and items[0].endswith(".toml"):  # the preset, then its overrides
        overrides = _read_toml(items.pop(0))
    for line in items:
        if line.endswith(".toml"):
            raise ConfigError(
                f"--run-config {line!r}: a .toml must come first (a preset), "
                "followed by key=value overrides; accepted: one .toml at most"
            )
        text = "\n".join(f"{k} = {v}" for k, v in _PAIR.findall(line))
        try:
            overrides.update(_flatten(tomllib.loads(text)))
        except tomllib.TOMLDecodeError:
            raise ConfigError(
                f"--run-config {line!r}: not in the format key1=123 key2=false "
                "key3='string' (values: bool, int, float or quoted string)"
            ) from None
    return overrides


def _read_toml(name: str) -> dict[str, Any]:
    path = Path(name).expanduser()
    try:
        return _flatten(tomllib.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise ConfigError(f"--run-config file {name!r} does not exist") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"--run-config file {name!r}: {exc}") from None


def overrides_toml(overrides: Mapping[str, Any]) -> str:
    """Flat TOML (``fedhap.mu = 0.05``) that ``flwr run --run-config FILE`` reads.

    Flower flattens a file's tables exactly as :func:`parse_run_config` does, so
    the file carries the same overrides. Strings are written as JSON strings,
    which TOML reads as basic strings.
    """
    lines = []
    for key, value in overrides.items():
        if isinstance(value, bool):
            shown = "true" if value else "false"
        elif isinstance(value, int | float):
            shown = repr(value)
        else:
            shown = json.dumps(str(value))
        lines.append(f"{key} = {shown}")
    return "\n".join(lines) + "\n"


def write_overrides(run_config: Sequence[str] | None, path: str | Path) -> Path:
    """Write the parsed overrides (a preset and its overrides) as one ``.toml``."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(overrides_toml(parse_run_config(run_config)), encoding="utf-8")
    return out


def app_config_defaults(project_dir: Path = PROJECT_DIR) -> dict[str, Any]:
    """``[tool.flwr.app.config]`` of ``pyproject.toml``, flattened."""
    data = tomllib.loads((project_dir / "pyproject.toml").read_text(encoding="utf-8"))
    return _flatten(data["tool"]["flwr"]["app"].get("config", {}))


def resolve_run_config(
    run_config: Sequence[str] | None, project_dir: Path = PROJECT_DIR
) -> dict[str, Any]:
    """Defaults from ``pyproject.toml`` fused with ``--run-config`` overrides.

    Parameters
    ----------
    run_config : sequence of str, optional
        What ``flwr run --run-config`` takes: ``"key=value ..."`` strings or one
        ``.toml`` file.
    project_dir : Path
        Folder holding ``pyproject.toml``.

    Raises
    ------
    ConfigError
        An override that does not parse, or an unknown key (Flower refuses those).
    """
    defaults = app_config_defaults(project_dir)
    overrides = parse_run_config(run_config)
    unknown = [key for key in overrides if key not in defaults]
    if unknown:  # with the closest valid key, or the new name of a renamed one
        raise ConfigError(unknown_key(unknown[0], list(defaults), RENAMED))
    return {**defaults, **overrides}


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, Mapping):
            out.update(_flatten(value, name))
        else:
            out[name] = value
    return out


def file_problems(settings: RunSettings) -> list[str]:
    """Files the config names that are missing or unreadable here, one line each."""
    problems: list[str] = []

    def need(key: str, value: str, *, kind: str, what: str) -> None:
        path = Path(value).expanduser()
        exists = path.is_dir() if kind == "dir" else path.is_file()
        if not exists and path.exists():  # a folder for a file, or the reverse
            given, wanted = ("a file", "a folder") if kind == "dir" else (
                "a folder", "a file"
            )
            problems.append(f"{key}={value!r} is {given}; accepted: {wanted} ({what})")
        elif not exists:
            from hashdata.recipes import missing_file_hint

            hint = missing_file_hint(value) if kind == "file" else ""
            problems.append(f"{key}={value!r}: {what} does not exist{hint}")
        elif not os.access(path, os.R_OK):
            problems.append(f"{key}={value!r}: {what} is not readable")

    if (
        settings.dataset in PATH_DATASETS
        and settings.data_path
        and not (settings.dataset == "cifar10" and settings.download)
    ):
        kind = "dir" if settings.dataset == "cifar10" else "file"
        what = "the CIFAR-10 folder" if kind == "dir" else "the data file"
        need(RunSettings.key("data_path"), settings.data_path, kind=kind, what=what)
    if settings.model_weights:
        key = RunSettings.key("model_weights")
        need(key, settings.model_weights, kind="file", what="the file")
    dphe = settings.dphe
    if settings.secure_aggregation != "none" and dphe.key_dir:
        need(dphe.key("key_dir"), dphe.key_dir, kind="dir", what="the key folder")
    if dphe.keyholder_ca:
        need(dphe.key("keyholder_ca"), dphe.keyholder_ca, kind="file", what="the CA")
    dpcode = settings.dpcode
    if dpcode.reads_codes_model(settings):
        key = dpcode.key("codes_model")
        need(key, dpcode.codes_model, kind="file", what="the trained model")
    return problems


def check_data(settings: RunSettings, num_clients: int | None = None) -> None:
    """Read what the run will read, as far as a check can without loading it.

    * ``dataset = "npz"``: the file against every rule of the loader
      (:func:`hashdata.loaders.check_npz`, the loader's own code): an archive of
      numeric ``.npy`` arrays, ``labels`` with one row per sample, no non-finite
      feature, a valid ``split`` / image shape. Headers first; only the labels,
      the split and float feature arrays (streamed) are read.
    * ``partitioning = "pathological"``: ``classes-per-client`` against the
      dataset's class count, where it is known before the split (the partitioner's
      own rule, :func:`hashdata.partition.validate_classes_per_client`; the run
      checks it again on the database rows).
    * ``num_clients`` given (``make run`` passes ``NUM_CLIENTS``) and an ``npz``
      file: the partitioning of the database rows (the file's split or the seeded
      one, :func:`hashdata.split.protocol_indices`) over that many clients, with
      the rules the ServerApp applies (:func:`hashdata.validate_partitioning`:
      more clients than rows, ``partition-repeats``, ``dirichlet-alpha``,
      ``classes-per-client`` on the database's classes). Whether a Dirichlet draw
      succeeds is still only known when the partitioner runs.
    * ``resume``: the run directory exists, is unfinished and holds a checkpoint
      (:mod:`settings.resume`, the ServerApp's code).

    Raises
    ------
    ConfigError
        The first problem, one line naming the value and what is accepted.
    """
    from hashdata.loaders import FIXED_NUM_CLASSES, check_npz
    from hashdata.partition import validate_classes_per_client, validate_partitioning
    from hashdata.split import protocol_indices

    classes = FIXED_NUM_CLASSES.get(settings.dataset)
    try:
        if settings.dataset == "npz" and settings.data_path:  # else a node's
            summary = check_npz(
                settings.data_path,
                image_shape=settings.image_hwc(),
                modalities=settings.modality_names(),
            )
            classes = summary.primary_classes
            if num_clients is not None:
                with warnings.catch_warnings():  # the run says it, once, in its log
                    warnings.simplefilter("ignore")
                    _, database = protocol_indices(
                        summary.labels,
                        summary.fixed_split,
                        query_fraction=settings.query_fraction,
                        seed=settings.seed,
                    )
                validate_partitioning(
                    summary.labels[database],
                    scheme=settings.partitioning,
                    num_partitions=num_clients,
                    alpha=settings.dirichlet_alpha,
                    classes_per_client=settings.classes_per_client,
                    repeats=settings.partition_repeats,
                )
        if settings.partitioning == "pathological" and classes is not None:
            validate_classes_per_client(settings.classes_per_client, classes)
    except (ValueError, FileNotFoundError) as exc:
        raise ConfigError(str(exc)) from None
    if settings.resume:
        checkpoint_file(resume_dir(settings))


def check(
    run_config: Sequence[str] | None, num_clients: int | None = None
) -> tuple[RunSettings, dict[str, Any]]:
    """Resolve, validate, check files and data; raise :class:`ConfigError`."""
    config = resolve_run_config(run_config)
    settings = RunSettings.from_config(config)
    problems = file_problems(settings)
    if problems:
        raise ConfigError(problems[0])
    from server.tracking import require_logger  # the ServerApp's own check

    require_logger(settings.logger)
    check_data(settings, num_clients)
    return settings, config


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m settings check",
        description="Validate a run config as the ServerApp would, before a run.",
    )
    parser.add_argument("command", choices=["check"])
    parser.add_argument(
        "--run-config",
        action="append",
        default=None,
        help="overrides as for `flwr run --run-config` (key=value pairs or a .toml); "
        "a preset .toml first, then key=value overrides of it",
    )
    parser.add_argument(
        "--quiet", action="store_true", help="print nothing on success"
    )
    parser.add_argument(
        "--num-clients",
        type=int,
        default=None,
        help="the federation's num-supernodes: also check the partitioning",
    )
    parser.add_argument(
        "--write-overrides",
        metavar="FILE",
        default=None,
        help="once valid, write the overrides (a preset and its key=value "
        "overrides) as one .toml for `flwr run . --run-config FILE`",
    )
    args = parser.parse_args(argv)
    try:
        _, config = check(args.run_config, args.num_clients)
        if args.write_overrides:
            write_overrides(args.run_config, args.write_overrides)
    except ConfigError as exc:
        print(f"error: run config: {exc}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    if not args.quiet:
        print(format_config(config))
    return 0


def format_config(config: Mapping[str, Any]) -> str:
    """``key = value`` lines, TOML-style, in ``pyproject.toml`` order."""
    lines = ["# resolved run config (valid)"]
    for key, value in config.items():
        if isinstance(value, bool):
            shown = "true" if value else "false"
        elif isinstance(value, str):
            shown = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        else:
            shown = repr(value)
        lines.append(f"{key} = {shown}")
    return "\n".join(lines)

"""A paper's driver: one command, a subcommand per table.

``python -m experiments.<paper> <table> [flags]`` runs the ``main`` of the table's
module (in :mod:`experiments.tables`, or a library module with a fixed first
argument) under :func:`experiments.lib.progress.cli`, with ``<table>``'s flags; an
unknown table is one ``error:`` line naming the accepted ones (exit code 2).
:func:`driver_command` finds the command that runs a table module, for the suite.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping, Sequence

from experiments.lib.progress import EXIT_BAD_CONFIG, cli

#: every paper's driver module, each with its ``TABLES``
DRIVERS = (
    "experiments.phashing",
    "experiments.fedhap",
    "experiments.pfmh",
    "experiments.dphe",
    "experiments.dpcode",
    "experiments.project",
)

#: a table: its module and the arguments that come before the user's
Table = tuple[str, tuple[str, ...]]


def _usage(driver: str, doc: str, tables: Mapping[str, Table]) -> str:
    return (
        f"usage: python -m {driver} {{{','.join(tables)}}} [flags]\n\n{doc.strip()}\n"
    )


def run_driver(
    driver: str, doc: str, tables: Mapping[str, Table], argv: Sequence[str]
) -> None:
    """Run table ``argv[0]`` of ``tables`` with the rest of ``argv`` as its flags."""
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(driver, doc, tables), end="")
        return
    name, *flags = argv
    if name not in tables:
        print(
            f"error: python -m {driver}: no table {name!r}; accepted: "
            + ", ".join(tables),
            file=sys.stderr,
        )
        sys.exit(EXIT_BAD_CONFIG)
    module, fixed = tables[name]
    main = importlib.import_module(module).main
    sys.argv = [f"python -m {driver} {name}", *fixed, *flags]
    cli(main)


def driver_command(module: str) -> list[str]:
    """Return ``["-m", driver, table, *fixed]``: the command that runs ``module``.

    Raises
    ------
    KeyError
        No driver runs ``module``.
    """
    for driver in DRIVERS:
        for name, (mod, fixed) in importlib.import_module(driver).TABLES.items():
            if mod == module:
                return ["-m", driver, name, *fixed]
    raise KeyError(f"no driver in {DRIVERS} runs {module}")

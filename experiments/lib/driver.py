"""A paper's driver: one command, a subcommand per table.

``python -m experiments.<paper> <table> [flags]`` runs the ``main`` of the table's
module (in :mod:`experiments.tables`; :data:`PAPERS` names them) under
:func:`experiments.lib.progress.cli`, with ``<table>``'s flags; an unknown table is
one ``error:`` line naming the accepted ones (exit code 2).
:func:`driver_command` finds the command that runs a table module, for the suite.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping, Sequence

from experiments.lib.progress import EXIT_BAD_CONFIG, cli

#: every paper's driver module and its tables, each a module of experiments.tables
PAPERS: dict[str, dict[str, str]] = {
    "experiments.phashing": {
        "table1": "experiments.tables.phashing_table",
        "itq": "experiments.tables.itq_table",
    },
    "experiments.fedhap": {
        "tables": "experiments.tables.fedhap_sweep",
        "real-data": "experiments.tables.real_data_table",
        "rounds": "experiments.tables.rounds_sweep",
        "across": "experiments.tables.across_table",
    },
    "experiments.pfmh": {
        "tables": "experiments.tables.pfmh_sweep",
        "contrast": "experiments.tables.pfmh_contrast",
        "protocols": "experiments.tables.pfmh_protocols",
    },
    "experiments.dphe": {
        "map": "experiments.tables.dphe_map",
        "users": "experiments.tables.dphe_users",
    },
    "experiments.dpcode": {
        "figures": "experiments.tables.dpcode_table",
        "federated": "experiments.tables.dpcode_federated",
    },
    "experiments.project": {
        "foundation": "experiments.tables.foundation",
        "faults": "experiments.tables.fault_table",
        "dp-sgd": "experiments.tables.dp_table",
        "update-density": "experiments.tables.update_density",
    },
}


def _usage(driver: str, doc: str, tables: Mapping[str, str]) -> str:
    return (
        f"usage: python -m {driver} {{{','.join(tables)}}} [flags]\n\n{doc.strip()}\n"
    )


def run_paper(driver: str, doc: str, argv: Sequence[str]) -> None:
    """Run table ``argv[0]`` of ``driver`` with the rest of ``argv`` as its flags."""
    run_tables(driver, doc, PAPERS[driver], argv)


def run_tables(
    driver: str, doc: str, tables: Mapping[str, str], argv: Sequence[str]
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
    main = importlib.import_module(tables[name]).main
    sys.argv = [f"python -m {driver} {name}", *flags]
    cli(main)


def driver_command(module: str) -> list[str]:
    """Return ``["-m", driver, table]``: the command that runs ``module``.

    Raises
    ------
    KeyError
        No driver runs ``module``.
    """
    for driver, tables in PAPERS.items():
        for name, mod in tables.items():
            if mod == module:
                return ["-m", driver, name]
    raise KeyError(f"no driver runs {module}")

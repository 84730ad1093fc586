"""One driver per paper: a subcommand per table (experiments/lib/driver.py)."""

import importlib
import sys

import pytest

from experiments.lib.driver import PAPERS, driver_command, run_paper, run_tables
from experiments.lib.progress import EXIT_BAD_CONFIG


def test_every_table_of_every_driver_is_a_module_with_a_main() -> None:
    for driver, tables in PAPERS.items():
        assert tables and importlib.import_module(driver).__doc__, driver
        for name, module in tables.items():
            assert callable(importlib.import_module(module).main), module
            assert driver_command(module) == ["-m", driver, name]


def test_an_unknown_table_is_one_line_naming_the_accepted(capsys) -> None:
    with pytest.raises(SystemExit) as end:
        run_paper("experiments.phashing", "doc", ["table2"])
    assert end.value.code == EXIT_BAD_CONFIG
    err = capsys.readouterr().err
    assert err == (
        "error: python -m experiments.phashing: no table 'table2'; "
        "accepted: table1, itq\n"
    )


def test_a_table_gets_its_flags_and_its_name_in_the_usage(monkeypatch, capsys):
    seen = []

    def main() -> None:
        seen.append(list(sys.argv))

    module = type(sys)("fake_table")
    module.main = main
    monkeypatch.setitem(sys.modules, "fake_table", module)
    monkeypatch.setattr(sys, "argv", ["x"])
    run_tables("experiments.x", "doc", {"t": "fake_table"}, ["t", "--a", "1"])
    assert seen == [["python -m experiments.x t", "--a", "1"]]
    run_tables("experiments.x", "Doc line.", {"t": "fake_table"}, [])
    assert capsys.readouterr().out.startswith("usage: python -m experiments.x {t}")

"""The drivers' default grids: experiments/grids/*.toml and their one loader."""

import tomllib

import pytest

from experiments.lib.grids import GRIDS_DIR, GridError, csv, load_grids
from experiments.lib.progress import EXIT_BAD_CONFIG, cli


def test_every_shipped_grid_file_holds_only_grids() -> None:
    files = sorted(GRIDS_DIR.glob("*.toml"))
    assert {f.stem for f in files} >= {"phashing", "fedhap", "pfmh", "dphe", "dpcode"}
    for path in files:
        for table, grids in tomllib.loads(path.read_text()).items():
            assert load_grids(path.stem, table, tuple(grids)) == grids


def test_a_grid_is_a_flag_default() -> None:
    assert csv([0, 1, 2]) == "0,1,2"
    assert [float(x) for x in csv([0.0002, 1.0]).split(",")] == [0.0002, 1.0]


@pytest.mark.parametrize(
    ("text", "keys", "says"),
    [
        ("[t]\nseeds = [0, 1]\n", ("seeds", "bits"), "[t] lacks bits; accepted keys: "),
        ("[t]\nseeds = [0]\nbitz = [8]\n", ("seeds",), "[t] has unknown bitz;"),
        ("[t]\nseeds = []\n", ("seeds",), "[t] seeds = []; accepted: a non-empty"),
        ("[t]\nseeds = [0, 'a']\n", ("seeds",), "seeds = [0, 'a']; accepted"),
        ("[t]\nseeds = [true]\n", ("seeds",), "seeds = [True]; accepted"),
        ("[t]\nseeds = 3\n", ("seeds",), "seeds = 3; accepted"),
        ("[u]\nseeds = [0]\n", ("seeds",), "no table [t] (tables: [u])"),
        ("[t\n", ("seeds",), "not TOML"),
    ],
)
def test_a_bad_grid_file_is_refused_in_one_line(tmp_path, text, keys, says) -> None:
    (tmp_path / "paper.toml").write_text(text)
    with pytest.raises(GridError) as err:
        load_grids("paper", "t", keys, folder=tmp_path)
    message = str(err.value)
    assert message.startswith(f"grid file {tmp_path / 'paper.toml'}: ")
    assert says in message and "\n" not in message


def test_a_missing_grid_file_ends_a_driver_with_one_error_line(tmp_path, capsys):
    def main() -> None:
        load_grids("nope", "t", ("seeds",), folder=tmp_path)

    with pytest.raises(SystemExit) as end:
        cli(main)
    assert end.value.code == EXIT_BAD_CONFIG
    err = capsys.readouterr().err
    assert err.startswith("error: grid file ") and "cannot be read" in err
    assert err.count("\n") == 1


def test_parse_csv_reads_each_item_and_names_the_first_bad_one():
    from experiments.lib.grids import BadItem, parse_csv

    assert parse_csv("3, 5", int, lambda e: e >= 1) == [3, 5]
    assert parse_csv("0.5", float, lambda v: v < 1) == [0.5]
    for text, item in (("3,x,0", "x"), ("3, 0 ,x", "0"), ("3,,5", ""), ("", "")):
        with pytest.raises(BadItem) as err:
            parse_csv(text, int, lambda e: e >= 1)
        assert err.value.item == item


def test_flag_list_reads_each_kind_and_stops_with_one_line_naming_the_item(capsys):
    import argparse

    from experiments.lib.grids import (
        COUNTS,
        FRACTIONS,
        NON_NEGATIVE,
        POSITIVE,
        SEEDS,
        flag_list,
    )

    parser = argparse.ArgumentParser(prog="driver")
    assert flag_list(parser, "--seeds", "0, 2", SEEDS) == [0, 2]
    assert flag_list(parser, "--bits", "16,32", COUNTS) == [16, 32]
    assert flag_list(parser, "--lr", "1e-3", POSITIVE) == [0.001]
    assert flag_list(parser, "--eps", "0,1.5", NON_NEGATIVE) == [0.0, 1.5]
    assert flag_list(parser, "--sparsity", "0,0.9", FRACTIONS) == [0.0, 0.9]
    bad = (
        (SEEDS, "0,-1", "-1"),
        (SEEDS, "0,x", "x"),
        (COUNTS, "16,0", "0"),
        (POSITIVE, "0.1,0", "0"),
        (POSITIVE, "nan", "nan"),
        (NON_NEGATIVE, "inf", "inf"),
        (FRACTIONS, "0,1", "1"),
        (SEEDS, "0,,1", ""),
    )
    for items, text, item in bad:
        with pytest.raises(SystemExit) as end:
            flag_list(parser, "--flag", text, items)
        assert end.value.code == 2
        err = capsys.readouterr().err.splitlines()
        assert err[-1] == (
            f"driver: error: --flag: {item!r} in {text!r}; accepted: {items.accepted}"
        )


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "experiments.pfmh", "tables", "--seeds", "0,x"],
        ["-m", "experiments.fedhap", "tables", "--bits", "16,0"],
        ["benchmarks/scale.py", "--clients", "100,ten"],
    ],
)
def test_drivers_refuse_a_bad_list_item_before_any_run(argv, tmp_path):
    import subprocess
    import sys

    from experiments.lib.runs import ROOT

    proc = subprocess.run(
        [sys.executable, *argv, "--out", str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "accepted: comma-separated integers" in proc.stderr.splitlines()[-1]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_method_names_keep_their_parenthesised_commas():
    # "FedHAP (projection D, sign input)" is one method: split on "," it was two,
    # and --methods refused it as unknown "FedHAP (projection D"
    from experiments.lib.grids import split_names
    from experiments.tables.real_data_setup import DISCRIMINATOR_OPTIONS, METHODS

    every = ",".join(METHODS)
    assert split_names(every) == list(METHODS)
    assert split_names(f" FedHAP , {','.join(DISCRIMINATOR_OPTIONS)},,") == [
        "FedHAP",
        *DISCRIMINATOR_OPTIONS,
    ]
    assert split_names("iid,non-iid") == ["iid", "non-iid"]
    assert split_names("") == []

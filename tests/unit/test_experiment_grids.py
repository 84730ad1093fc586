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

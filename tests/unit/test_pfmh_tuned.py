"""The PFMH main table tuned on a validation split (``--lr-grid``).

The Flower runs are replaced by a fake whose score peaks at a rate chosen per
method, so the test checks the driver's wiring: tuning runs on the validation
file with the tune seed, a grid edge extends the grid, the table runs each cell at
its chosen rate on the real file, and a resumed sweep runs nothing.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest

#: the rate at which the fake run scores best, per ``pfmh.variant`` / mode
PEAK = {("personalized", "full"): 3e-4, ("fedavg", "wo-p"): 2.7e-3}


def _data(tmp_path):
    rng = np.random.default_rng(0)
    n = 80
    labels = np.arange(n) % 4
    split = np.zeros(n, dtype=np.int8)
    split[:8] = 1  # the file's own queries
    path = tmp_path / "tiny.npz"
    np.savez(
        path,
        x_image=rng.normal(size=(n, 6)).astype(np.float32),
        x_text=rng.normal(size=(n, 3)).astype(np.float32),
        labels=labels,
        split=split,
    )
    return path


def _argv(tmp_path, data, *extra):
    return [
        "pfmh_sweep",
        "--only",
        "main",
        "--seeds",
        "0,1",
        "--bits",
        "16",
        "--out",
        str(tmp_path / "out"),
        "--set",
        "dataset=npz",
        "--set",
        f'data-path="{data}"',
        "--set",
        'modalities="image,text"',
        *extra,
    ]


@pytest.fixture
def fake_runs(monkeypatch):
    import experiments.tables.pfmh_sweep as sweep

    calls = []

    def fake(cfg, clients, run_dir, cpus):
        calls.append(dict(cfg))
        peak = PEAK[(cfg["pfmh.mode"], cfg["pfmh.variant"])]
        score = 0.5 - 0.05 * math.log10(cfg["learning-rate"] / peak) ** 2
        per_client = {sweep.SQ_CDB: score, sweep.LOCAL: score + 0.3}
        return {"final_per_client": per_client, "initial_per_client": {}, "final": {}}

    methods = {m: sweep.METHODS[m] for m in ("PFMH", "FedAvg (same model)")}
    monkeypatch.setattr(sweep, "METHODS", methods)
    monkeypatch.setattr(sweep, "run_federated", fake)
    return sweep, calls


def test_tuned_table_tunes_on_validation_extends_the_edge_and_runs_the_choice(
    fake_runs, tmp_path, monkeypatch
) -> None:
    sweep, calls = fake_runs
    data = _data(tmp_path)
    argv = _argv(tmp_path, data, "--lr-grid", "1e-4,3e-4,9e-4")
    monkeypatch.setattr(sys, "argv", argv)
    sweep.main()
    tune = [c for c in calls if c["seed"] == 99]
    table = [c for c in calls if c["seed"] != 99]
    # every tuning run on the validation file, never on the reported file
    assert {c["data-path"] for c in tune} != {str(data)}
    assert all("validation-s99" in c["data-path"] for c in tune)
    assert all(c["data-path"] == str(data) for c in table)
    # PFMH peaks inside the grid (3 runs); FedAvg on its top edge: 9e-4 -> 2.7e-3
    # (best) -> 8.1e-3 (worse), so 5 runs
    assert sorted(c["learning-rate"] for c in tune if c["pfmh.mode"] != "fedavg") == [
        1e-4,
        3e-4,
        9e-4,
    ]
    assert sorted(c["learning-rate"] for c in tune if c["pfmh.mode"] == "fedavg") == [
        1e-4,
        3e-4,
        9e-4,
        2.7e-3,
        8.1e-3,
    ]
    rates = {(c["pfmh.mode"], c["seed"]): c["learning-rate"] for c in table}
    assert rates == {
        ("personalized", 0): 3e-4,
        ("personalized", 1): 3e-4,
        ("fedavg", 0): 2.7e-3,
        ("fedavg", 1): 2.7e-3,
    }
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    grids = summary["tuning"]["grids"]
    assert grids["FedAvg (same model), 16 bits"]["added"] == [2.7e-3, 8.1e-3]
    assert grids["PFMH, 16 bits"]["chosen_learning_rate"] == 3e-4
    assert summary["tuning"]["split"]["left_out"] == 8  # the file's queries
    # the table aggregates the 4 table runs only, each at its cell's rate
    assert sorted(len(a["seeds"]) for a in summary["aggregate"]) == [2, 2]
    text = (out / "table.md").read_text()
    assert "lr tuned per method and code length" in text
    assert "scored on the global protocol of a validation split" in text
    assert "| PFMH, 16 bits | 48.86 | **50.00** | 48.86 | - | - | 0.0003 |" in text
    # resumed: nothing left to run
    calls.clear()
    monkeypatch.setattr(sys, "argv", [*argv, "--resume"])
    sweep.main()
    assert calls == []
    assert (out / "table.md").read_text() == text


def test_untuned_table_keeps_the_run_configs_rate(fake_runs, tmp_path, monkeypatch):
    sweep, calls = fake_runs
    monkeypatch.setattr(sys, "argv", _argv(tmp_path, _data(tmp_path)))
    sweep.main()
    assert {c["learning-rate"] for c in calls} == {1e-4}  # conf/pfmh.toml
    assert {c["seed"] for c in calls} == {0, 1}
    text = (tmp_path / "out" / "table.md").read_text()
    assert "lr 0.0001 for every method (not tuned)" in text
    assert "**Tuning**" not in text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--only", "sensitivity"], "only the main table is tuned"),
        (["--tune-seed", "1"], "--tune-seed 1 is one of --seeds"),
        (["--val-fraction", "1.5"], "--val-fraction 1.5: accepted is in (0, 1)"),
        (["--max-extensions", "-1"], "--max-extensions -1: accepted is >= 0"),
        (["--lr-grid", "1e-4,x"], "--lr-grid"),
    ],
)
def test_tuning_flags_that_do_not_fit_fail_before_any_run(
    fake_runs, tmp_path, monkeypatch, capsys, extra, message
) -> None:
    sweep, calls = fake_runs
    argv = _argv(tmp_path, _data(tmp_path), "--lr-grid", "1e-4,3e-4", *extra)
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit):
        sweep.main()
    assert message in capsys.readouterr().err
    assert calls == []


def test_tuning_needs_a_file_with_a_fixed_split(
    fake_runs, tmp_path, monkeypatch, capsys
):
    sweep, calls = fake_runs
    argv = ["pfmh_sweep", "--only", "main", "--out", str(tmp_path), "--lr-grid", "1e-4"]
    monkeypatch.setattr(sys, "argv", argv)  # the preset's multiview-digits
    with pytest.raises(SystemExit):
        sweep.main()
    err = capsys.readouterr().err
    assert "tuning draws its validation split from a data file" in err
    assert calls == []


def test_a_resumed_sweep_keeps_the_grown_grids_from_its_first_table_on(
    fake_runs, tmp_path, monkeypatch
) -> None:
    """A resumed sweep with a new code length: while the new cells tune, the
    tables it writes keep the old cells' choices from their extended grids."""
    sweep, calls = fake_runs
    argv = _argv(tmp_path, _data(tmp_path), "--lr-grid", "1e-4,3e-4,9e-4")
    monkeypatch.setattr(sys, "argv", argv)
    sweep.main()
    seen = []
    write = sweep.write_outputs

    def spy(rows, args):
        seen.append(
            sweep.chosen_rates(rows, args.grids)["FedAvg (same model), 16 bits"]
        )
        return write(rows, args)

    monkeypatch.setattr(sweep, "write_outputs", spy)
    more = [*argv, "--resume"]
    more[more.index("--bits") + 1] = "16,32"
    monkeypatch.setattr(sys, "argv", more)
    calls.clear()
    sweep.main()
    assert len(calls) == 3 + 5 + 4  # the new width: PFMH, FedAvg tuning, 4 table runs
    assert seen and set(seen) == {2.7e-3}


def test_replay_extensions_stops_at_the_first_round_not_run() -> None:
    from experiments.lib.tuning import Grid, replay_extensions

    def tune(lr, score):
        return {"kind": "tune", "method": "m", "learning_rate": lr, "map_all": score}

    base = [tune(1e-4, 0.1), tune(3e-4, 0.2), tune(9e-4, 0.3)]
    grid = {"m": Grid([1e-4, 3e-4, 9e-4])}
    # the first extension (2.7e-3) ran and won; the second (8.1e-3) did not run
    replay_extensions(base + [tune(2.7e-3, 0.4)], grid, max_extensions=2)
    assert grid["m"].lrs == [1e-4, 3e-4, 9e-4, 2.7e-3] and grid["m"].rounds == 1
    assert grid["m"].extended == [("lr", 2.7e-3)]
    grid = {"m": Grid([1e-4, 3e-4, 9e-4])}
    rows = base + [tune(2.7e-3, 0.4), tune(8.1e-3, 0.35)]
    replay_extensions(rows, grid, max_extensions=2)
    assert grid["m"].lrs[-1] == 8.1e-3 and grid["m"].rounds == 2
    grid = {"m": Grid([1e-4, 3e-4, 9e-4])}
    replay_extensions(rows, grid, max_extensions=1)  # no more than allowed
    assert grid["m"].lrs[-1] == 2.7e-3 and grid["m"].rounds == 1
    grid = {"m": Grid([1e-4, 3e-4, 9e-4])}
    replay_extensions(base, grid, max_extensions=2)  # 2.7e-3 not run
    assert grid["m"].lrs == [1e-4, 3e-4, 9e-4] and grid["m"].extended == []
    assert grid["m"].rounds == 0


def test_the_tuning_table_marks_a_choice_left_on_the_grid_edge() -> None:
    from experiments.lib.tuning import Grid
    from experiments.tables.pfmh_tuned import SCORE, chosen_rates, tuning_table

    def tune(cell, lr, score):
        return {"kind": "tune", "method": cell, "learning_rate": lr, SCORE: score}

    rows = [tune("a", 1e-4, 0.1), tune("a", 3e-4, 0.2), tune("a", 9e-4, 0.15)]
    rows += [tune("b", 1e-4, 0.1), tune("b", 3e-4, 0.2)]
    grids = {"a": Grid([1e-4, 3e-4, 9e-4]), "b": Grid([1e-4, 3e-4])}
    text = "\n".join(tuning_table(rows, grids, chosen_rates(rows, grids)))
    assert "| a | 10.00 | **20.00** | 15.00 | 0.0003 |" in text
    assert "| b | 10.00 | **20.00** | - | 0.0003 (edge) |" in text


def test_a_tuned_table_keeps_only_its_own_runs_at_the_chosen_rate() -> None:
    from experiments.tables.pfmh_tuned import cell_name, table_rows

    def row(seed, lr, **kw):
        return {"table": "main", "method": "PFMH", "bits": 32, "seed": seed,
                "learning_rate": lr, **kw}  # fmt: skip

    untuned = row(0, 1e-4)  # an untuned run at the rate the tuning chose
    tuned = row(0, 1e-4, kind="table")
    old = row(1, 3e-4, kind="table")  # a rate no longer chosen
    tune = row(99, 1e-4, kind="tune")
    chosen = {cell_name("PFMH", 32): 1e-4}
    assert table_rows([untuned, tuned, old, tune], chosen) == [tuned]
    assert table_rows([untuned, tune], {}) == [untuned]  # an untuned table


def test_an_untuned_resume_into_a_tuned_folder_is_refused(
    fake_runs, tmp_path, monkeypatch, capsys
) -> None:
    sweep, calls = fake_runs
    argv = _argv(tmp_path, _data(tmp_path))
    monkeypatch.setattr(sys, "argv", [*argv, "--lr-grid", "1e-4,3e-4,9e-4"])
    sweep.main()
    calls.clear()
    monkeypatch.setattr(sys, "argv", [*argv, "--resume"])
    with pytest.raises(SystemExit):
        sweep.main()
    assert "a table tuned on validation, without --lr-grid" in capsys.readouterr().err
    assert calls == []

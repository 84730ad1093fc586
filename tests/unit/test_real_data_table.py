"""The real-data table's tables and curve figure, from synthetic rows (no training)."""

import argparse
import json

import numpy as np
import pytest

from experiments.lib import tuning as tun
from experiments.tables import real_data_setup as rds
from experiments.tables import real_data_table as rdt
from experiments.tables.real_data_figures import mean_curves, plot_curves


def _row(method: str, part: str, seed: int, m: float, lr: float = 5e-4) -> dict:
    ks = [10, 100, 1000]
    return {
        "name": f"{method} {part} s{seed}",
        "method": method,
        "partitioning": part,
        "seed": seed,
        "learning_rate": lr,
        "map_all": m,
        "map_at_k": m + 0.01,
        "floor_map_all": None if part == "-" else 0.5,
        "curves": {
            "pr": {
                "radius": [0, 1, 2],
                "precision": [0.0, 0.9, 0.6],
                "recall": [0.0, 0.2 + seed / 10, 1.0],
            },
            "ks": ks,
            "precision_at_k": [0.9, 0.8, 0.7],
            "recall_at_k": [0.01, 0.1, 0.5 + seed / 10],
        },
        "protocol": "stated protocol",
        "seconds": 10.0,
    }


def test_tables_state_protocol_tuning_ceiling_and_floor(tmp_path) -> None:
    rows = [
        _row(m, p, s, v + s / 100, lr)
        for s in (0, 1)
        for m, p, v, lr in (
            ("DPSH (FedAvg)", "iid", 0.6, 2e-3),
            ("FedHAP", "iid", 0.7, 5e-4),
            ("DPSH (FedAvg)", "non-iid", 0.55, 2e-3),
        )
    ] + [_row(rds.CENTRALIZED, "-", s, 0.8 + s / 100) for s in (0, 1)]
    tuning = [
        {"method": "DPSH (FedAvg)", "learning_rate": lr, "map_all": v, "seconds": 5.0}
        for lr, v in ((5e-4, 0.5), (2e-3, 0.6))
    ]
    args = argparse.Namespace(
        data_path=tmp_path / "m.npz",
        clients=20,
        bits=48,
        rounds=10,
        classes_per_client=3,
        tune_seed=99,
        seeds="0,1",
        out=tmp_path,
        train_size=0,
        fedhap_lr_grid=None,
        grids={"DPSH (FedAvg)": tun.Grid([5e-4, 2e-3], [3])},
        tuned_epochs={"DPSH (FedAvg)": 3},
    )
    methods = ["DPSH (FedAvg)", "FedHAP", rds.CENTRALIZED]
    rdt._write(
        rows, tuning, {"DPSH (FedAvg)": 2e-3}, args, methods, ["iid", "non-iid"], 0.0
    )
    text = (tmp_path / "table.md").read_text()
    assert text.startswith("Protocol (ours;")
    assert "**iid** (run protocol: stated protocol)" in text
    # the ceiling's budget as trained: its own tuned epochs, not the federated runs'
    assert "training rows for 10 x its own local epochs (column local epochs)" in text
    assert "| DPSH (FedAvg) | 0.002 | 3 | 60.50 ± 0.71 |" in text
    assert "| FedHAP | 0.0005 | 3 | 70.50 ± 0.71 |" in text
    # the ceiling appears under both partitionings; FedHAP has no non-iid rows
    assert text.count(f"| {rds.CENTRALIZED} | 0.0005 | 3 | 80.50 ± 0.71 |") == 2
    assert text.split("**non-iid**")[1].count("| FedHAP |") == 0
    # the tuning table: validation scores, the chosen setting bold, on an edge
    assert "validation mAP@ALL %, never the reported queries" in text
    assert "| DPSH (FedAvg) *edge* | 3 | 50.00 | **60.00** |" in text
    assert "| 55.00 ± 7.07 |" in text  # recall@1000 over the two seeds
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["tuned_learning_rates"] == {"DPSH (FedAvg)": 2e-3}
    grid = summary["tuning_grids"]["DPSH (FedAvg)"]
    assert grid["chosen"] == {"learning_rate": 2e-3, "local_epochs": 3}
    assert grid["learning_rates"] == [5e-4, 2e-3] and grid["seed"] == 99
    assert grid["chosen_on_edge"] is True
    # what experiments.tables.across_table compares (only one setting may differ)
    assert summary["setup"] == {
        "data": "m.npz",
        "clients": 20,
        "bits": 48,
        "rounds": 10,
        "train_size": 0,
        "classes_per_client": 3,
    }
    assert summary["cells"]["FedHAP | iid"]["map_all"] == pytest.approx([0.7, 0.71])
    # FedHAP's MIRFlickr protocol: the paper's 10,000 training rows, named as such
    # on MIRFlickr only
    args.train_size = 10000
    rdt._write(
        rows, tuning, {"DPSH (FedAvg)": 2e-3}, args, methods, ["iid", "non-iid"], 0.0
    )
    text = (tmp_path / "table.md").read_text()
    assert text.startswith("Protocol (the file's queries;")
    args.data_path = tmp_path / "mirflickr25k_tags.npz"
    rdt._write(
        rows, tuning, {"DPSH (FedAvg)": 2e-3}, args, methods, ["iid", "non-iid"], 0.0
    )
    text = (tmp_path / "table.md").read_text()
    assert text.startswith("Protocol (FedHAP Table 1's split: the file's queries;")
    assert "a seeded random 10000 of the database rows" in text
    # FedHAP is tuned like every method, and the protocol and tuning table say so
    tuning.append(
        {"method": "FedHAP", "learning_rate": 2e-3, "map_all": 0.72, "seconds": 5.0}
    )
    args.tuned_epochs = {"DPSH (FedAvg)": 3, "FedHAP": 3}
    rdt._write(
        rows,
        tuning,
        {"DPSH (FedAvg)": 2e-3, "FedHAP": 2e-3},
        args,
        methods,
        ["iid"],
        0.0,
    )
    text = (tmp_path / "table.md").read_text()
    assert (
        "every method's learning rate and local epochs, FedHAP's and the ceiling's "
        "included, tuned on seed 99" in text
    )
    assert "FedHAP's the default" not in text
    assert "federated methods IID" in text
    assert "| FedHAP | 3 | - | **72.00** |" in text


def test_curve_figure_is_written_with_means_over_seeds(tmp_path) -> None:
    rows = [_row("FedHAP", "iid", s, 0.7) for s in (0, 2)]
    rows.append(_row(rds.CENTRALIZED, "-", 0, 0.8))
    c = mean_curves(rows[:2])
    np.testing.assert_allclose(c["recall"], [0.0, 0.3, 1.0])
    np.testing.assert_allclose(c["recall_at_k"], [0.01, 0.1, 0.6])
    out = plot_curves(rows, "iid", tmp_path / "curves-iid.png", bits=48)
    assert out is not None and out.stat().st_size > 10_000
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_curves(rows, "non-iid-only", tmp_path / "x.png", bits=48) is not None
    assert plot_curves([], "iid", tmp_path / "none.png", bits=48) is None


def test_best_tuned_lr_is_the_best_final_map_smallest_lr_on_ties() -> None:
    from experiments.tables.real_data_setup import best_tuned_lr

    rows = [
        {"method": "CSQ (FedAvg)", "learning_rate": 2e-3, "map_all": 0.6},
        {"method": "CSQ (FedAvg)", "learning_rate": 5e-4, "map_all": 0.6},
        {"method": "CSQ (FedAvg)", "learning_rate": 2e-4, "map_all": 0.5},
        {"method": "DPSH (FedAvg)", "learning_rate": 2e-4, "map_all": 0.9},
    ]
    assert best_tuned_lr(rows, "CSQ (FedAvg)") == 5e-4
    assert best_tuned_lr(list(reversed(rows)), "CSQ (FedAvg)") == 5e-4
    assert best_tuned_lr(rows, "DPSH (FedAvg)") == 2e-4
    assert best_tuned_lr(rows, "HashNet (FedAvg)") is None


def test_tuned_lr_waits_for_the_whole_grid_and_ignores_rates_off_it() -> None:
    tune = [
        {"kind": "tune", "method": "CSQ (FedAvg)", "learning_rate": lr, "map_all": m}
        for lr, m in ((2e-3, 0.6), (1e-2, 0.7), (5e-2, 0.9))
    ]
    assert rdt.tuned_lr(tune, "CSQ (FedAvg)", [2e-3, 1e-2]) == 1e-2
    assert rdt.tuned_lr(tune, "CSQ (FedAvg)", [2e-3, 2e-2]) is None  # 2e-2 not run
    assert rdt.tuned_lr(tune, "DPSH (FedAvg)", [2e-3]) is None


def test_a_grown_grid_supersedes_table_rows_at_the_old_rate(tmp_path) -> None:
    def tune(lr: float, m: float) -> dict:
        return {
            "kind": "tune",
            "name": f"tune CSQ (FedAvg) lr={lr}",
            "method": "CSQ (FedAvg)",
            "learning_rate": lr,
            "map_all": m,
        }

    rows = [
        tune(2e-3, 0.6),
        {**_row("CSQ (FedAvg)", "iid", 0, 0.6, 2e-3), "kind": "table"},
        {**_row("FedHAP", "iid", 0, 0.7, 5e-4), "kind": "table"},
        _row(rds.CENTRALIZED, "-", 0, 0.8),
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def grids(lrs: list[float]) -> dict:
        return {m: lrs for m in rds.TUNED}

    # the old grid: nothing is stale
    assert rdt.supersede_stale_rows(path, grids([2e-3])) == []
    # the grown grid's new rate is not run yet: nothing is decided
    assert rdt.supersede_stale_rows(path, grids([2e-3, 1e-2])) == []
    # it is run and wins: the CSQ table row is superseded, kept, renamed
    with path.open("a") as f:
        f.write(json.dumps(tune(1e-2, 0.7)) + "\n")
    assert rdt.supersede_stale_rows(path, grids([2e-3, 1e-2])) == [
        "CSQ (FedAvg) iid s0"
    ]
    after = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(after) == len(rows) + 1
    old = [r for r in after if r["method"] == "CSQ (FedAvg)" and "partitioning" in r]
    assert [r["kind"] for r in old] == ["superseded"]
    assert old[0]["name"] == "superseded: CSQ (FedAvg) iid s0 (lr 0.002 x 3 epochs)"
    # FedHAP (untuned) is left alone, so is the ceiling until its tuning is run
    assert sum(r.get("kind", "table") == "table" for r in after) == 2
    assert rdt.supersede_stale_rows(path, grids([2e-3, 1e-2])) == []
    # the ceiling is tuned like the baselines: its row at the old default goes
    with path.open("a") as f:
        for lr, m in ((2e-3, 0.82), (1e-2, 0.81)):
            f.write(json.dumps({**tune(lr, m), "method": rds.CENTRALIZED}) + "\n")
    assert rdt.supersede_stale_rows(path, grids([2e-3, 1e-2])) == [
        f"{rds.CENTRALIZED} - s0"
    ]
    after = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["method"] for r in after if r.get("kind", "table") == "table"] == [
        "FedHAP"
    ]
    # tuned too (--fedhap-lr-grid): its row at the untuned default goes once its
    # grid is run
    with path.open("a") as f:
        for lr, m in ((5e-4, 0.7), (2e-3, 0.75)):
            f.write(json.dumps({**tune(lr, m), "method": "FedHAP"}) + "\n")
    fedhap_grid = {**grids([2e-3, 1e-2]), "FedHAP": [5e-4]}
    assert rdt.supersede_stale_rows(path, fedhap_grid) == []  # 5e-4 is its rate
    fedhap_grid["FedHAP"] = [5e-4, 2e-3]
    assert rdt.supersede_stale_rows(path, fedhap_grid) == ["FedHAP iid s0"]


@pytest.mark.parametrize("bad", ["", "0", "-1", "abc", "nan", "0.002,,0.01", "inf"])
def test_a_bad_learning_rate_grid_is_refused_naming_the_value(bad) -> None:
    with pytest.raises(ValueError, match="--lr-grid: .* is not a learning rate"):
        rdt.parse_lr_grid(bad, "--lr-grid")
    assert rdt.parse_lr_grid("0.002, 0.01", "--lr-grid") == [0.002, 0.01]


def test_fedprox_baselines_are_tuned_but_run_only_when_named() -> None:
    assert rds.METHODS["CSQ (FedProx)"] == {"strategy": "fedprox", "loss": "csq"}
    assert "CSQ (FedProx)" in rds.BASELINES and "CSQ (FedProx)" in rds.TUNED
    assert not any("(FedProx)" in m for m in rds.DEFAULT_METHODS)
    assert {"FedHAP", rds.CENTRALIZED, "DCH (FedAvg)"} <= set(rds.DEFAULT_METHODS)
    assert "FedHAP" not in rds.BASELINES and rds.CENTRALIZED not in rds.BASELINES


def test_a_resume_that_adds_methods_keeps_the_folders_others_in_the_table() -> None:
    rows = [_row("DCH (FedAvg)", "iid", 0, 0.7), _row(rds.CENTRALIZED, "-", 0, 0.8)]
    assert rdt.shown_in_table(rds.METHODS, ["CSQ (FedProx)"], rows, "method") == [
        rds.CENTRALIZED,
        "DCH (FedAvg)",
        "CSQ (FedProx)",
    ]


def test_a_resume_of_a_folder_that_tuned_fedhap_needs_its_grid() -> None:
    rows = [
        {"kind": "tune", "method": "FedHAP", "learning_rate": lr, "map_all": 0.7}
        for lr in (5e-4, 2e-3)
    ] + [{"kind": "tune", "method": "CSQ (FedAvg)", "learning_rate": 1e-2}]
    with pytest.raises(ValueError, match=r"tuned FedHAP \(rates 0.0005,0.002\)"):
        rdt.check_fedhap_tuning(rows, None)
    rdt.check_fedhap_tuning(rows, [5e-4, 2e-3])
    rdt.check_fedhap_tuning(rows[2:], None)  # FedHAP untuned there: nothing to pass


def test_untuned_tables_say_so_and_run_no_tuning(tmp_path) -> None:
    rows = [_row(m, "non-iid", 0, 0.6) for m in ("DPSH (FedAvg)", "FedHAP")]
    args = argparse.Namespace(
        data_path=tmp_path / "f.npz",
        clients=10,
        bits=32,
        rounds=10,
        classes_per_client=3,
        tune_seed=99,
        seeds="0",
        out=tmp_path,
        train_size=0,
        fedhap_lr_grid=None,
        untuned=True,
    )
    rdt._write(rows, [], {}, args, ["DPSH (FedAvg)", "FedHAP"], ["non-iid"], 0.0)
    text = (tmp_path / "table.md").read_text()
    assert "untuned (defaults): every method and the ceiling at learning rate" in text
    assert "tuned on seed" not in text and "Learning-rate tuning" not in text
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["setup"]["untuned"] is True


def _tune(method: str, lr: float, epochs: int, m: float) -> dict:
    return {
        "kind": "tune",
        "method": method,
        "learning_rate": lr,
        "local_epochs": epochs,
        "map_all": m,
    }


def test_tuned_setting_covers_learning_rates_times_epochs() -> None:
    grid = tun.Grid([5e-4, 2e-3], [3, 5])
    rows = [
        _tune("FedHAP", lr, e, m)
        for lr, e, m in ((5e-4, 3, 0.60), (2e-3, 3, 0.64), (5e-4, 5, 0.62))
    ]
    assert tun.tuned_setting(rows, "FedHAP", grid) is None  # (2e-3, 5) not run
    rows.append(_tune("FedHAP", 2e-3, 5, 0.64))  # a tie: the fewer epochs win
    assert tun.tuned_setting(rows, "FedHAP", grid) == (2e-3, 3)
    # rows without local_epochs are at the default epochs (older folders)
    old = [{"kind": "tune", "method": "X", "learning_rate": 1e-3, "map_all": 0.5}]
    assert tun.tuned_setting(old, "X", [1e-3]) == (1e-3, tun.DEFAULT_EPOCHS)


def test_a_choice_on_a_grid_edge_extends_that_axis() -> None:
    grids = {
        "FedHAP": tun.Grid([5e-4, 2e-3, 5e-3], [3, 5]),
        "DCH (FedAvg)": tun.Grid([5e-4, 2e-3, 5e-3], [3, 5]),
    }
    rows = [_tune("FedHAP", lr, e, 0.5) for lr, e in grids["FedHAP"].settings()]
    rows[4]["map_all"] = 0.7  # (2e-3, 5): interior rate, top epochs
    rows += [
        _tune("DCH (FedAvg)", lr, e, 0.5 + lr)
        for lr, e in grids["DCH (FedAvg)"].settings()
    ]
    jobs = tun.extend_grids(rows, grids)
    # FedHAP: epochs 5 is the top edge -> 7 epochs at every rate
    assert ("tune", "FedHAP", 2e-3, 7) in jobs
    assert grids["FedHAP"].extended == [("epochs", 7)]
    # DCH: the top rate wins at 3 epochs -> 5e-3 * 2.5 = 0.0125 at both epochs
    assert ("tune", "DCH (FedAvg)", 0.0125, 3) in jobs
    assert ("tune", "DCH (FedAvg)", 0.0125, 5) in jobs
    # ... and its 3 epochs are the bottom edge -> 1 epoch at every rate
    assert ("tune", "DCH (FedAvg)", 0.0125, 1) in jobs
    assert grids["DCH (FedAvg)"].extended == [("lr", 0.0125), ("epochs", 1)]
    # nothing decided until the new runs are in
    assert tun.tuned_setting(rows, "FedHAP", grids["FedHAP"]) is None


@pytest.mark.parametrize("bad", ["", "0", "-1", "3.5", "x", "3,,5"])
def test_a_bad_epochs_grid_is_refused_naming_the_value(bad) -> None:
    with pytest.raises(ValueError, match="--epochs-grid: .* is not a number of"):
        rdt.parse_epochs_grid(bad)
    assert rdt.parse_epochs_grid("3, 5") == [3, 5]


def test_a_resume_into_a_folder_tuned_on_the_queries_is_refused(tmp_path) -> None:
    args = argparse.Namespace(
        data_path=tmp_path / "m.npz",
        clients=20,
        bits=48,
        rounds=10,
        train_size=0,
        classes_per_client=3,
        untuned=False,
        val_fraction=0.1,
        val_seed=None,
        tune_seed=99,
    )
    setup = rds.setup_of(args)
    assert setup["tuning"] == "validation split 0.1, seed 99"
    old = {k: v for k, v in setup.items() if k != "tuning"}
    (tmp_path / "summary.json").write_text(json.dumps({"setup": old}))
    with pytest.raises(ValueError, match="tuning"):
        rdt.check_resume_setup(tmp_path, setup)


def _fake_driver(tmp_path, monkeypatch) -> tuple[list, list[str]]:
    """Point the driver at a toy file and fake runs; return its calls and argv.

    Each call is (data path, learning rate, local epochs, the run config); the
    fake's mAP is best at the largest rate and the fewest epochs.
    """
    rng = np.random.default_rng(0)
    n = 120
    split = np.zeros(n, dtype=np.int8)
    split[:20] = 1  # the reported queries
    data = tmp_path / "toy.npz"
    np.savez(
        data,
        x_text=rng.normal(size=(n, 4)).astype(np.float32),
        labels=np.tile(np.arange(4), n // 4),
        split=split,
    )
    seen: list = []

    def final(lr: float, epochs: int) -> dict:
        m = 0.5 + 10 * lr - 0.01 * epochs
        pr = {"radius": [0, 1], "precision": [1.0, 0.5], "recall": [0.1, 1.0]}
        curves = {"ks": [10], "precision_at_k": [0.5], "recall_at_k": [0.1]}
        return {"map_all": m, "map_at_k": m, "pr": pr, **curves}

    def fake_federated(cfg, clients, run_dir):
        seen.append((cfg["data-path"], cfg["learning-rate"], cfg["local-epochs"], cfg))
        return {
            "final": final(cfg["learning-rate"], cfg["local-epochs"]),
            "initial_map_all": 0.1,
            "protocol": "fake",
        }

    def fake_centralized(cfg, out):
        seen.append((cfg["data-path"], cfg["learning-rate"], cfg["local-epochs"], cfg))
        return {"final": final(cfg["learning-rate"], cfg["local-epochs"])}

    monkeypatch.setattr(rdt, "run_federated", fake_federated)
    monkeypatch.setattr(rdt, "run_centralized", fake_centralized)
    monkeypatch.setattr(rdt, "check_partitions", lambda cfgs, clients: None)
    monkeypatch.setattr(rdt, "plot_curves", lambda *a, **k: None)
    argv = ["real_data_table", "--data-path", str(data), "--seeds", "0"]
    argv += ["--partitions", "iid", "--out", str(tmp_path / "out")]
    argv += ["--runs", str(tmp_path / "runs")]
    return seen, argv


def test_the_driver_tunes_on_the_validation_file_and_grows_an_edge(
    tmp_path, monkeypatch
) -> None:
    """The whole driver with fake runs: tuning sees only the validation file."""
    seen, argv = _fake_driver(tmp_path, monkeypatch)
    data, out = tmp_path / "toy.npz", tmp_path / "out"
    argv += ["--methods", "FedHAP", "--lr-grid", "0.001,0.002"]
    argv += ["--epochs-grid", "1,2", "--max-extensions", "1"]
    monkeypatch.setattr("sys.argv", argv)
    rdt.main()
    summary = json.loads((out / "summary.json").read_text())
    split_rec = summary["tuning_split"]
    tune_paths = {c[0] for c in seen[:-1]}
    assert tune_paths == {split_rec["path"]}  # every tuning run: validation file
    assert seen[-1][0] == str(data.resolve())  # the table run: the real file
    val = np.load(split_rec["path"])
    assert len(val["labels"]) == 100 and split_rec["left_out"] == 20
    grid = summary["tuning_grids"]["FedHAP"]
    # 2e-3 won at the top edge -> 4e-3 added (at 1 and 2 epochs) and chosen
    assert grid["learning_rates"] == [1e-3, 2e-3, 4e-3]
    assert grid["extended"] == [["lr", 0.004]]
    assert grid["chosen"] == {"learning_rate": 4e-3, "local_epochs": 1}
    assert grid["chosen_on_edge"] is True  # one extension allowed, still the edge
    assert seen[-1][1:3] == (4e-3, 1)
    assert summary["setup"]["tuning"] == "validation split 0.1, seed 99"


def test_a_resume_with_fewer_methods_grows_only_their_grids(
    tmp_path, monkeypatch
) -> None:
    """A grid edge extends the named methods only, not every method in the rows.

    Before the fix, resuming a folder with ``--methods FedHAP`` ran DCH's
    extension runs too. The others keep the grids their rows grew, so their table
    rows (at an extended rate) are not marked superseded.
    """
    seen, argv = _fake_driver(tmp_path, monkeypatch)
    argv += ["--lr-grid", "0.001,0.002", "--fedhap-lr-grid", "0.001,0.002"]
    argv += ["--epochs-grid", "1"]
    first = [*argv, "--methods", "FedHAP,DCH (FedAvg)", "--max-extensions", "1"]
    monkeypatch.setattr("sys.argv", first)
    rdt.main()  # both grow to 4e-3, still on the edge
    seen.clear()
    again = [*argv, "--methods", "FedHAP", "--max-extensions", "2", "--resume"]
    monkeypatch.setattr("sys.argv", again)
    rdt.main()
    ran = [(c[3]["strategy"], c[1]) for c in seen]
    assert ran == [("fedhap", 8e-3), ("fedhap", 8e-3)]  # its tuning run, its table
    rows = [json.loads(line) for line in (tmp_path / "out" / "rows.jsonl").open()]
    dch = [r for r in rows if r["method"] == "DCH (FedAvg)" and r["kind"] != "tune"]
    assert [(r["kind"], r["learning_rate"]) for r in dch] == [("table", 4e-3)]


def test_fedhaps_discriminator_options_are_tuned_as_fedhap_never_as_baselines(
    tmp_path, monkeypatch
) -> None:
    """Defined once (the digits ablation uses the same keys), run only when named,
    tuned over --fedhap-lr-grid, and out of every "best baseline"."""
    from experiments.tables import fedhap_sweep

    options = set(rds.DISCRIMINATOR_OPTIONS)
    assert options == {m for m in fedhap_sweep.DISCRIMINATOR_METHODS if m != "FedHAP"}
    for m in options:
        assert rds.METHODS[m] == {"strategy": "fedhap", **rds.DISCRIMINATOR_OPTIONS[m]}
        assert fedhap_sweep.METHODS[m] == {
            "fedhap.variant": "full",
            **rds.METHODS[m],  # type: ignore[dict-item]
        }
    assert not options & {*rds.BASELINES, *rds.TUNED, *rds.DEFAULT_METHODS}
    assert options < set(rds.FEDHAP_METHODS)
    seen, argv = _fake_driver(tmp_path, monkeypatch)
    argv += ["--methods", "FedHAP (projection D)", "--epochs-grid", "1"]
    argv += ["--lr-grid", "0.01", "--fedhap-lr-grid", "0.001,0.003"]
    argv += ["--max-extensions", "0"]
    monkeypatch.setattr("sys.argv", argv)
    rdt.main()
    assert [c[1] for c in seen] == [1e-3, 3e-3, 3e-3]  # 2 tuning runs, the table's
    assert {c[3]["fedhap.discriminator"] for c in seen} == {"projection"}
    assert {c[3]["strategy"] for c in seen} == {"fedhap"}
    text = (tmp_path / "out" / "table.md").read_text()
    assert "| FedHAP (projection D) *edge* | 1 | 50.00 | **52.00** |" in text
    assert "over the seeds run (seeds 0; each row's count in column seeds)" in text
    # FedHAP added with two seeds by a resume: the protocol names the rows' seeds,
    # not the last --seeds
    argv[argv.index("--seeds") + 1] = "1,2"
    argv[argv.index("--methods") + 1] = "FedHAP"
    monkeypatch.setattr("sys.argv", [*argv, "--resume"])
    rdt.main()
    text = (tmp_path / "out" / "table.md").read_text()
    assert "(seeds 0, 1, 2; each row's count in column seeds)" in text


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--tune-seed", "0"], "--tune-seed 0 is one of --seeds 0"),
        (["--val-fraction", "1.5"], "--val-fraction 1.5: accepted is in (0, 1)"),
        (["--max-extensions", "-1"], "--max-extensions -1: accepted is >= 0"),
    ],
)
def test_bad_tuning_flags_are_refused_before_any_run(
    tmp_path, monkeypatch, capsys, flags, message
) -> None:
    import sys

    seen, argv = _fake_driver(tmp_path, monkeypatch)
    monkeypatch.setattr(sys, "argv", [*argv, *flags])
    with pytest.raises(SystemExit):
        rdt.main()
    assert message in capsys.readouterr().err
    assert seen == []  # refused before any run


def _partition_aware(monkeypatch, seen: list) -> None:
    """Fake federated runs whose best rate is the largest IID, the smallest non-IID."""

    def fake_federated(cfg, clients, run_dir):
        seen.append((cfg["data-path"], cfg["learning-rate"], cfg["local-epochs"], cfg))
        sign = -1 if cfg["partitioning"] == "pathological" else 1
        m = 0.5 + sign * 10 * cfg["learning-rate"]
        pr = {"radius": [0, 1], "precision": [1.0, 0.5], "recall": [0.1, 1.0]}
        curves = {"ks": [10], "precision_at_k": [0.5], "recall_at_k": [0.1]}
        final = {"map_all": m, "map_at_k": m, "pr": pr, **curves}
        return {"final": final, "initial_map_all": 0.1, "protocol": "fake"}

    monkeypatch.setattr(rdt, "run_federated", fake_federated)


@pytest.mark.parametrize("mode", ["iid", "table"])
def test_tune_partitioning_table_tunes_each_partitioning_on_its_own(
    tmp_path, monkeypatch, mode
) -> None:
    """IID tuning runs a non-IID row at the IID winner; ``table`` tunes it non-IID.

    Under ``--tune-partitioning table`` the non-IID cell is tuned with non-IID
    clients (label shards) on the validation split and its rows run at that
    choice; the IID cell and the ceiling are tuned as before.
    """
    seen, argv = _fake_driver(tmp_path, monkeypatch)
    _partition_aware(monkeypatch, seen)
    argv[argv.index("--partitions") + 1] = "iid,non-iid"
    argv += ["--methods", "FedHAP,centralized (DPSH)", "--epochs-grid", "1"]
    argv += ["--lr-grid", "0.001,0.002", "--fedhap-lr-grid", "0.001,0.002"]
    argv += ["--max-extensions", "0", "--tune-partitioning", mode]
    monkeypatch.setattr("sys.argv", argv)
    rdt.main()
    out = tmp_path / "out"
    rows = [json.loads(line) for line in (out / "rows.jsonl").open()]
    fedhap = {
        (r["kind"], r["partitioning"], r["learning_rate"])
        for r in rows
        if r["method"].startswith("FedHAP")
    }
    summary = json.loads((out / "summary.json").read_text())
    table = {(r["partitioning"], r["learning_rate"]) for r in summary["rows"]}
    if mode == "iid":
        assert fedhap == {
            ("tune", "iid", 1e-3),
            ("tune", "iid", 2e-3),
            ("table", "iid", 2e-3),
            ("table", "non-iid", 2e-3),  # the IID winner, worse with non-IID clients
        }
        assert "tune_partitioning" not in summary["setup"]
        assert "FedHAP, non-iid" not in summary["tuning_grids"]
    else:
        assert fedhap == {
            ("tune", "iid", 1e-3),
            ("tune", "iid", 2e-3),
            ("tune", "non-iid", 1e-3),
            ("tune", "non-iid", 2e-3),
            ("table", "iid", 2e-3),
            ("table", "non-iid", 1e-3),  # the non-IID winner
        }
        assert summary["setup"]["tune_partitioning"] == "table"
        cell = summary["tuning_grids"]["FedHAP, non-iid"]
        assert cell["chosen"] == {"learning_rate": 1e-3, "local_epochs": 1}
        non_iid_tuning = [
            c[3]
            for c in seen
            if c[3].get("partitioning") == "pathological" and c[3]["seed"] == 99
        ]
        assert len(non_iid_tuning) == 2
        assert {c["data-path"] for c in non_iid_tuning} == {
            summary["tuning_split"]["path"]
        }
        text = (out / "table.md").read_text()
        assert "under each partitioning of the table" in text
        assert "| FedHAP, non-iid *edge* | 1 | **49.00** | 48.00 |" in text
    assert ("-", 2e-3) in table  # the ceiling: one choice, no partitioning


def test_a_resume_that_changes_the_tuning_partitioning_is_refused(
    tmp_path, monkeypatch, capsys
) -> None:
    """A folder tuned IID cannot be resumed as tuned per partitioning (or back)."""
    seen, argv = _fake_driver(tmp_path, monkeypatch)
    argv += ["--methods", "FedHAP", "--epochs-grid", "1", "--max-extensions", "0"]
    argv += ["--lr-grid", "0.001", "--fedhap-lr-grid", "0.001"]
    monkeypatch.setattr("sys.argv", argv)
    rdt.main()
    seen.clear()
    monkeypatch.setattr("sys.argv", [*argv, "--resume", "--tune-partitioning", "table"])
    with pytest.raises(SystemExit):
        rdt.main()
    assert "tune_partitioning" in capsys.readouterr().err
    assert seen == []


def test_a_resume_of_fedhap_tuned_per_partitioning_needs_its_grid() -> None:
    """A non-IID FedHAP cell ("FedHAP, non-iid") counts as FedHAP's tuning too."""
    rows = [
        {
            "kind": "tune",
            "method": "FedHAP, non-iid",
            "tuned_method": "FedHAP",
            "learning_rate": 0.002,
        }
    ]
    with pytest.raises(ValueError, match="--fedhap-lr-grid 0.002"):
        rdt.check_fedhap_tuning(rows, None)
    rdt.check_fedhap_tuning(rows, [0.002])  # with the grid: accepted

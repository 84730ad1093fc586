"""The PHashing driver's table, figure and loopback run config (no training)."""

import argparse
import json
import re
import time

import pytest
from flwr.common.config import parse_config_args

from experiments.lib.runner import load_rows
from experiments.loopback import run_config_arg
from experiments.tables import phashing_table as pt


def test_loopback_run_config_is_what_flwr_parses() -> None:
    cfg = {
        "data-path": "/data/cifar 10.npz",
        "image-shape": "32,32,3",
        "learning-rate": 0.001,
        "rounds": 10,
        "privacy.code-flip-epsilon": 2.0,
        "download": False,
    }
    assert parse_config_args([run_config_arg(cfg)]) == cfg


def _curves(bits: int, p: float) -> dict:
    return {
        "pr": {
            "radius": list(range(bits + 1)),
            "precision": [p] * (bits + 1),
            "recall": [i / bits for i in range(bits + 1)],
        },
        "ks": [10],
        "precision_at_k": [p],
        "recall_at_k": [0.1],
    }


def test_table_has_floor_ceiling_partial_counts_and_pr_figure(tmp_path) -> None:
    rows = []
    for seed in (0, 1):
        for method in pt.METHODS:
            for eps in (0.0, 1.0):
                if method == "FedHAP" and seed == 1:
                    continue  # one seed only: its cells must say n=1
                row = {
                    "method": method,
                    "bits": 16,
                    "seed": seed,
                    "eps": eps,
                    "map_all": 0.5 - 0.2 * eps,
                    "curves": _curves(16, 0.5),
                }
                if eps == 0.0:
                    row.update(train_seconds=60.0, initial_map_all=0.1)
                rows.append(row)
        rows.append(
            {
                "method": pt.CEILING,
                "bits": 16,
                "seed": seed,
                "eps": 0.0,
                "map_all": 0.8,
                "train_seconds": 6.0,
                "curves": _curves(16, 0.8),
            }
        )
    args = argparse.Namespace(
        bits_list=[16],
        seeds_list=[0, 1],
        eps_list=[0.0, 1.0],
        clients=2,
        rounds=1,
        backend="loopback",
        base={},
        out=tmp_path,
        lr_grid=[],
        ceiling=True,
    )
    args.protocol = pt._protocol(args)
    text = pt._write(rows, args)
    lines = {
        line.split(" | ")[0] + " | " + line.split(" | ")[1]: line
        for line in text.splitlines()
        if line.startswith("| ")
    }
    assert "10.00 ± 0.00 |" in lines[f"| {pt.FLOOR} | -"]
    assert "50.00 ± 0.00 |" in lines["| DPSH (FedAvg) | non-private"]
    assert "30.00 ± 0.00 |" in lines["| DPSH (FedAvg) | 1"]
    assert "(n=1)" in lines["| FedHAP | non-private"]
    assert "(n=1)" not in lines["| DPSH (FedAvg) | 1"]
    assert "80.00 ± 0.00 |" in lines[f"| {pt.CEILING} | non-private"]
    assert "loopback Flower deployment" in text and "Hardware:" in text
    assert "trained centrally on the whole database for" in text
    assert (tmp_path / "pr-16b.png").stat().st_size > 0
    assert (tmp_path / "table.md").read_text().strip() == text.strip()
    assert "over seeds 0,1 (a cell of fewer runs says how many: n=k)." in text
    # a --resume with fewer --seeds keeps the other seeds' rows: the header and the
    # counts follow the rows, not the flag
    args.seeds_list = [0]
    text = pt._write(rows, args)
    assert "over seeds 0,1 (a cell" in text
    assert "(n=1)" in next(
        line for line in text.splitlines() if line.startswith("| FedHAP | non-private")
    )


def test_tuning_picks_each_methods_best_lr_and_the_table_says_so(tmp_path) -> None:
    args = argparse.Namespace(
        bits_list=[32],
        seeds_list=[0],
        eps_list=[0.0],
        clients=2,
        rounds=1,
        backend="simulation",
        base={},
        out=tmp_path,
        lr_grid=[1e-4, 1e-3],
        tune_seed=99,
        tune_bits=32,
    )
    tune = [
        {"kind": "tune", "method": "DPSH (FedAvg)", "lr": 1e-4, "map_all": 0.3},
        {"kind": "tune", "method": "DPSH (FedAvg)", "lr": 1e-3, "map_all": 0.1},
        {"kind": "tune", "method": "FedHAP", "lr": 1e-4, "map_all": 0.2},
        {"kind": "tune", "method": "FedHAP", "lr": 1e-3, "map_all": 0.4},
        # the ceiling is tuned too: its best rate is not DPSH's
        {"kind": "tune", "method": pt.CEILING, "lr": 1e-4, "map_all": 0.5},
        {"kind": "tune", "method": pt.CEILING, "lr": 1e-3, "map_all": 0.6},
    ]
    for r in tune:
        r.update(bits=32, seed=99, eps=0.0, train_seconds=1.0)
    args.tuned = pt.tuned_lrs(tune, args)
    assert args.tuned == {"DPSH (FedAvg)": 1e-4, "FedHAP": 1e-3, pt.CEILING: 1e-3}
    # table jobs carry the chosen rate into the run config
    job = {"method": "FedHAP", "strategy": "fedhap", "bits": 32, "seed": 0, "lr": 1e-3}
    assert pt._config(job, args)["learning-rate"] == 1e-3
    args.protocol = "Protocol."
    text = pt._write(tune, args)
    assert "| DPSH (FedAvg) | **30.00** | 10.00 |" in text
    assert "| FedHAP | 20.00 | **40.00** |" in text
    assert f"| {pt.CEILING} | 50.00 | **60.00** |" in text
    assert "its own learning rate, tuned like the federated" in pt._ceiling_lr_text(
        args
    )
    # a grid value without its tuning run is an error, not a silent default
    with pytest.raises(RuntimeError, match="no tuning run at lr"):
        pt.tuned_lrs(tune[:3], args)
    with pytest.raises(RuntimeError, match=re.escape(f"{pt.CEILING}: no tuning run")):
        pt.tuned_lrs(tune[:5], args)
    # --no-ceiling: nothing of the ceiling's is tuned or needed
    args.ceiling = False
    assert pt.tuned_lrs(tune[:4], args)[pt.CEILING] is None
    assert {j["method"] for j in pt._tune_jobs(args)} == set(pt.METHODS)
    args.lr_grid = []
    assert set(pt.tuned_lrs([], args).values()) == {None}


def test_tuning_runs_at_tune_bits_and_the_table_says_so(tmp_path) -> None:
    """--tune-bits 32 with --bits 12,32: tuning jobs at 32 bits, named as such."""
    args = argparse.Namespace(
        bits_list=[12, 32], lr_grid=[1e-4, 1e-3], tune_seed=99, tune_bits=32
    )
    jobs = pt._tune_jobs(args)
    assert {j["bits"] for j in jobs} == {32}
    assert len(jobs) == 2 * (len(pt.METHODS) + 1)  # the ceiling is tuned too
    assert {j["lr"] for j in jobs if j["method"] == pt.CEILING} == {1e-4, 1e-3}
    args.tuned = {"DPSH (FedAvg)": 1e-4, "FedHAP": 1e-3, pt.CEILING: 1e-4}
    text = "\n".join(pt._tuning_lines([], args))
    assert "(seed 99, 32 bits," in text
    assert "at every code length" in text


def test_execute_skips_done_jobs_records_failures_and_appends_rows(
    tmp_path, monkeypatch
) -> None:
    # training faked: job seed 2 fails, the others each give one row per epsilon
    def fake_train(job, args):
        if job["seed"] == 2:
            raise RuntimeError("out of memory")
        return {"final": {"map_all": 0.5}}, 1.0

    def fake_finish(job, summary, secs, args):
        base = {k: job[k] for k in ("method", "bits", "seed")}
        return [{**base, "eps": eps, "map_all": 0.5} for eps in (0.0, 1.0)]

    written = []
    monkeypatch.setattr(pt, "_train", fake_train)
    monkeypatch.setattr(pt, "_finish", fake_finish)
    monkeypatch.setattr(pt, "_write", lambda rows, args: written.append(len(rows)))
    jobs = [
        {"method": "dpsh", "strategy": "fedavg", "bits": 16, "seed": s}
        for s in (0, 1, 2)
    ]
    rows = [{"method": "dpsh", "bits": 16, "seed": 0, "eps": 0.0, "map_all": 0.4}]
    rows_path = tmp_path / "rows.jsonl"
    failed: list[str] = []
    args = argparse.Namespace(backend="simulation", jobs=2)
    with pytest.raises(SystemExit, match="1 run\\(s\\) failed"):  # after the rest
        pt._execute(jobs, rows, rows_path, failed, args, time.perf_counter())
    # seed 0 was done; seed 1 appended whole (2 rows); seed 2 failed and named
    assert [r["seed"] for r in rows] == [0, 1, 1]
    assert len(rows_path.read_text().splitlines()) == 2
    assert failed == ["fedavg-16b-s2: out of memory"]
    assert written == [3]  # the table is rewritten after each finished table job


def _tuned_folder(tmp_path, **over) -> "object":
    folder = tmp_path / "tuned"
    folder.mkdir()
    summary = {
        "clients": 10,
        "rounds": 10,
        "hardware": "CPU (2 cores)",
        "base_overrides": {"model": "cnn", "data-path": "/here/.gpu/cifar.npz"},
        "tuned_learning_rates": {
            "DPSH (FedAvg)": 1e-4,
            "FedHAP": 3e-4,
            pt.CEILING: 1e-4,
        },
        "rows": [
            {"kind": "tune", "method": "FedHAP", "bits": 32, "seed": 99, "lr": 3e-4},
            {"method": "FedHAP", "bits": 32, "seed": 0, "eps": 0.0},
        ],
    }
    summary.update(over)
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def _args(tmp_path, **over) -> argparse.Namespace:
    args = argparse.Namespace(
        bits_list=[12, 24],
        seeds_list=[0],
        eps_list=[0.0],
        clients=10,
        rounds=10,
        backend="loopback",
        base={"model": "cnn", "data-path": "/there/.gpu/cifar.npz"},
        out=tmp_path,
        lr_grid=[],
        ceiling=True,
    )
    vars(args).update(over)
    return args


def test_tuned_from_takes_another_tables_rates_and_the_protocol_says_so(
    tmp_path,
) -> None:
    args = _args(tmp_path)
    # the same file in another folder (another machine) is the same setup
    args.tuned_from_info = pt.read_tuned_from(_tuned_folder(tmp_path), args)
    assert args.tuned_from_info["rates"] == {
        "DPSH (FedAvg)": 1e-4,
        "FedHAP": 3e-4,
        pt.CEILING: 1e-4,
    }
    assert args.tuned_from_info["bits"] == [32]
    text = pt._lr_text(args)
    assert "DPSH (FedAvg) 0.0001, FedHAP 0.0003" in text
    assert "tuned there at 32 bits, seed 99, on CPU (2 cores)" in text
    assert "not retuned at 12,24 bits" in text
    args.tuned = args.tuned_from_info["rates"]
    args.protocol = "Protocol."
    pt._write([], args)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["tuned_learning_rates"]["FedHAP"] == 3e-4
    assert summary["tuned_from"]["folder"].endswith("tuned")


@pytest.mark.parametrize(
    ("over", "args_over", "named"),
    [
        ({"rounds": 30}, {}, "rounds: 30 there, 10 here"),
        ({"clients": 20}, {}, "clients: 20 there, 10 here"),
        (
            {},
            {"base": {"model": "resnet18", "data-path": "/x/cifar.npz"}},
            "--set model: 'cnn' there, 'resnet18' here",
        ),
        (
            {},
            {"base": {"model": "cnn", "data-path": "/x/other.npz"}},
            "--set data-path: 'cifar.npz' there, 'other.npz' here",
        ),
        ({"tuned_learning_rates": {"FedHAP": 3e-4}}, {}, "no tuned learning rates"),
    ],
)
def test_tuned_from_refuses_another_setup_naming_the_setting(
    tmp_path, over, args_over, named
) -> None:
    folder = _tuned_folder(tmp_path, **over)
    with pytest.raises(SystemExit, match=re.escape(named)):
        pt.read_tuned_from(folder, _args(tmp_path, **args_over))


def test_tuned_from_refuses_a_folder_without_a_summary(tmp_path) -> None:
    with pytest.raises(SystemExit, match="no tuned learning rates"):
        pt.read_tuned_from(tmp_path / "nowhere", _args(tmp_path))


def test_resume_refuses_another_setup_and_accepts_more_code_lengths(
    tmp_path,
) -> None:
    """--resume compares the shared setup, not bits or seeds (rows key on those)."""
    args = _args(tmp_path, eps_list=[0.0, 1.0], bits_list=[12, 24, 32])
    args.tuned = {"DPSH (FedAvg)": 1e-4, "FedHAP": 3e-4, pt.CEILING: 1e-4}
    args.protocol = "Protocol."
    pt.check_resume(args)  # nothing written yet: nothing to compare
    pt._write([], args)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["setup"] == {
        "clients": 10,
        "rounds": 10,
        "epsilons": [0.0, 1.0],
        "--set model": "cnn",
        "--set data-path": "cifar.npz",
    }
    pt.check_resume(_args(tmp_path, eps_list=[1.0, 0.0], bits_list=[48]))
    # the same file in another folder is the same data
    moved = {"model": "cnn", "data-path": "/elsewhere/cifar.npz"}
    pt.check_resume(_args(tmp_path, eps_list=[0.0, 1.0], base=moved))
    with pytest.raises(SystemExit, match=re.escape("its runs have rounds = 10, ")):
        pt.check_resume(_args(tmp_path, eps_list=[0.0, 1.0], rounds=30))
    with pytest.raises(SystemExit, match=re.escape("epsilons = [0.0, 1.0], this")):
        pt.check_resume(_args(tmp_path, eps_list=[0.0, 2.0]))


def test_resume_checks_a_table_written_before_setups_were_recorded(
    tmp_path,
) -> None:
    """An older summary's clients, rounds, overrides and row epsilons count."""
    folder = _tuned_folder(tmp_path)  # no "setup" key; table rows at eps 0
    pt.check_resume(_args(folder))
    with pytest.raises(SystemExit, match=re.escape("--set model = 'cnn', this")):
        other = {"model": "resnet18", "data-path": "/x/cifar.npz"}
        pt.check_resume(_args(folder, base=other))
    with pytest.raises(SystemExit, match=re.escape("epsilons = [0.0], this")):
        pt.check_resume(_args(folder, eps_list=[0.0, 1.0]))


def test_tuning_scores_on_the_validation_file_and_an_edge_grows_the_grid(
    tmp_path,
) -> None:
    import numpy as np

    from experiments.lib.tuning import write_validation_file

    data = tmp_path / "c.npz"
    split = np.zeros(40, dtype=np.int8)
    split[:10] = 1
    np.savez(
        data, x=np.zeros((40, 3), np.float32), labels=np.arange(40) % 2, split=split
    )
    args = argparse.Namespace(
        base={"dataset": "npz", "data-path": str(data)},
        rounds=1,
        lr_grid=[1e-4, 1e-3],
        tune_seed=99,
        tune_bits=32,
        validation=write_validation_file(data, tmp_path / "v", seed=99),
    )
    args.lr_grids = {m: list(args.lr_grid) for m in pt.tuned_methods(args)}
    tune = {"kind": "tune", "method": "FedHAP", "strategy": "fedhap", "bits": 32}
    cfg = pt._config({**tune, "seed": 99, "lr": 1e-3}, args)
    assert cfg["data-path"] == args.validation.path  # tuning: the validation file
    table = {"method": "FedHAP", "strategy": "fedhap", "bits": 32, "seed": 0}
    assert pt._config(table, args)["data-path"] == str(data)  # the table: the file
    rows = [
        {"kind": "tune", "method": m, "lr": lr, "map_all": v}
        for m, lr, v in (
            ("DPSH (FedAvg)", 1e-4, 0.3),  # best at the bottom edge
            ("DPSH (FedAvg)", 1e-3, 0.1),
            ("FedHAP", 1e-4, 0.2),
            ("FedHAP", 1e-3, 0.4),  # best at the top edge
            (pt.CEILING, 1e-4, 0.6),
            (pt.CEILING, 1e-3, 0.7),  # the ceiling's grid grows like the others'
        )
    ]
    ceiling_cfg = pt._config({**tune, "method": pt.CEILING, "seed": 99}, args)
    assert ceiling_cfg["data-path"] == args.validation.path
    jobs = pt.extension_jobs(rows, args)
    assert {(j["method"], j["lr"]) for j in jobs} == {
        ("DPSH (FedAvg)", 1e-5),
        ("FedHAP", 1e-2),
        (pt.CEILING, 1e-2),
    }
    # the grown grid waits for its new runs before choosing
    with pytest.raises(RuntimeError, match="no tuning run at lr"):
        pt.tuned_lrs(rows, args)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--tune-seed", "1"], "--tune-seed 1 is one of --seeds 0,1"),
        (["--max-extensions", "-1"], "--max-extensions -1: accepted is >= 0"),
    ],
)
def test_bad_tuning_flags_are_refused_before_any_run(
    tmp_path, monkeypatch, capsys, flags, message
) -> None:
    import sys

    def no_run(*args, **kwargs):
        raise AssertionError("a run started")

    monkeypatch.setattr(pt, "_execute", no_run)
    argv = ["phashing", "--seeds", "0,1", "--lr-grid", "1e-4,1e-3"]
    argv += ["--out", str(tmp_path / "out"), *flags]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit):
        pt.main()
    assert message in capsys.readouterr().err


def test_resume_supersedes_table_rows_at_a_rate_no_longer_chosen(tmp_path) -> None:
    """A folder written before the ceiling was tuned: its ceiling rows ran at DPSH's.

    Rows without ``lr`` count as trained at the old rule's rate; the ceiling rows
    whose rate is not the ceiling's own choice are superseded (kept, out of the
    table) and their runs are the only table jobs left to do.
    """
    args = _args(tmp_path, bits_list=[32], lr_grid=[1e-4, 1e-3])
    args.tune_seed, args.tune_bits = 99, 32
    args.tuned = {"DPSH (FedAvg)": 1e-4, "FedHAP": 1e-3, pt.CEILING: 1e-3}
    legacy = [  # no "lr": written when the ceiling took DPSH's rate (1e-4)
        {"method": m, "bits": 32, "seed": 0, "eps": 0.0, "map_all": v}
        for m, v in (("DPSH (FedAvg)", 0.5), ("FedHAP", 0.6), (pt.CEILING, 0.7))
    ]
    legacy[2]["train_seconds"] = 60.0
    rows_path = tmp_path / "rows.jsonl"
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in legacy))
    rows = load_rows(rows_path)
    stale = pt.supersede_stale_rows(rows, rows_path, args)
    assert stale == [f"{pt.CEILING} 32 bits seed 0 lr 0.0001"]
    on_disk = load_rows(rows_path)  # rewritten: kept, marked, with its rate
    assert [r.get("kind", "table") for r in on_disk] == ["table", "table", "superseded"]
    assert [r["lr"] for r in rows] == [1e-4, 1e-3, 1e-4]
    jobs = [{**j, "lr": args.tuned[j["method"]]} for j in pt._jobs(args)]
    done = {pt._key(r) for r in rows}
    assert [j["method"] for j in jobs if pt._key(j) not in done] == [pt.CEILING]
    # the table leaves the superseded row out and says so
    args.protocol = "Protocol."
    text = pt._write(rows, args)
    ceiling_line = next(x for x in text.splitlines() if x.startswith(f"| {pt.CEILING}"))
    assert "70.00" not in ceiling_line
    assert "1 superseded runs (1.0 min)" in text
    # --no-ceiling keeps a ceiling row at another rate: it only skips new runs
    kept = [{**legacy[2], "lr": 5e-4}]
    args.ceiling = False
    assert pt.supersede_stale_rows(kept, tmp_path / "other.jsonl", args) == []
    assert kept[0].get("kind", "table") == "table"
    args.ceiling = True
    # a second pass changes nothing and rewrites nothing
    before = rows_path.read_text()
    assert pt.supersede_stale_rows(rows, rows_path, args) == []
    assert rows_path.read_text() == before


def test_tuned_from_says_whether_that_table_tuned_its_ceiling(tmp_path) -> None:
    old = pt.read_tuned_from(_tuned_folder(tmp_path), _args(tmp_path))
    args = _args(tmp_path, tuned_from_info=old)
    assert "at DPSH's rate from there (0.0001; that table did not tune" in (
        pt._ceiling_lr_text(args)
    )
    (tmp_path / "tuned" / "summary.json").unlink()
    (tmp_path / "tuned").rmdir()
    grids = {pt.CEILING: {"learning_rates": [1e-4, 1e-3], "chosen": 1e-4}}
    new = pt.read_tuned_from(_tuned_folder(tmp_path, tuning_grids=grids), args)
    args.tuned_from_info = new
    assert "at the learning rate tuned for it there (0.0001)" in (
        pt._ceiling_lr_text(args)
    )


def test_tuned_from_needs_a_ceiling_rate_only_for_a_table_with_a_ceiling(
    tmp_path,
) -> None:
    rates = {"DPSH (FedAvg)": 1e-4, "FedHAP": 3e-4, pt.CEILING: None}
    folder = _tuned_folder(tmp_path, tuned_learning_rates=rates)
    with pytest.raises(SystemExit, match=re.escape("(or --no-ceiling here)")):
        pt.read_tuned_from(folder, _args(tmp_path))
    info = pt.read_tuned_from(folder, _args(tmp_path, ceiling=False))
    assert info["rates"][pt.CEILING] is None

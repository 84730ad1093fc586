"""What a researcher tracks per run: versions and commit, rounds.csv, clients.csv,
TensorBoard event files (read back), titled plots with a loss curve, and the
``python -m server.results compare`` command. Fast: no Flower run."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from server import compare, provenance
from server.plots import plot_loss_per_round, run_title
from server.results import RunResults
from server.results import main as results_main
from server.tracking import require_logger
from settings.run_settings import ConfigError


def _row(rnd: int, loss: float | None, mAP: float | None) -> dict:
    row = {"round": rnd, "train_loss": loss, "elapsed_s": 1.0 + rnd}
    if mAP is not None:
        row.update(map_all=mAP, map_at_k=mAP + 0.1, precision_at_k={10: 0.5, 50: 0.4})
    if rnd:
        row["clients"] = {
            0: {"train-loss": loss + 0.01, "num-examples": 80.0},
            1: {"train-loss": loss - 0.01, "num-examples": 81.0},
        }
    return row


def _fake_run(root: Path, name: str, *, seed: int, maps: list[float]) -> Path:
    res = RunResults(root, name)
    config = {
        "strategy": "fedavg",
        "dataset": "digits",
        "partitioning": "iid",
        "code-length": 32,
        "seed": seed,
        "loss": "dpsh",
    }
    res.write_json(
        "config.json",
        {"config": config, "torch": "x", "provenance": provenance.run_provenance()},
    )
    for rnd, m in enumerate(maps):
        res.append_round(_row(rnd, None if rnd == 0 else 1.0 / (rnd + 1), m))
    res.write_json(
        "summary.json",
        {
            "final": {"map_all": maps[-1]},
            "final_round": 2,
            "best_map_all": max(maps),
            "best_round": 2,
            "train_round_s_mean": 0.5,
        },
    )
    return res.finish()


def test_config_records_versions_and_the_git_commit():
    prov = provenance.run_provenance()
    assert set(prov["versions"]) == {"python", "flwr", "torch", "numpy", "fedhash"}
    assert prov["versions"]["flwr"].startswith("1.42")
    assert len(prov["git"]["commit"]) == 40 and isinstance(prov["git"]["dirty"], bool)
    assert prov["fab"] is None  # no Flower run
    # the machine: one CPU model's floating-point sums are not another's
    assert prov["machine"]["cpu_model"] and prov["machine"]["cpu_count"] >= 1


def test_fab_hash_from_flowers_run_and_no_commit_outside_git(tmp_path):
    run = SimpleNamespace(fab_hash="ab" * 32, fab_version="0.1.0", run_id=7)
    assert provenance.run_provenance(run)["fab"] == {
        "hash": "ab" * 32,
        "version": "0.1.0",
        "run_id": 7,
    }
    assert provenance.git_state(tmp_path) is None  # a FAB's install folder


def test_no_commit_for_a_folder_inside_another_checkout(tmp_path):
    """A FAB installed under a checkout's ignored .flwr/ is not that checkout."""
    import subprocess

    def git(*args):
        subprocess.run(
            ["git", "-C", str(tmp_path), *args], check=True, capture_output=True
        )

    git("init", "-q")
    git(
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "x",
    )
    (tmp_path / ".flwr" / "apps" / "fab").mkdir(parents=True)
    assert provenance.git_state(tmp_path)["dirty"] is False
    assert provenance.git_state(tmp_path / ".flwr" / "apps" / "fab") is None


def test_stamp_records_the_commit_only_when_the_fab_matches(tmp_path, monkeypatch):
    run = _fake_run(tmp_path, "r", seed=0, maps=[0.2, 0.5])
    cfg = json.loads((run / "config.json").read_text())
    cfg["provenance"].update(git=None, fab={"hash": "f" * 64})
    (run / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setattr(provenance, "checkout_fab_hash", lambda _: "0" * 64)
    assert "changed since the run started" in provenance.stamp(run)
    assert json.loads((run / "config.json").read_text())["provenance"]["git"] is None
    monkeypatch.setattr(provenance, "checkout_fab_hash", lambda _: "f" * 64)
    assert "recorded" in provenance.stamp(run)
    git = json.loads((run / "config.json").read_text())["provenance"]["git"]
    assert git["matched_by"] == "fab_hash" and len(git["commit"]) == 40


def test_rounds_csv_beside_rounds_jsonl_and_clients_csv(tmp_path):
    run = _fake_run(tmp_path, "r", seed=0, maps=[0.2, 0.5, 0.7])
    rows = list(csv.DictReader((run / "rounds.csv").open()))
    assert [r["round"] for r in rows] == ["0", "1", "2"]
    assert rows[0]["train_loss"] == "" and float(rows[2]["map_all"]) == 0.7
    assert float(rows[1]["precision_at_k.10"]) == 0.5
    assert not any(k.startswith("clients") for k in rows[0])
    clients = list(csv.DictReader((run / "clients.csv").open()))
    assert len(clients) == 2 * 2 * 2  # rounds 1-2, 2 clients, 2 metrics
    assert {c["partition_id"] for c in clients} == {"0", "1"}


def test_resume_rewrites_the_csv_from_the_kept_rounds(tmp_path):
    res = RunResults(tmp_path, "r")
    for rnd in range(3):
        res.append_round(_row(rnd, 0.5, 0.3))
    res.rewrite_rounds(res.rows[:2])  # the checkpoint kept rounds 0-1
    reopened = RunResults.reopen(res.dir)
    assert [r["round"] for r in reopened.rows] == [0, 1]
    reopened.append_round(_row(2, 0.4, 0.35))
    rows = list(csv.DictReader((res.dir / "rounds.csv").open()))
    assert [r["round"] for r in rows] == ["0", "1", "2"]


def test_tensorboard_event_files_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import (
        EventAccumulator,
    )

    res = RunResults(tmp_path, "tb")
    res.set_logger("tensorboard")
    for rnd, m in enumerate([0.2, 0.5, 0.7]):
        res.append_round(_row(rnd, None if rnd == 0 else 0.9 - 0.1 * rnd, m))
    final = res.finish()
    acc = EventAccumulator(str(final / "tensorboard"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {
        "map_all",
        "train_loss",
        "precision_at_k/10",
        "clients/1/train-loss",
    } <= set(tags)
    assert [(e.step, round(e.value, 4)) for e in acc.Scalars("map_all")] == [
        (0, 0.2),
        (1, 0.5),
        (2, 0.7),
    ]
    assert [e.step for e in acc.Scalars("train_loss")] == [1, 2]


def test_no_logger_writes_no_event_files(tmp_path):
    res = RunResults(tmp_path, "none")
    res.set_logger("none")
    res.append_round(_row(0, None, 0.2))
    assert not (res.finish() / "tensorboard").exists()


def test_a_missing_tensorboard_is_one_config_error(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="logger='tensorboard' needs the tensorboard"):
        require_logger("tensorboard")


def test_plot_title_names_method_data_partitioning_bits_seed(tmp_path):
    title = run_title(
        {
            "strategy": "fedhap",
            "dataset": "digits",
            "seed": 3,
            "partitioning": "pathological",
            "classes-per-client": 3,
            "code-length": 48,
        },
        15,
    )
    assert (
        title == "fedhap · digits · pathological (3 classes/client) · 48 bits"
        " · seed 3 · round 15"
    )
    rows = [_row(0, None, 0.2), _row(1, 0.8, None), _row(2, 0.6, 0.5)]
    assert plot_loss_per_round(rows, title, tmp_path / "loss.png")
    assert (tmp_path / "loss.png").stat().st_size > 1000
    assert not plot_loss_per_round(rows[:1], title, tmp_path / "none.png")


def test_compare_prints_a_table_and_writes_one_plot(tmp_path, capsys):
    a = _fake_run(tmp_path, "run-a", seed=0, maps=[0.2, 0.5, 0.6])
    b = _fake_run(tmp_path, "run-b", seed=1, maps=[0.2, 0.4, 0.7])
    out = tmp_path / "cmp.png"
    assert results_main(["compare", str(a), str(b), "--plot", str(out)]) == 0
    text = capsys.readouterr().out
    assert "run-a" in text and "run-b" in text and "0.6000" in text and "0.7000" in text
    assert "seed *" in text and "dataset *" not in text  # fields that differ
    assert out.stat().st_size > 1000


def test_compare_refuses_a_folder_that_is_not_a_finished_run(tmp_path, capsys):
    res = RunResults(tmp_path, "live")
    assert compare.main(["compare", str(res.dir)]) == 2
    assert "unfinished run" in capsys.readouterr().err
    assert compare.main(["compare", str(tmp_path / "nope")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_a_simulation_of_flowers_default_size_is_not_silent():
    """`flwr run .` without a federation size runs Flower's default 2 SuperNodes."""
    from settings.runtime import default_size_warning

    assert "Flower's default; the documented default is 10" in default_size_warning(2)
    assert default_size_warning(10) is None and default_size_warning(3) is None

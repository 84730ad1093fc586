"""Smoke run of ``python -m experiments.pfmh protocols`` (and so of the in-process
mini-federation that ``contrast`` shares): every method, all three protocols."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_protocols_table_runs_every_method_and_tunes_on_validation(tmp_path):
    out = tmp_path / "pp"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.pfmh",
            "protocols",
            "--seeds",
            "0",
            "--lr-grid",
            "1e-3",
            "--methods",
            "pfmh,pfmh-g0.1,fedavg,central",
            "--clients",
            "2",
            "--rounds",
            "1",
            "--set",
            "local-epochs=1",
            "--set",
            "dataset=multiview-digits",
            "--max-extensions",
            "0",
            "--out",
            str(out),
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    rows = summary["rows"]
    assert {r["method"] for r in rows} == {
        "floor",
        "pfmh",
        "pfmh-g0.1",
        "fedavg",
        "central",
    }
    for r in rows:
        for key in ("validation_map_all", "test_map_all", "paper_map_all"):
            assert 0.0 <= r[key] <= 1.0
        # the paper's protocol ranks against every training item of the file
        assert r["paper_retrieval_items"] > r["test_queries"]
    assert summary["tuning"]["chosen"]["pfmh"]["chosen"] == 1e-3
    assert summary["tuning"]["max_extensions"] == 0
    floor = [r for r in rows if r["method"] == "floor"]
    trained = [r for r in rows if r["method"] == "central"]
    assert floor and floor[0]["train_seconds"] < trained[0]["train_seconds"]
    assert "pfmh>fedavg (paper)" in summary["verdicts"]
    assert "pfmh-g0.1>pfmh (global)" in summary["verdicts"]
    weight = summary["tuning"]["prototype_weight"]
    assert set(weight["validation"]) == {"1", "0.1"}
    assert weight["chosen"] in (1.0, 0.1)
    table = (out / "table.md").read_text()
    assert "untrained (initial model, floor)" in table and "paper" in table


def test_rates_are_chosen_on_validation_and_edges_are_extended():
    from experiments.tables.pfmh_protocols import choose_rates, extension

    def row(lr, seed, v):
        return {"method": "pfmh", "learning_rate": lr, "seed": seed,
                "validation_map_all": v, "test_map_all": 1.0 - v}  # fmt: skip

    rows = [
        {"method": "floor", "learning_rate": 0.0, "seed": 0, "validation_map_all": 0.9},
        row(1e-4, 0, 0.30), row(1e-4, 1, 0.34), row(3e-4, 0, 0.40), row(3e-4, 1, 0.38),
        row(1e-3, 0, 0.20), row(1e-3, 1, 0.22),
        row(3e-3, 0, 0.99),  # one seed only: not a candidate
    ]  # fmt: skip
    got = choose_rates(rows, [0, 1])["pfmh"]
    # the best validation mean wins, whatever the test numbers say
    assert got["chosen"] == 3e-4 and not got["chosen_on_edge"]
    assert set(got["validation_means"]) == {"0.0001", "0.0003", "0.001"}
    assert got["validation_means"]["0.0003"] == 0.39
    assert extension(choose_rates(rows, [0, 1])) == {}
    edge = choose_rates([r for r in rows if r["learning_rate"] <= 3e-4], [0, 1])
    assert edge["pfmh"]["chosen_on_edge"]
    assert extension(edge)["pfmh"] == pytest.approx(9e-4)  # the grid's step past it
    low = choose_rates([r for r in rows if r["learning_rate"] >= 3e-4], [0, 1])
    assert extension(low)["pfmh"] == pytest.approx(9e-5)
    # a rate whose printed form is rounded is still found on its (lower) end
    third = [
        {**r, "learning_rate": 1e-4 / 3, "validation_map_all": 0.5}
        for r in rows
        if r["learning_rate"] == 1e-4
    ]
    lowest = choose_rates(
        [*third, *(r for r in rows if r["learning_rate"] == 3e-4)], [0, 1]
    )
    assert lowest["pfmh"]["chosen"] == 1e-4 / 3 and lowest["pfmh"]["chosen_on_edge"]
    assert extension(lowest)["pfmh"] == pytest.approx((1e-4 / 3) ** 2 / 3e-4)
    assert "floor" not in edge


def test_prototype_weight_is_chosen_on_validation_at_each_weights_rate():
    from experiments.tables.pfmh_protocols import choose_prototype_weight

    def tuned(rate, means):
        return {"chosen": rate, "validation_means": means}

    chosen = {
        "pfmh": tuned(3e-4, {"0.0001": 0.30, "0.0003": 0.33}),
        "pfmh-g0.3": tuned(1e-4, {"0.0001": 0.35, "0.0003": 0.20}),
        "pfmh-g0.1": tuned(3e-4, {"0.0001": 0.10, "0.0003": 0.34}),
        "fedavg": tuned(1e-4, {"0.0001": 0.99}),  # not a PFMH weight
    }
    got = choose_prototype_weight(chosen)
    assert got == {
        "chosen": 0.3,
        "validation": {"1": 0.33, "0.3": 0.35, "0.1": 0.34},
    }
    # a tie keeps the larger weight (the paper's 1 over a smaller one)
    chosen["pfmh-g0.3"] = tuned(1e-4, {"0.0001": 0.33})
    chosen["pfmh-g0.1"] = tuned(1e-4, {"0.0001": 0.33})
    assert choose_prototype_weight(chosen)["chosen"] == 1.0
    # nothing to choose from without PFMH at weight 1 and another weight
    assert choose_prototype_weight({"pfmh": chosen["pfmh"]}) is None
    assert choose_prototype_weight({"pfmh-g0.1": chosen["pfmh-g0.1"]}) is None

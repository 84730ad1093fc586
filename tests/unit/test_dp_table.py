"""The DP-SGD table's untrained floor rows."""

from __future__ import annotations

from experiments.tables.dp_table import floors_from_rows, table


def _row(method: str, noise: float | None, seed: int, floor: float | None) -> dict:
    return {
        "method": method,
        "noise": noise,
        "seed": seed,
        "map_all": 0.9 if noise is None else 0.5,
        "eps_per_record": None if noise is None else 10.0,
        "delta_per_record": None if noise is None else 1e-4,
        "eps_per_code": None,
        "floor_map_all": floor,
    }


def test_floor_row_sits_under_its_method_from_the_non_private_runs() -> None:
    rows = [
        _row("A", None, 0, 0.30),
        _row("A", None, 1, 0.32),
        _row("A", 1.0, 0, 0.99),  # a DP run's floor is not read
        _row("B", None, 0, None),  # rows of an older sweep: no floor recorded
        _row("B", 1.0, 0, None),
    ]
    floors = floors_from_rows(rows)
    assert floors == [
        {"method": "A", "seed": 0, "map_all": 0.30},
        {"method": "A", "seed": 1, "map_all": 0.32},
    ]
    lines = table(rows, floors).splitlines()
    methods = [line.split("|")[1].strip() for line in lines[2:]]
    sigmas = [line.split("|")[2].strip() for line in lines[2:]]
    assert methods == ["A", "A", "A", "B", "B"]
    assert sigmas == ["no DP", "1.0", "untrained (floor)", "no DP", "1.0"]
    assert "31.00 ± 1.41 (n=2)" in lines[4]


def _fake_runs(monkeypatch, seen):
    import experiments.tables.dp_table as dp

    def score(cfg):  # a larger rate scores higher on validation, so 0.01 is an edge
        return 0.5 + cfg["learning-rate"]

    def fake_federated(cfg, clients, run_dir):
        seen.append(("fed", cfg.get("data-path"), cfg["seed"], cfg["learning-rate"]))
        dp_on = cfg.get("dp-sgd.enabled", False)
        return {
            "final": {"map_all": score(cfg)},
            "initial_map_all": 0.3,
            "privacy": {"per record": {"max_client_epsilon": 9.0}} if dp_on else {},
        }

    def fake_centralized(cfg, out):
        seen.append(
            ("central", cfg.get("data-path"), cfg["seed"], cfg["learning-rate"])
        )
        assert cfg["loss"] == "csq" and "dp-sgd.enabled" not in cfg
        return {"final": {"map_all": 0.9 - cfg["learning-rate"]}}  # smaller is better

    monkeypatch.setattr(dp, "run_federated", fake_federated)
    monkeypatch.setattr(dp, "run_centralized", fake_centralized)
    return dp


def test_dp_table_tunes_every_cell_and_the_ceiling_on_validation(
    monkeypatch, tmp_path
) -> None:
    import json
    import sys

    from hashdata.digits_file import write_digits_npz

    seen: list[tuple] = []
    dp = _fake_runs(monkeypatch, seen)
    data = write_digits_npz(tmp_path / "digits-fixed.npz")
    out = tmp_path / "out"
    argv = ["dp_table", "--data-path", str(data), "--seeds", "0,1", "--noise", "1.0"]
    argv += ["--lr-grid", "0.005,0.01", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    dp.main()
    tune = [s for s in seen if s[2] == 99]
    table = [s for s in seen if s[2] != 99]
    # 5 cells (2 methods x {no DP, sigma 1} + the ceiling) x 2 rates, then the edge
    # adds one rate to every cell (0.02 where 0.01 wins; 0.0025 for the ceiling,
    # where 0.005 wins); all on the validation file, seed 99
    assert len(tune) == 5 * 3
    assert {s[1] for s in tune} != {str(data.resolve())}
    assert all("validation" in s[1] for s in tune)
    assert sorted({s[3] for s in tune}) == [0.0025, 0.005, 0.01, 0.02]
    # the table: every cell at its chosen rate, on the file itself, seeds 0 and 1
    assert len(table) == 5 * 2
    assert {s[1] for s in table} == {str(data.resolve())}
    assert {(s[0], s[3]) for s in table} == {("fed", 0.02), ("central", 0.0025)}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tuning_split"]["left_out"] == 180  # the file's queries
    grid = summary["tuning_grids"]["FedAvg (CSQ), sigma 1"]
    assert grid["added"] == [0.02] and grid["chosen_learning_rate"] == 0.02
    text = (out / "table.md").read_text()
    assert text.startswith("Protocol: digits-fixed.npz (its fixed query split)")
    assert "tuned over 0.005,0.01" in text and "tuned the same way." in text
    assert "| centralized (CSQ) | no DP | 0.0025 | 89.75 ± 0.00 (n=2) |" in text
    assert "| FedAvg (CSQ) | 1.0 | 0.02 | 52.00 ± 0.00 (n=2) | 9 |" in text
    assert "| FedAvg (CSQ) | untrained (floor) | - | 30.00 ± 0.00 (n=2) |" in text
    assert "**52.00** edge" in text  # still on the edge after one extension
    # resuming runs nothing again
    seen.clear()
    monkeypatch.setattr(sys, "argv", [*argv, "--resume"])
    dp.main()
    assert seen == []
    # a second extension moves every choice: the table runs again at the new
    # rates; the old rows stay in rows.jsonl, out of the table
    monkeypatch.setattr(sys, "argv", [*argv, "--resume", "--max-extensions", "2"])
    dp.main()
    assert sorted({s[3] for s in seen if s[2] == 99}) == [0.00125, 0.04]
    assert {(s[0], s[3]) for s in seen if s[2] != 99} == {
        ("fed", 0.04),
        ("central", 0.00125),
    }
    text = (out / "table.md").read_text()
    assert "| FedAvg (CSQ) | 1.0 | 0.04 | 54.00 ± 0.00 (n=2) |" in text
    assert "| 0.02 |" not in text
    rows = [json.loads(x) for x in (out / "rows.jsonl").read_text().splitlines()]
    assert sum(r["kind"] == "table" for r in rows) == 2 * 5 * 2


def test_dp_table_without_a_fixed_split_runs_untuned_and_says_so(
    monkeypatch, tmp_path, capsys
) -> None:
    import sys

    import pytest

    seen: list[tuple] = []
    dp = _fake_runs(monkeypatch, seen)
    out = tmp_path / "out"
    argv = ["dp_table", "--seeds", "0", "--noise", "2.0", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    dp.main()
    assert {s[3] for s in seen} == {0.005} and len(seen) == 5  # no tuning runs
    text = (out / "table.md").read_text()
    assert "untuned: every cell at lr 0.005" in text and "tuned the same" not in text
    # a tune seed among the table's seeds is refused before any run
    seen.clear()
    bad = ["dp_table", "--data-path", str(tmp_path / "x.npz"), "--seeds", "0,99"]
    monkeypatch.setattr(sys, "argv", [*bad, "--out", str(tmp_path / "o2")])
    with pytest.raises(SystemExit):
        dp.main()
    assert "--tune-seed 99 is one of --seeds" in capsys.readouterr().err
    assert seen == []

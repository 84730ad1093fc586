"""experiments.tables.across_table: one table across code lengths or client counts."""

from __future__ import annotations

import json
import sys

import pytest

from experiments.tables import across_table

SETUP = {
    "data": "m.npz",
    "rounds": 10,
    "train_size": 10000,
    "classes_per_client": 3,
}


def _table_folder(tmp_path, name, bits, rows, **setup):
    folder = tmp_path / name
    folder.mkdir()
    summary = {"setup": {**SETUP, "clients": 20, "bits": bits, **setup}, "rows": rows}
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def _rdt_row(method, part, seed, value, floor=0.5, kind="table", lr=0.01):
    """A row as experiments.tables.real_data_table writes it."""
    return {
        "kind": kind,
        "method": method,
        "partitioning": part,
        "seed": seed,
        "learning_rate": lr,
        "map_all": value,
        "floor_map_all": None if part == "-" else floor,
    }


def _sweep_row(method, part, seed, value, floor=0.4, lr=0.01):
    """A row as the rounds sweep writes it (no kind; floor at round 0)."""
    curve = {} if part == "-" else {"0": floor, "10": value}
    return {
        "method": method,
        "partitioning": part,
        "seed": seed,
        "learning_rate": lr,
        "map_all": value,
        "map_per_round": curve,
    }


def test_combines_both_writers_and_states_margin_floor_and_ceiling(
    tmp_path, monkeypatch
):
    at48 = _table_folder(
        tmp_path,
        "t48",
        48,
        [
            _rdt_row("FedHAP", "iid", 0, 0.72, lr=5e-4),
            _rdt_row("FedHAP", "iid", 1, 0.74, lr=5e-4),
            _rdt_row("DCH (FedAvg)", "iid", 0, 0.73, lr=5e-3),
            _rdt_row("DCH (FedAvg)", "iid", 1, 0.73, lr=5e-3),
            _rdt_row("DPSH (FedAvg)", "iid", 0, 0.60),
            _rdt_row("DPSH (FedAvg)", "iid", 1, 0.20, kind="superseded", lr=0.002),
            _rdt_row("centralized (DPSH)", "-", 0, 0.80, lr=5e-3),
        ],
    )
    at12 = _table_folder(
        tmp_path,
        "t12",
        12,
        [
            _sweep_row("FedHAP", "iid", 0, 0.70, lr=5e-4),
            _sweep_row("FedHAP", "iid", 1, 0.70, lr=5e-4),
            _sweep_row("DCH (FedAvg)", "iid", 0, 0.65, lr=5e-3),
            _sweep_row("DCH (FedAvg)", "iid", 1, 0.67, lr=5e-3),
            _sweep_row("centralized (DPSH)", "-", 0, 0.75, lr=5e-3),
        ],
    )
    out = tmp_path / "out"
    argv = [
        "across_table",
        "--table",
        str(at48),
        "--table",
        str(at12),
        "--out",
        str(out),
    ]
    monkeypatch.setattr(sys, "argv", argv)
    across_table.main()
    text = (out / "table.md").read_text()
    assert "| method | 12 bits | 48 bits |" in text
    assert "| FedHAP | 70.00 ± 0.00 | 73.00 ± 1.41 |" in text
    # DPSH has one table seed at 48 bits (the superseded row is left out), none at 12
    assert "| DPSH (FedAvg) | - | 60.00 ± 0.00 (n=1) |" in text
    # FedHAP minus the best baseline: +4.00 over DCH at 12, +0.00 over DCH at 48
    assert "| FedHAP minus the best baseline (points) | +4.00 (DCH (FedAvg)) |" in text
    assert "+0.00 (DCH (FedAvg)) |" in text
    assert "| untrained floor (round 0) | 40.00 ± 0.00 | 50.00 ± 0.00 |" in text
    assert (
        "| ceiling: centralized (DPSH) | 75.00 ± 0.00 (n=1) | 80.00 ± 0.00 (n=1) |"
        in text
    )
    assert "DPSH (FedAvg) 0.01" in text and "FedHAP 0.0005" in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["sources"] == {"12": str(at12), "48": str(at48)}
    assert len(summary["rows"]) == 11
    assert (out / "bits.png").stat().st_size > 0


def test_across_clients_is_the_papers_table_6_shape(tmp_path, monkeypatch, capsys):
    at20 = _table_folder(tmp_path, "c20", 48, [_rdt_row("FedHAP", "iid", 0, 0.72)])
    at40 = _table_folder(
        tmp_path, "c40", 48, [_sweep_row("FedHAP", "iid", 0, 0.70)], clients=40
    )
    out = tmp_path / "out"
    argv = ["across_table", "--table", str(at20), "--table", str(at40)]
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(out), "--across", "clients"])
    across_table.main()
    text = (out / "table.md").read_text()
    assert text.startswith("Protocol: m.npz, 48 bits, 10 rounds,")
    assert "| method | 20 clients | 40 clients |" in text
    assert "| FedHAP | 72.00 ± 0.00 | 70.00 ± 0.00 |" in text
    assert (out / "clients.png").stat().st_size > 0
    # across bits, the same two folders are refused: both are 48 bits
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(out)])
    with pytest.raises(SystemExit):
        across_table.main()
    assert "both have bits = 48" in capsys.readouterr().err


def test_refuses_tables_that_differ_in_more_than_bits(tmp_path, monkeypatch, capsys):
    a = _table_folder(tmp_path, "a", 12, [])
    b = _table_folder(tmp_path, "b", 24, [], rounds=20)
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "across_table",
            "--table",
            str(a),
            "--table",
            str(b),
            "--out",
            str(tmp_path / "o"),
        ],
    )
    with pytest.raises(SystemExit):
        across_table.main()
    err = capsys.readouterr().err
    assert "rounds = 20" in err and "has 10" in err and "only bits may differ" in err
    assert not (tmp_path / "o").exists()


def test_refuses_two_tables_of_one_code_length(tmp_path):
    a = _table_folder(tmp_path, "a", 24, [])
    b = _table_folder(tmp_path, "b", 24, [])
    setup = {**SETUP, "clients": 20, "bits": 24}
    with pytest.raises(ValueError, match="both have bits = 24"):
        across_table.check_setups({a: setup, b: setup}, "bits")


def test_a_summary_without_setup_is_refused_with_the_way_out(tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="records no setup.*--resume"):
        across_table.load_table(folder)
    with pytest.raises(ValueError, match="cannot read"):
        across_table.load_table(tmp_path / "missing")


def test_partitions_and_methods_filters_keep_the_ceiling_and_name_bad_values(
    tmp_path, monkeypatch, capsys
) -> None:
    rows = [
        _rdt_row("FedHAP", "iid", 0, 0.72),
        _rdt_row("FedHAP", "non-iid", 0, 0.68),
        _rdt_row("HashNet (FedAvg)", "iid", 0, 0.64),
        _rdt_row(across_table.CENTRALIZED, "-", 0, 0.74),
    ]
    kept = across_table.keep_only(rows, ["iid"], ["FedHAP"])
    assert [(r["method"], r["partitioning"]) for r in kept] == [
        ("FedHAP", "iid"),
        (across_table.CENTRALIZED, "-"),
    ]
    assert across_table.keep_only(rows, [], []) == rows
    with pytest.raises(
        ValueError, match=r"--partitions 'IID'.*they have: iid, non-iid"
    ):
        across_table.keep_only(rows, ["IID"], [])
    with pytest.raises(ValueError, match=r"--methods 'DCH'.*FedHAP, HashNet"):
        across_table.keep_only(rows, [], ["DCH"])
    # through the command line: the non-IID section and HashNet's row are gone
    at20 = _table_folder(tmp_path, "c20", 48, rows)
    out = tmp_path / "out"
    argv = ["across_table", "--across", "clients", "--table", str(at20)]
    argv += ["--partitions", "iid", "--methods", "FedHAP", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    across_table.main()
    text = (out / "table.md").read_text()
    assert "**iid**" in text and "non-iid** (" not in text
    assert "HashNet" not in text and "| FedHAP | 72.00" in text
    monkeypatch.setattr(sys, "argv", [*argv[:-4], "--partitions", "x", "--out", "o"])
    with pytest.raises(SystemExit):
        across_table.main()
    assert "--partitions 'x': no table has this partitioning" in capsys.readouterr().err

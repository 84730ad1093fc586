"""PFMH's mAP-per-round figure from kept run directories (synthetic rounds.jsonl)."""

import json

from experiments.pfmh_figures import GLOBAL, LOCAL, map_per_round, plot_map_per_round


def _run(root, name: str, values: list[float | None], finished: bool = True) -> None:
    run = root / "runs" / name / "pfmh-run-1"
    run.mkdir(parents=True)
    lines = [
        {"round": t, GLOBAL: v, LOCAL: None if v is None else v + 0.5}
        for t, v in enumerate(values)
    ]
    (run / "rounds.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    if finished:
        (run / "summary.json").write_text("{}")


def test_map_per_round_reads_only_evaluated_rounds(tmp_path) -> None:
    _run(tmp_path, "a", [0.2, None, 0.3])
    got = map_per_round(tmp_path / "runs" / "a" / "pfmh-run-1")
    assert got == {GLOBAL: {0: 0.2, 2: 0.3}, LOCAL: {0: 0.7, 2: 0.8}}


def test_figure_skips_unfinished_runs_and_other_tables(tmp_path) -> None:
    _run(tmp_path, "pfmh-s0", [0.2, 0.3])
    _run(tmp_path, "pfmh-s1", [0.2, 0.5])
    _run(tmp_path, "cut-s0", [0.1], finished=False)
    rows = [
        {"table": "main", "bits": 32, "method": "PFMH", "name": "pfmh-s0"},
        {"table": "main", "bits": 32, "method": "PFMH", "name": "pfmh-s1"},
        {"table": "main", "bits": 32, "method": "Cut", "name": "cut-s0"},
        {"table": "completion", "bits": 32, "method": "X", "name": "pfmh-s0"},
    ]
    path = plot_map_per_round(rows, tmp_path, bits=32)
    assert path == tmp_path / "map_per_round-32b.png"
    assert path.read_bytes()[:4] == b"\x89PNG"
    assert plot_map_per_round(rows, tmp_path, bits=64) is None


def test_pfmh_tables_open_with_their_protocol() -> None:
    import argparse

    from experiments.pfmh_sweep import preset, tables

    args = argparse.Namespace(seeds=[0], clients=10, bits=[32], base=preset())
    text = tables([], args)
    first = text.splitlines()[0]
    assert first.startswith("Protocol: PFMH global protocol")
    assert "Federation: 10 clients, Dirichlet 0.1" in first
    assert "Floor: the untrained network" in first and "Ceiling:" in first

"""PFMH's mAP-per-round figure from kept run directories (synthetic rounds.jsonl)."""

import json

from experiments.tables.pfmh_figures import (
    GLOBAL,
    LOCAL,
    map_per_round,
    plot_map_per_round,
)


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

    from experiments.tables.pfmh_sweep import preset, tables

    args = argparse.Namespace(
        seeds=[0], clients=10, bits=[32], base=preset(), validation=None, grids={}
    )
    text = tables([], args, [])
    first = text.splitlines()[0]
    assert first.startswith("Protocol: PFMH global protocol")
    assert "Federation: 10 clients, Dirichlet 0.1" in first
    assert "Floor: the untrained network" in first and "Ceiling:" in first
    # no rows yet: the form the run config trains; rows: the forms they ran
    assert "weight: infonce, weight 1." in first
    old = {"name": "pfmh-a0.1-32b-s0"}  # a row from before pfmh.contrast existed
    first = tables([], args, [old]).splitlines()[0]
    assert "weight: decoupled, weight 1." in first


def test_pfmh_rows_record_their_loss_form_and_resume_refuses_another(
    monkeypatch, tmp_path
) -> None:
    import pytest

    import experiments.tables.pfmh_sweep as sweep

    def fake(cfg, clients, run_dir, cpus):
        return {"final_per_client": {}, "initial_per_client": {}, "final": None}

    monkeypatch.setattr(sweep, "run_federated", fake)
    args = _sens_args(out=tmp_path, cpus=1)
    args.base = {**args.base, "pfmh.contrast": "decoupled"}
    row = sweep.run_job(sweep.jobs(args)[0], args)
    assert (row["contrast"], row["prototype_weight"]) == ("decoupled", 1.0)
    sweep.check_resumed_form([row, {"name": "old"}], args.base)  # same form: fine
    with pytest.raises(
        SystemExit,
        match=r"row old ran the prototype contrast "
        r"decoupled, weight 1, the run config trains infonce",
    ):
        sweep.check_resumed_form([{"name": "old"}], sweep.preset())


def _report(ks, precision):
    import numpy as np

    from hashing.retrieval import RetrievalReport

    return RetrievalReport(
        map_all=0.5,
        map_at_k=0.5,
        top_k=10,
        pr={},
        ks=tuple(ks),
        precision_at_k=np.array(precision),
        recall_at_k=np.zeros(len(ks)),
        n_query=4,
        n_db=60,
        bits=16,
    )


def test_precision_over_clients_is_the_unweighted_mean_per_k() -> None:
    import pytest

    from hashing.pfmh.evaluation import PRECISION_PREFIX, precision_over_clients

    got = precision_over_clients(
        [_report((10, 50), [0.8, 0.4]), _report((10, 50), [0.6, 0.2])]
    )
    assert got == pytest.approx(
        {PRECISION_PREFIX + "10": 0.7, PRECISION_PREFIX + "50": 0.3}
    )
    assert precision_over_clients([]) == {}
    with pytest.raises(ValueError, match="different K"):
        precision_over_clients([_report((10,), [0.1]), _report((20,), [0.1])])


def _sens_args(**kw):
    import argparse

    from experiments.tables.pfmh_sweep import preset

    base = dict(
        seeds=[0, 1],
        clients=10,
        bits=[64],
        base=preset(),
        only="sensitivity",
        sensitivity_bits=64,
        loss_alphas=[0.001, 0.01, 0.1],
        loss_betas=[0.001, 1.0],
        completion_alphas=[1.0],
        completion_bits=32,
        validation=None,
        grids={},
    )
    return argparse.Namespace(**{**base, **kw})


def test_sensitivity_jobs_vary_one_weight_and_skip_the_main_tables_point() -> None:
    from experiments.tables.pfmh_sweep import job_name, jobs, loss_defaults

    args = _sens_args()
    assert loss_defaults(args.base) == (0.01, 0.001)  # conf/pfmh.toml / defaults
    got = jobs(args)
    pairs = [(j["loss_alpha"], j["loss_beta"]) for j in got if j["seed"] == 0]
    # (0.01, 0.001) is the main table's PFMH run: not run again
    assert pairs == [(0.001, 0.001), (0.1, 0.001), (0.01, 1.0)]
    assert {j["table"] for j in got} == {"sensitivity"}
    assert {j["bits"] for j in got} == {64} and len(got) == 6
    names = [job_name(j) for j in got]
    assert len(set(names)) == len(names)
    assert "la0.001-lb0.001" in names[0]


def test_sensitivity_run_sets_the_loss_weights(monkeypatch, tmp_path) -> None:
    import experiments.tables.pfmh_sweep as sweep

    seen = {}

    def fake(cfg, clients, run_dir, cpus):
        seen.update(cfg)
        return {
            "final_per_client": {
                sweep.SQ_CDB: 0.3,
                "server_queries_client_db_precision_at_10": 0.6,
            },
            "initial_per_client": {},
            "final": None,
        }

    monkeypatch.setattr(sweep, "run_federated", fake)
    args = _sens_args(out=tmp_path, cpus=1)
    job = sweep.jobs(args)[0]
    row = sweep.run_job(job, args)
    assert (seen["pfmh.alpha"], seen["pfmh.beta"]) == (0.001, 0.001)
    assert row["precision_at_k"] == {"10": 0.6}


def _agg_rows():
    from experiments.tables.pfmh_sweep import aggregate

    rows = []
    for seed, shift in ((0, 0.0), (1, 0.02)):
        common = {"alpha": 0.1, "bits": 64, "seed": seed, "local_map_all": 0.8}
        rows.append(
            {
                **common,
                "table": "main",
                "method": "PFMH",
                "server_queries_client_db_map_all": 0.30 + shift,
                "precision_at_k": {"10": 0.5 + shift, "25": 0.4},
            }
        )
        for a, b, v in ((0.1, 0.001, 0.2), (0.01, 1.0, 0.25)):
            rows.append(
                {
                    **common,
                    "table": "sensitivity",
                    "method": "PFMH",
                    "loss_alpha": a,
                    "loss_beta": b,
                    "server_queries_client_db_map_all": v + shift,
                }
            )
    return aggregate(rows)


def test_aggregate_keeps_sensitivity_points_apart_and_averages_precision() -> None:
    import pytest

    agg = _agg_rows()
    sens = [a for a in agg if a["table"] == "sensitivity"]
    assert sorted((a["loss_alpha"], a["loss_beta"]) for a in sens) == [
        (0.01, 1.0),
        (0.1, 0.001),
    ]
    main = next(a for a in agg if a["table"] == "main")
    assert main["precision_at_k"]["10"][0] == pytest.approx(0.51)
    assert main["precision_at_k"]["25"] == pytest.approx([0.4, 0.0])
    assert "loss_alpha" not in main


def test_sensitivity_and_precision_tables_and_plots(tmp_path) -> None:
    from experiments.tables.pfmh_figures import plot_precision_at_k, plot_sensitivity
    from experiments.tables.pfmh_sweep import precision_table, sensitivity_table

    agg = _agg_rows()
    args = _sens_args()
    main = {(a["method"], a["bits"]): a for a in agg if a["table"] == "main"}
    text = "\n".join(sensitivity_table(agg, args))
    # alpha rows in order, the default point taken from the main table
    assert "| alpha | 0.01 (default) | 31.00 ± 1.41 (n=2) |" in text
    assert text.index("| alpha | 0.01 (default)") < text.index("| alpha | 0.1 |")
    assert "| beta | 1 | 26.00 ± 1.41 (n=2) |" in text
    ptext = "\n".join(precision_table(main, args))
    assert "| PFMH | 51.00 ± 1.41 | 40.00 ± 0.00 |" in ptext
    assert "P@10 | P@25" in ptext
    path = plot_precision_at_k(agg, tmp_path, bits=64)
    assert path == tmp_path / "precision_at_k-64b.png"
    assert path.read_bytes()[:4] == b"\x89PNG"
    assert plot_precision_at_k(agg, tmp_path, bits=32) is None
    path = plot_sensitivity(agg, tmp_path, bits=64, defaults=(0.01, 0.001))
    assert path == tmp_path / "sensitivity-64b.png"
    assert path.read_bytes()[:4] == b"\x89PNG"
    assert plot_sensitivity(agg, tmp_path, bits=32, defaults=(0.01, 0.001)) is None


def test_tables_name_their_seeds_and_mark_a_cell_over_another_count() -> None:
    import argparse

    from experiments.tables.pfmh_sweep import aggregate, preset, tables

    common = {"table": "main", "alpha": 0.1, "local_map_all": 0.9}
    rows = [
        {**common, "method": m, "bits": 32, "seed": s, GLOBAL: 0.3 + s / 100}
        for m, seeds in (("PFMH", range(10)), ("FedAvg (same model)", range(5)))
        for s in seeds
    ]
    rows += [
        {**common, "method": "centralized", "bits": 32, "seed": s, GLOBAL: 0.4}
        for s in range(5)
    ]
    args = argparse.Namespace(
        seeds=[0], clients=10, bits=[32], base=preset(), validation=None, grids={}
    )
    text = tables(aggregate(rows), args, rows)
    assert (
        "Seeds: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9; each cell is the mean over 5 of them "
        "unless it says (n=k)." in text
    )
    assert "| PFMH | 34.50 ± 3.03 (n=10) |" in text  # a second look's ten seeds
    assert "| FedAvg (same model) | 32.00 ± 1.58 |" in text

"""The one sweep runner (experiments/lib/runner.py) and the drivers that use it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.lib.runner import exit_if_failed, load_rows, run_sweep
from experiments.tables import dphe_map, dphe_users, fedhap_sweep
from tests.fixtures import write_feature_npz


def _run(job):
    if job == "bad":
        raise RuntimeError("boom")
    return {"name": job, "value": len(job)}


def test_rows_are_appended_failures_reported_and_resume_skips_done(tmp_path, capsys):
    rows_path = tmp_path / "rows.jsonl"
    seen = []
    rows, failed = run_sweep(
        ["a", "bad", "ccc"],
        _run,
        rows_path=rows_path,
        resume=False,
        name=str,
        describe=lambda row: f"value {row['value']}",
        after_row=lambda rows: seen.append(len(rows)),
    )
    assert [r["name"] for r in rows] == ["a", "ccc"] and failed == ["bad"]
    assert load_rows(rows_path) == rows and seen == [1, 2]
    out = capsys.readouterr().out
    assert "3 runs to do (0 already done)" in out
    assert "FAILED bad: boom" in out and "] ccc: value 3" in out
    with pytest.raises(SystemExit) as exit_info:
        exit_if_failed(failed)
    assert exit_info.value.code == 1
    # resume: only the failed job runs again; without resume the file starts empty
    calls = []
    rows, failed = run_sweep(
        ["a", "bad", "ccc"],
        lambda job: calls.append(job) or {"name": job, "value": 0},
        rows_path=rows_path,
        resume=True,
        name=str,
        describe=str,
    )
    assert calls == ["bad"] and failed == []
    assert [r["name"] for r in load_rows(rows_path)] == ["a", "ccc", "bad"]
    run_sweep([], _run, rows_path=rows_path, resume=False, name=str, describe=str)
    assert rows_path.read_text() == ""


def test_fedhap_sweep_resumes_by_run_name(tmp_path, monkeypatch):
    done = []

    def fake_run_job(job, args):
        done.append(fedhap_sweep.job_name(job))
        return {
            "name": fedhap_sweep.job_name(job),
            **job,
            "map_all": 0.5,
            "map_at_k": 0.5,
            "top_k": 10,
            "seconds": 0.0,
        }

    monkeypatch.setattr(fedhap_sweep, "run_job", fake_run_job)
    argv = [
        "fedhap_sweep",
        "--seeds",
        "0",
        "--only",
        "distance",
        "--out",
        str(tmp_path),
    ]
    monkeypatch.setattr(sys, "argv", argv)
    fedhap_sweep.main()
    assert len(done) == 1 and (tmp_path / "table.md").exists()
    monkeypatch.setattr(sys, "argv", [*argv, "--resume", "--seeds", "0,1"])
    fedhap_sweep.main()
    assert len(done) == 2 and len(load_rows(tmp_path / "rows.jsonl")) == 2


def test_dphe_map_always_resumes_by_seed_and_sparsity(tmp_path, monkeypatch):
    done = []

    def fake_run_pair(seed, sparsity, args):
        done.append((seed, sparsity))
        return {
            "seed": seed,
            "sparsity": sparsity,
            "plain_map_all": 0.5,
            "dphe_map_all": 0.5,
            "diff_points": 0.0,
        }

    monkeypatch.setattr(dphe_map, "run_pair", fake_run_pair)
    refs = _fake_references(monkeypatch)
    argv = ["dphe_map", "--seeds", "0,1", "--sparsity", "0.9", "--out", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    dphe_map.main()
    monkeypatch.setattr(sys, "argv", [*argv[:4], "0.9,0.0", *argv[5:]])
    dphe_map.main()
    assert done == [(0, 0.9), (1, 0.9), (0, 0.0), (1, 0.0)]
    rows = [json.loads(x) for x in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [(r["seed"], r["sparsity"]) for r in rows] == done
    text = (tmp_path / "table.md").read_text()
    assert "| 90% |" in text
    assert text.startswith("Protocol: digits (scikit-learn)")
    assert "split IID into 5 disjoint client partitions" in text
    assert "2048-bit keys, full obfuscators" in text
    assert "the same whole packed blocks of the phi-permuted space as every" in text
    # floor and ceiling once per seed (resumed on the second call), below the table
    assert refs == [(0, 10), (1, 10)]
    floor = "| untrained, the model every run starts from (floor) |"
    assert f"{floor} 15.50 ± 0.71 |" in text
    assert "10 epochs over the whole database, dense, no DPHE (ceiling) | " in text
    assert "| 90.50 ± 0.71 |" in text


def _fake_references(monkeypatch) -> list[tuple[int, int]]:
    """Replace the centralized floor/ceiling run; the (seed, rounds) it was asked."""
    asked = []

    def fake(seed, rounds, out, config=None):
        asked.append((seed, rounds))
        return {
            "seed": seed,
            "epochs": rounds,
            "floor_map_all": 0.15 + 0.01 * seed,
            "ceiling_map_all": 0.9 + 0.01 * seed,
        }

    monkeypatch.setattr(dphe_map, "run_reference", fake)
    return asked


def test_dphe_users_runs_each_n_in_its_own_folder_and_plots(
    tmp_path, monkeypatch, capsys
):
    seen, configs = [], []

    def fake_run_pair(seed, sparsity, args, config=None):
        seen.append((args.clients, seed, sparsity, args.out))
        configs.append(config)
        return {
            "seed": seed,
            "sparsity": sparsity,
            "plain_map_all": 0.5,
            "dphe_map_all": 0.5 - 0.001 * args.clients,
            "diff_points": -0.1 * args.clients,
            "plain_train_round_s": 1.0,
            "dphe_train_round_s": 2.0,
        }

    monkeypatch.setattr(dphe_users, "run_pair", fake_run_pair)
    refs = _fake_references(monkeypatch)
    argv = ["dphe_users", "--users", "5,10", "--seeds", "0", "--out", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    dphe_users.main()
    # one DPHE key and run folder per N (run_pair names its runs by seed only)
    assert [(n, s, out.name) for n, s, _, out in seen] == [(5, 0, "n5"), (10, 0, "n10")]
    assert all(out.parent == tmp_path / "runs" for *_, out in seen)
    text = (tmp_path / "table.md").read_text()
    assert "| 5 | 0 | ~323 | 50.00 ± 0.00 | 49.50 ± 0.00 | -0.500 |" in text
    assert "right panel" in text and "2048-bit keys, djn obfuscators" in text
    floor = "| untrained, the model every run starts from (floor) |"
    assert f"{floor} 15.00 ± 0.00 |" in text
    assert (tmp_path / "users.png").stat().st_size > 0
    dphe_users.main()  # resumes: nothing runs again
    assert len(seen) == 2 and refs == [(0, 10)]
    monkeypatch.setattr(sys, "argv", [*argv[:2], "2,5", *argv[3:]])
    with pytest.raises(SystemExit):  # DPHE needs 3 users
        dphe_users.main()
    monkeypatch.setattr(sys, "argv", [*argv[:2], "five", *argv[3:]])
    with pytest.raises(SystemExit):  # a parser error, not a traceback
        dphe_users.main()
    assert "--users: 'five' in 'five'; accepted: comma-separated integers" in (
        capsys.readouterr().err
    )
    # the left panel: N = 5k users as k repeated five-way splits, in its own folder
    assert configs == [None, None]
    left = tmp_path / "left"
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "dphe_users",
            "--users",
            "5,10",
            "--seeds",
            "0",
            "--panel",
            "left",
            "--out",
            str(left),
        ],
    )
    dphe_users.main()
    assert configs[2:] == [None, {"partition-repeats": 2}]
    text = (left / "table.md").read_text()
    assert "left panel" in text and "| 10 | 0 | ~323 |" in text  # a fifth each
    monkeypatch.setattr(
        sys,
        "argv",
        ["dphe_users", "--users", "5,12", "--panel", "left", "--out", str(left)],
    )
    with pytest.raises(SystemExit):
        dphe_users.main()
    assert "every N must be a multiple of 5" in capsys.readouterr().err
    # one folder per panel: the left panel never resumes the right panel's rows
    monkeypatch.setattr(
        sys, "argv", [*argv[:-2], "--panel", "left", "--out", str(tmp_path)]
    )
    with pytest.raises(SystemExit):
        dphe_users.main()
    assert "holds rows of the right panel" in capsys.readouterr().err


def test_run_federated_clears_what_an_interrupted_attempt_left(tmp_path, monkeypatch):
    # a sweep killed mid-run leaves <run>.incomplete; the retried run must not then
    # fail on "expected one finished run directory" (found on 2026-11-27)
    from experiments.lib import runs

    run_dir = tmp_path / "runs" / "pfmh-32b-s0"
    stale = run_dir / "pfmh-digits-32b-s0-20261127-031140.incomplete"
    stale.mkdir(parents=True)
    (stale / "checkpoint.json").write_text("{}")

    def fake_run(cmd, **kwargs):
        sets = [s.split("=", 1) for s in cmd if s.startswith("results-dir=")]
        results = json.loads(sets[0][1])  # passed as a JSON string
        assert list(Path(results).iterdir()) == []  # cleared before the run starts
        final = Path(results) / "pfmh-digits-32b-s0-20261127-033143"
        final.mkdir()
        (final / "summary.json").write_text(json.dumps({"final": {"map_all": 0.5}}))
        return subprocess.CompletedProcess(cmd, 0, stdout=f"{final}\n", stderr="")

    monkeypatch.setattr(runs.subprocess, "run", fake_run)
    summary = runs.run_federated({"strategy": "pfmh"}, 10, run_dir)
    assert summary.pop("run_dir").endswith("/pfmh-digits-32b-s0-20261127-033143")
    assert summary == {"final": {"map_all": 0.5}}
    assert not stale.exists()


def test_rounds_sweep_reads_each_runs_curve_and_uses_the_tuned_rates(
    tmp_path, monkeypatch, capsys
):
    from experiments.tables import real_data_setup as rds
    from experiments.tables import rounds_sweep

    tuned = tmp_path / "tuned"
    tuned.mkdir()
    rates = {"DPSH (FedAvg)": 0.01, "CSQ (FedAvg)": 0.005}
    (tuned / "summary.json").write_text(json.dumps({"tuned_learning_rates": rates}))
    data = tmp_path / "x.npz"
    data.write_bytes(b"")
    asked = []

    def fake_federated(cfg, clients, run_dir):
        asked.append((cfg["learning-rate"], cfg["rounds"], cfg["eval-every"]))
        run_dir.mkdir(parents=True, exist_ok=True)  # run_federated clears it
        lines = [
            {"round": r, "map_all": (0.3 + r / 100 if r % 2 == 0 else None)}
            for r in range(5)
        ]
        (run_dir / "rounds.jsonl").write_text(
            "\n".join(json.dumps(x) for x in lines) + "\n"
        )
        return {"final": {"map_all": 0.34}, "run_dir": str(run_dir)}

    def fake_centralized(cfg, out):
        asked.append(("centralized", cfg["loss"], cfg["rounds"], cfg["learning-rate"]))
        return {"final": {"map_all": 0.5}}

    monkeypatch.setattr(rounds_sweep, "run_federated", fake_federated)
    monkeypatch.setattr(rounds_sweep, "run_centralized", fake_centralized)
    checked = []  # the partitions are checked once, before any run
    monkeypatch.setattr(
        rounds_sweep,
        "check_partitions",
        lambda cfgs, clients: checked.extend(
            (c["seed"], c["partitioning"], clients, len(asked)) for c in cfgs
        ),
    )
    argv = [
        "rounds_sweep",
        "--data-path",
        str(data),
        "--tuned-from",
        str(tuned),
        "--rounds",
        "4",
        "--eval-every",
        "2",
        "--methods",
        "DPSH (FedAvg),FedHAP",
        "--out",
        str(tmp_path / "out"),
        "--runs",
        str(tmp_path / "runs"),
    ]
    monkeypatch.setattr(sys, "argv", argv)
    rounds_sweep.main()
    assert asked == [(0.01, 4, 2), (0.0005, 4, 2), ("centralized", "dpsh", 4, 5e-4)]
    assert checked == [(0, "iid", 20, 0)]
    text = (tmp_path / "out" / "table.md").read_text()
    assert "| r = 0 | r = 2 | r = 4 |" in text
    assert "for 4 x local-epochs epochs (the federated runs' budget)" in text
    assert (
        "| DPSH (FedAvg) | 0.01 | 1 | 30.00 ± 0.00 | 32.00 ± 0.00 | 34.00 ± 0.00 |"
        in text
    )
    assert (
        "Centralized ceiling (DPSH) (lr 0.0005): 50.00 ± 0.00 mAP@ALL % (1 seeds)"
        in text
    )
    assert (tmp_path / "out" / "rounds.png").stat().st_size > 0
    # the table's grid grew: DPSH's tuned rate and the ceiling's changed; a resumed
    # sweep runs those again (FedHAP's row is kept) and tables the new rows only
    rates.update({"DPSH (FedAvg)": 0.02, rds.CENTRALIZED: 0.002})
    (tuned / "summary.json").write_text(json.dumps({"tuned_learning_rates": rates}))
    asked.clear()
    monkeypatch.setattr(sys, "argv", [*argv, "--resume"])
    rounds_sweep.main()
    assert asked == [(0.02, 4, 2), ("centralized", "dpsh", 4, 0.002)]
    text = (tmp_path / "out" / "table.md").read_text()
    assert "| DPSH (FedAvg) | 0.02 |" in text and "| DPSH (FedAvg) | 0.01 |" not in text
    assert "| FedHAP | 0.0005 |" in text
    assert "Centralized ceiling (DPSH) (lr 0.002): 50.00 ± 0.00" in text
    assert len((tmp_path / "out" / "rows.jsonl").read_text().splitlines()) == 5
    assert "FedHAP's the default 0.0005" in text
    # that table tuned FedHAP too (--fedhap-lr-grid): FedHAP runs again at its rate
    rates["FedHAP"] = 0.002
    (tuned / "summary.json").write_text(json.dumps({"tuned_learning_rates": rates}))
    asked.clear()
    rounds_sweep.main()
    assert asked == [(0.002, 4, 2)]
    text = (tmp_path / "out" / "table.md").read_text()
    assert "| FedHAP | 0.002 |" in text and "| FedHAP | 0.0005 |" not in text
    assert "FedHAP's tuned there too" in text and "FedHAP's the default" not in text
    assert "(seeds 0; each row's count in column seeds)" in text
    # a seed added by a resumed sweep: the protocol names the rows' seeds, not the
    # last invocation's --seeds
    monkeypatch.setattr(sys, "argv", [*argv, "--resume", "--seeds", "1"])
    rounds_sweep.main()
    text = (tmp_path / "out" / "table.md").read_text()
    assert "(seeds 0, 1; each row's count in column seeds)" in text
    assert "| FedHAP | 0.002 | 2 |" in text
    # a baseline without a tuned rate is refused before anything runs
    monkeypatch.setattr(sys, "argv", [*argv[:-5], "HashNet (FedAvg)", *argv[-4:]])
    with pytest.raises(SystemExit):
        rounds_sweep.main()
    assert "no tuned learning rate for HashNet (FedAvg)" in capsys.readouterr().err


def _fake_rounds_sweep(
    tmp_path, monkeypatch, tuned, *, rounds: int, out: Path
) -> list[str]:
    """Point rounds_sweep at fake runs writing to ``out``; return its argv.

    Each federated run's curve is 0.3 at round 0 and 0.4 at ``rounds``; the
    ceiling scores 0.5; the data file is empty, so partitions go unchecked.
    """
    from experiments.tables import rounds_sweep

    data = tmp_path / "x.npz"
    data.write_bytes(b"")

    def fake_federated(cfg, clients, run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
        lines = [{"round": 0, "map_all": 0.3}, {"round": rounds, "map_all": 0.4}]
        (run_dir / "rounds.jsonl").write_text(
            "".join(json.dumps(x) + "\n" for x in lines)
        )
        return {"final": {"map_all": 0.4}, "run_dir": str(run_dir)}

    monkeypatch.setattr(rounds_sweep, "check_partitions", lambda cfgs, clients: None)
    monkeypatch.setattr(rounds_sweep, "run_federated", fake_federated)
    monkeypatch.setattr(
        rounds_sweep, "run_centralized", lambda cfg, out: {"final": {"map_all": 0.5}}
    )
    argv = ["rounds_sweep", "--data-path", str(data), "--tuned-from", str(tuned)]
    argv += ["--rounds", str(rounds), "--eval-every", str(rounds)]
    argv += ["--methods", "DPSH (FedAvg)", "--runs", str(tmp_path / "runs")]
    return [*argv, "--out", str(out)]


def _sweep_at_12_bits(tmp_path, monkeypatch, summary) -> tuple[list[str], Path, str]:
    """Run rounds_sweep at 12 bits (fake runs) from a --tuned-from ``summary``.

    Returns its argv (without ``--bits``), the output folder and its table.
    """
    from experiments.tables import rounds_sweep

    tuned = tmp_path / "tuned"
    tuned.mkdir()
    (tuned / "summary.json").write_text(json.dumps(summary))
    out = tmp_path / "out"
    argv = _fake_rounds_sweep(tmp_path, monkeypatch, tuned, rounds=2, out=out)
    monkeypatch.setattr(sys, "argv", [*argv, "--bits", "12"])
    rounds_sweep.main()
    return argv, out, (out / "table.md").read_text()


def test_rounds_sweep_records_its_setup_and_says_when_rates_come_from_another_length(
    tmp_path, monkeypatch
):
    from experiments.tables import rounds_sweep

    summary = {
        "setup": {"bits": 48, "clients": 20},
        "tuned_learning_rates": {"DPSH (FedAvg)": 0.01},
    }
    argv, out, text = _sweep_at_12_bits(tmp_path, monkeypatch, summary)
    assert (
        "(its tune seed, scored on the queries it reports, at 48 bits, not retuned "
        "at 12 bits)" in text
    )
    setup = json.loads((out / "summary.json").read_text())["setup"]
    assert setup == {
        "data": "x.npz",
        "clients": 20,
        "bits": 12,
        "rounds": 2,
        "train_size": 0,
        "classes_per_client": 3,
    }
    # at the length it was tuned at, nothing is said
    other = tmp_path / "out48"
    monkeypatch.setattr(sys, "argv", [*argv, "--bits", "48", "--out", str(other)])
    rounds_sweep.main()
    assert (
        "(its tune seed, scored on the queries it reports)"
        in (other / "table.md").read_text()
    )
    # Table 6's shape: more clients than the rates were tuned with
    other = tmp_path / "out40"
    monkeypatch.setattr(
        sys, "argv", [*argv, "--bits", "48", "--clients", "40", "--out", str(other)]
    )
    rounds_sweep.main()
    text = (other / "table.md").read_text()
    assert "reports, at 20 clients, not retuned at 40 clients)" in text


def test_rounds_sweep_carries_the_validation_tuning_of_the_table_it_reads(
    tmp_path, monkeypatch
):
    from experiments.tables import rounds_sweep

    tuning = "validation split 0.1, seed 99"
    summary = {
        "setup": {"bits": 48, "clients": 20, "tuning": tuning},
        "tuned_learning_rates": {"DPSH (FedAvg)": 0.005, "FedHAP": 5e-4},
        "tuned_local_epochs": {"DPSH (FedAvg)": 7, "FedHAP": 7},
    }
    argv, out, text = _sweep_at_12_bits(tmp_path, monkeypatch, summary)
    # the ceiling trains rounds x the run config's epochs, not the longest run's
    assert "the longest run's" not in text and "federated runs' budget" not in text
    assert "for 2 x the run config's local-epochs epochs (the methods" in text
    assert (
        "(its tune seed, scored on its validation split 0.1, seed 99, at 48 bits, "
        "not retuned at 12 bits)" in text
    )
    # only DPSH ran: FedHAP's tuned epochs are not named
    assert "local epochs tuned there too (DPSH (FedAvg) 7); " in text
    assert "at FedHAP's rate and epochs" not in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["setup"]["tuning"] == tuning  # across_table keeps it apart
    assert summary["tuned_local_epochs"] == {"DPSH (FedAvg)": 7, "FedHAP": 7}
    # resuming checks the same setup: nothing runs again, nothing is refused
    monkeypatch.setattr(sys, "argv", [*argv, "--bits", "12", "--resume"])
    rounds_sweep.main()


def test_resume_into_a_folder_of_another_setup_is_refused_before_any_run(
    tmp_path, monkeypatch, capsys
):
    from experiments.tables import rounds_sweep

    tuned = tmp_path / "tuned"
    tuned.mkdir()
    rates = {"tuned_learning_rates": {"DPSH (FedAvg)": 0.01}}
    (tuned / "summary.json").write_text(json.dumps(rates))
    data = tmp_path / "x.npz"
    data.write_bytes(b"")
    out = tmp_path / "out"
    out.mkdir()
    setup = {
        "data": "x.npz",
        "clients": 20,
        "bits": 24,
        "rounds": 2,
        "train_size": 0,
        "classes_per_client": 3,
    }
    (out / "summary.json").write_text(json.dumps({"setup": setup, "rows": []}))
    (out / "rows.jsonl").write_text('{"kept": true}\n')
    started = []
    monkeypatch.setattr(rounds_sweep, "run_federated", lambda *a: started.append(a))
    argv = ["rounds_sweep", "--data-path", str(data), "--tuned-from", str(tuned)]
    argv += ["--rounds", "2", "--eval-every", "2", "--methods", "DPSH (FedAvg)"]
    argv += ["--out", str(out), "--bits", "12", "--resume"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit):
        rounds_sweep.main()
    err = capsys.readouterr().err
    assert "its runs have bits = 24, this command 12" in err
    assert not started and (out / "rows.jsonl").read_text() == '{"kept": true}\n'


def test_check_partitions_refuses_shards_the_data_cannot_give(tmp_path) -> None:
    """3 label shards per client over 30 clients need 30 rows of each of 3 classes."""
    from experiments.lib.runs import check_partitions

    data = write_feature_npz(tmp_path / "f.npz", n=90, num_classes=3)
    base = {"dataset": "npz", "data-path": str(data), "query-fraction": 0.2}
    shards = {"partitioning": "pathological", "classes-per-client": 3}
    check_partitions([{**base, "seed": 0, **shards}], 3)  # 3 clients: fine
    check_partitions([{**base, "seed": 0, "partitioning": "iid"}], 30)
    with pytest.raises(ValueError) as err:
        check_partitions([{**base, "seed": 1, **shards}], 30)
    message = str(err.value)
    assert message.startswith("30 clients, seed 1, partitioning = 'pathological', ")
    assert "classes-per-client = 3:" in message and "impossible" in message
    assert "dirichlet-alpha" not in message  # a key this scheme does not read


def test_rounds_sweep_stops_before_any_run_on_an_impossible_partitioning(
    tmp_path, monkeypatch, capsys
) -> None:
    from experiments.tables import rounds_sweep

    tuned = tmp_path / "tuned"
    tuned.mkdir()
    rates = {"DPSH (FedAvg)": 0.01}
    (tuned / "summary.json").write_text(json.dumps({"tuned_learning_rates": rates}))
    data = write_feature_npz(tmp_path / "f.npz", n=90, num_classes=3)

    def no_run(*args, **kwargs):
        raise AssertionError("a run started")

    monkeypatch.setattr(rounds_sweep, "run_federated", no_run)
    monkeypatch.setattr(rounds_sweep, "run_centralized", no_run)
    argv = ["rounds_sweep", "--data-path", str(data), "--tuned-from", str(tuned)]
    argv += ["--clients", "30", "--partitions", "iid,non-iid", "--rounds", "1"]
    argv += ["--eval-every", "1", "--methods", "DPSH (FedAvg)"]
    argv += ["--out", str(tmp_path / "out")]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as stop:
        rounds_sweep.main()
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "30 clients, seed 0, partitioning = 'pathological'" in err
    assert not (tmp_path / "out").exists()  # nothing written


def test_rounds_sweep_resumed_with_another_partitioning_keeps_both_in_the_table(
    tmp_path, monkeypatch
) -> None:
    from experiments.tables import rounds_sweep

    tuned = tmp_path / "tuned"
    tuned.mkdir()
    rates = {"DPSH (FedAvg)": 0.01}
    (tuned / "summary.json").write_text(json.dumps({"tuned_learning_rates": rates}))
    out = tmp_path / "out"
    argv = _fake_rounds_sweep(tmp_path, monkeypatch, tuned, rounds=1, out=out)
    monkeypatch.setattr(sys, "argv", [*argv, "--partitions", "iid"])
    rounds_sweep.main()
    monkeypatch.setattr(sys, "argv", [*argv, "--partitions", "non-iid", "--resume"])
    rounds_sweep.main()
    text = (out / "table.md").read_text()
    assert text.index("**iid**") < text.index("**non-iid**")
    summary = json.loads((out / "summary.json").read_text())
    assert {r["partitioning"] for r in summary["rows"]} == {"iid", "non-iid", "-"}


def test_fedhap_sweep_discriminator_table_only_when_asked(tmp_path, monkeypatch):
    done = []

    def fake_run_job(job, args):
        done.append(job)
        return {
            "name": fedhap_sweep.job_name(job),
            **{k: v for k, v in job.items() if k != "cfg"},
            "map_all": 0.5 + 0.1 * ("projection" in job["method"]),
            "map_at_k": 0.5,
            "top_k": 10,
            "seconds": 0.0,
        }

    monkeypatch.setattr(fedhap_sweep, "run_job", fake_run_job)
    argv = ["fedhap_sweep", "--seeds", "0,1", "--out", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", [*argv, "--only", "discriminator"])
    fedhap_sweep.main()
    assert {j["method"] for j in done} == set(fedhap_sweep.DISCRIMINATOR_METHODS)
    assert len(done) == 8 and all(j["table"] == "discriminator" for j in done)
    table = (tmp_path / "table.md").read_text()
    assert (
        "| FedHAP (projection D, sign input) | 60.00 | 60.00 | 60.00 ± 0.00 |" in table
    )
    assert "| FedHAP | 50.00 | 50.00 | 50.00 ± 0.00 |" in table
    assert "iid, 20 clients" not in table  # only the table asked for
    done.clear()  # the default run (no --only) leaves it out
    monkeypatch.setattr(sys, "argv", ["fedhap_sweep", "--out", str(tmp_path / "all")])
    fedhap_sweep.main()
    assert done and not [j for j in done if j["table"] == "discriminator"]


def test_dphe_map_names_a_feature_file_and_passes_it_to_every_run():
    import argparse

    args = argparse.Namespace(
        data_path="/x/feats.npz",
        clients=10,
        rounds=10,
        key_bits=2048,
        obfuscators="full",
        layout="block",
        error_feedback="auto",
        dense=False,
    )
    assert dphe_map.data_config(args) == {"dataset": "npz", "data-path": "/x/feats.npz"}
    assert dphe_map.protocol(args).startswith(
        "Protocol: `feats.npz` with its own split"
    )
    args.data_path = ""
    assert dphe_map.data_config(args) == {}


def test_the_ceilings_budget_is_stated_as_trained_not_as_the_longest_runs():
    from experiments.tables.real_data_setup import CENTRALIZED
    from experiments.tables.rounds_sweep import ceiling_budget

    assert (
        ceiling_budget(30, {})
        == "30 x local-epochs epochs (the federated runs' budget)"
    )
    tuned = {"FedHAP": 7, "DCH (FedAvg)": 3, CENTRALIZED: 3}
    assert ceiling_budget(30, tuned).startswith(
        "30 x 3 = 90 epochs (its local epochs tuned there; each federated method "
        "trains 30 rounds x its own)"
    )


def test_fedhap_sweep_adds_the_main_tables_floor_and_ceiling(tmp_path, monkeypatch):
    asked = []

    def fake_federated(cfg, clients, run_dir):
        asked.append(("federated", cfg["partitioning"], cfg["rounds"], cfg["strategy"]))
        initial = 0.3 if cfg["partitioning"] == "iid" else 0.32
        return {"initial_map_all": initial, "final": {"map_all": 0.4}}

    def fake_centralized(cfg, out):
        asked.append(("centralized", cfg["loss"], cfg["rounds"], cfg["code-length"]))
        return {"epochs": 45, "final": {"map_all": 0.99, "map_at_k": 0.98}}

    monkeypatch.setattr(fedhap_sweep, "run_federated", fake_federated)
    monkeypatch.setattr(fedhap_sweep, "run_centralized", fake_centralized)
    argv = ["fedhap_sweep", "--seeds", "0", "--bits", "48", "--only", "bounds"]
    argv += ["--set", "rounds=15", "--out", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    fedhap_sweep.main()
    # one 1-round run per partitioning for the floor (its round-0 mAP, not its
    # final one), one centralized DPSH run at the table's rounds for the ceiling
    assert asked == [
        ("federated", "iid", 1, "fedavg"),
        ("federated", "pathological", 1, "fedavg"),
        ("centralized", "dpsh", 15, 48),
    ]
    text = (tmp_path / "table.md").read_text()
    iid, non_iid = text.split("**non-iid")
    assert "| untrained (floor) | 30.00 ± 0.00 (n=1) |" in iid
    assert "| untrained (floor) | 32.00 ± 0.00 (n=1) |" in non_iid
    assert text.count("| centralized (DPSH) | 99.00 ± 0.00 (n=1) |") == 2
    assert "at the table's learning rate, like every row here (not tuned" in text
    rows = load_rows(tmp_path / "rows.jsonl")
    assert {r["name"] for r in rows} == {
        "untrained-floor-iid-48b-20c-s0",
        "untrained-floor-pathological-48b-20c-s0",
        "centralized-dpsh-central-48b-20c-s0",
    }
    # resumed: nothing runs again
    asked.clear()
    monkeypatch.setattr(sys, "argv", [*argv, "--resume"])
    fedhap_sweep.main()
    assert asked == []


def test_a_fedhap_ablation_runs_at_fedhaps_tuned_setting(tmp_path, monkeypatch):
    from experiments.tables import rounds_sweep

    tuned = tmp_path / "tuned"
    tuned.mkdir()
    summary = {
        "tuned_learning_rates": {"FedHAP": 5e-4, "DCH (FedAvg)": 1e-2},
        "tuned_local_epochs": {"FedHAP": 7, "DCH (FedAvg)": 3},
    }
    (tuned / "summary.json").write_text(json.dumps(summary))
    data = tmp_path / "x.npz"
    data.write_bytes(b"")
    asked = []

    def fake_federated(cfg, clients, run_dir):
        asked.append(
            (cfg.get("fedhap.variant"), cfg["learning-rate"], cfg["local-epochs"])
        )
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "rounds.jsonl").write_text(json.dumps({"round": 0, "map_all": 0.3}))
        return {"final": {"map_all": 0.7}, "run_dir": str(run_dir)}

    monkeypatch.setattr(rounds_sweep, "run_federated", fake_federated)
    monkeypatch.setattr(
        rounds_sweep, "run_centralized", lambda cfg, out: {"final": {"map_all": 0.8}}
    )
    monkeypatch.setattr(rounds_sweep, "check_partitions", lambda cfgs, clients: None)
    out = tmp_path / "out"
    argv = ["rounds_sweep", "--data-path", str(data), "--tuned-from", str(tuned)]
    argv += ["--methods", "FedHAP-3 (no discriminator),DCH (FedAvg)", "--rounds", "5"]
    argv += ["--out", str(out), "--runs", str(tmp_path / "runs")]
    monkeypatch.setattr(sys, "argv", argv)
    rounds_sweep.main()
    # the ablation was not tuned there: FedHAP's rate and epochs, its own variant
    assert asked == [("fedhap-3", 5e-4, 7), (None, 1e-2, 3)]
    text = (out / "table.md").read_text()
    assert "FedHAP-3 (no discriminator) at FedHAP's rate and epochs" in text
    assert "| FedHAP-3 (no discriminator) | 0.0005 | 1 |" in text


def test_the_rounds_table_names_only_the_epochs_of_the_methods_it_ran():
    from experiments.tables.real_data_setup import CENTRALIZED
    from experiments.tables.rounds_sweep import _epochs_words

    tuned = {"FedHAP": 3, "CSQ (FedAvg)": 3, "DPSH (FedAvg)": 15, CENTRALIZED: 1}
    rows = [{"method": "FedHAP"}, {"method": "DPSH (FedAvg)"}, {"method": CENTRALIZED}]
    assert _epochs_words(rows, tuned) == (
        f"local epochs tuned there too (DPSH (FedAvg) 15, FedHAP 3, {CENTRALIZED} 1); "
    )
    assert _epochs_words([{"method": "DCH (FedAvg)"}], tuned) == ""

"""The GPU runbook's repeat check: two deterministic runs compared bit for bit."""

from __future__ import annotations

from benchmarks.gpu_run import render, same_metrics, step_status

ROUNDS = [
    {"round": 0, "map_all": 0.1344521604448211, "map_at_k": 0.21},
    {"round": 1, "train_loss": 0.7650980268915496},
]


def test_equal_rounds_are_the_same():
    assert same_metrics(
        {"metrics_per_round": ROUNDS}, {"metrics_per_round": list(ROUNDS)}
    )


def test_one_bit_off_is_not_the_same():
    changed = [dict(ROUNDS[0]), {"round": 1, "train_loss": 0.7650980268915497}]
    assert (
        same_metrics({"metrics_per_round": ROUNDS}, {"metrics_per_round": changed})
        is False
    )


def test_a_failed_or_skipped_run_is_not_compared():
    assert same_metrics({}, {"metrics_per_round": ROUNDS}) is None
    assert same_metrics({"status": "skipped"}, {}) is None


def test_the_report_states_the_comparison():
    report = {
        "machine": {
            "cpus": 2,
            "python": "3.12",
            "torch": "2",
            "requested_device": "cuda",
        },
        "wall_s": 1.0,
        "budget_s": 10.0,
        "gpu_sampled": True,
        "steps": {
            "features-fedavg-deterministic-repeat": {
                "status": "ok",
                "same_as_first_run": False,
            }
        },
    }
    text = render(report)
    assert (
        "features-fedavg-deterministic-repeat: per-round losses and mAP NOT equal"
        in text
    )


def test_a_step_the_budget_stopped_says_so():
    assert step_status(0, finished=True) == "ok"
    assert step_status(124, finished=False).startswith("stopped: the budget ran out")
    assert step_status(1, finished=False) == "failed (exit 1)"
    assert step_status(0, finished=False) == "failed (exit 0)"


def _run_folder(path, *, client_loss: float, seconds: float):
    """A finished run folder whose round 1 has one client's loss and wall times."""
    import json

    path.mkdir()
    rows = [
        {"round": 0, "map_all": 0.1, "map_at_k": 0.2, "eval_seconds": seconds},
        {
            "round": 1,
            "train_loss": 0.5,
            "train_round_s": seconds,
            "clients": {"0": {"train-loss": client_loss}},
            "map_all": 0.3,
            "map_at_k": 0.4,
            "precision_at_k": {"10": 0.5},
            "elapsed_s": seconds,
        },
    ]
    (path / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "config.json").write_text("{}")
    (path / "summary.json").write_text(json.dumps({"final": {"map_all": 0.3}}))
    return path


def test_the_repeat_compares_every_field_but_wall_time(tmp_path):
    from benchmarks.gpu_run import run_summary

    first = run_summary(_run_folder(tmp_path / "a", client_loss=0.7, seconds=1.0))
    slower = run_summary(_run_folder(tmp_path / "b", client_loss=0.7, seconds=9.0))
    assert same_metrics(first, slower)  # only the wall times differ
    # a client's loss is a seeded number too: a repeat that differs there is not
    # the same run, even where the global loss and mAP agree
    other = run_summary(_run_folder(tmp_path / "c", client_loss=0.8, seconds=1.0))
    assert same_metrics(first, other) is False

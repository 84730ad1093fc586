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

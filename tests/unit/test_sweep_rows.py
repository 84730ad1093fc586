"""run_sweep (experiments.lib.runner): new rows name the machine that ran them."""

from __future__ import annotations

import json

from experiments.lib.runner import load_rows, run_sweep
from server.provenance import cpu_model, versions


def _sweep(tmp_path, jobs, resume):
    return run_sweep(
        jobs,
        lambda job: {"name": job, "value": len(job)},
        rows_path=tmp_path / "rows.jsonl",
        resume=resume,
        name=lambda job: job,
        describe=lambda row: str(row["value"]),
    )


def test_each_new_row_names_the_machine_that_ran_it(tmp_path) -> None:
    """The same seed gives the same metrics on one CPU model, not across them."""
    rows, failed = _sweep(tmp_path, ["a", "bb"], resume=False)
    assert failed == []
    want = {"cpu_model": cpu_model(), "torch": versions()["torch"]}
    assert want["cpu_model"]
    assert [r["machine"] for r in load_rows(tmp_path / "rows.jsonl")] == [want, want]


def test_a_resumed_row_keeps_the_machine_it_was_run_on(tmp_path) -> None:
    old = {"name": "a", "value": 1, "machine": {"cpu_model": "elsewhere"}}
    (tmp_path / "rows.jsonl").write_text(json.dumps(old) + "\n")
    rows, _ = _sweep(tmp_path, ["a", "bb"], resume=True)
    stored = load_rows(tmp_path / "rows.jsonl")
    assert stored[0] == old  # not restamped
    assert stored[1]["machine"]["cpu_model"] == cpu_model()

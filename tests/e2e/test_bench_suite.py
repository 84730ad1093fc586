"""``python -m experiments.suite --quick``: files and their shapes, not the numbers.

The cheapest paper that exercises the whole orchestration: DPcode on digits (its
driver's own ``--quick``, no Flower, about 50 s on 2 busy cores). Every Flower
paper's quick run is one to three simulations of about 3 min each here, so
``--paper all --quick`` (about 20 min) is not part of the test suite.
"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE_KEYS = {
    "paper",
    "runs",
    "command",
    "driver",
    "driver_args",
    "suite_command",
    "seeds",
    "dataset",
    "quick",
    "protocol",
    "git",
    "started_at",
    "finished_at",
    "wall_seconds",
    "returncode",
    "complete",
    "outputs",
}


def _suite(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "experiments.suite", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def test_quick_dpcode_writes_the_driver_outputs_and_suite_json(tmp_path) -> None:
    argv = ("--paper", "dpcode", "--dataset", "digits", "--quick")
    argv += ("--out", str(tmp_path))
    proc = _suite(*argv)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[suite 1/1] dpcode started" in proc.stdout
    assert "[suite 1/1] dpcode finished" in proc.stdout
    assert "dpcode | [" in proc.stdout  # the driver's own progress lines

    paper = tmp_path / "dpcode-digits"
    table = (paper / "table.md").read_text().splitlines()
    headers = [i for i, line in enumerate(table) if line.startswith("| method |")]
    assert headers
    assert table[headers[0] + 1].startswith("|---|")
    assert table[headers[0] + 2].startswith("| DPcode |")

    summary = json.loads((paper / "summary.json").read_text())
    assert summary["seeds"] == [0] and summary["aggregate"]
    rows = [json.loads(x) for x in (paper / "rows.jsonl").read_text().splitlines()]
    assert rows and all({"name", "f_score", "re"} <= set(r) for r in rows)
    assert (paper / "suite.log").read_text()

    record = json.loads((paper / "suite.json").read_text())
    assert SUITE_KEYS <= set(record)
    assert record["complete"] is True and record["returncode"] == 0
    assert record["paper"] == "dpcode" and record["seeds"] == [0]
    assert record["dataset"]["name"] == "digits" and record["quick"] is True
    assert record["command"].startswith("python -m experiments.dpcode figures ")
    assert "--quick" in record["driver_args"]
    assert "DPcode" in record["protocol"]["driver"]
    assert record["wall_seconds"] > 0
    assert record["outputs"] == ["table.md", "summary.json", "rows.jsonl"]

    # --resume: a complete paper with the same driver arguments is skipped
    again = _suite(*argv, "--resume")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "complete in" in again.stdout and "skipped" in again.stdout
    assert "dpcode | " not in again.stdout
    assert json.loads((paper / "suite.json").read_text()) == record

"""Issue 19: bad configs fail at once with one line and exit code 2; failed runs
fail ``make run``; ServerApp config errors are one log line; progress and ETA."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.lib.progress import SweepProgress, format_seconds
from server.experiment import eta_text
from server.local_superlink import status_main
from server.log_filters import ConfigErrorOneLine
from settings.run_settings import STRATEGIES, ConfigError
from tests.local_flower import make_run

ROOT = Path(__file__).resolve().parents[2]

BAD = [
    ("code-length=7", "code-length=7: accepted is [8, 256]"),
    ("strategy='fedfoo'", "strategy='fedfoo': accepted are fedavg"),
    (
        "dataset='npz' data-path='/nonexistent/features.npz'",
        "data-path='/nonexistent/features.npz': the data file does not exist",
    ),
    ("learning-rate=-1", "learning-rate=-1.0: must be > 0"),
    ("colde-length=32", "unknown config key 'colde-length'"),
]


def _check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "settings", "check", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(("override", "message"), BAD)
def test_check_refuses_each_bad_value_in_one_line(override, message):
    done = _check("--run-config", override)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: run config: ")
    assert message in lines[0]
    assert done.stdout == ""


def test_check_prints_the_resolved_config():
    done = _check("--run-config", "code-length=64 strategy='fedhap'")
    assert done.returncode == 0, done.stderr
    assert "code-length = 64" in done.stdout and 'strategy = "fedhap"' in done.stdout
    assert 'privacy.noise = "secure"' in done.stdout  # defaults are resolved too
    toml = _check("--run-config", "conf/fedhap.toml", "--quiet")
    assert toml.returncode == 0 and toml.stdout == ""


@pytest.mark.parametrize(
    "override",
    [
        "code-length=64 strategy='fedhap'",
        'run-name="a b" learning-rate=1e-3 dp-sgd.enabled=true seed=7',
        "dphe.clip=0.5  eval-every=2",
        "conf/fedhap.toml",
    ],
)
def test_run_config_parses_as_flower_parses_it(override):
    from flwr.common.config import parse_config_args

    from settings.check import parse_run_config

    assert parse_run_config([override]) == parse_config_args([override])


def test_every_method_has_both_sides_and_no_other():
    from strategies import client_side, server_side
    from strategies.catalog import query_actions

    assert sorted(STRATEGIES) == sorted(server_side.registered_strategies())
    assert sorted(STRATEGIES) == sorted(client_side.MODULES)
    for name in STRATEGIES:
        side = client_side.client_side(name)
        # the catalog names every query action a client side answers
        assert {a for a, m in query_actions().items() if m == name} == set(side.queries)
        trains = server_side.SIDES[name].info.trains
        assert (side.trainer is not None) == trains, name


def test_dphe_config_restates_the_obfuscator_names():
    from crypto.obfuscators import OBFUSCATORS
    from strategies.dphe.config import OBFUSCATORS as CONFIG_OBFUSCATORS

    assert OBFUSCATORS == CONFIG_OBFUSCATORS


def _record(exc: BaseException) -> logging.LogRecord:
    try:
        raise exc
    except BaseException:
        return logging.LogRecord(
            "flwr",
            logging.ERROR,
            __file__,
            1,
            "%s raised an exception",
            ("ServerApp",),
            sys.exc_info(),
        )


def test_serverapp_config_error_is_one_line_other_errors_keep_traceback():
    fmt = logging.Formatter("%(levelname)s: %(message)s")
    record = _record(ConfigError("code-length=7: accepted is [8, 256]"))
    assert ConfigErrorOneLine().filter(record)
    text = fmt.format(record)
    assert text == "ERROR: run config: code-length=7: accepted is [8, 256]"
    other = _record(RuntimeError("boom"))
    assert ConfigErrorOneLine().filter(other)
    assert "Traceback" in fmt.format(other)


def test_unactionable_flower_warnings_are_dropped():
    from server.log_filters import Unactionable

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("flwr", logging.WARNING, __file__, 1, msg, (), None)

    quiet = Unactionable()
    assert not quiet.filter(
        record("fraction_evaluate is set to 0.0. Federated evaluation will be skipped.")
    )
    assert quiet.filter(record("round 3: dropping reply from node 7: bad shape"))


def test_progress_lines_and_eta():
    assert eta_text(3, 10, []) == ""
    assert eta_text(3, 10, [2.0, 4.0]) == " | ETA 21 s"
    assert eta_text(10, 10, [2.0]) == ""
    assert eta_text(0, 30, [5.0]) == " | ETA 2 min 30 s"
    assert format_seconds(3725) == "1 h 2 min"
    progress = SweepProgress(4, done=1)
    line = progress.line("run-b: mAP 0.5")
    assert line.startswith("[2/4, ETA ") and line.endswith("] run-b: mAP 0.5")
    progress.line("c")
    assert progress.line("d").startswith("[4/4, ETA done]")


def test_status_without_a_started_run_is_a_failure(tmp_path, capsys):
    log = tmp_path / "last-run.log"
    log.write_text("Flower configuration not found.\n")
    assert status_main(str(tmp_path), str(log)) == 1
    assert "did not start" in capsys.readouterr().err


def test_make_run_refuses_a_bad_value_before_anything_starts(tmp_path):
    done = make_run("'code-length=7'")
    assert done.returncode == 2
    out = (done.stdout + done.stderr).strip().splitlines()
    errors = [line for line in out if "code-length=7" in line]
    assert errors == [
        "error: run config: code-length=7: accepted is [8, 256]"
    ]
    assert "SuperLink" not in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.parametrize(
    "variable, value, accepted",
    [("CLIENT_CPUS", v, "a number > 0 (CPUs per simulated client)")
     for v in ("0", "abc", "-1", "")]
    + [("NUM_CLIENTS", v, "a whole number >= 1 (simulated SuperNodes)")
       for v in ("0", "2.5", "abc", "-3", "")]
    + [("CLIENT_GPUS", v, "a number >= 0 (GPUs per simulated client)")
       for v in ("abc", "-1", "")],
)
def test_make_run_refuses_a_bad_make_variable_before_anything_starts(
    variable, value, accepted
):
    # Flower would start a SuperLink and Ray, then fail with a traceback (CLIENT_CPUS=0
    # tried on 2026-11-27: "Simulation failed", exit code 700)
    key = {
        "CLIENT_CPUS": "client_cpus",
        "NUM_CLIENTS": "clients",
        "CLIENT_GPUS": "client_gpus",
    }[variable]
    done = make_run("'rounds=1'", **{key: value})
    assert done.returncode == 2
    text = done.stdout + done.stderr
    assert f"error: {variable}={value}: accepted is {accepted}" in text
    assert "SuperLink" not in text and "Traceback" not in text

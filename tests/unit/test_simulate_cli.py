"""``experiments.simulate``: which results directory a run returns (no Ray)."""

from __future__ import annotations

import sys

import pytest

from experiments import simulate as sim


@pytest.fixture
def fake_run(monkeypatch):
    """Replace Flower's simulation by one that writes ``<results-dir>/run-<n>``."""
    made: list[str] = []

    def run_simulation(*, server_app, **kwargs):
        results = server_app
        results.mkdir(parents=True, exist_ok=True)
        (results / f"run-{len(made)}").mkdir()
        made.append(str(results))

    monkeypatch.setattr(sim, "run_simulation", run_simulation)
    # the fake ServerApp is where its results go: the config's results-dir
    monkeypatch.setattr(
        sim,
        "build_server_app",
        lambda overrides: sim.Path(overrides.get("results-dir", "results")),
    )
    monkeypatch.setattr(sim, "build_client_app", lambda overrides, node_log: None)
    return made


def test_the_cli_runs_without_a_results_dir_and_returns_the_new_run(
    tmp_path, monkeypatch, capsys, fake_run
) -> None:
    """The documented `python -m experiments.simulate --clients 10 --set rounds=20`.

    No ``results-dir`` given: the app's default (``results``), which already holds
    an earlier run; the run this call made is the one printed.
    """
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results" / "earlier-run").mkdir(parents=True)
    monkeypatch.setattr(
        sys, "argv", ["simulate", "--clients", "2", "--set", "rounds=1"]
    )
    sim.main()
    assert capsys.readouterr().out.strip() == "results/run-0"


def test_a_run_that_adds_no_directory_is_an_error_naming_the_folder(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(sim, "run_simulation", lambda **kwargs: None)
    monkeypatch.setattr(sim, "build_server_app", lambda overrides: None)
    monkeypatch.setattr(sim, "build_client_app", lambda overrides, node_log: None)
    (tmp_path / "old").mkdir()
    with pytest.raises(RuntimeError, match="expected one new finished run"):
        sim.simulate({"results-dir": str(tmp_path)}, num_clients=2)

"""Smoke test of ``benchmarks/import_closure.py`` and the split it measures."""

import json

import pytest

from benchmarks import import_closure


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("closure") / "import_closure.json"
    import_closure.main(["--out", str(out)])
    return json.loads(out.read_text())["results"]["this"]


def test_the_benchmark_writes_both_closures_and_the_circles(report):
    assert report["app_modules"] > 50
    for app in ("clientapp", "serverapp"):
        closure = report["closures"][app]
        assert closure["modules"] == len(closure["module_list"]) > 0
    assert report["circles"]["count"] == len(report["circles"]["components"])


def test_circles_are_found_in_a_made_up_graph():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_closure.circles(graph) == [["a", "b", "c"]]


def test_the_client_app_imports_its_half_only(report):
    client = report["closures"]["clientapp"]
    assert client["under_server"] == []
    assert not any(
        m.startswith("strategies.") and m.endswith(".strategy")
        for m in client["module_list"]
    )
    assert client["modules"] <= 60


def test_the_server_app_imports_no_client_trainer_and_nothing_circles(report):
    assert report["closures"]["serverapp"]["client_trainers"] == []
    assert report["circles"]["components"] == []


def test_a_fedavg_client_loads_no_other_method_and_no_server_code(report):
    loaded = report["closures"]["clientapp_fedavg_train"]["module_list"]
    assert "strategies.fedavg.trainer" in loaded
    # the other methods' config sections are the settings' (no torch there)
    other = ("server", "hashing.pfmh", "strategies.pfmh.", "strategies.dpcode.")
    # and the names of PFMH's loss forms its config section offers (no torch: the
    # empty package and hashing/pfmh/forms.py)
    names = {"hashing.pfmh", "hashing.pfmh.forms"}
    found = [
        m
        for m in loaded
        if m.startswith(other) and not m.endswith(".config") and m not in names
    ]
    assert found == []

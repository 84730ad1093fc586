"""Smoke test of ``benchmarks/settings_path.py`` (static, no imports of the app)."""

import json

from benchmarks import settings_path


def test_the_benchmark_follows_settings_from_run_experiment(tmp_path):
    out = tmp_path / "settings_path.json"
    settings_path.main(["--out", str(out)])
    this = json.loads(out.read_text())["this"]
    assert "server.experiment:run_experiment" in this["function_list"]
    # hooks of the method tables are followed: every strategy factory is visited
    for factory in ("fedavg", "fedprox", "fedhap", "pfmh"):
        assert any(f.endswith(f":{factory}") for f in this["function_list"]), factory
    assert this["functions"] == len(this["function_list"])
    assert this["files"] == len(this["file_list"])
    assert this["calls_back_up"] == len(this["back_up_list"])

"""A preset takes key=value overrides (``make run RUN_CONFIG=... OVERRIDES=...``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from settings.check import main, parse_run_config, write_overrides
from settings.run_settings import ConfigError

ROOT = Path(__file__).resolve().parents[2]
PRESET = str(ROOT / "conf" / "fedhap.toml")


def test_pairs_after_a_preset_override_its_keys():
    parsed = parse_run_config(
        [PRESET, "classes-per-client=2 rounds=4", "fedhap.mu=0.1"]
    )
    assert parsed["strategy"] == "fedhap"  # from the preset
    assert parsed["classes-per-client"] == 2  # the preset said 3
    assert parsed["rounds"] == 4 and parsed["fedhap.mu"] == 0.1


def test_a_preset_after_pairs_is_one_clear_error():
    with pytest.raises(ConfigError, match="must come first"):
        parse_run_config(["rounds=4", PRESET])


def test_the_written_file_is_what_flower_reads(tmp_path):
    from flwr.common.config import parse_config_args

    items = [PRESET, "rounds=4 run-name='a \"b\" c' dp-sgd.enabled=true"]
    out = write_overrides(items, tmp_path / "run.toml")
    assert parse_config_args([str(out)]) == parse_run_config(items)


def test_check_validates_the_overridden_value(tmp_path, capsys):
    out = tmp_path / "run.toml"
    args = ["check", "--run-config", PRESET, "--run-config", "code-length=7"]
    assert main([*args, "--write-overrides", str(out)]) == 2
    assert "code-length=7" in capsys.readouterr().err
    assert not out.exists()  # nothing written for a bad config

"""The container test's builders, checked with Flower's own parser and builder.

``make test-containers`` was red before it tested anything: its unsigned-FAB case
rebuilt an app from a FAB that Flower refused (``fab-exclude``'s ``docs/**`` matched
no file there), and its faults case submitted a run config written with the nested
``dphe`` table in JSON syntax, which is not TOML. Both builders now live in
``tests/container_kit.py``; these tests need no docker.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest
from flwr.cli.build import build_fab_from_disk
from flwr.common.config import parse_config_args

from settings.check import parse_run_config
from settings.run_settings import RunSettings
from tests.compose_local import ROOT
from tests.container_kit import app_from_fab, run_config_file, write_run_config

SMOKE = ROOT / "deploy" / "smoke-run.toml"


def test_run_config_file_parses_back_with_flowers_parser(tmp_path):
    extra = {"rounds": 5, "eval-every": 5, "results-dir": "/app/results/refused"}
    path = run_config_file(SMOKE, tmp_path / "faults.toml", **extra)
    # what `flwr run --run-config FILE` does with it
    parsed = parse_config_args([str(path)])
    assert parsed == {**parse_run_config([str(SMOKE)]), **extra}
    assert parsed["dphe.prototypes"] is True and parsed["rounds"] == 5
    RunSettings.from_config(parsed)  # and the app accepts it


def test_write_run_config_refuses_nested_values(tmp_path):
    with pytest.raises(ValueError, match="run-config key 'dphe': dict value"):
        write_run_config(tmp_path / "x.toml", {"dphe": {"prototypes": True}})


@pytest.fixture(scope="module")
def app_fab(tmp_path_factory) -> Path:
    """This repository's FAB, as ``deploy.fab_registry sign`` builds it."""
    path = tmp_path_factory.mktemp("fab") / "fedhash.fab"
    path.write_bytes(build_fab_from_disk(ROOT))
    return path


def _members(fab: bytes) -> set[str]:
    with zipfile.ZipFile(__import__("io").BytesIO(fab)) as bundle:
        return {m for m in bundle.namelist() if not m.startswith(".info/")}


def test_app_from_fab_builds_with_flower_and_has_its_own_hash(app_fab, tmp_path):
    # the old way, extraction alone, is refused by Flower's builder
    plain = tmp_path / "plain"
    with zipfile.ZipFile(app_fab) as bundle:
        for member in bundle.namelist():
            if not member.startswith(".info/"):
                bundle.extract(member, plain)
    with pytest.raises(ValueError, match=r'did not match any files: "docs/\*\*"'):
        build_fab_from_disk(plain)
    folder = app_from_fab(app_fab, tmp_path / "unsigned", "unsigned")
    rebuilt = build_fab_from_disk(folder)
    original = app_fab.read_bytes()
    assert hashlib.sha256(rebuilt).digest() != hashlib.sha256(original).digest()
    assert _members(rebuilt) == _members(original) | {"VARIANT.md"}

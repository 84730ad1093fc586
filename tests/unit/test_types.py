"""mypy over the framework-free packages (settings: pyproject.toml [tool.mypy])."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("hashing", "hashdata", "privacy", "crypto")
# A cold run (empty .mypy_cache) takes about 35 s on one core, a warm one about 1 s.
TIMEOUT_S = 300


@pytest.mark.skipif(
    importlib.util.find_spec("mypy") is None,
    reason="mypy is not installed (pip install -e '.[dev]')",
)
def test_mypy_clean() -> None:
    try:
        result = subprocess.run(
            [sys.executable, "-m", "mypy", *PACKAGES],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"mypy did not finish in {TIMEOUT_S} s: {error.output or ''}")
    if result.returncode != 0:
        pytest.fail(
            f"mypy {' '.join(PACKAGES)} exited {result.returncode}:\n"
            f"{result.stdout}{result.stderr}",
            pytrace=False,
        )

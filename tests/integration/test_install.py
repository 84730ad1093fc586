"""`make install`: a Python that is too old is one line before a venv is made; the
CPU-only torch build is one variable away."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_old_python_is_refused_in_one_line_before_any_venv(tmp_path):
    old = tmp_path / "python3.10"
    old.write_text(
        '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "Python 3.10.12"; exit 0; fi\n'
        "exit 1\n"  # `import sys; sys.exit(sys.version_info < (3, 11))` says too old
    )
    old.chmod(0o755)
    venv = tmp_path / "venv"
    done = _make("install", f"PYTHON={old}", f"VENV={venv}")
    assert done.returncode == 2, done.stdout + done.stderr
    first = done.stderr.splitlines()[0]
    assert first == (
        f"error: PYTHON={old} is Python 3.10.12; accepted: Python 3.11 or newer "
        "(make PYTHON=python3.11 ...)"
    )
    assert not venv.exists()


def test_a_missing_python_is_named(tmp_path):
    done = _make("install", "PYTHON=/nonexistent/python3", f"VENV={tmp_path / 'v'}")
    assert done.returncode == 2
    assert done.stderr.startswith("error: PYTHON=/nonexistent/python3 is not found;")


def _torch_install_line(stdout: str) -> str:
    commands = stdout.replace("\\\n", " ").splitlines()
    return next(c for c in commands if "torch==2.14.1" in c)


def test_torch_index_url_installs_the_cpu_build(tmp_path):
    venv = tmp_path / "venv"  # no stamp there: `make -n` prints the whole recipe
    cpu = _make("-n", "install", f"VENV={venv}", f"TORCH_INDEX_URL={CPU_INDEX}")
    assert cpu.returncode == 0, cpu.stderr
    assert f"pip install --quiet --index-url {CPU_INDEX} " in _torch_install_line(
        cpu.stdout
    )
    default = _make("-n", "install", f"VENV={venv}")
    assert "--index-url" not in _torch_install_line(default.stdout)

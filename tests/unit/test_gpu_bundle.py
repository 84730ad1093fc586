"""benchmarks/gpu_bundle.py: the wheel rewrite that makes Ray fit one device call.

The download and the Ray check need the network and a large wheel; they ran once
(docs/results/gpu/bundle/manifest-*.json). Here: a small synthetic wheel is
rewritten, its RECORD is verified (pip does not check it), pip installs it and it
imports.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from benchmarks.gpu_bundle import (
    pack,
    record_hash,
    requirements,
    rewrite_wheel,
    verify_record,
)


def _wheel(tmp: Path) -> Path:
    path = tmp / "toy-1.0-py3-none-any.whl"
    files = {
        "toy/__init__.py": b"VALUE = 42\n",
        "toy/jars/big.jar": b"x" * 5000,
        "toy/jars/more.jar": b"y" * 10,
        "toy/keep.txt": b"kept\n",
        "toy-1.0.dist-info/METADATA": (
            b"Metadata-Version: 2.1\nName: toy\nVersion: 1.0\n"
        ),
        "toy-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    record = [f"{n},{record_hash(d)},{len(d)}" for n, d in files.items()]
    record.append("toy-1.0.dist-info/RECORD,,")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("toy-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def test_rewrite_drops_members_stores_and_installs(tmp_path):
    src = _wheel(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    dst = out / src.name
    verify_record(src)
    info = rewrite_wheel(src, dst, drop=("toy/jars/",))
    verify_record(dst)
    assert info == {"dropped": 2, "dropped_bytes": 5010, "stripped": []}
    with zipfile.ZipFile(dst) as z:
        names = z.namelist()
        assert not [n for n in names if n.startswith("toy/jars/")]
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}
        record = z.read("toy-1.0.dist-info/RECORD").decode()
    assert "jars" not in record
    init_hash = record_hash(b"VALUE = 42\n")
    assert f"toy/__init__.py,{init_hash},11" in record
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--target",
            str(target),
            str(dst),
        ],
        check=True,
    )
    out = subprocess.run(
        [sys.executable, "-c", "import toy; print(toy.VALUE)"],
        env={"PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "42"
    assert not (target / "toy" / "jars").exists()


def test_a_wrong_record_hash_is_refused(tmp_path):
    """pip installs a wheel whose RECORD is wrong; verify_record refuses it."""
    src = _wheel(tmp_path)
    bad = tmp_path / "bad" / src.name
    bad.parent.mkdir()
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(bad, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item)
            if item.filename == "toy/__init__.py":
                data = b"VALUE = 43\n"
            zout.writestr(item, data)
    with pytest.raises(ValueError, match="toy/__init__.py does not match"):
        verify_record(bad)


def test_not_a_wheel(tmp_path):
    path = tmp_path / "x-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x/__init__.py", "")
    with pytest.raises(ValueError, match="no \\*.dist-info/RECORD"):
        rewrite_wheel(path, tmp_path / "y.whl")


def test_pack_and_requirements(tmp_path):
    wheel = _wheel(tmp_path)
    archive = tmp_path / "b.tar.xz"
    pack([wheel], archive, {"wheels": [wheel.name]})
    import tarfile

    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["MANIFEST.json", f"wheels/{wheel.name}"]
    reqs = requirements()
    assert "flwr==1.42.0" in reqs and "ray==2.55.1" in reqs
    assert all("==" in r for r in reqs)

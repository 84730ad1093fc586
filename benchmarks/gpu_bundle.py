"""The wheels the lent GPU machine lacks, packed to travel in one device call.

That machine has CPython 3.12 and PyTorch but no network, no Flower and no Ray, and
one call carries at most 64 MiB (the working tree included). The Ray 2.55.1 wheel
alone is 73.7 MB, 31.8 MB of it ``ray/jars`` (Java workers, unused by Python).

``python benchmarks/gpu_bundle.py DIR`` (or ``bash benchmarks/gpu_bundle.sh DIR``):

1. downloads the wheels of ``benchmarks/gpu_bundle.txt`` for the target interpreter
   (``--python-version``, default 3.12; manylinux x86-64) with ``pip download``;
2. rewrites the Ray wheel without ``ray/jars`` and, with ``--strip`` (default),
   with the symbol tables of its ELF binaries removed (``strip --strip-unneeded``:
   debug and symbol sections only, the code is unchanged); its ``RECORD`` is
   rewritten to match, so pip installs it and checks every hash;
3. stores every wheel uncompressed (a wheel is a zip; stored members let the outer
   xz see the bytes) and packs them, with ``MANIFEST.json`` (name, size, sha256 of
   each wheel), into ``DIR/gpu-bundle.tar.xz``; prints its size and the total.

``--check`` then unpacks the archive, installs every wheel with ``pip install
--no-index --no-deps --target`` and, in a fresh interpreter that imports from there
first, starts a local Ray cluster and runs a remote task (only meaningful when
``--python-version`` is this interpreter's: the check of a 3.12 bundle runs on the
GPU machine itself, in ``benchmarks/gpu_run.sh``).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "benchmarks" / "gpu_bundle.txt"
ARCHIVE = "gpu-bundle.tar.xz"
#: What one device call carries in all; the bundle must leave room for the tree.
LIMIT_MIB = 56
#: Members dropped from Ray's wheel: Java support (ray/jars), the dashboard's web
#: client (Flower starts Ray with include_dashboard=False) and Ray's libraries on top
#: of its core (RLlib, Tune, Train, Serve, Data, LLM), which neither Flower nor Ray's
#: core imports: Flower uses ``ray``, ``ray.util.actor_pool`` and
#: ``ray.util.scheduling_strategies``. Their console scripts (``serve``, ``tune``)
#: are installed but do not work.
RAY_DROP = (
    "ray/jars/",
    "ray/dashboard/client/build/",
    "ray/rllib/",
    "ray/tune/",
    "ray/train/",
    "ray/serve/",
    "ray/data/",
    "ray/llm/",
)
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)


def record_hash(data: bytes) -> str:
    """Return a wheel RECORD hash: ``sha256=`` + urlsafe base64, no padding."""
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _is_elf(data: bytes) -> bool:
    return data[:4] == b"\x7fELF"


def strip_elf(data: bytes) -> bytes:
    """Return ``data`` without its symbol and debug sections (``strip``)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "elf"
        path.write_bytes(data)
        subprocess.run(["strip", "--strip-unneeded", str(path)], check=True)
        return path.read_bytes()


def rewrite_wheel(
    src: Path,
    dst: Path,
    *,
    drop: tuple[str, ...] = (),
    strip: bool = False,
    strip_min_bytes: int = 1 << 20,
) -> dict:
    """Copy wheel ``src`` to ``dst``, rewritten.

    Members under ``drop`` are removed, ELF files of at least ``strip_min_bytes``
    stripped when ``strip``, every member stored uncompressed, and the
    ``*.dist-info/RECORD`` rewritten to the new contents.

    Returns ``{"dropped": n, "dropped_bytes": b, "stripped": [names]}``.
    """
    dropped, dropped_bytes, stripped = 0, 0, []
    members: list[tuple[zipfile.ZipInfo, bytes]] = []
    record_name = None
    with zipfile.ZipFile(src) as zin:
        for info in zin.infolist():
            if info.filename.endswith(".dist-info/RECORD"):
                record_name = info.filename
                continue
            if any(info.filename.startswith(p) for p in drop):
                dropped += 1
                dropped_bytes += info.file_size
                continue
            data = zin.read(info)
            if strip and len(data) >= strip_min_bytes and _is_elf(data):
                data = strip_elf(data)
                stripped.append(info.filename)
            members.append((info, data))
    if record_name is None:
        raise ValueError(f"{src.name}: not a wheel (no *.dist-info/RECORD)")
    lines = [f"{i.filename},{record_hash(d)},{len(d)}" for i, d in members]
    lines.append(f"{record_name},,")
    record = ("\n".join(lines) + "\n").encode()
    tmp = dst.with_name(dst.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as zout:
        for info, data in members:
            out = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            out.external_attr = info.external_attr
            out.compress_type = zipfile.ZIP_STORED
            zout.writestr(out, data)
        out = zipfile.ZipInfo(record_name, date_time=(2020, 1, 1, 0, 0, 0))
        out.external_attr = 0o644 << 16
        zout.writestr(out, record)
    os.replace(tmp, dst)
    return {"dropped": dropped, "dropped_bytes": dropped_bytes, "stripped": stripped}


def verify_record(wheel: Path) -> None:
    """Raise ``ValueError`` unless ``wheel``'s RECORD matches its members.

    Every member must be listed with its sha256 and size, and RECORD must list
    nothing else (pip does not check this when it installs a wheel, so the bundle
    checks it after every rewrite).
    """
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if not n.endswith("/")]
        record_name = next((n for n in names if n.endswith(".dist-info/RECORD")), None)
        if record_name is None:
            raise ValueError(f"{wheel.name}: no *.dist-info/RECORD")
        listed = {}
        for line in z.read(record_name).decode().splitlines():
            if line:
                name, digest, size = line.rsplit(",", 2)
                listed[name] = (digest, size)
        for name in names:
            if name == record_name:
                continue
            if name not in listed:
                raise ValueError(f"{wheel.name}: {name} is not in RECORD")
            data = z.read(name)
            if listed[name] != (record_hash(data), str(len(data))):
                raise ValueError(f"{wheel.name}: {name} does not match its RECORD line")
        extra = set(listed) - set(names)
        if extra:
            raise ValueError(
                f"{wheel.name}: RECORD lists missing files {sorted(extra)[:3]}"
            )


def requirements(path: Path = REQUIREMENTS) -> list[str]:
    """Return the pinned requirement lines of ``path`` (no comments, blanks)."""
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


def download(reqs: list[str], dest: Path, python_version: str) -> list[Path]:
    """``pip download`` the binary wheels of ``reqs`` for CPython ``python_version``."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        "-d",
        str(dest),
    ]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    subprocess.run(cmd + reqs, check=True)
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != len(reqs):
        raise RuntimeError(
            f"expected {len(reqs)} wheels in {dest}, found {len(wheels)}: "
            f"{[w.name for w in wheels]}"
        )
    return wheels


def pack(wheels: list[Path], archive: Path, manifest: dict) -> None:
    """Write ``wheels`` and ``MANIFEST.json`` into the xz tarball ``archive``."""
    tmp = archive.with_name(archive.name + ".tmp")
    # xz -9e: its 64 MiB window spans Ray's raylet, gcs_server and _raylet.so,
    # which share most of their code (Ray's xz: 24.3 MiB at -6, 17.8 at -9e)
    with tarfile.open(tmp, "w:xz", preset=9 | lzma.PRESET_EXTREME) as tar:
        for wheel in wheels:
            tar.add(wheel, arcname=f"wheels/{wheel.name}")
        data = json.dumps(manifest, indent=1).encode()
        info = tarfile.TarInfo("MANIFEST.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, archive)


def build(out_dir: Path, *, python_version: str = "3.12", strip: bool = True) -> dict:
    """Download, rewrite and pack the bundle into ``out_dir``; return its manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        # downloads are kept (out_dir/download): a rebuild does not fetch them again
        raw = download(requirements(), out_dir / "download", python_version)
        stored = Path(tmp) / "wheels"
        stored.mkdir()
        entries, ray_info = [], None
        for wheel in raw:
            dst = stored / wheel.name
            is_ray = wheel.name.startswith("ray-")
            info = rewrite_wheel(
                wheel, dst, drop=RAY_DROP if is_ray else (), strip=strip and is_ray
            )
            if is_ray:
                verify_record(dst)
                ray_info = {**info, "original_bytes": wheel.stat().st_size}
            entries.append(
                {
                    "wheel": wheel.name,
                    "downloaded_bytes": wheel.stat().st_size,
                    "stored_bytes": dst.stat().st_size,
                    "sha256": hashlib.sha256(dst.read_bytes()).hexdigest(),
                }
            )
        manifest = {
            "python_version": python_version,
            "platforms": list(PLATFORMS),
            "ray": ray_info,
            "wheels": entries,
        }
        archive = out_dir / ARCHIVE
        pack(sorted(stored.glob("*.whl")), archive, manifest)
    manifest["archive_bytes"] = archive.stat().st_size
    manifest["build_seconds"] = round(time.perf_counter() - t0, 1)
    (out_dir / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def install(archive: Path, target: Path) -> float:
    """Unpack ``archive`` and pip-install its wheels into ``target``; seconds taken."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        wheels = sorted(str(p) for p in Path(tmp, "wheels").glob("*.whl"))
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-index",
                "--no-deps",
                "--no-compile",
                "--no-cache-dir",
                "--upgrade",
                "--target",
                str(target),
                *wheels,
            ],
            check=True,
        )
    return time.perf_counter() - t0


RAY_TASK = """
import json, sys, time
t0 = time.perf_counter()
import ray
assert ray.__file__.startswith(sys.argv[1]), ray.__file__
ray.init(num_cpus=1, num_gpus=0, include_dashboard=False, log_to_driver=False)
@ray.remote
def square(x):
    return x * x
out = ray.get([square.remote(i) for i in range(4)])
ray.shutdown()
print(json.dumps({"ray": ray.__version__, "file": ray.__file__, "result": out,
                  "seconds": round(time.perf_counter() - t0, 1)}))
"""


def check(archive: Path) -> dict:
    """Install ``archive`` into a temporary folder and run a Ray task from it."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "site"
        seconds = install(archive, target)
        env = {**os.environ, "PYTHONPATH": str(target)}
        proc = subprocess.run(
            [sys.executable, "-c", RAY_TASK, str(target)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"ray from the bundle failed:\n{proc.stderr[-3000:]}")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        if result["result"] != [0, 1, 4, 9]:
            raise RuntimeError(f"ray task returned {result['result']}")
        jars = Path(target, "ray", "jars")
        return {**result, "install_seconds": round(seconds, 1), "jars": jars.exists()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="folder for gpu-bundle.tar.xz")
    parser.add_argument("--python-version", default="3.12")
    parser.add_argument(
        "--no-strip",
        dest="strip",
        action="store_false",
        help="keep the symbol tables of Ray's binaries",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="install the bundle into a temporary folder and run a Ray task",
    )
    args = parser.parse_args()
    if shutil.which("strip") is None and args.strip:
        parser.error("strip (binutils) not found: install it or pass --no-strip")
    manifest = build(args.out_dir, python_version=args.python_version, strip=args.strip)
    mib = manifest["archive_bytes"] / 2**20
    ray = manifest["ray"]
    print(
        f"{len(manifest['wheels'])} wheels for CPython {args.python_version}; Ray "
        f"{ray['original_bytes'] / 2**20:.1f} MiB wheel without {ray['dropped']} "
        f"files ({ray['dropped_bytes'] / 2**20:.1f} MiB unpacked: jars, dashboard "
        "client, libraries), "
        f"{len(ray['stripped'])} binaries stripped"
    )
    print(f"{args.out_dir / ARCHIVE}: {mib:.1f} MiB (limit {LIMIT_MIB} MiB)")
    if mib > LIMIT_MIB:
        sys.exit(f"error: the bundle is {mib:.1f} MiB, over {LIMIT_MIB} MiB")
    if args.check:
        result = check(args.out_dir / ARCHIVE)
        print(f"check: {json.dumps(result)}")
        manifest["check"] = result
        (args.out_dir / "MANIFEST.json").write_text(
            json.dumps(manifest, indent=1) + "\n"
        )


if __name__ == "__main__":
    main()

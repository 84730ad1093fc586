"""Register SuperNode public keys with the SuperLink: ``python -m deploy.register``.

Usage: ``python -m deploy.register [--connection fedhash] [--wait 120] KEY_OR_DIR...``.

With ``--enable-supernode-auth`` a Flower 1.42 SuperLink accepts only SuperNodes whose
public key was registered through its Control API beforehand (``flwr supernode
register <key.pub> <connection>``); a SuperNode with any other key is refused when it
activates. This runs that command for every ``*.pub`` given (or found in a folder),
retrying while the SuperLink is not up yet, and treats "already in use" as done, so
it can run again after a restart of a SuperLink that keeps its state
(``--database``). The connection (address, CA certificate) is read from
``$FLWR_HOME/config.toml``.

No Flower imports: it drives the ``flwr`` CLI.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ALREADY_REGISTERED = "Public key already in use"


def public_keys(paths: Sequence[str]) -> list[Path]:
    """Expand folders to their ``*.pub`` files (sorted); keep files as given."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        out.extend(sorted(path.glob("*.pub")) if path.is_dir() else [path])
    return out


def register_one(
    key: Path, *, connection: str, flwr: str, wait_s: float
) -> tuple[bool, str]:
    """Register one key; return ``(ok, message)``.

    Retries every 2 s until ``wait_s`` has passed while the CLI reports a failure
    other than "already in use" (typically: the SuperLink is not listening yet).
    """
    deadline = time.monotonic() + wait_s
    while True:
        proc = subprocess.run(
            [flwr, "supernode", "register", str(key), connection, "--format", "json"],
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            answer = json.loads(proc.stdout)
        except ValueError:
            answer = {"success": False, "error-message": proc.stdout + proc.stderr}
        if answer.get("success"):
            return True, f"{key.name}: registered as node {answer.get('node-id')}"
        error = str(answer.get("error-message", "")).strip()
        if ALREADY_REGISTERED in error:
            return True, f"{key.name}: already registered"
        if time.monotonic() > deadline:
            return False, f"{key.name}: {error.splitlines()[-1] if error else proc}"
        time.sleep(2.0)


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser."""
    parser = argparse.ArgumentParser(
        prog="python -m deploy.register",
        description="Register SuperNode public keys with a SuperLink that runs "
        "with --enable-supernode-auth.",
    )
    parser.add_argument("keys", nargs="+", help="*.pub files or folders of them")
    parser.add_argument(
        "--connection",
        default="fedhash",
        help="SuperLink connection in $FLWR_HOME/config.toml (default: %(default)s)",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=120.0,
        help="seconds to keep retrying while the SuperLink is unreachable",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Register every key; return 0 if all are registered, else 1 (2: bad args)."""
    args = build_parser().parse_args(argv)
    keys = public_keys(args.keys)
    missing = [str(k) for k in keys if not k.is_file()]
    if not keys or missing:
        wanted = missing or args.keys
        print(f"register: no such public key(s): {wanted}", file=sys.stderr)
        return 2
    flwr = shutil.which("flwr")
    if flwr is None:
        print("register: the flwr CLI is not on PATH", file=sys.stderr)
        return 2
    with ThreadPoolExecutor(max_workers=min(8, len(keys))) as pool:
        results = list(
            pool.map(
                lambda k: register_one(
                    k, connection=args.connection, flwr=flwr, wait_s=args.wait
                ),
                keys,
            )
        )
    for ok, message in results:
        print(
            message if ok else f"FAILED {message}", file=sys.stderr if not ok else None
        )
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())

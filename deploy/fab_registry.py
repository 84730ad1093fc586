"""Signed FABs for ``--trusted-entities``: ``python -m deploy.fab_registry``.

Usage::

    python -m deploy.fab_registry sign APP_DIR --key KEY [--key-id ID] --registry DIR
        [--version X.Y.Z] [--valid-days 30]
    python -m deploy.fab_registry serve --registry DIR [--host H] [--port P]
        --ssl-certfile CRT --ssl-keyfile KEY

Why this exists (Flower 1.42, checked in the installed source):

* ``flower-supernode --trusted-entities FILE`` (``supernode/start_client_internal.py``,
  ``_pull_and_store_message`` and ``_verify_fab``) runs a run's ClientApp only if the
  FAB the SuperLink hands out carries an Ed25519 signature, by a key listed in FILE,
  over ``signed_at (8 bytes, big-endian) || sha256(FAB)``. Anything else is answered
  with ``Error(INVALID_FAB, "The FAB could not be verified.")`` and never executed.
* The SuperLink fills a FAB's signatures (``Fab.verifications``) *only* for apps it
  downloads from Flower Hub (``superlink/servicer/control/control_handlers.py``:
  ``start_run`` -> ``_get_remote_fab`` -> ``request_download_link``). A FAB sent
  with ``flwr run <dir>`` always has no signatures, so it is refused by every
  SuperNode that has trusted entities. ``flwr app review`` is Flower's only signing
  command, and it signs apps *on Flower Hub*.
* The Hub's address is read from ``FLWR_SUPERGRID_API_URL``
  (``supercore/constant.py``). This module is a private, offline stand-in for the two
  Hub endpoints the SuperLink calls: ``POST {url}/hub/fetch-fab`` (download link and
  signatures) and the download itself. ``flwr run @fedhash/fedhash==0.1.0 fedhash``
  then makes the *stock* SuperLink fetch the FAB and its signatures from here, and
  the *stock* SuperNodes verify them with Flower's own code.

The registry need not be trusted: it cannot forge a signature, and a FAB it alters no
longer matches its signature. ``sign`` builds the FAB as ``flwr run`` / ``flwr build``
do (``flwr.cli.build.build_fab_from_files``, fixed timestamps) with the build's
version stamped into its ``pyproject.toml`` (one patch above the registry's newest,
unless ``--version`` says higher), signs it as ``flwr app review`` does, and also
signs a manifest (app id, version, sha256, expiry; ``deploy/fab_manifest.py``) that
the SuperNodes check through ``deploy/supernode_guard.py``: a registry that serves an
older or expired signed build is refused too.

Layout of DIR: ``<publisher>/<name>/<version>.fab`` and ``<version>.json``
(``{"fab_sha256": ..., "verifications": [{"public_key_id", "signature",
"signed_at", "manifest", "manifest_signature"}]}``, the Hub's format plus the
manifest, which Flower passes through to the SuperNodes).
"""

from __future__ import annotations

import argparse
import base64
import datetime
import hashlib
import json
import os
import re
import sys
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import Response
from packaging.version import Version

from deploy.fab_manifest import (
    DEFAULT_VALID_DAYS,
    VERSION,
    Manifest,
    sign_manifest,
    stamp_version,
)

APP_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
KEY_ID_FILE = "key-id"
API_PREFIX = "/v1"


def fab_paths(registry: Path, publisher: str, name: str, version: str) -> Path:
    """``<registry>/<publisher>/<name>/<version>`` (add ``.fab`` / ``.json``)."""
    for part in (publisher, name):
        if not APP_PART.match(part) or part in (".", ".."):
            raise ValueError(f"invalid app id part {part!r}")
    if not VERSION.match(version):
        raise ValueError(f"invalid version {version!r} (x.y.z, digits only)")
    return registry / publisher / name / version


def sign_fab(
    fab: bytes, private_key_path: Path, key_id: str, *, signed_at: int | None = None
) -> dict[str, Any]:
    """One verification record, as Flower Hub returns it, for ``fab``."""
    from flwr.supercore.primitives.asymmetric_ed25519 import (  # noqa: PLC0415
        create_message_to_sign,
        load_private_key,
        sign_message,
    )

    if signed_at is None:
        signed_at = int(datetime.datetime.now(datetime.UTC).timestamp())
    message = create_message_to_sign(hashlib.sha256(fab).digest(), signed_at)
    signature = sign_message(load_private_key(private_key_path), message)
    return {
        "public_key_id": key_id,
        "signature": base64.urlsafe_b64encode(signature).rstrip(b"=").decode(),
        "signed_at": signed_at,
    }


def read_key_id(private_key_path: Path, key_id: str | None) -> str:
    """``key_id`` or the one ``deploy.generate`` wrote next to the key."""
    if key_id:
        return key_id
    path = private_key_path.parent / KEY_ID_FILE
    if not path.is_file():
        raise ValueError(f"no --key-id and no {path}")
    return path.read_text().strip()


def registry_versions(registry: Path, fab_id: str) -> list[str]:
    """Versions of ``fab_id`` (``publisher/name``) the registry holds, oldest first."""
    publisher, name = fab_id.split("/")
    folder = fab_paths(registry, publisher, name, "0.0.0").parent
    found = [p.stem for p in folder.glob("*.fab") if VERSION.match(p.stem)]
    return sorted(found, key=Version)


def next_version(pyproject_version: str, held: Sequence[str]) -> str:
    """Return the version of a new build.

    The app's own, or one patch above the newest held, whichever is higher.
    """
    if not held:
        return pyproject_version
    newest = Version(held[-1])
    bumped = f"{newest.major}.{newest.minor}.{newest.micro + 1}"
    return max(pyproject_version, bumped, key=Version)


def publish(
    app_dir: Path,
    registry: Path,
    private_key_path: Path,
    key_id: str,
    *,
    version: str | None = None,
    valid_days: float = DEFAULT_VALID_DAYS,
    now: int | None = None,
) -> tuple[str, Path]:
    """Build, version and sign ``app_dir``'s FAB; return ``(app spec, fab path)``.

    The FAB and its manifest are signed and stored in ``registry``.

    ``version`` defaults to one patch above the registry's newest (or the app's own
    when that is higher); an explicit one must be above the newest. The manifest
    expires ``valid_days`` after signing.
    """
    from flwr.cli.build import build_fab_from_files, collect_files  # noqa: PLC0415
    from flwr.common.config import (  # noqa: PLC0415
        get_fab_config,
        get_metadata_from_config,
    )

    if not valid_days > 0:
        raise ValueError(f"--valid-days={valid_days}: accepted is a number > 0")
    files = dict(collect_files(app_dir.resolve()))
    pyproject = files["pyproject.toml"]
    raw = pyproject.read_bytes() if isinstance(pyproject, Path) else pyproject
    config = tomllib.loads(raw.decode())
    fab_id = f"{config['tool']['flwr']['app']['publisher']}/{config['project']['name']}"
    held = registry_versions(registry, fab_id)
    if version is None:
        version = next_version(config["project"]["version"], held)
    elif not VERSION.match(version):
        raise ValueError(f"--version={version}: accepted is x.y.z, digits only")
    elif held and Version(version) <= Version(held[-1]):
        raise ValueError(
            f"--version={version}: accepted is a version above {held[-1]}, the "
            "registry's newest (nodes refuse a build older than one they ran)"
        )
    files["pyproject.toml"] = stamp_version(raw, version)
    fab, _ = build_fab_from_files(files)
    built_id, built_version = get_metadata_from_config(get_fab_config(fab))
    if (built_id, built_version) != (fab_id, version):
        raise ValueError(
            f"built {built_id}=={built_version}, expected {fab_id}=={version}"
        )
    publisher, name = fab_id.split("/")
    base = fab_paths(registry, publisher, name, version)
    signed_at = int(now if now is not None else time.time())
    manifest = Manifest(
        fab_id=fab_id,
        version=version,
        fab_sha256=hashlib.sha256(fab).hexdigest(),
        signed_at=signed_at,
        expires_at=signed_at + int(valid_days * 86400),
    )
    verification = sign_fab(fab, private_key_path, key_id, signed_at=signed_at)
    verification.update(sign_manifest(manifest, private_key_path))
    record = {"fab_sha256": manifest.fab_sha256, "verifications": [verification]}
    base.parent.mkdir(parents=True, exist_ok=True)
    for suffix, data in ((".fab", fab), (".json", json.dumps(record).encode())):
        tmp = base.with_name(base.name + suffix + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, base.with_name(base.name + suffix))
    return f"@{publisher}/{name}=={version}", base.with_name(base.name + ".fab")


def create_app(registry: Path) -> FastAPI:
    """Serve the two Flower Hub endpoints a SuperLink calls from ``registry``."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    def locate(app_id: str, version: str | None) -> Path:
        if not isinstance(app_id, str) or not app_id.startswith("@"):
            raise HTTPException(404, detail=f"{app_id} not found")
        publisher, _, name = app_id[1:].partition("/")
        try:
            if version is None:
                folder = fab_paths(registry, publisher, name, "0.0.0").parent
                found = [p.stem for p in folder.glob("*.fab") if VERSION.match(p.stem)]
                if not found:
                    raise HTTPException(404, detail=f"{app_id} not found")
                version = max(found, key=Version)
            base = fab_paths(registry, publisher, name, version)
        except ValueError:
            raise HTTPException(404, detail=f"{app_id} not found") from None
        if not base.with_name(base.name + ".fab").is_file():
            raise HTTPException(404, detail=f"{app_id}=={version} not found")
        return base

    @app.get(API_PREFIX + "/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post(API_PREFIX + "/hub/fetch-fab")
    async def fetch_fab(request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            raise HTTPException(400, detail="JSON body expected") from None
        base = locate(body.get("app_id"), body.get("app_version"))
        meta = base.with_name(base.name + ".json")
        record = json.loads(meta.read_text()) if meta.is_file() else {}
        publisher, name = base.parent.parent.name, base.parent.name
        url = request.url_for(
            "fab_file", publisher=publisher, name=name, file=base.name + ".fab"
        )
        return {"fab_url": str(url), "verifications": record.get("verifications", [])}

    @app.get(API_PREFIX + "/fabs/{publisher}/{name}/{file}", name="fab_file")
    def fab_file(publisher: str, name: str, file: str) -> Response:
        if not file.endswith(".fab"):
            raise HTTPException(404)
        base = locate(f"@{publisher}/{name}", file[: -len(".fab")])
        return Response(
            base.with_name(base.name + ".fab").read_bytes(),
            media_type="application/octet-stream",
        )

    return app


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser (subcommands ``sign`` and ``serve``)."""
    parser = argparse.ArgumentParser(
        prog="python -m deploy.fab_registry",
        description="Sign FABs for SuperNodes with --trusted-entities and serve them "
        "to the SuperLink in Flower Hub's format (FLWR_SUPERGRID_API_URL).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sign = sub.add_parser("sign", help="build, sign and store an app's FAB")
    sign.add_argument("app", nargs="?", default=".", help="app folder (default: .)")
    sign.add_argument("--key", required=True, help="Ed25519 OpenSSH private key")
    sign.add_argument(
        "--key-id", default=None, help=f"public key id (default: {KEY_ID_FILE} file)"
    )
    sign.add_argument("--registry", required=True, help="registry folder")
    sign.add_argument(
        "--version",
        default=None,
        help="version of this build, x.y.z, above the registry's newest (default: "
        "one patch above it)",
    )
    sign.add_argument(
        "--valid-days",
        type=float,
        default=DEFAULT_VALID_DAYS,
        help=f"days until nodes refuse this build (default {DEFAULT_VALID_DAYS})",
    )
    serve = sub.add_parser("serve", help="serve the registry over HTTPS")
    serve.add_argument("--registry", required=True, help="registry folder")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8443)
    serve.add_argument("--ssl-certfile", default=None)
    serve.add_argument("--ssl-keyfile", default=None)
    serve.add_argument(
        "--insecure", action="store_true", help="plain HTTP (tests, loopback only)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run a subcommand; 0 on success, 2 on a refused argument."""
    args = build_parser().parse_args(argv)
    if args.command == "sign":
        key = Path(args.key)
        try:
            spec, fab = publish(
                Path(args.app),
                Path(args.registry),
                key,
                read_key_id(key, args.key_id),
                version=args.version,
                valid_days=args.valid_days,
            )
        except (ValueError, OSError) as error:
            print(f"fab_registry sign: {error}", file=sys.stderr)
            return 2
        print(f"signed {fab}")
        print(f"run it with: flwr run {spec} <connection> --stream ...")
        return 0
    if not args.insecure and not (args.ssl_certfile and args.ssl_keyfile):
        print("fab_registry serve: --ssl-certfile and --ssl-keyfile (or --insecure)")
        return 2
    import uvicorn  # noqa: PLC0415

    uvicorn.run(
        create_app(Path(args.registry)),
        host=args.host,
        port=args.port,
        ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile,
        log_level="info",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Signed FAB manifests: which app, which version, which bytes, until when.

Flower 1.42 signs a FAB over ``signed_at || sha256(FAB)`` only (``flwr app review``;
``flwr.supernode.start_client_internal._verify_fab`` checks it). That covers no
version and no expiry: a registry that need not be trusted can serve any FAB the
operator ever signed, the oldest included, and the SuperNode runs it.

So the operator also signs a **manifest** with the same Ed25519 key::

    {"fab_id": "fedhash/fedhash", "version": "0.1.4",
     "fab_sha256": "<hex>", "signed_at": <unix s>, "expires_at": <unix s>}

``python -m deploy.fab_registry sign`` writes it, with its signature, into the FAB's
verification record (Flower passes a record's extra fields through to the
SuperNode unchanged). The version is stamped into the FAB's ``pyproject.toml``
too, and each build gets a higher one than the registry holds.

The node checks it (:func:`check_manifest`, run in the SuperNode process by
``python -m deploy.supernode_guard``, from the node's image, not from the FAB):
the signature is by a trusted entity, the manifest names exactly these bytes and
this app and version, it has not expired, and its version is not older than the
newest this node has run (:class:`VersionLedger`, a file in the node's state
folder). A FAB older than one the node already ran is refused, whoever serves it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import tempfile
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version

DOMAIN = b"fedhash-fab-manifest-v1\n"  # signatures of manifests are nothing else
VERSION = re.compile(r"^\d+\.\d+\.\d+$")
LEDGER_FILE = "fab-versions.json"
DEFAULT_VALID_DAYS = 30


class ManifestRefused(ValueError):
    """The FAB's manifest fails a check; the message names the rule."""


@dataclass(frozen=True)
class Manifest:
    """What one signature vouches for."""

    fab_id: str  # "<publisher>/<name>"
    version: str  # x.y.z
    fab_sha256: str  # hex digest of the FAB's bytes
    signed_at: int  # unix seconds
    expires_at: int  # unix seconds; refused from then on

    def canonical(self) -> bytes:
        """Return the exact bytes that are signed."""
        return DOMAIN + json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_dict(cls, data: Any) -> Manifest:
        """Parse a manifest; ``ManifestRefused`` names what is malformed."""
        if not isinstance(data, dict) or set(data) != set(cls.__dataclass_fields__):
            raise ManifestRefused(
                f"manifest {data!r}: accepted is an object with exactly "
                f"{sorted(cls.__dataclass_fields__)}"
            )
        if not isinstance(data["version"], str) or not VERSION.match(data["version"]):
            raise ManifestRefused(f"manifest version {data['version']!r}: x.y.z")
        for key in ("signed_at", "expires_at"):
            if type(data[key]) is not int:
                raise ManifestRefused(f"manifest {key} {data[key]!r}: an integer")
        for key in ("fab_id", "fab_sha256"):
            if not isinstance(data[key], str):
                raise ManifestRefused(f"manifest {key} {data[key]!r}: a string")
        return cls(**data)


def fab_identity(fab: bytes) -> tuple[str, str]:
    """``(fab_id, version)`` from the FAB's own ``pyproject.toml``."""
    from flwr.common.config import (  # noqa: PLC0415
        get_fab_config,
        get_metadata_from_config,
    )

    return get_metadata_from_config(get_fab_config(fab))


def stamp_version(pyproject: bytes, version: str) -> bytes:
    """``pyproject.toml`` with ``[project] version`` set to ``version``."""
    import tomli_w  # noqa: PLC0415 (a Flower dependency)

    if not VERSION.match(version):
        raise ValueError(f"version {version!r}: accepted is x.y.z, digits only")
    config = tomllib.loads(pyproject.decode())
    config["project"]["version"] = version
    return tomli_w.dumps(config).encode()


def sign_manifest(manifest: Manifest, private_key_path: Path) -> dict[str, Any]:
    """Return the fields a verification record carries for ``manifest``."""
    from flwr.supercore.primitives.asymmetric_ed25519 import (  # noqa: PLC0415
        load_private_key,
        sign_message,
    )

    key = load_private_key(private_key_path)
    signature = sign_message(key, manifest.canonical())
    return {
        "manifest": asdict(manifest),
        "manifest_signature": base64.urlsafe_b64encode(signature).rstrip(b"=").decode(),
    }


def _verify_signature(public_key_ssh: str, message: bytes, signature: str) -> bool:
    from cryptography.hazmat.primitives.asymmetric import ed25519  # noqa: PLC0415
    from cryptography.hazmat.primitives.serialization import (  # noqa: PLC0415
        load_ssh_public_key,
    )
    from flwr.supercore.primitives.asymmetric_ed25519 import (  # noqa: PLC0415
        decode_base64url,
        verify_signature,
    )

    key = load_ssh_public_key(public_key_ssh.encode())
    if not isinstance(key, ed25519.Ed25519PublicKey):
        return False
    try:
        raw = decode_base64url(signature)
    except ValueError:
        return False
    return bool(verify_signature(key, message, raw))


def check_manifest(
    fab: bytes,
    verifications: dict[str, str],
    trusted_entities: dict[str, str],
    *,
    now: float,
) -> Manifest:
    """Return the manifest a trusted entity signed for exactly ``fab``, unexpired.

    ``verifications`` is what the SuperNode receives (``Fab.verifications``: key id
    -> JSON of the record). Raises ``ManifestRefused`` naming the failed rule.
    """
    digest = hashlib.sha256(fab).hexdigest()
    fab_id, version = fab_identity(fab)
    problems = []
    for key_id, raw in verifications.items():
        if key_id == "valid_license" or key_id not in trusted_entities:
            continue
        try:
            record = json.loads(raw)
        except (TypeError, ValueError):
            problems.append(f"{key_id}: record is not JSON")
            continue
        if "manifest" not in record:
            problems.append(f"{key_id}: no signed manifest (FAB signed without one)")
            continue
        manifest = Manifest.from_dict(record["manifest"])
        signature = record.get("manifest_signature")
        if not isinstance(signature, str) or not _verify_signature(
            trusted_entities[key_id], manifest.canonical(), signature
        ):
            problems.append(f"{key_id}: manifest signature does not verify")
            continue
        if manifest.fab_sha256 != digest:
            problems.append(f"{key_id}: manifest names other bytes than this FAB")
            continue
        if (manifest.fab_id, manifest.version) != (fab_id, version):
            problems.append(
                f"{key_id}: manifest names {manifest.fab_id}=={manifest.version}, "
                f"the FAB is {fab_id}=={version}"
            )
            continue
        if now >= manifest.expires_at:
            raise ManifestRefused(
                f"FAB {fab_id}=={version} expired: its manifest is valid until "
                f"{manifest.expires_at} (unix s), now is {int(now)}; sign a new build"
            )
        return manifest
    raise ManifestRefused(
        f"FAB {fab_id}=={version}: no valid manifest by a trusted entity ("
        + ("; ".join(problems) or "no record by a trusted entity")
        + ")"
    )


class VersionLedger:
    """The newest version of each app this node has run (its state folder).

    ``admit`` refuses a version older than the newest recorded, and the newest
    version with other bytes; otherwise it records the version (atomic write,
    0600) and returns.
    """

    def __init__(self, state_dir: Path) -> None:
        self.path = Path(state_dir) / LEDGER_FILE

    def load(self) -> dict[str, dict[str, str]]:
        """``{fab_id: {"version", "fab_sha256"}}``; empty when there is none."""
        if not self.path.exists():
            return {}
        data = json.loads(self.path.read_text())
        if not isinstance(data, dict):
            raise ManifestRefused(f"{self.path}: not a version ledger")
        return data

    def admit(self, manifest: Manifest) -> None:
        """Record ``manifest``'s version, or raise ``ManifestRefused``."""
        seen = self.load()
        newest = seen.get(manifest.fab_id)
        if newest is not None:
            if Version(manifest.version) < Version(newest["version"]):
                raise ManifestRefused(
                    f"FAB {manifest.fab_id}=={manifest.version} is older than "
                    f"{newest['version']}, which this node already ran; a node "
                    "never goes back to an older signed build"
                )
            if (
                manifest.version == newest["version"]
                and manifest.fab_sha256 != newest["fab_sha256"]
            ):
                raise ManifestRefused(
                    f"FAB {manifest.fab_id}=={manifest.version} has other bytes "
                    "than the build of that version this node ran; every build "
                    "needs a new version"
                )
            if manifest.version == newest["version"]:
                return
        seen[manifest.fab_id] = {
            "version": manifest.version,
            "fab_sha256": manifest.fab_sha256,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".fab-versions-")
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(seen, out, sort_keys=True)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

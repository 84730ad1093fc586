"""An untrusted FAB registry serves an older or expired signed build.

Flower 1.42 signs a FAB over ``signed_at || sha256(FAB)`` only, so its SuperNode
(``_verify_fab``) accepts every build the operator ever signed, the oldest one
included, whoever serves it: the registry (or the SuperLink) can roll a node back to
a build with a known flaw. Each test plays that registry against a tiny app signed by
``python -m deploy.fab_registry sign``'s code, and checks Flower's own verdict (the
attack gets through it) and the node's (``deploy/supernode_guard.py``: signed
manifest with version and expiry, and the node's ledger of versions it ran).
"""

from __future__ import annotations

import json
import logging
import textwrap
from pathlib import Path

import pytest
import yaml
from flwr.supercore.fab import Fab
from flwr.supernode.start_client_internal import _verify_fab

from deploy import supernode_guard
from deploy.fab_manifest import LEDGER_FILE, VersionLedger, check_manifest
from deploy.fab_registry import main as registry_main
from deploy.fab_registry import publish, registry_versions, sign_fab
from deploy.generate import make_fab_signing_key, trusted_entities_yaml

DAY = 86400
NOW = 1_900_000_000


@pytest.fixture()
def operator(tmp_path: Path):
    """A tiny Flower app, the operator's signing key and the node's trust file."""
    app = tmp_path / "app"
    (app / "tinyapp").mkdir(parents=True)
    (app / "tinyapp" / "__init__.py").write_text("")
    (app / "tinyapp" / "apps.py").write_text("app = None\n")
    (app / "pyproject.toml").write_text(
        textwrap.dedent(
            """\
            [build-system]
            requires = ["hatchling"]
            build-backend = "hatchling.build"

            [project]
            name = "tinyapp"
            version = "1.0.0"
            dependencies = []

            [tool.hatch.build.targets.wheel]
            packages = ["."]

            [tool.flwr.app]
            publisher = "operator"

            [tool.flwr.app.components]
            serverapp = "tinyapp.apps:app"
            clientapp = "tinyapp.apps:app"

            [tool.flwr.app.config]
            x = 1
            """
        )
    )
    private, public, key_id = make_fab_signing_key("operator")
    key = tmp_path / "signing.key"
    key.write_bytes(private)
    trusted = yaml.safe_load(trusted_entities_yaml({key_id: public.decode()}))
    return app, key, key_id, trusted, tmp_path / "fabs"


def _served(fab_path: Path) -> Fab:
    """The FAB as the SuperNode receives it (Flower's _format_verification)."""
    record = json.loads(fab_path.with_suffix(".json").read_text())
    fab = fab_path.read_bytes()
    verifications = {
        r["public_key_id"]: json.dumps(
            {k: v for k, v in r.items() if k != "public_key_id"}
        )
        for r in record["verifications"]
    }
    return Fab(record["fab_sha256"], fab, {**verifications, "valid_license": "Valid"})


def _node(tmp_path: Path, now: float = NOW):
    return supernode_guard.guarded(
        _verify_fab, VersionLedger(tmp_path / "node-state"), clock=lambda: now
    )


def test_fab_rollback_to_an_older_signed_build_is_refused(operator, caplog):
    app, key, key_id, trusted, registry = operator
    _, old = publish(app, registry, key, key_id, now=NOW)
    spec, new = publish(app, registry, key, key_id, now=NOW)
    assert registry_versions(registry, "operator/tinyapp") == ["1.0.0", "1.0.1"]
    assert spec == "@operator/tinyapp==1.0.1"
    node = _node(registry.parent)
    assert node(_served(new), trusted)  # the node runs 1.0.1
    # the attack: the registry serves 1.0.0, validly signed; Flower accepts it
    assert _verify_fab(_served(old), trusted)
    with caplog.at_level(logging.ERROR, logger="supernode_guard"):
        assert not node(_served(old), trusted)
    assert "1.0.0 is older than 1.0.1, which this node already ran" in caplog.text
    ledger = json.loads((registry.parent / "node-state" / LEDGER_FILE).read_text())
    assert ledger["operator/tinyapp"]["version"] == "1.0.1"
    mode = (registry.parent / "node-state" / LEDGER_FILE).stat().st_mode
    assert mode & 0o777 == 0o600
    assert node(_served(new), trusted)  # the same build again: fine


def test_fab_expired_or_without_manifest_is_refused(operator, caplog):
    app, key, key_id, trusted, registry = operator
    _, fab = publish(app, registry, key, key_id, now=NOW - 31 * DAY, valid_days=30)
    assert _verify_fab(_served(fab), trusted)  # Flower: no expiry
    with caplog.at_level(logging.ERROR, logger="supernode_guard"):
        assert not _node(registry.parent)(_served(fab), trusted)
    assert "expired" in caplog.text
    # a build signed the old way (Flower's signature only, no manifest)
    served = _served(fab)
    plain = sign_fab(served.content, key, key_id)
    bare = Fab(served.hash_str, served.content, {key_id: json.dumps(
        {k: v for k, v in plain.items() if k != "public_key_id"}),
        "valid_license": "Valid"})
    assert _verify_fab(bare, trusted)
    with pytest.raises(ValueError, match="no signed manifest"):
        check_manifest(bare.content, bare.verifications, trusted, now=NOW)


def test_fab_manifest_must_name_these_bytes_and_be_signed_by_a_trusted_key(
    operator, tmp_path
):
    app, key, key_id, trusted, registry = operator
    _, first = publish(app, registry, key, key_id, now=NOW)
    _, second = publish(app, registry, key, key_id, now=NOW)
    a, b = _served(first), _served(second)
    # b's manifest and signatures on a's bytes: Flower's check already fails, and
    # the manifest names other bytes
    swapped = Fab(a.hash_str, a.content, b.verifications)
    assert not _verify_fab(swapped, trusted)
    with pytest.raises(ValueError, match="other bytes than this FAB"):
        check_manifest(a.content, b.verifications, trusted, now=NOW)
    # a manifest signed by another key, under the trusted key id
    rogue_private, _, _ = make_fab_signing_key("rogue")
    rogue = tmp_path / "rogue.key"
    rogue.write_bytes(rogue_private)
    record = json.loads(a.verifications[key_id])
    from deploy.fab_manifest import Manifest, sign_manifest

    record.update(sign_manifest(Manifest(**record["manifest"]), rogue))
    forged = {key_id: json.dumps(record), "valid_license": "Valid"}
    with pytest.raises(ValueError, match="manifest signature does not verify"):
        check_manifest(a.content, forged, trusted, now=NOW)


def test_fab_same_version_with_other_bytes_is_refused(operator, tmp_path):
    app, key, key_id, trusted, registry = operator
    _, first = publish(app, registry, key, key_id, now=NOW)
    other_registry = tmp_path / "other"
    (app / "tinyapp" / "apps.py").write_text("app = 1\n")
    _, other = publish(app, other_registry, key, key_id, now=NOW)  # also 1.0.0
    node = _node(tmp_path)
    assert node(_served(first), trusted)
    assert _verify_fab(_served(other), trusted)
    assert not node(_served(other), trusted)


def test_fab_sign_refuses_a_version_not_above_the_registrys_newest(operator, capsys):
    app, key, key_id, _, registry = operator
    publish(app, registry, key, key_id, version="2.0.0", now=NOW)
    argv = ["sign", str(app), "--key", str(key), "--key-id", key_id]
    argv += ["--registry", str(registry)]
    assert registry_main([*argv, "--version", "2.0.0"]) == 2
    err = capsys.readouterr().err
    assert "--version=2.0.0: accepted is a version above 2.0.0" in err
    assert registry_main([*argv, "--valid-days", "0"]) == 2
    assert "--valid-days=0" in capsys.readouterr().err
    assert registry_versions(registry, "operator/tinyapp") == ["2.0.0"]


def test_fab_guard_hooks_the_supernodes_check(tmp_path, monkeypatch):
    import flwr.supernode.start_client_internal as sci

    monkeypatch.setattr(sci, "_verify_fab", sci._verify_fab)  # restored after
    supernode_guard.install(VersionLedger(tmp_path))
    assert sci._verify_fab.__qualname__.startswith("guarded.")
    assert supernode_guard.main(["--fab-state-dir", str(tmp_path)]) == 2

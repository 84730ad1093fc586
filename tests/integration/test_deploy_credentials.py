"""deploy.generate: certificates, SuperNode keys, secrets, bundles; a folder each."""

from __future__ import annotations

import stat
import tomllib

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import (
    load_pem_private_key,
    load_ssh_private_key,
    load_ssh_public_key,
)
from flwr.cli.supernode.register import try_load_public_key
from flwr.supercore.primitives.asymmetric import public_key_to_bytes

from crypto import load_client_bundle
from deploy.generate import Credentials, generate, main

N = 3


@pytest.fixture(scope="module")
def creds(tmp_path_factory: pytest.TempPathFactory) -> Credentials:
    return generate(
        tmp_path_factory.mktemp("gen") / "credentials",
        num_supernodes=N,
        key_bits=512,
        allow_test_keys=True,
        superlink_sans=["flwr.example.org", "10.0.0.5"],
    )


def _cert(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _sans(cert: x509.Certificate) -> set[str]:
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = set(ext.get_values_for_type(x509.DNSName))
    return names | {str(ip) for ip in ext.get_values_for_type(x509.IPAddress)}


def test_server_certificates_are_signed_by_the_ca_for_their_names(creds):
    ca = _cert(creds.ca_cert)
    expected = {
        # only its gateways reach the SuperLink: no public name
        creds.superlink: {"superlink", "superlink-core", "localhost", "127.0.0.1"}
        | {"::1"},
        creds.keyholder: {"keyholder", "localhost", "127.0.0.1"},
        # remote SuperNodes reach the gateway under the SuperLink's extra names
        creds.fleet_gateway: {"fleet-gateway", "localhost", "127.0.0.1"}
        | {"flwr.example.org", "10.0.0.5"},
        creds.control_gateway: {"control-gateway", "localhost", "127.0.0.1"}
        | {"flwr.example.org", "10.0.0.5"},
        creds.runtime_gateway: {"runtime-gateway", "localhost", "127.0.0.1"},
        creds.fab_registry: {"fab-registry", "localhost", "127.0.0.1"},
        **{creds.supernode(i): {f"supernode-{i}", "localhost"} for i in range(N)},
    }
    for folder, names in expected.items():
        cert = _cert(folder / "server.crt")
        cert.verify_directly_issued_by(ca)
        assert names <= _sans(cert), folder
        key = load_pem_private_key((folder / "server.key").read_bytes(), None)
        assert key.public_key() == cert.public_key()
        assert (folder / "ca.crt").read_bytes() == creds.ca_cert.read_bytes()
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_supernode_keys_are_what_flower_loads(creds):
    publics = set()
    for i in range(N):
        key = load_ssh_private_key((creds.supernode(i) / "auth.key").read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        assert key.curve.name == "secp384r1"
        # the bytes `flwr supernode register` sends for the .pub file
        registered = try_load_public_key(creds.public_key(i))
        assert registered == public_key_to_bytes(key.public_key())
        assert (
            creds.public_key(i).read_bytes()
            == (creds.supernode(i) / "auth.pub").read_bytes()
        )
        publics.add(registered)
    assert len(publics) == N


def test_each_folder_holds_only_what_its_service_may_read(creds):
    def names(folder):
        return {p.name for p in folder.iterdir()}

    assert names(creds.superlink) == {
        "ca.crt",
        "server.crt",
        "server.key",
        "superexec.secret",
    }
    assert names(creds.serverapp) == {"ca.crt", "superexec.secret", "aggregator.json"}
    assert names(creds.keyholder) == {
        "ca.crt",
        "server.crt",
        "server.key",
        "keyholder.json",
        "keyholder-streams.json",  # the stream parameters it pins (issue 12)
    }
    for i in range(N):
        assert names(creds.supernode(i)) == {
            "ca.crt",
            "auth.key",
            "auth.pub",
            "server.crt",
            "server.key",
            "superexec.secret",
            "trusted-entities.yaml",
        }
        assert names(creds.clientapp(i)) == {
            "ca.crt",
            "superexec.secret",
            f"client-{i}.json",
        }
        assert (
            load_client_bundle(creds.clientapp(i) / f"client-{i}.json").client_id == i
        )
    # no secret of the CA anywhere but ca/
    assert [p for p in creds.root.rglob("ca.key")] == [
        creds.ca_cert.with_name("ca.key")
    ]


def test_superexec_secrets_pair_each_runtime_api_with_its_executor(creds):
    def secret(folder):
        return (folder / "superexec.secret").read_bytes()

    assert secret(creds.superlink) == secret(creds.serverapp)
    node_secrets = {secret(creds.supernode(i)) for i in range(N)}
    assert len(node_secrets) == N and secret(creds.superlink) not in node_secrets
    for i in range(N):
        assert secret(creds.supernode(i)) == secret(creds.clientapp(i))
        assert len(secret(creds.clientapp(i))) == 64


def test_secrets_are_private(creds):
    private = [creds.ca_cert.with_name("ca.key"), creds.keyholder / "keyholder.json"]
    private += [creds.supernode(i) / "auth.key" for i in range(N)]
    private += list(creds.root.rglob("*.secret")) + list(creds.root.rglob("*.key"))
    for path in private:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for folder in (p for p in creds.root.rglob("*") if p.is_dir()):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_flower_homes_point_at_the_superlink(creds):
    host = tomllib.loads((creds.flwr_home / "config.toml").read_text())
    assert host["superlink"]["default"] == "fedhash"
    assert host["superlink"]["fedhash"] == {
        "address": "127.0.0.1:8000",
        "root-certificates": str(creds.ca_cert.resolve()),
    }
    assert host["superlink"]["fedhash-insecure"]["insecure"] is True
    cli = tomllib.loads((creds.root / "flwr-cli" / "config.toml").read_text())
    assert cli["superlink"]["fedhash"]["address"] == "control-gateway:9093"


def test_refusals(tmp_path, creds, capsys):
    with pytest.raises(ValueError, match="at least 3"):
        generate(tmp_path / "two", num_supernodes=2, dphe=False)
    with pytest.raises(FileExistsError, match="--overwrite"):
        generate(creds.root, dphe=False)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not written by deploy.generate"):
        generate(foreign, overwrite=True, dphe=False)
    assert (foreign / "keep.txt").exists()
    assert main(["--out", str(tmp_path / "x"), "--supernodes", "1"]) == 2
    assert "at least 3" in capsys.readouterr().err


def test_overwrite_replaces_everything_and_no_dphe_skips_bundles(tmp_path):
    out = tmp_path / "c"
    assert main(["--out", str(out), "--no-dphe"]) == 0
    first = (out / "superlink" / "server.crt").read_bytes()
    assert main(["--out", str(out), "--no-dphe", "--supernodes", "4"]) == 2
    assert (
        main(["--out", str(out), "--no-dphe", "--supernodes", "4", "--overwrite"]) == 0
    )
    assert (out / "superlink" / "server.crt").read_bytes() != first
    assert (out / "supernode-3" / "auth.key").is_file()
    assert not list(out.rglob("*.json"))


def test_fab_signing_key_and_trusted_entities_are_what_flower_loads(creds):
    from flwr.supercore.primitives.asymmetric_ed25519 import load_private_key
    from flwr.supernode.cli.flower_supernode import (
        _try_obtain_trusted_entities,
        _validate_public_keys_ed25519,
    )

    def names(folder):
        return {p.name for p in folder.iterdir()}

    signing = creds.fab_signing_key.parent
    assert names(signing) == {"fab-signing.key", "fab-signing.pub", "key-id"}
    assert stat.S_IMODE(creds.fab_signing_key.stat().st_mode) == 0o600
    key = load_private_key(creds.fab_signing_key)  # what `flwr app review` loads
    key_id = (signing / "key-id").read_text().strip()
    assert key_id.startswith("fpk_")
    for i in range(N):
        # what `flower-supernode --trusted-entities` reads and checks
        entities = _try_obtain_trusted_entities(creds.trusted_entities(i))
        _validate_public_keys_ed25519(entities)
        assert list(entities) == [key_id]
        assert load_ssh_public_key(entities[key_id].encode()) == key.public_key()
    for folder in (
        creds.fleet_gateway,
        creds.runtime_gateway,
        creds.control_gateway,
        creds.fab_registry,
    ):
        assert names(folder) == {"ca.crt", "server.crt", "server.key"}
    # the signing key is in no service's folder
    assert [p for p in creds.root.rglob("fab-signing.key")] == [creds.fab_signing_key]

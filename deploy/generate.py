"""Generate every credential a deployment needs: ``python -m deploy.generate``.

Usage: ``python -m deploy.generate [--out deploy/credentials] [--supernodes 3]
[--key-bits 2048] [--allow-test-keys] [--no-dphe] [--superlink-san NAME]
[--port 8000] [--overwrite]``.

One folder per consumer, so that each container mounts exactly what it may read:

=====================  ==========================================================
folder                 contents (who mounts it)
=====================  ==========================================================
``ca/``                ``ca.crt``, ``ca.key``: the private CA. Mounted nowhere;
                       keep ``ca.key`` offline.
``superlink/``         ``ca.crt``, ``server.crt``/``server.key`` (SANs ``superlink``,
                       ``superlink-core``, ``localhost``, ``127.0.0.1``, ``::1``),
                       ``superexec.secret`` (SuperLink)
``serverapp/``         ``ca.crt``, ``superexec.secret``, ``aggregator.json`` (the
                       ServerApp executor; ``dphe.key-dir`` points here)
``keyholder/``         ``ca.crt``, ``server.crt``/``server.key`` (SANs ``keyholder``,
                       ``localhost``, ``127.0.0.1``), ``keyholder.json`` (keyholder)
``supernode-<i>/``     ``ca.crt``, ``auth.key``/``auth.pub`` (SuperNode
                       authentication: an ECDSA P-384 key pair in OpenSSH format, as
                       Flower 1.42 expects), ``server.crt``/``server.key`` for the
                       node's Runtime API (SANs ``supernode-<i>``, ``localhost``,
                       ``127.0.0.1``), ``superexec.secret`` (SuperNode ``i``)
``clientapp-<i>/``     ``ca.crt``, ``superexec.secret``, ``client-<i>.json`` (the
                       ClientApp executor of node ``i``; node config
                       ``dphe-key-bundle`` points here)
``supernode-<i>/``     also ``trusted-entities.yaml``: the FAB signing key's
                       public half, for ``flower-supernode --trusted-entities``
``fleet-gateway/``     ``ca.crt``, ``server.crt``/``server.key`` (SANs
                       ``fleet-gateway``, loopback names and ``--superlink-san``):
                       the Fleet-only listener the SuperNodes connect to
``runtime-gateway/``   ``ca.crt``, ``server.crt``/``server.key`` (SANs
                       ``runtime-gateway``, loopback names): the Runtime-only
                       listener the ServerApp executor connects to
``control-gateway/``   ``ca.crt``, ``server.crt``/``server.key`` (SANs
                       ``control-gateway``, loopback names and ``--superlink-san``):
                       the Control-only listener published on the host's loopback
``fab-registry/``      ``ca.crt``, ``server.crt``/``server.key`` (SANs
                       ``fab-registry``, loopback names): where the SuperLink
                       fetches signed FABs (``deploy/fab_registry.py``)
``fab-signing/``       ``fab-signing.key`` (Ed25519, OpenSSH), ``fab-signing.pub``,
                       ``key-id``: the operator's FAB signing key. Mounted nowhere;
                       ``python -m deploy.fab_registry sign`` reads it on the host
``public-keys/``       ``supernode-<i>.pub``: what ``flwr supernode register`` reads
``flwr-home/``         ``config.toml`` with connections ``fedhash``
                       (``127.0.0.1:<port>``, TLS with ``ca/ca.crt``) and
                       ``fedhash-insecure``: ``FLWR_HOME`` for ``flwr run`` on the
                       host
``flwr-cli/``          ``config.toml`` with connection ``fedhash``
                       (``control-gateway:9093``)
                       and ``ca.crt``: the compose service that registers SuperNodes
=====================  ==========================================================

``superexec.secret`` files are the shared secrets with which Flower's SuperExec
authenticates to a Runtime API (``--superexec-auth-secret-file``): one for the
SuperLink and its ServerApp executor, one per SuperNode and its ClientApp executor.

Folders are ``0700``, secrets ``0600``. Only ``cryptography`` (a Flower dependency) is
needed, plus this repository's ``crypto`` package for the DPHE bundles (skip them with
``--no-dphe``). No Flower imports.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import secrets
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_OUT = Path("deploy/credentials")
MARKER = ".fedhash-credentials"
SUPERLINK_SERVICE = "superlink"
FLEET_GATEWAY_SERVICE = "fleet-gateway"
RUNTIME_GATEWAY_SERVICE = "runtime-gateway"
CONTROL_GATEWAY_SERVICE = "control-gateway"
CONTROL_GATEWAY_PORT = 9093
SUPERLINK_CORE_NAME = "superlink-core"  # its alias on the only network it listens on
FAB_REGISTRY_SERVICE = "fab-registry"
TRUSTED_ENTITIES_FILE = "trusted-entities.yaml"
KEYHOLDER_SERVICE = "keyholder"
COMPOSE_SUPERLINK_PORT = 8000
CONNECTION = "fedhash"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
MIN_SUPERNODES = 3


def supernode_service(index: int) -> str:
    """Compose service (and host) name of SuperNode ``index``."""
    return f"supernode-{index}"


@dataclass(frozen=True)
class Credentials:
    """Paths of a generated credentials folder (see the module docstring)."""

    root: Path
    num_supernodes: int

    @property
    def ca_cert(self) -> Path:
        """The CA certificate (PEM)."""
        return self.root / "ca" / "ca.crt"

    @property
    def superlink(self) -> Path:
        """The SuperLink's folder."""
        return self.root / "superlink"

    @property
    def serverapp(self) -> Path:
        """The ServerApp executor's folder (``dphe.key-dir``)."""
        return self.root / "serverapp"

    @property
    def keyholder(self) -> Path:
        """The keyholder's folder."""
        return self.root / "keyholder"

    def supernode(self, index: int) -> Path:
        """SuperNode ``index``'s folder."""
        return self.root / supernode_service(index)

    def clientapp(self, index: int) -> Path:
        """Folder of SuperNode ``index``'s ClientApp executor."""
        return self.root / f"clientapp-{index}"

    def public_key(self, index: int) -> Path:
        """SuperNode ``index``'s authentication public key (OpenSSH)."""
        return self.root / "public-keys" / f"{supernode_service(index)}.pub"

    @property
    def flwr_home(self) -> Path:
        """``FLWR_HOME`` for the host's ``flwr`` CLI."""
        return self.root / "flwr-home"

    @property
    def fleet_gateway(self) -> Path:
        """The Fleet gateway's folder (the SuperNodes' only way in)."""
        return self.root / FLEET_GATEWAY_SERVICE

    @property
    def runtime_gateway(self) -> Path:
        """The Runtime gateway's folder (the ServerApp executor's only way in)."""
        return self.root / RUNTIME_GATEWAY_SERVICE

    @property
    def control_gateway(self) -> Path:
        """The Control gateway's folder (the operator's host only)."""
        return self.root / CONTROL_GATEWAY_SERVICE

    @property
    def fab_registry(self) -> Path:
        """The signed-FAB registry's folder."""
        return self.root / FAB_REGISTRY_SERVICE

    @property
    def fab_signing_key(self) -> Path:
        """The operator's FAB signing key (Ed25519, OpenSSH); mounted nowhere."""
        return self.root / "fab-signing" / "fab-signing.key"

    def trusted_entities(self, index: int) -> Path:
        """SuperNode ``index``'s ``--trusted-entities`` file."""
        return self.supernode(index) / TRUSTED_ENTITIES_FILE


def _write(path: Path, data: bytes, *, secret: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    mode = 0o600 if secret else 0o644
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, mode)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fedhash deployment"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _san(names: Iterable[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in dict.fromkeys(names):  # keep order, drop duplicates
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_ca(*, days: int) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """Return a new self-signed CA (ECDSA P-256) valid for ``days`` days."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    name = _name("fedhash deployment CA")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    return key, cert


def make_server_cert(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    names: Sequence[str],
    *,
    days: int,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """Return a TLS server key and certificate for ``names`` (DNS names or IPs).

    The first name is the certificate's common name; all of them are SANs.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_san(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def make_auth_key_pair(comment: str) -> tuple[bytes, bytes]:
    """Return a SuperNode authentication key pair as OpenSSH ``(private, public)``.

    Flower 1.42 loads the private key with ``load_ssh_private_key`` and accepts
    NIST elliptic curves only; ``flwr supernode register`` reads the public key
    with ``load_ssh_public_key``.
    """
    private, public = _openssh_pair(ec.generate_private_key(ec.SECP384R1()))
    return private, public + f" {comment}\n".encode()


def make_fab_signing_key(comment: str) -> tuple[bytes, bytes, str]:
    """Return an Ed25519 FAB signing key as OpenSSH ``(private, public, key id)``.

    Flower 1.42's SuperNode accepts only Ed25519 trusted entities
    (``_validate_public_keys_ed25519``) and looks signatures up by key id; Flower Hub
    ids look like ``fpk_<uuid>``, and so do ours.
    """
    private, public = _openssh_pair(ed25519.Ed25519PrivateKey.generate())
    return private, public + f" {comment}".encode(), f"fpk_{uuid.uuid4()}"


def _openssh_pair(
    key: ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey,
) -> tuple[bytes, bytes]:
    """``(private PEM, public line)`` of ``key`` in OpenSSH formats, unencrypted."""
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private, public


def trusted_entities_yaml(entities: dict[str, str]) -> bytes:
    """``--trusted-entities`` YAML: ``{key id: 'ssh-ed25519 ...'}``."""
    lines = [f"{key_id}: '{public}'" for key_id, public in entities.items()]
    return ("\n".join(lines) + "\n").encode()


def connection_toml(
    *, address: str, root_certificates: str, with_insecure: bool = False
) -> str:
    """``config.toml`` of a Flower home: TLS connection ``fedhash`` (the default).

    ``with_insecure`` adds ``fedhash-insecure`` (same address, no TLS) for
    ``deploy/docker-compose.insecure.yml``.
    """
    text = (
        "[superlink]\n"
        f'default = "{CONNECTION}"\n\n'
        f"[superlink.{CONNECTION}]\n"
        f'address = "{address}"\n'
        f'root-certificates = "{root_certificates}"\n'
    )
    if with_insecure:
        text += (
            f"\n[superlink.{CONNECTION}-insecure]\n"
            f'address = "{address}"\n'
            "insecure = true\n"
        )
    return text


def generate(
    out: str | os.PathLike[str],
    *,
    num_supernodes: int = 3,
    dphe: bool = True,
    key_bits: int = 2048,
    allow_test_keys: bool = False,
    superlink_sans: Sequence[str] = (),
    host_port: int = COMPOSE_SUPERLINK_PORT,
    days: int = 365,
    overwrite: bool = False,
) -> Credentials:
    """Write CA, TLS certificates, SuperNode keys, SuperExec secrets, DPHE bundles.

    Parameters
    ----------
    out : path
        Output folder (created ``0700``).
    num_supernodes : int
        Number of SuperNodes (>= 3: DPHE aggregates need 3 contributors).
    dphe : bool
        Also write the DPHE bundles (``crypto.keys.generate_keys``).
    key_bits : int
        Paillier modulus size (2048 or 3072; smaller needs ``allow_test_keys``).
    allow_test_keys : bool
        Accept insecure small Paillier keys (tests only).
    superlink_sans : sequence of str
        Extra DNS names / IPs for the SuperLink certificate (a remote host name).
    host_port : int
        SuperLink port written in ``flwr-home/config.toml``.
    days : int
        Validity of the CA and certificates.
    overwrite : bool
        Replace an existing credentials folder (only one this script wrote).

    Returns
    -------
    Credentials
        The paths.

    Raises
    ------
    ValueError
        On a bad argument.
    FileExistsError
        If ``out`` is not empty and ``overwrite`` is False, or is not ours.
    """
    if num_supernodes < MIN_SUPERNODES:
        raise ValueError(
            f"--supernodes {num_supernodes}: DPHE aggregates need at least "
            f"{MIN_SUPERNODES} contributors, so deploy >= {MIN_SUPERNODES} SuperNodes"
        )
    if days < 1:
        raise ValueError(f"--days {days}: must be >= 1")
    root = Path(out)
    if root.exists() and any(root.iterdir()):
        if not overwrite:
            raise FileExistsError(
                f"{root} is not empty: pass --overwrite to replace its credentials"
            )
        if not (root / MARKER).is_file():
            raise FileExistsError(
                f"{root} was not written by deploy.generate (no {MARKER}): refusing "
                "to delete it"
            )
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(root, 0o700)
    creds = Credentials(root=root, num_supernodes=num_supernodes)
    _write(root / MARKER, b"written by python -m deploy.generate\n", secret=False)

    ca_key, ca_cert = make_ca(days=days)
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    _write(creds.ca_cert, ca_pem, secret=False)
    _write(creds.ca_cert.with_name("ca.key"), _key_pem(ca_key), secret=True)

    def server(folder: Path, names: Sequence[str]) -> None:
        key, cert = make_server_cert(ca_key, ca_cert, names, days=days)
        _write(folder / "server.key", _key_pem(key), secret=True)
        _write(
            folder / "server.crt",
            cert.public_bytes(serialization.Encoding.PEM),
            secret=False,
        )

    def secret() -> bytes:
        return secrets.token_hex(32).encode("ascii")

    link_secret = secret()
    # the SuperLink is reached only by its gateways (and its own health check)
    server(creds.superlink, [SUPERLINK_SERVICE, SUPERLINK_CORE_NAME, *LOOPBACK_NAMES])
    _write(creds.superlink / "superexec.secret", link_secret, secret=True)
    _write(creds.serverapp / "superexec.secret", link_secret, secret=True)
    server(creds.keyholder, [KEYHOLDER_SERVICE, *LOOPBACK_NAMES])
    # the SuperNodes reach the SuperLink through the gateway, under the same names
    # SuperNodes reach the Fleet gateway, the operator the Control gateway, under
    # the SuperLink's public names (--superlink-san)
    server(
        creds.fleet_gateway, [FLEET_GATEWAY_SERVICE, *LOOPBACK_NAMES, *superlink_sans]
    )
    server(
        creds.control_gateway,
        [CONTROL_GATEWAY_SERVICE, *LOOPBACK_NAMES, *superlink_sans],
    )
    server(creds.runtime_gateway, [RUNTIME_GATEWAY_SERVICE, *LOOPBACK_NAMES])
    server(creds.fab_registry, [FAB_REGISTRY_SERVICE, *LOOPBACK_NAMES])
    signing_private, signing_public, signing_id = make_fab_signing_key("fab-signing")
    _write(creds.fab_signing_key, signing_private, secret=True)
    _write(
        creds.fab_signing_key.with_suffix(".pub"), signing_public + b"\n", secret=False
    )
    _write(creds.fab_signing_key.with_name("key-id"), signing_id.encode(), secret=False)
    trusted = trusted_entities_yaml({signing_id: signing_public.decode()})
    for folder in (
        creds.superlink,
        creds.serverapp,
        creds.keyholder,
        creds.fleet_gateway,
        creds.runtime_gateway,
        creds.control_gateway,
        creds.fab_registry,
    ):
        _write(folder / "ca.crt", ca_pem, secret=False)
    for i in range(num_supernodes):
        node, app = creds.supernode(i), creds.clientapp(i)
        private, public = make_auth_key_pair(supernode_service(i))
        _write(node / "auth.key", private, secret=True)
        _write(node / "auth.pub", public, secret=False)
        _write(creds.public_key(i), public, secret=False)
        _write(creds.trusted_entities(i), trusted, secret=False)
        server(node, [supernode_service(i), *LOOPBACK_NAMES])
        node_secret = secret()
        _write(node / "superexec.secret", node_secret, secret=True)
        _write(app / "superexec.secret", node_secret, secret=True)
        for folder in (node, app):
            _write(folder / "ca.crt", ca_pem, secret=False)
    _write(
        creds.flwr_home / "config.toml",
        connection_toml(
            address=f"127.0.0.1:{host_port}",
            root_certificates=str(creds.ca_cert.resolve()),
            with_insecure=True,
        ).encode(),
        secret=False,
    )
    cli = root / "flwr-cli"
    _write(cli / "ca.crt", ca_pem, secret=False)
    _write(
        cli / "config.toml",
        connection_toml(
            address=f"{CONTROL_GATEWAY_SERVICE}:{CONTROL_GATEWAY_PORT}",
            root_certificates="/credentials/ca.crt",
        ).encode(),
        secret=False,
    )
    if dphe:
        _write_dphe_bundles(creds, key_bits=key_bits, allow_test_keys=allow_test_keys)
    return creds


def _write_dphe_bundles(
    creds: Credentials, *, key_bits: int, allow_test_keys: bool
) -> None:
    try:
        from crypto.keys import (
            AGGREGATOR_FILE,
            KEYHOLDER_FILE,
            client_file,
            generate_keys,
        )
    except ImportError as exc:
        raise RuntimeError(
            f"DPHE bundles need this repository's crypto package ({exc}); run from "
            "the repository root with its dependencies installed, or pass --no-dphe"
        ) from None
    with tempfile.TemporaryDirectory(dir=creds.root) as tmp:
        paths = generate_keys(
            Path(tmp) / "dphe",
            num_clients=creds.num_supernodes,
            key_bits=key_bits,
            allow_test_keys=allow_test_keys,
        )
        os.replace(paths.keyholder, creds.keyholder / KEYHOLDER_FILE)
        os.replace(paths.aggregator, creds.serverapp / AGGREGATOR_FILE)
        for i, path in enumerate(paths.clients):
            os.replace(path, creds.clientapp(i) / client_file(i))
    # the keyholder pins its streams' parameters itself (--streams): those of the
    # deploy preset; rewrite with
    # `python -m strategies.dphe.keyholder_streams` for another
    from crypto.keyholder import write_streams_file
    from strategies.dphe.keyholder_streams import read_run_config, run_streams

    preset = Path(__file__).resolve().parents[1] / "conf" / "deploy-fedhap-dphe.toml"
    write_streams_file(
        creds.keyholder / "keyholder-streams.json",
        run_streams(read_run_config(str(preset), []), key_bits=key_bits),
    )


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser."""
    parser = argparse.ArgumentParser(
        prog="python -m deploy.generate",
        description="Generate the CA, TLS certificates, SuperNode authentication "
        "keys, SuperExec secrets and DPHE bundles of a deployment.",
    )
    parser.add_argument(
        "--out", default=str(DEFAULT_OUT), help="output folder (default: %(default)s)"
    )
    parser.add_argument(
        "--supernodes",
        type=int,
        default=3,
        help="number of SuperNodes, >= 3 (default: %(default)s)",
    )
    parser.add_argument(
        "--key-bits", type=int, default=2048, help="Paillier modulus bits"
    )
    parser.add_argument(
        "--allow-test-keys",
        action="store_true",
        help="accept insecure small Paillier keys (tests only)",
    )
    parser.add_argument(
        "--no-dphe", action="store_true", help="do not write DPHE key bundles"
    )
    parser.add_argument(
        "--superlink-san",
        action="append",
        default=[],
        metavar="NAME",
        help="extra DNS name or IP of the SuperLink certificate (repeatable)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=COMPOSE_SUPERLINK_PORT,
        help="SuperLink port for flwr-home/config.toml (default: %(default)s)",
    )
    parser.add_argument(
        "--days", type=int, default=365, help="certificate validity in days"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing folder"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the generator; return the exit status (2 on a refused argument)."""
    args = build_parser().parse_args(argv)
    try:
        creds = generate(
            args.out,
            num_supernodes=args.supernodes,
            dphe=not args.no_dphe,
            key_bits=args.key_bits,
            allow_test_keys=args.allow_test_keys,
            superlink_sans=args.superlink_san,
            host_port=args.port,
            days=args.days,
            overwrite=args.overwrite,
        )
    except (ValueError, FileExistsError, RuntimeError) as error:
        print(f"generate: {error}", file=sys.stderr)
        return 2
    print(
        f"credentials for 1 SuperLink and {creds.num_supernodes} SuperNodes in "
        f"{creds.root}/"
    )
    print(f"  keep {creds.ca_cert.with_name('ca.key')} offline; it is mounted nowhere")
    print(f"  flwr on this host: export FLWR_HOME={creds.flwr_home.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

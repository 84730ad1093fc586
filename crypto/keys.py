"""Key generation and key bundles for DPHE (the paper's key generator G).

:func:`generate_keys` creates one Paillier key pair, the user-shared permutation seed
``phi_seed``, one user-aggregator permutation seed per client, one client-keyholder
MAC key per client and an auth token, and writes one JSON bundle per role, each
holding only what that role may know:

================  =============================================================
bundle            contents
================  =============================================================
keyholder.json    ``n``, ``p``, ``q`` (the secret key), ``phi_seed``, every
                  client's ``mac_key``, auth token
aggregator.json   ``n``, every client's seed, auth token (no ``p``/``q``, no
                  ``phi_seed``, no MAC key: the aggregator can neither decrypt,
                  undo phi, nor forge a client's tags or touch-set MACs)
client-<id>.json  ``n``, ``phi_seed``, this client's own seed and ``mac_key``
================  =============================================================

The MAC keys (32 bytes each, version 2 of the bundle format) let the keyholder check
that what it decrypts is an honest sum of authentic client contributions
(:mod:`crypto.dphe`, :mod:`crypto.keyholder`). A version-1 bundle (without MAC
keys) is refused with an error naming the missing field and telling to rerun
``python -m crypto.keygen``.

The auth token is shared by the keyholder and the aggregator: the keyholder service
(:mod:`crypto.keyholder_service`) only serves requests bearing it. Big integers are
stored as hex strings, seeds as hex. The directory is made ``0o700`` and every file
is written ``0o600`` atomically (temporary file, then rename).

Key sizes: 2048 or 3072 bits. Smaller keys are insecure and only accepted with
``allow_test_keys=True`` (for tests and benchmarks); their bundles say
``"test_key": true`` and loaders expose it as ``bundle.test_key``.

No Flower imports.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import secrets
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gmpy2
import numpy as np
from phe import paillier

from crypto.permutation import SEED_BYTES, keyed_permutation

BUNDLE_FORMAT = "fedhash-dphe-bundle"
BUNDLE_VERSION = 2
PRODUCTION_KEY_BITS = (2048, 3072)
MIN_TEST_KEY_BITS = 256
MIN_CLIENTS = 3
KEYHOLDER_FILE = "keyholder.json"
AGGREGATOR_FILE = "aggregator.json"
ROLE_KEYHOLDER = "keyholder"
ROLE_AGGREGATOR = "aggregator"
ROLE_CLIENT = "client"
PHI_LABEL = "phi"
"""Label of the user-shared permutation phi over the ``D + 1`` coordinates."""
PHI_N_LABEL = "phi_n"
"""Label of a user-aggregator permutation phi_n over the blocks."""
MAC_KEY_BYTES = 32
"""Length of a client-keyholder MAC key."""
PHI_CACHE_SIZE = 8
"""Most permutations phi a holder keeps (phi changes every round and stream)."""


def client_file(client_id: int) -> str:
    """File name of client ``client_id``'s bundle (``client-<id>.json``)."""
    return f"client-{client_id}.json"


def key_id_of(n: int) -> bytes:
    """Identify a Paillier public key: SHA-256 of ``n`` (big-endian, minimal bytes).

    Parameters
    ----------
    n : int
        Paillier modulus.

    Returns
    -------
    bytes
        32-byte digest.
    """
    return hashlib.sha256(
        int(n).to_bytes((int(n).bit_length() + 7) // 8, "big")
    ).digest()


class _PublicKeyHolder:
    """The public-key part every bundle shares (needs an ``n`` attribute)."""

    n: int

    @functools.cached_property
    def public_key(self) -> paillier.PaillierPublicKey:
        """The Paillier public key."""
        return paillier.PaillierPublicKey(self.n)

    @property
    def key_id(self) -> bytes:
        """32-byte SHA-256 identifier of the public key (:func:`key_id_of`)."""
        return key_id_of(self.n)


class _PhiHolder(_PublicKeyHolder):
    """Holders of the user-shared permutation's seed: clients and the keyholder."""

    phi_seed: bytes
    _permutations: dict[Any, np.ndarray]

    def phi(self, size: int, context: str = "") -> np.ndarray:
        """User-shared permutation phi of ``size`` coordinates (LRU-cached).

        Parameters
        ----------
        size : int
            Number of coordinates ``D + 1``.
        context : str
            Appended to the SHAKE-256 label: :mod:`crypto.dphe` passes the session,
            stream and round, so phi is fresh for every aggregation. The cache keeps
            the last :data:`PHI_CACHE_SIZE` permutations.

        Returns
        -------
        np.ndarray
            ``(size,)`` int64; coordinate ``i`` goes to phi-space position ``phi[i]``.
        """
        label = f"{PHI_LABEL}/{context}" if context else PHI_LABEL
        key = (label, int(size))
        cache = self._permutations
        perm = cache.pop(key, None)
        if perm is None:
            perm = keyed_permutation(self.phi_seed, int(size), label)
            perm.setflags(write=False)
        cache[key] = perm  # most recent last
        while len(cache) > PHI_CACHE_SIZE:
            del cache[next(iter(cache))]
        return perm


@dataclass(frozen=True)
class ClientBundle(_PhiHolder):
    """What client (user) ``client_id`` holds: public key, phi seed, its own seed.

    Parameters
    ----------
    client_id : int
        The client's id (Flower partition id), ``>= 0``.
    n : int
        Paillier modulus (public key).
    phi_seed : bytes
        32-byte seed of the user-shared permutation phi.
    client_seed : bytes
        32-byte seed of this client's user-aggregator permutation phi_n.
    key_bits : int
        Bit length of ``n``.
    mac_key : bytes
        32-byte key shared with the keyholder only: block tags and touch-set MAC.
    test_key : bool
        True for an insecure test-size key.
    """

    client_id: int
    n: int = field(repr=False)
    phi_seed: bytes = field(repr=False)
    client_seed: bytes = field(repr=False)
    key_bits: int
    mac_key: bytes = field(repr=False)
    test_key: bool = False
    _permutations: dict[Any, np.ndarray] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _phi_n: dict[Any, np.ndarray] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def phi_n(self, num_blocks: int) -> np.ndarray:
        """Return this client's user-aggregator permutation phi_n (cached).

        Parameters
        ----------
        num_blocks : int
            Number of blocks.

        Returns
        -------
        np.ndarray
            ``(num_blocks,)`` int64; phi-space block ``b`` is sent as ``phi_n[b]``.
        """
        return _cached(self._phi_n, self.client_seed, num_blocks, PHI_N_LABEL)


@dataclass(frozen=True)
class AggregatorBundle(_PublicKeyHolder):
    """What the aggregator holds: public key, every client's seed, the auth token.

    Parameters
    ----------
    n : int
        Paillier modulus (public key).
    client_seeds : dict of int to bytes
        Client id -> 32-byte seed of that client's permutation phi_n.
    auth_token : str
        Bearer token for the keyholder service.
    key_bits : int
        Bit length of ``n``.
    test_key : bool
        True for an insecure test-size key.
    """

    n: int = field(repr=False)
    client_seeds: dict[int, bytes] = field(repr=False)
    auth_token: str = field(repr=False)
    key_bits: int
    test_key: bool = False
    _permutations: dict[tuple[Any, ...], np.ndarray] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def num_clients(self) -> int:
        """Number of clients with a seed."""
        return len(self.client_seeds)

    def phi_n(self, client_id: int, num_blocks: int) -> np.ndarray:
        """Client ``client_id``'s user-aggregator permutation (cached).

        Parameters
        ----------
        client_id : int
            A client id with a seed in this bundle.
        num_blocks : int
            Number of blocks.

        Returns
        -------
        np.ndarray
            ``(num_blocks,)`` int64; phi-space block ``b`` arrives as ``phi_n[b]``.

        Raises
        ------
        ValueError
            If the client id is unknown.
        """
        seed = self.client_seeds.get(client_id)
        if seed is None:
            raise ValueError(
                f"unknown client id {client_id!r}: the aggregator bundle has seeds "
                f"for {self.num_clients} clients"
            )
        return _cached(self._permutations, seed, num_blocks, PHI_N_LABEL, client_id)


@dataclass(frozen=True)
class KeyholderBundle(_PhiHolder):
    """What the keyholder holds: the secret key, the phi seed, the auth token.

    Parameters
    ----------
    n : int
        Paillier modulus.
    p, q : int
        Its prime factors (the secret key).
    phi_seed : bytes
        32-byte seed of the user-shared permutation phi.
    auth_token : str
        Bearer token the aggregator must present.
    key_bits : int
        Bit length of ``n``.
    mac_keys : dict of int to bytes
        Client id -> that client's 32-byte MAC key.
    test_key : bool
        True for an insecure test-size key.
    """

    n: int = field(repr=False)
    p: int = field(repr=False)
    q: int = field(repr=False)
    phi_seed: bytes = field(repr=False)
    auth_token: str = field(repr=False)
    key_bits: int
    mac_keys: dict[int, bytes] = field(repr=False)
    test_key: bool = False
    _permutations: dict[Any, np.ndarray] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @functools.cached_property
    def private_key(self) -> paillier.PaillierPrivateKey:
        """The Paillier private key (never leaves the keyholder)."""
        return paillier.PaillierPrivateKey(self.public_key, self.p, self.q)


@dataclass(frozen=True)
class KeyPaths:
    """Where :func:`generate_keys` wrote the bundles.

    Parameters
    ----------
    directory : Path
        Output directory (mode ``0o700``).
    keyholder : Path
        The keyholder bundle.
    aggregator : Path
        The aggregator bundle.
    clients : tuple of Path
        Client bundles, indexed by client id.
    """

    directory: Path
    keyholder: Path
    aggregator: Path
    clients: tuple[Path, ...]


def check_key_bits(key_bits: int, *, allow_test_keys: bool) -> None:
    """Accept 2048 or 3072 bits; with ``allow_test_keys`` any multiple of 8 >= 256.

    Raises
    ------
    ValueError
        Naming the size and what is accepted.
    """
    if isinstance(key_bits, bool) or not isinstance(key_bits, int):
        raise ValueError(f"key_bits must be an integer, got {type(key_bits).__name__}")
    if key_bits in PRODUCTION_KEY_BITS:
        return
    if not allow_test_keys:
        raise ValueError(
            f"key_bits must be one of {PRODUCTION_KEY_BITS}, got {key_bits}; smaller "
            "keys are insecure and need allow_test_keys=True (tests only)"
        )
    if key_bits < MIN_TEST_KEY_BITS or key_bits % 8:
        raise ValueError(
            f"test key_bits must be a multiple of 8 >= {MIN_TEST_KEY_BITS}, "
            f"got {key_bits}"
        )


def generate_keys(
    out_dir: str | os.PathLike[str],
    *,
    num_clients: int,
    key_bits: int = 2048,
    allow_test_keys: bool = False,
    overwrite: bool = False,
) -> KeyPaths:
    """Generate the Paillier key, permutation seeds and auth token; write the bundles.

    Parameters
    ----------
    out_dir : path
        Output directory; created with mode ``0o700`` (tightened to ``0o700`` if it
        exists with group/other permissions).
    num_clients : int
        Number of clients ``N`` (ids ``0 .. N-1``), ``>= 3`` (DPHE needs N >= 3).
    key_bits : int
        Paillier modulus size: 2048 or 3072 (see :func:`check_key_bits`).
    allow_test_keys : bool
        Accept insecure small keys (bundles are marked ``"test_key": true``).
    overwrite : bool
        Replace existing bundles; otherwise existing bundles are an error.

    Returns
    -------
    KeyPaths
        Paths of the written bundles.

    Raises
    ------
    ValueError
        If ``num_clients`` or ``key_bits`` is out of range.
    FileExistsError
        If a bundle exists and ``overwrite`` is False.
    """
    if isinstance(num_clients, bool) or not isinstance(num_clients, int):
        raise ValueError(
            f"num_clients must be an integer, got {type(num_clients).__name__}"
        )
    if num_clients < MIN_CLIENTS:
        raise ValueError(
            f"num_clients must be >= {MIN_CLIENTS} (DPHE needs at least 3 users), "
            f"got {num_clients}"
        )
    check_key_bits(key_bits, allow_test_keys=allow_test_keys)
    directory = Path(out_dir)
    targets = {
        ROLE_KEYHOLDER: directory / KEYHOLDER_FILE,
        ROLE_AGGREGATOR: directory / AGGREGATOR_FILE,
    }
    client_paths = tuple(directory / client_file(i) for i in range(num_clients))
    existing = [p for p in (*targets.values(), *client_paths) if p.exists()]
    if existing and not overwrite:
        raise FileExistsError(
            f"refusing to overwrite existing bundles {[str(p) for p in existing]}; "
            "pass overwrite=True (--overwrite) to replace them"
        )
    _make_private_dir(directory)

    public_key, private_key = paillier.generate_paillier_keypair(n_length=key_bits)
    n = public_key.n
    test_key = key_bits not in PRODUCTION_KEY_BITS
    phi_seed = secrets.token_bytes(SEED_BYTES)
    client_seeds = [secrets.token_bytes(SEED_BYTES) for _ in range(num_clients)]
    mac_keys = [secrets.token_bytes(MAC_KEY_BYTES) for _ in range(num_clients)]
    auth_token = secrets.token_hex(32)
    common = {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "key_bits": key_bits,
        "test_key": test_key,
        "key_id": key_id_of(n).hex(),
        "n": _hex(n),
    }
    _write_json(
        targets[ROLE_KEYHOLDER],
        {
            "role": ROLE_KEYHOLDER,
            **common,
            "p": _hex(private_key.p),
            "q": _hex(private_key.q),
            "phi_seed": phi_seed.hex(),
            "mac_keys": {str(i): k.hex() for i, k in enumerate(mac_keys)},
            "auth_token": auth_token,
        },
    )
    _write_json(
        targets[ROLE_AGGREGATOR],
        {
            "role": ROLE_AGGREGATOR,
            **common,
            "client_seeds": {str(i): s.hex() for i, s in enumerate(client_seeds)},
            "auth_token": auth_token,
        },
    )
    for client_id, (path, seed, mac_key) in enumerate(
        zip(client_paths, client_seeds, mac_keys, strict=True)
    ):
        _write_json(
            path,
            {
                "role": ROLE_CLIENT,
                **common,
                "client_id": client_id,
                "phi_seed": phi_seed.hex(),
                "client_seed": seed.hex(),
                "mac_key": mac_key.hex(),
            },
        )
    return KeyPaths(
        directory=directory,
        keyholder=targets[ROLE_KEYHOLDER],
        aggregator=targets[ROLE_AGGREGATOR],
        clients=client_paths,
    )


def load_client_bundle(
    path: str | os.PathLike[str], *, client_id: int | None = None
) -> ClientBundle:
    """Load a client bundle.

    Parameters
    ----------
    path : path
        ``client-<id>.json``.
    client_id : int, optional
        If given, the bundle must belong to this client.

    Returns
    -------
    ClientBundle
        The client's public key and seeds.

    Raises
    ------
    FileNotFoundError
        If the file is missing.
    ValueError
        If it is not valid JSON, has the wrong role, belongs to another client or has
        a malformed field.
    """
    data, where = _read_bundle(path, ROLE_CLIENT)
    n, key_bits, test_key = _common_fields(data, where)
    bundle_id = _get_int(data, "client_id", where, low=0)
    if client_id is not None and bundle_id != client_id:
        raise ValueError(
            f"{where} belongs to client {bundle_id}, not to client {client_id}"
        )
    return ClientBundle(
        client_id=bundle_id,
        n=n,
        phi_seed=_get_seed(data, "phi_seed", where),
        client_seed=_get_seed(data, "client_seed", where),
        key_bits=key_bits,
        mac_key=_parse_seed(_required(data, "mac_key", where), "mac_key", where),
        test_key=test_key,
    )


def load_aggregator_bundle(path: str | os.PathLike[str]) -> AggregatorBundle:
    """Load the aggregator bundle.

    Parameters
    ----------
    path : path
        ``aggregator.json``.

    Returns
    -------
    AggregatorBundle
        Public key, every client's seed and the auth token.

    Raises
    ------
    FileNotFoundError
        If the file is missing.
    ValueError
        If it is not valid JSON, has the wrong role or a malformed field.
    """
    data, where = _read_bundle(path, ROLE_AGGREGATOR)
    n, key_bits, test_key = _common_fields(data, where)
    seeds = _seed_map(data, "client_seeds", where)
    return AggregatorBundle(
        n=n,
        client_seeds=seeds,
        auth_token=_get_token(data, where),
        key_bits=key_bits,
        test_key=test_key,
    )


def load_keyholder_bundle(path: str | os.PathLike[str]) -> KeyholderBundle:
    """Load the keyholder bundle.

    Parameters
    ----------
    path : path
        ``keyholder.json``.

    Returns
    -------
    KeyholderBundle
        Secret key, phi seed and auth token.

    Raises
    ------
    FileNotFoundError
        If the file is missing.
    ValueError
        If it is not valid JSON, has the wrong role, a malformed field, or ``p``,
        ``q`` are not distinct primes with ``p * q == n``.
    """
    data, where = _read_bundle(path, ROLE_KEYHOLDER)
    n, key_bits, test_key = _common_fields(data, where)
    p = _get_hex_int(data, "p", where)
    q = _get_hex_int(data, "q", where)
    if p * q != n or p == q or not (gmpy2.is_prime(p) and gmpy2.is_prime(q)):
        raise ValueError(f"{where}: p and q are not distinct primes with p * q == n")
    return KeyholderBundle(
        n=n,
        p=p,
        q=q,
        phi_seed=_get_seed(data, "phi_seed", where),
        auth_token=_get_token(data, where),
        key_bits=key_bits,
        mac_keys=_seed_map(data, "mac_keys", where),
        test_key=test_key,
    )


def _required(data: Mapping[str, Any], name: str, where: str) -> object:
    if name not in data:
        raise ValueError(
            f"{where} has no {name!r} (the client-keyholder MAC key(s) of bundle "
            f"version {BUNDLE_VERSION}): rerun `python -m crypto.keygen` and give "
            "every party its new bundle"
        )
    return data[name]


def _seed_map(data: Mapping[str, Any], name: str, where: str) -> dict[int, bytes]:
    raw = _required(data, name, where)
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError(f"{where}: {name} must be a non-empty object")
    seeds: dict[int, bytes] = {}
    for key, value in raw.items():
        if not (isinstance(key, str) and key.isdigit()):
            raise ValueError(f"{where}: {name} key {key!r} is not a client id")
        seeds[int(key)] = _parse_seed(value, f"{name}[{key}]", where)
    return dict(sorted(seeds.items()))


def _cached(
    cache: dict[Any, np.ndarray], seed: bytes, size: int, label: str, *extra: int
) -> np.ndarray:
    key = (label, int(size), *extra)
    perm = cache.get(key)
    if perm is None:
        perm = keyed_permutation(seed, int(size), label)
        perm.setflags(write=False)
        cache[key] = perm
    return perm


# --- file helpers -------------------------------------------------------------------


def _hex(value: int) -> str:
    return format(int(value), "x")


def _make_private_dir(directory: Path) -> None:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if stat.S_IMODE(directory.stat().st_mode) & 0o077:
        os.chmod(directory, 0o700)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically with mode 0o600."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _read_bundle(path: str | os.PathLike[str], role: str) -> tuple[dict[str, Any], str]:
    where = f"{role} bundle {os.fspath(path)}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{where} not found (generate keys with `python -m crypto.keygen`)"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{where} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where} must hold a JSON object")
    if data.get("format") == BUNDLE_FORMAT and data.get("version") == 1:
        raise ValueError(
            f"{where} is a version-1 bundle without 'mac_key'/'mac_keys' (the "
            "client-keyholder MAC keys that let the keyholder refuse forged sums): "
            "rerun `python -m crypto.keygen` and give every party its new bundle"
        )
    if data.get("format") != BUNDLE_FORMAT or data.get("version") != BUNDLE_VERSION:
        raise ValueError(
            f"{where} is not a {BUNDLE_FORMAT} version {BUNDLE_VERSION} file "
            f"(format={data.get('format')!r}, version={data.get('version')!r})"
        )
    if data.get("role") != role:
        raise ValueError(f"{where} has role {data.get('role')!r}, expected {role!r}")
    return data, where


def _common_fields(data: Mapping[str, Any], where: str) -> tuple[int, int, bool]:
    key_bits = _get_int(data, "key_bits", where, low=MIN_TEST_KEY_BITS)
    test_key = data.get("test_key")
    if not isinstance(test_key, bool):
        raise ValueError(f"{where}: test_key must be true or false")
    try:
        check_key_bits(key_bits, allow_test_keys=test_key)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    n = _get_hex_int(data, "n", where)
    if n.bit_length() != key_bits:
        raise ValueError(
            f"{where}: n has {n.bit_length()} bits but key_bits is {key_bits}"
        )
    recorded = data.get("key_id")
    if recorded != key_id_of(n).hex():
        raise ValueError(f"{where}: key_id does not match n")
    return n, key_bits, test_key


def _get_int(data: Mapping[str, Any], name: str, where: str, *, low: int) -> int:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{where}: {name} must be an integer >= {low}, got {value!r}")
    return value


def _get_hex_int(data: Mapping[str, Any], name: str, where: str) -> int:
    value = data.get(name)
    try:
        if not isinstance(value, str):
            raise TypeError
        number = int(value, 16)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {name} must be a hex string") from None
    if number <= 1:
        raise ValueError(f"{where}: {name} must be > 1")
    return number


def _get_seed(data: Mapping[str, Any], name: str, where: str) -> bytes:
    return _parse_seed(data.get(name), name, where)


def _parse_seed(value: object, name: str, where: str) -> bytes:
    try:
        if not isinstance(value, str):
            raise TypeError
        seed = bytes.fromhex(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {name} must be a hex string") from None
    if len(seed) != SEED_BYTES:
        raise ValueError(f"{where}: {name} must be {SEED_BYTES} bytes, got {len(seed)}")
    return seed


def _get_token(data: Mapping[str, Any], where: str) -> str:
    token = data.get("auth_token")
    if not isinstance(token, str) or len(token) < 32:
        raise ValueError(f"{where}: auth_token must be a string of >= 32 characters")
    return token

"""Tests of DPHE key generation, bundles and the keygen command line."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from crypto import keygen
from crypto.keys import (
    KeyPaths,
    generate_keys,
    key_id_of,
    load_aggregator_bundle,
    load_client_bundle,
    load_keyholder_bundle,
)

NUM_CLIENTS = 4


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPaths:
    out = tmp_path_factory.mktemp("dphe") / "keys"
    return generate_keys(
        out, num_clients=NUM_CLIENTS, key_bits=512, allow_test_keys=True
    )


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def test_files_written_with_private_permissions(keys: KeyPaths) -> None:
    assert stat.S_IMODE(keys.directory.stat().st_mode) == 0o700
    files = [keys.keyholder, keys.aggregator, *keys.clients]
    assert [p.name for p in keys.clients] == [
        f"client-{i}.json" for i in range(NUM_CLIENTS)
    ]
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    # atomic writes leave no temporary files behind
    assert sorted(p.name for p in keys.directory.iterdir()) == sorted(
        p.name for p in files
    )


def test_bundles_hold_only_their_roles_secrets(keys: KeyPaths) -> None:
    keyholder = read(keys.keyholder)
    aggregator = read(keys.aggregator)
    assert keyholder["role"] == "keyholder"
    assert aggregator["role"] == "aggregator"
    assert {"p", "q", "phi_seed", "auth_token", "n"} <= set(keyholder)
    assert not {"p", "q", "lambda", "phi_seed"} & set(aggregator)
    secrets_of_keyholder = [keyholder["p"], keyholder["q"], keyholder["phi_seed"]]
    aggregator_text = keys.aggregator.read_text()
    for secret in secrets_of_keyholder:
        assert secret not in aggregator_text
    assert aggregator["auth_token"] == keyholder["auth_token"]
    seeds = aggregator["client_seeds"]
    assert sorted(seeds) == [str(i) for i in range(NUM_CLIENTS)]
    assert len(set(seeds.values())) == NUM_CLIENTS
    for client_id, path in enumerate(keys.clients):
        text = path.read_text()
        data = json.loads(text)
        assert data["role"] == "client"
        assert data["client_id"] == client_id
        assert data["client_seed"] == seeds[str(client_id)]
        assert data["phi_seed"] == keyholder["phi_seed"]
        assert not {"p", "q", "auth_token", "client_seeds"} & set(data)
        for other, seed in seeds.items():
            if other != str(client_id):
                assert seed not in text
        assert keyholder["p"] not in text and keyholder["q"] not in text


def test_loaded_bundles_agree_and_expose_key_id(keys: KeyPaths) -> None:
    keyholder = load_keyholder_bundle(keys.keyholder)
    aggregator = load_aggregator_bundle(keys.aggregator)
    client = load_client_bundle(keys.clients[2], client_id=2)
    assert keyholder.n == aggregator.n == client.n
    assert keyholder.p * keyholder.q == keyholder.n
    assert client.key_bits == 512 and client.test_key and aggregator.test_key
    n = client.n
    assert client.key_id == hashlib.sha256(n.to_bytes(64, "big")).digest()
    assert client.key_id == key_id_of(n) == aggregator.key_id == keyholder.key_id
    assert len(client.key_id) == 32
    assert client.public_key.n == n
    assert keyholder.private_key.raw_decrypt(client.public_key.raw_encrypt(42)) == 42
    assert aggregator.client_seeds[2] == client.client_seed
    assert aggregator.num_clients == NUM_CLIENTS
    assert read(keys.keyholder)["test_key"] is True


def test_repr_hides_secrets(keys: KeyPaths) -> None:
    keyholder = load_keyholder_bundle(keys.keyholder)
    text = repr(keyholder) + repr(load_aggregator_bundle(keys.aggregator))
    text += repr(load_client_bundle(keys.clients[0]))
    for secret in (str(keyholder.p), format(keyholder.p, "x"), keyholder.auth_token):
        assert secret not in text
    assert keyholder.phi_seed.hex() not in text


def test_loaders_report_missing_wrong_role_and_wrong_client(
    keys: KeyPaths, tmp_path: Path
) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        load_client_bundle(tmp_path / "nope.json")
    with pytest.raises(ValueError, match="role 'keyholder', expected 'aggregator'"):
        load_aggregator_bundle(keys.keyholder)
    with pytest.raises(ValueError, match="role 'client', expected 'keyholder'"):
        load_keyholder_bundle(keys.clients[0])
    with pytest.raises(ValueError, match="belongs to client 1, not to client 0"):
        load_client_bundle(keys.clients[1], client_id=0)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("n", "zz", "n must be a hex string"),
        ("phi_seed", "abcd", "phi_seed must be 32 bytes"),
        ("client_seed", 7, "client_seed must be a hex string"),
        ("client_id", -1, "client_id must be an integer"),
        ("key_id", "00", "key_id does not match"),
        ("key_bits", 1024, "n has 512 bits"),
        ("test_key", False, "allow_test_keys"),
        ("version", 99, "version"),
    ],
)
def test_loader_rejects_malformed_fields(
    keys: KeyPaths, tmp_path: Path, field: str, value: object, match: str
) -> None:
    data = read(keys.clients[0])
    data[field] = value
    path = tmp_path / "client-0.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=match):
        load_client_bundle(path)


def test_loader_rejects_bad_json_and_bad_factors(
    keys: KeyPaths, tmp_path: Path
) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_keyholder_bundle(path)
    data = read(keys.keyholder)
    data["p"] = format(int(data["p"], 16) + 2, "x")
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="p and q"):
        load_keyholder_bundle(path)
    data = read(keys.aggregator)
    data["client_seeds"] = {"zero": "00" * 32}
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="not a client id"):
        load_aggregator_bundle(path)


def test_key_size_refused_without_the_test_flag(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="allow_test_keys"):
        generate_keys(tmp_path / "k", num_clients=3, key_bits=512)
    with pytest.raises(ValueError, match="multiple of 8"):
        generate_keys(tmp_path / "k", num_clients=3, key_bits=516, allow_test_keys=True)
    with pytest.raises(ValueError, match=">= 256"):
        generate_keys(tmp_path / "k", num_clients=3, key_bits=128, allow_test_keys=True)
    with pytest.raises(ValueError, match="num_clients must be >= 3"):
        generate_keys(tmp_path / "k", num_clients=2, key_bits=512, allow_test_keys=True)
    assert not (tmp_path / "k").exists()


def test_refuses_to_overwrite_unless_asked(tmp_path: Path) -> None:
    out = tmp_path / "k"
    first = generate_keys(out, num_clients=3, key_bits=256, allow_test_keys=True)
    old_id = load_aggregator_bundle(first.aggregator).key_id
    with pytest.raises(FileExistsError, match="overwrite"):
        generate_keys(out, num_clients=3, key_bits=256, allow_test_keys=True)
    again = generate_keys(
        out, num_clients=3, key_bits=256, allow_test_keys=True, overwrite=True
    )
    assert load_aggregator_bundle(again.aggregator).key_id != old_id


def test_existing_permissive_directory_is_tightened(tmp_path: Path) -> None:
    out = tmp_path / "open"
    out.mkdir()
    os.chmod(out, 0o755)
    generate_keys(out, num_clients=3, key_bits=256, allow_test_keys=True)
    assert stat.S_IMODE(out.stat().st_mode) == 0o700


def test_keygen_command_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "cli"
    argv = ["--out", str(out), "--clients", "3", "--key-bits", "256"]
    assert keygen.main(argv) == 2  # small key without the flag
    assert "allow_test_keys" in capsys.readouterr().err
    assert keygen.main([*argv, "--allow-test-keys"]) == 0
    printed = capsys.readouterr().out
    assert "keyholder.json" in printed and "client-2.json" in printed
    assert "WARNING" in printed
    load_client_bundle(out / "client-2.json", client_id=2)
    assert keygen.main([*argv, "--allow-test-keys"]) == 2  # exists
    assert "overwrite" in capsys.readouterr().err
    assert keygen.main([*argv, "--allow-test-keys", "--overwrite"]) == 0

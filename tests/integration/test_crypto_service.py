"""Tests of the keyholder HTTP service and its stdlib client."""

from __future__ import annotations

import dataclasses
import itertools
import socket
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import uvicorn
from fastapi.testclient import TestClient

from crypto import (
    AggregateRefused,
    DPHEAggregator,
    DPHEParams,
    EncryptedSum,
    Keyholder,
    KeyholderBundle,
    KeyholderLike,
    RemoteKeyholder,
    encrypt_update,
    generate_keys,
    keyholder_service,
    load_aggregator_bundle,
    load_client_bundle,
    load_keyholder_bundle,
)
from crypto.dphe import AggregationContext
from crypto.keyholder_service import create_app

DIM = 10


@dataclasses.dataclass
class Setup:
    bundle: KeyholderBundle
    keyholder: Keyholder
    token: str
    clients: list
    aggregator_bundle: object
    params: DPHEParams
    updates: list
    expected: np.ndarray
    rounds: itertools.count

    def fresh(self, count: int) -> EncryptedSum:
        """A sum of the first ``count`` clients for a round not decrypted yet."""
        context = AggregationContext(
            self.keyholder.session_id(), "model", next(self.rounds)
        )
        rng = np.random.default_rng(0)
        aggregator = DPHEAggregator(self.aggregator_bundle, self.params, context)
        for client_id in range(count):
            aggregator.add(
                client_id,
                encrypt_update(
                    self.updates[client_id],
                    weight=1,
                    bundle=self.clients[client_id],
                    params=self.params,
                    context=context,
                    rng=rng,
                ),
            )
        return aggregator.result()


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    paths = generate_keys(
        tmp_path_factory.mktemp("svc") / "keys",
        num_clients=3,
        key_bits=512,
        allow_test_keys=True,
    )
    bundle = load_keyholder_bundle(paths.keyholder)
    aggregator_bundle = load_aggregator_bundle(paths.aggregator)
    params = DPHEParams(dimension=DIM, packing=3)
    rng = np.random.default_rng(0)
    keyholder = Keyholder(bundle, {"model": params})
    made = Setup(
        bundle=bundle,
        keyholder=keyholder,
        token=aggregator_bundle.auth_token,
        clients=[load_client_bundle(p) for p in paths.clients],
        aggregator_bundle=aggregator_bundle,
        params=params,
        updates=[rng.normal(scale=0.2, size=DIM) for _ in range(3)],
        expected=np.zeros(0),
        rounds=itertools.count(1),
    )
    made.expected = keyholder.decrypt_aggregate(made.fresh(3))
    return made


@pytest.fixture(scope="module")
def client(setup: Setup) -> TestClient:
    return TestClient(create_app(setup.keyholder, setup.token))


def body(encrypted_sum: EncryptedSum) -> dict:
    return {"encrypted_sum": encrypted_sum.to_json()}


def test_health_needs_no_token(client: TestClient, setup: Setup) -> None:
    answer = client.get("/v1/health")
    assert answer.status_code == 200
    assert answer.json() == {
        "status": "ok",
        "key_id": setup.bundle.key_id.hex(),
        "key_bits": 512,
        "min_contributors": 3,
        "streams": ["model"],
    }


def test_decrypt_with_the_right_token(client: TestClient, setup: Setup) -> None:
    answer = client.post(
        "/v1/decrypt-aggregate",
        json=body(setup.fresh(3)),
        headers={"Authorization": f"Bearer {setup.token}"},
    )
    assert answer.status_code == 200
    sums = np.array([int(v) for v in answer.json()["sums"]], dtype=np.int64)
    np.testing.assert_array_equal(sums, setup.expected)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token-wrong-token-wrong-token"},
        {"Authorization": "Basic abc"},
        {"Authorization": "Bearer"},
    ],
)
def test_missing_or_wrong_token_is_401(
    client: TestClient, setup: Setup, headers: dict
) -> None:
    answer = client.post(
        "/v1/decrypt-aggregate", json=body(setup.fresh(3)), headers=headers
    )
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == "Bearer"


def test_token_is_checked_before_the_body(client: TestClient) -> None:
    answer = client.post("/v1/decrypt-aggregate", content=b"{garbage")
    assert answer.status_code == 401


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (None, "refused (malformed)"),
        ({"contributors": 3}, "malformed"),
        ({"encrypted_sum": {"key_id": "00"}}, "refused (parameters)"),
    ],
)
def test_malformed_requests_are_422(
    client: TestClient, setup: Setup, payload: dict | None, match: str
) -> None:
    headers = {"Authorization": f"Bearer {setup.token}"}
    if payload is None:
        answer = client.post("/v1/decrypt-aggregate", content=b"{", headers=headers)
    else:
        answer = client.post("/v1/decrypt-aggregate", json=payload, headers=headers)
    assert answer.status_code == 422
    assert match in answer.json()["detail"]


def test_fewer_than_three_contributors_is_422(client: TestClient, setup: Setup) -> None:
    answer = client.post(
        "/v1/decrypt-aggregate",
        json=body(setup.fresh(2)),
        headers={"Authorization": f"Bearer {setup.token}"},
    )
    assert answer.status_code == 422
    assert answer.json()["detail"] == "aggregate refused (contributors)"


def test_create_app_refuses_a_short_token(setup: Setup) -> None:
    with pytest.raises(ValueError, match="32"):
        create_app(setup.keyholder, "short")


# --- real server on an ephemeral loopback port --------------------------------------


@pytest.fixture(scope="module")
def server_url(setup: Setup) -> Iterator[str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(setup.keyholder, setup.token),
        log_level="warning",
        lifespan="off",
        ws="none",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()
    assert not thread.is_alive()


def test_remote_keyholder_end_to_end(server_url: str, setup: Setup) -> None:
    remote = RemoteKeyholder(server_url, setup.token, timeout=10)
    assert isinstance(remote, KeyholderLike)
    assert remote.health()["key_id"] == setup.bundle.key_id.hex()
    np.testing.assert_array_equal(
        remote.decrypt_aggregate(setup.fresh(3)), setup.expected
    )
    assert remote.session_id() == setup.keyholder.session_id()
    assert setup.token not in repr(remote)
    # the session now has a decrypted round: a new run must not start on it
    assert remote.decrypted_rounds() == setup.keyholder.decrypted_rounds() != {}


def test_serverapp_refuses_a_keyholder_session_an_earlier_run_used() -> None:
    from settings.run_settings import ConfigError
    from strategies.dphe.server_setup import _check_fresh_session

    class Used:
        def decrypted_rounds(self) -> dict[str, int]:
            return {"model": 3}

    class Fresh:
        def decrypted_rounds(self) -> dict[str, int]:
            return {}

    _check_fresh_session(Fresh(), "https://keyholder:8443")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="model up to round 3.*restart the keyholder"):
        _check_fresh_session(Used(), "https://keyholder:8443")  # type: ignore[arg-type]


def test_remote_keyholder_maps_refusals_and_auth_errors(
    server_url: str, setup: Setup
) -> None:
    remote = RemoteKeyholder(server_url, setup.token, timeout=10)
    with pytest.raises(AggregateRefused, match="contributors") as refused:
        remote.decrypt_aggregate(setup.fresh(2))
    assert refused.value.category == "contributors"
    wrong = RemoteKeyholder(server_url, "x" * 64, timeout=10)
    with pytest.raises(RuntimeError, match="rejected the auth token"):
        wrong.decrypt_aggregate(setup.fresh(3))


def test_remote_keyholder_unreachable(setup: Setup) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    remote = RemoteKeyholder(f"http://127.0.0.1:{port}", setup.token, timeout=5)
    with pytest.raises(RuntimeError, match="cannot reach keyholder"):
        remote.decrypt_aggregate(setup.fresh(3))


def test_remote_keyholder_refuses_unsafe_urls() -> None:
    with pytest.raises(ValueError, match="plain http"):
        RemoteKeyholder("http://keyholder.example:8765", "t" * 64)
    RemoteKeyholder("http://keyholder.example:8765", "t" * 64, allow_plain_http=True)
    with pytest.raises(ValueError, match="ca_file"):
        RemoteKeyholder("http://127.0.0.1:1", "t" * 64, ca_file="ca.pem")
    with pytest.raises(ValueError, match="http"):
        RemoteKeyholder("ftp://127.0.0.1:1", "t" * 64)


def test_service_main_refuses_plain_http_off_loopback(
    capsys: pytest.CaptureFixture,
) -> None:
    streams = ["--streams", "unused.json"]
    code = keyholder_service.main(
        ["--bundle", "unused.json", "--host", "0.0.0.0", *streams]
    )
    assert code == 2
    assert "allow-plain-http" in capsys.readouterr().err
    assert keyholder_service.main(["--bundle", "missing.json", *streams]) == 2
    assert "not found" in capsys.readouterr().err

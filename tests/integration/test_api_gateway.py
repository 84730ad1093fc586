"""deploy/api_gateway.py and deploy/fab_registry.py without processes.

The gateway is driven in-process (ASGI) with a fake SuperLink behind it; the
registry's signatures are checked with Flower 1.42's own SuperNode verification
(``flwr.supernode.start_client_internal._verify_fab``). The loopback deployment
test (tests/e2e/test_deployment.py) runs both as the compose services do.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient
from flwr.supercore.fab import Fab
from flwr.superlink.main import create_app as create_superlink_app
from flwr.supernode.start_client_internal import _verify_fab

from deploy.api_gateway import (
    DEFAULT_MAX_BODY,
    ApiGateway,
    allowed,
    api_paths,
    fleet_paths,
)
from deploy.api_gateway import main as gateway_main
from deploy.fab_registry import create_app as create_registry
from deploy.fab_registry import fab_paths, publish, sign_fab
from deploy.generate import make_fab_signing_key, trusted_entities_yaml
from tests.compose_local import ROOT


def _all_superlink_paths() -> set[str]:
    from fastapi.routing import iter_route_contexts

    app = create_superlink_app()
    return {
        getattr(c, "path", None) or c.route.path
        for c in iter_route_contexts(app.routes)
    }


def test_gateway_allows_exactly_flowers_fleet_routes():
    fleet = fleet_paths()
    everything = _all_superlink_paths()
    assert fleet <= everything
    assert all(p.startswith("/v1/fleet/") for p in fleet)
    assert "/v1/fleet/pull-messages" in fleet and "/v1/fleet/activate-node" in fleet
    for path in everything - fleet:
        assert not allowed("POST", path, fleet), path
        assert not allowed("GET", path, fleet) or path == "/health", path
    assert allowed("GET", "/health", fleet)
    assert not allowed("GET", "/v1/fleet/pull-messages", fleet)  # POST only
    assert any(p.startswith("/v1/control/") for p in everything)  # refused above


def test_each_gateway_allows_exactly_its_apis_routes_and_no_other():
    """fleet / runtime / control split every API route of the SuperLink between them,
    with no route in two of them: the ServerApp's gateway serves no Control route,
    the operator's no Runtime route, and so on."""
    everything = _all_superlink_paths()
    apis = {api: api_paths(api) for api in ("fleet", "runtime", "control")}
    assert "/v1/runtime/pull-task-input" in apis["runtime"]
    assert "/v1/control/start-run" in apis["control"]
    for api, paths in apis.items():
        assert paths <= everything, api
        for other, other_paths in apis.items():
            if other != api:
                assert not paths & other_paths, (api, other)
                for path in other_paths:
                    assert not allowed("POST", path, paths), (api, path)
    served = set().union(*apis.values())
    assert {p for p in everything - served if p.startswith("/v1/")} == set()
    with pytest.raises(ValueError, match="accepted are fleet, runtime, control"):
        api_paths("admin")


def _gateway_call(method: str, raw_path: bytes, body: bytes = b"", headers=()):
    seen: list[httpx.Request] = []

    class Body(httpx.AsyncByteStream):  # streamed, as from a real SuperLink
        def __init__(self, data: bytes) -> None:
            self.data = data

        async def __aiter__(self):
            yield self.data

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, stream=Body(b"pong:" + request.content))

    gateway = ApiGateway(
        "https://superlink:8000",
        paths=fleet_paths(),
        transport=httpx.MockTransport(upstream),
        max_body=1024,
    )
    sent: list[dict] = []
    path = raw_path.decode("latin-1")
    decoded = path.replace("%2e", ".").replace("%2E", ".").replace("%2D", "-")
    scope = {
        "type": "http",
        "method": method,
        "path": decoded,
        "raw_path": raw_path,
        "query_string": b"",
        "headers": [(b"host", b"gw"), *headers],
        "client": ("127.0.0.1", 1),
    }
    chunks = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        return chunks.pop(0)

    async def send(message):
        sent.append(message)

    asyncio.run(gateway(scope, receive, send))
    status = sent[0]["status"]
    content = b"".join(m.get("body", b"") for m in sent[1:])
    return status, content, seen


def test_gateway_forwards_fleet_calls_with_headers_and_body():
    status, content, seen = _gateway_call(
        "POST",
        b"/v1/fleet/pull-messages",
        b"\x01\x02",
        headers=[(b"x-flwr-signature", b"sig"), (b"connection", b"keep-alive")],
    )
    assert status == 200 and content == b"pong:\x01\x02"
    assert len(seen) == 1
    assert str(seen[0].url) == "https://superlink:8000/v1/fleet/pull-messages"
    assert seen[0].headers["x-flwr-signature"] == "sig"  # node auth passes through


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", b"/v1/control/start-run"),
        ("POST", b"/v1/control/register-node"),
        ("POST", b"/v1/runtime/get-nodes"),
        ("POST", b"/v1/fleet/../control/start-run"),
        ("POST", b"/v1/fleet/%2e%2e/control/start-run"),
        ("POST", b"/v1/fleet/pull%2Dmessages"),  # decodes to a Fleet path
        ("GET", b"/docs"),
        ("GET", b"/openapi.json"),
        ("GET", b"/v1/fleet/pull-messages"),
    ],
)
def test_gateway_refuses_everything_else_without_calling_the_superlink(
    method: str, path: bytes
):
    status, _, seen = _gateway_call(method, path)
    assert status == 404 and seen == []


def test_gateway_limits_the_request_size():
    status, _, seen = _gateway_call("POST", b"/v1/fleet/push-object", b"x" * 2048)
    assert status == 413 and seen == []


class _Recorder(httpx.AsyncBaseTransport):
    """A SuperLink that notes, for each body piece it gets, how far the client is."""

    def __init__(self, progress: list[int], gate: asyncio.Event | None = None):
        self.progress, self.gate, self.got = progress, gate, []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        async for piece in request.stream:
            self.got.append((len(piece), self.progress[0]))
        if self.gate is not None:
            await self.gate.wait()
        return httpx.Response(200, stream=_Reply())


class _Reply(httpx.AsyncByteStream):  # streamed, as from a real SuperLink
    async def __aiter__(self):
        yield b"ok"


def _scope(path=b"/v1/fleet/push-object", headers=()):
    return {
        "type": "http", "method": "POST", "path": path.decode(), "raw_path": path,
        "query_string": b"", "headers": [(b"host", b"gw"), *headers],
        "client": ("127.0.0.1", 1),
    }


def _pieces(n: int, size: int, progress: list[int]):
    async def receive():
        progress[0] += 1
        await asyncio.sleep(0)
        return {"type": "http.request", "body": b"x" * size,
                "more_body": progress[0] < n}
    return receive


def _collector(sent: list):
    async def send(message):
        sent.append(message)
    return send


def test_gateway_streams_bodies_instead_of_buffering_them():
    # the old gateway read the whole body (up to 512 MiB) before forwarding a byte
    progress = [0]
    upstream = _Recorder(progress)
    gateway = ApiGateway("https://superlink:8000", paths=fleet_paths(),
                           transport=upstream, max_body=10_000)
    sent: list = []
    asyncio.run(gateway(_scope(), _pieces(4, 1000, progress), _collector(sent)))
    assert sent[0]["status"] == 200
    # each piece reached the SuperLink before the client sent the next one
    assert upstream.got == [(1000, 1), (1000, 2), (1000, 3), (1000, 4)]


def test_gateway_cuts_a_long_body_and_refuses_a_declared_one_unread():
    progress = [0]
    upstream = _Recorder(progress)
    gateway = ApiGateway("https://superlink:8000", paths=fleet_paths(),
                           transport=upstream, max_body=2500)
    assert gateway.max_body < 512 * 1024 * 1024
    sent: list = []
    asyncio.run(gateway(_scope(), _pieces(10, 1000, progress), _collector(sent)))
    assert sent[0]["status"] == 413 and progress[0] == 3  # cut at the 3rd piece
    progress[0], sent[:] = 0, []
    scope = _scope(headers=[(b"content-length", b"300000000")])
    asyncio.run(gateway(scope, _pieces(10, 1000, progress), _collector(sent)))
    assert sent[0]["status"] == 413 and progress[0] == 0  # not one byte read
    # the defaults: below the old 512 MiB, above Flower's 5 MiB array chunks
    assert 5 * 1024 * 1024 < DEFAULT_MAX_BODY <= 64 * 1024 * 1024


def test_gateway_caps_requests_in_flight_and_stalled_bodies():
    async def scenario():
        gate = asyncio.Event()
        progress = [0]
        gateway = ApiGateway("https://superlink:8000", paths=fleet_paths(),
                               transport=_Recorder(progress, gate), max_active=1,
                               body_idle_s=0.05)
        first: list = []
        task = asyncio.create_task(
            gateway(_scope(), _pieces(1, 10, progress), _collector(first))
        )
        while gateway.active == 0:
            await asyncio.sleep(0.001)
        second: list = []
        await gateway(_scope(), _pieces(1, 10, [0]), _collector(second))
        gate.set()
        await task
        stalled: list = []

        async def never():
            await asyncio.Event().wait()

        await gateway(_scope(), never, _collector(stalled))
        return first[0]["status"], second[0]["status"], stalled[0]["status"]

    assert asyncio.run(scenario()) == (200, 503, 408)


def test_gateway_cli_passes_the_connection_cap_to_uvicorn(monkeypatch, capsys):
    import uvicorn

    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(kw, app=app))
    assert gateway_main(["--superlink", "s:8000", "--insecure",
                         "--max-connections", "7"]) == 0
    assert seen["limit_concurrency"] == 7 and seen["app"].max_active == 7
    assert seen["app"].max_body == DEFAULT_MAX_BODY
    assert gateway_main(["--superlink", "s:8000", "--insecure",
                         "--max-body-bytes", "0"]) == 2
    assert "--max-body-bytes=0: accepted is a number > 0" in capsys.readouterr().err


def test_registry_signatures_verify_with_flowers_supernode_code(tmp_path: Path):
    private, public, key_id = make_fab_signing_key("operator")
    key = tmp_path / "signing.key"
    key.write_bytes(private)
    trusted = yaml.safe_load(trusted_entities_yaml({key_id: public.decode()}))
    registry = tmp_path / "fabs"
    spec, fab_file = publish(ROOT, registry, key, key_id)
    assert spec.startswith("@fedhash/fedhash==")
    fab = fab_file.read_bytes()
    client = TestClient(create_registry(registry))
    answer = client.post(
        "/v1/hub/fetch-fab",
        json={"app_id": "@fedhash/fedhash", "app_version": None, "flwr_version": "x"},
    ).json()
    assert client.get(answer["fab_url"]).content == fab

    def verifications(records) -> dict[str, str]:
        # what the SuperLink makes of the Hub's answer (_format_verification)
        out = {
            r["public_key_id"]: json.dumps(
                {k: v for k, v in r.items() if k != "public_key_id"}
            )
            for r in records
        }
        return {**out, "valid_license": "Valid"}

    good = verifications(answer["verifications"])
    digest = hashlib.sha256(fab).hexdigest()
    assert _verify_fab(Fab(digest, fab, good), trusted)
    tampered = fab + b"\0"
    assert not _verify_fab(Fab(digest, tampered, good), trusted)
    rogue_private, _, rogue_id = make_fab_signing_key("rogue")
    rogue = tmp_path / "rogue.key"
    rogue.write_bytes(rogue_private)
    for signer in (rogue_id, key_id):  # unknown id; trusted id, wrong key
        bad = verifications([sign_fab(fab, rogue, signer)])
        assert not _verify_fab(Fab(digest, fab, bad), trusted)
    # unknown apps, versions and path tricks are 404
    for app_id, version in (("@x/y", None), ("@fedhash/fedhash", "9.9.9")):
        response = client.post(
            "/v1/hub/fetch-fab", json={"app_id": app_id, "app_version": version}
        )
        assert response.status_code == 404
    assert client.get("/v1/fabs/fedhash/fedhash/..%2F..%2Fx.fab").status_code == 404
    with pytest.raises(ValueError):
        fab_paths(registry, "..", "x", "0.1.0")

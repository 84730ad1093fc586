"""One of a SuperLink's APIs, and nothing else: ``python -m deploy.api_gateway``.

Usage: ``python -m deploy.api_gateway --api fleet|runtime|control --superlink
superlink:8000 --root-certificates CA --host 0.0.0.0 --port 9092 --ssl-certfile CRT
--ssl-keyfile KEY [--insecure]``.

Flower 1.42's SuperLink serves its Fleet, Control and Runtime APIs from one HTTP
listener (``superlink/cli/flower_superlink.py``: ``_run_superlink_http_api`` runs one
``uvicorn`` server for the app that ``superlink/main.py`` builds with all three
routers; ``--fleet-api-address`` and ``--control-api-address`` are deprecated and only
start legacy gRPC servers behind internal switches). The open-source Control API
has no user authentication: whoever reaches that port can submit runs, submit FABs
and register SuperNode keys (``/v1/control/register-node``).

So in the compose deployment the SuperLink listens only on a network that holds
nothing but these gateways (``superlink-core``), and every other party reaches it
through the gateway of the one API it needs:

* ``--api fleet`` (the SuperNodes): ``POST`` on the paths of Flower's Fleet router
  (``flwr.superlink.routers.fleet.router``, all under ``/v1/fleet/``);
* ``--api runtime`` (the ServerApp executor): ``POST`` on the paths of Flower's
  Runtime routers (``flwr.supercore.routers.runtime``, all under ``/v1/runtime/``);
* ``--api control`` (the operator's host and the one-shot key registration only):
  ``POST`` on the paths of Flower's Control router (all under ``/v1/control/``).

``GET`` / ``HEAD /health`` is served by each. Allowed requests are forwarded
unchanged (body and headers, so SuperNode authentication, which signs a timestamp
header, and the SuperExec secret still work end to end) to the SuperLink over TLS,
verified against the deployment's CA. Everything else (the other APIs, ``/docs``,
``/openapi.json``, any other path or method) is answered ``404`` here and never
reaches the SuperLink. Paths are compared exactly, so ``..``, ``//`` or
percent-encoding cannot reach another route.

A gateway has no credentials of its own beyond its TLS certificate; it does not
weaken SuperNode authentication or the SuperExec secret, which the SuperLink still
checks.

Anyone who reaches the gateway's port can send it bodies before any authentication
(the SuperLink checks the node's signature only once the request is complete), so
the gateway bounds what one sender can make it hold:

* request bodies are **streamed** to the SuperLink as they arrive, never buffered
  whole; a body longer than ``--max-body-bytes`` (default 16 MiB) is cut off and
  answered ``413``, one whose ``Content-Length`` says so before any byte is read.
  Flower 1.42 sends arrays in chunks of at most ``FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE``
  (5 MiB) per ``push-object`` request, so an honest node stays below it; raise the
  limit with the chunk size;
* a body that stalls for ``--body-idle-seconds`` (default 30) is answered ``408``;
* at most ``--max-connections`` (default 256; at least two per SuperNode)
  connections and requests at once: uvicorn's ``limit_concurrency`` answers ``503``
  beyond it, and the gateway itself answers ``503`` to a request beyond as many in
  flight.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import ssl
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from typing import Any

import httpx

PREFIXES = {"fleet": "/v1/fleet/", "runtime": "/v1/runtime/", "control": "/v1/control/"}
HEALTH = "/health"
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)
DEFAULT_MAX_BODY = 16 * 1024 * 1024  # bytes of one request (Flower: 5 MiB chunks)
DEFAULT_MAX_CONNECTIONS = 256  # connections / requests at once (>= 2 per node)
DEFAULT_BODY_IDLE_S = 30.0  # longest wait for the next piece of a request body

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

log = logging.getLogger("api_gateway")


def _router_paths(api: str) -> list[str]:
    """Return the paths of Flower's own router(s) for ``api``."""
    if api == "fleet":
        from flwr.superlink.routers.fleet.router import router  # noqa: PLC0415

        routers = [router]
    elif api == "runtime":
        from flwr.supercore.routers.runtime.responses import (  # noqa: PLC0415
            router as responses,
        )
        from flwr.supercore.routers.runtime.router import router  # noqa: PLC0415

        routers = [router, responses]
    elif api == "control":
        from flwr.superlink.routers.control.router import router  # noqa: PLC0415

        routers = [router]
    else:
        raise ValueError(f"api={api!r}: accepted are {', '.join(PREFIXES)}")
    return [route.path for r in routers for route in r.routes]


def api_paths(api: str) -> frozenset[str]:
    """Return the paths of one of Flower's SuperLink APIs.

    ``api``: ``fleet``, ``runtime`` or ``control``; each path starts with that API's
    prefix (``/v1/<api>/``).
    """
    paths = frozenset(_router_paths(api))
    if not paths or not all(p.startswith(PREFIXES[api]) for p in paths):
        raise RuntimeError(f"unexpected {api} routes in this Flower: {sorted(paths)}")
    return paths


def fleet_paths() -> frozenset[str]:
    """Return the paths of Flower's Fleet API router (all ``/v1/fleet/...``)."""
    return api_paths("fleet")


def allowed(method: str, path: str, paths: frozenset[str]) -> bool:
    """Whether the gateway forwards ``method path`` (``paths``: its API's)."""
    if path == HEALTH:
        return method in ("GET", "HEAD")
    return method == "POST" and path in paths


class ApiGateway:
    """ASGI app: forward allowed requests to ``upstream``, refuse the rest."""

    def __init__(
        self,
        upstream: str,
        *,
        verify: ssl.SSLContext | bool = True,
        paths: frozenset[str] | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        max_active: int = DEFAULT_MAX_CONNECTIONS,
        body_idle_s: float = DEFAULT_BODY_IDLE_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.paths = paths if paths is not None else fleet_paths()
        self.max_body = max_body
        self.max_active = max_active
        self.body_idle_s = body_idle_s
        self.active = 0  # requests being forwarded now
        self._verify = verify
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self.refused = 0

    def client(self) -> httpx.AsyncClient:
        """Return the upstream HTTP client (created in the server's event loop)."""
        if self._client is None:
            self._client = httpx.AsyncClient(
                verify=self._verify,
                transport=self._transport,
                timeout=httpx.Timeout(connect=10.0, read=600.0, write=600.0, pool=30.0),
                follow_redirects=False,
                trust_env=False,
            )
        return self._client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection."""
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # websockets: not served
        method, path = scope["method"], scope["path"]
        raw_path = scope.get("raw_path") or path.encode()
        if raw_path.decode("latin-1") != path or not allowed(method, path, self.paths):
            self.refused += 1
            client = scope.get("client") or ("?", 0)
            log.warning("refused %s %r from %s", method, raw_path, client[0])
            await _respond(send, 404, b'{"detail":"Not Found"}')
            return
        declared = _header(scope, b"content-length")
        if declared is not None and (
            not declared.isdigit() or int(declared) > self.max_body
        ):
            await _respond(send, 413, b'{"detail":"Request too large"}')
            return
        if self.active >= self.max_active:
            log.warning("busy: %d requests in flight; 503 to %s", self.active, path)
            await _respond(send, 503, b'{"detail":"Gateway busy"}')
            return
        self.active += 1
        try:
            await self._forward(scope, receive, send)
        finally:
            self.active -= 1

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Stream the request body to the SuperLink and its response back."""
        method, path = scope["method"], scope["path"]
        cut: list[int] = []  # the status that cut the body off (413, 408, 400)

        async def body() -> AsyncIterator[bytes]:
            size = 0
            while True:
                try:
                    message = await asyncio.wait_for(receive(), self.body_idle_s)
                except TimeoutError:
                    cut.append(408)
                    raise _BodyCut from None
                if message["type"] == "http.disconnect":
                    cut.append(400)
                    raise _BodyCut
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_body:
                    cut.append(413)
                    raise _BodyCut
                if chunk:
                    yield chunk
                if not message.get("more_body"):
                    return

        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in scope["headers"]
            if k.decode("latin-1").lower() not in HOP_BY_HOP
        ]
        request = self.client().build_request(
            method, self.upstream + path, headers=headers, content=body()
        )
        try:
            response = await self.client().send(request, stream=True)
        except (_BodyCut, httpx.HTTPError) as error:
            if cut:
                detail = {
                    413: b"Request too large",
                    408: b"Request body timed out",
                    400: b"Client went away",
                }[cut[0]]
                await _respond(send, cut[0], b'{"detail":"' + detail + b'"}')
                return
            log.error("SuperLink unreachable: %s", error)
            await _respond(send, 502, b'{"detail":"SuperLink unreachable"}')
            return
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [
                        (k, v)
                        for k, v in response.headers.raw
                        if k.decode("latin-1").lower() not in HOP_BY_HOP
                    ],
                }
            )
            async for chunk in response.aiter_raw():
                await send(
                    {"type": "http.response.body", "body": chunk, "more_body": True}
                )
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._client is not None:
                    await self._client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


class _BodyCut(Exception):
    """The request body was cut off (too large, stalled, or the client left)."""


def _header(scope: Scope, name: bytes) -> str | None:
    """Return the first value of header ``name`` (lower case), or ``None``."""
    for key, value in scope["headers"]:
        if key.lower() == name:
            return value.decode("latin-1").strip()
    return None


async def _respond(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser."""
    parser = argparse.ArgumentParser(
        prog="python -m deploy.api_gateway",
        description="Serve one of a SuperLink's APIs (and /health), so that whoever "
        "reaches this port never reaches the others.",
    )
    parser.add_argument(
        "--api",
        choices=sorted(PREFIXES),
        default="fleet",
        help="the API served (default fleet: SuperNodes; runtime: the ServerApp "
        "executor; control: the operator)",
    )
    parser.add_argument(
        "--superlink", required=True, help="SuperLink host:port (all its APIs)"
    )
    parser.add_argument(
        "--root-certificates", default=None, help="CA certificate of the SuperLink"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=9092, help="port to listen on")
    parser.add_argument("--ssl-certfile", default=None, help="gateway certificate")
    parser.add_argument("--ssl-keyfile", default=None, help="gateway private key")
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="plain HTTP on both sides (deploy/docker-compose.insecure.yml only)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY,
        help="largest request body, streamed (default 16 MiB: Flower sends arrays in "
        "5 MiB chunks)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        help="connections and requests at once; 503 beyond (default 256, at least "
        "2 per SuperNode)",
    )
    parser.add_argument(
        "--body-idle-seconds",
        type=float,
        default=DEFAULT_BODY_IDLE_S,
        help="longest wait for the next piece of a body; 408 after (default 30)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the gateway; 2 on a refused argument."""
    args = build_parser().parse_args(argv)
    for flag, value in (
        ("--max-body-bytes", args.max_body_bytes),
        ("--max-connections", args.max_connections),
        ("--body-idle-seconds", args.body_idle_seconds),
    ):
        if not value > 0:
            print(
                f"api_gateway: {flag}={value}: accepted is a number > 0",
                file=sys.stderr,
            )
            return 2
    if args.insecure:
        scheme, verify = "http", False
    else:
        if not (args.ssl_certfile and args.ssl_keyfile and args.root_certificates):
            print(
                "api_gateway: --ssl-certfile, --ssl-keyfile and --root-certificates "
                "are required (or --insecure)",
                file=sys.stderr,
            )
            return 2
        scheme = "https"
        verify = ssl.create_default_context(cafile=args.root_certificates)
    logging.basicConfig(
        level=logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    app = ApiGateway(
        f"{scheme}://{args.superlink}",
        verify=verify,
        paths=api_paths(args.api),
        max_body=args.max_body_bytes,
        max_active=args.max_connections,
        body_idle_s=args.body_idle_seconds,
    )
    log.info(
        "serving the %s API of %s://%s on %s:%d (%d routes); all else 404",
        args.api,
        scheme,
        args.superlink,
        args.host,
        args.port,
        len(app.paths),
    )
    import uvicorn  # noqa: PLC0415

    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        ssl_certfile=None if args.insecure else args.ssl_certfile,
        ssl_keyfile=None if args.insecure else args.ssl_keyfile,
        log_level="info",
        access_log=False,
        limit_concurrency=args.max_connections,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""HTTP service of the keyholder: ``python -m crypto.keyholder_service --bundle ...``.

The keyholder runs apart from the aggregator (the ServerApp), holding the secret key,
phi and the users' MAC keys; the aggregator sends it encrypted sums over HTTP(S)
through :class:`crypto.keyholder_client.RemoteKeyholder`. The parameters of every
stream it decrypts are pinned by its own ``--streams FILE``
(``python -m strategies.dphe.keyholder_streams`` writes it from the run config).

Endpoints (the token is checked before the body is read, in constant time):

* ``POST /v1/decrypt-aggregate`` -- body ``{"encrypted_sum":
  EncryptedSum.to_json()}``, header ``Authorization: Bearer <auth token>``; answers
  ``{"sums": [decimal strings]}`` (``D + 1`` int64 sums in original order). Errors:
  401 missing or wrong token; 413 body above ``--max-body-bytes``; 429 more than
  ``--max-concurrent`` requests in flight; 422 ``{"detail": "aggregate refused
  (<category>)"}`` on a malformed request or a refusal -- generic on purpose
  (:class:`~crypto.keyholder.AggregateRefused`): the details go to the keyholder's
  own log only. No request, however large or malformed, gets a 500.
* ``GET /v1/session`` (token) -- ``{"session": hex, "decrypted_rounds": {stream:
  last round}, "run_id": int or null}``, this process's session id, what it
  already decrypted and the run it serves.
* ``POST /v1/bind-run`` (token) -- body ``{"run_id": int}``; answers ``{"session":
  hex, "proof": hex}``, the proof the clients check
  (:meth:`~crypto.keyholder.Keyholder.bind_run`); 422 if the session serves another
  run or an earlier session bound that run id.
* ``POST /v1/identify`` (token) -- body ``{"stream", "round", "masked": {client id:
  {"blocks": [int], "ciphertexts": [hex]}}}`` after a sum was refused with
  ``"identify": true``; answers ``{"culprits": [int]}``
  (:meth:`~crypto.keyholder.Keyholder.identify`).

A 422 refusal body carries ``culprits`` (client ids to drop, not secret) and
``identify`` besides the generic ``detail``.
* ``GET /v1/health`` -- ``{"status": "ok", "key_id": hex, "key_bits": int,
  "min_contributors": int, "streams": [names]}`` (public, no token needed).

Limits: the body size (default: :func:`default_max_body_bytes` of the pinned
streams, i.e. the largest honest request plus a quarter), the dimension and every
other size (from the pinned streams: a request for another dimension is refused
before anything is allocated), the concurrency (default 2 requests in flight, the
rest 429), and the permutation cache (:data:`crypto.keys.PHI_CACHE_SIZE`).

The auth token travels in a header: outside the loopback interface serve TLS
(``--ssl-certfile``/``--ssl-keyfile``); plain HTTP on another interface needs
``--allow-plain-http``.

No Flower imports.
"""

from __future__ import annotations

import argparse
import hmac
import json
import logging
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from crypto.dphe import DPHEParams
from crypto.keyholder import AggregateRefused, Keyholder, read_streams_file
from crypto.keyholder_client import (
    BIND_PATH,
    DECRYPT_PATH,
    HEALTH_PATH,
    IDENTIFY_PATH,
    SESSION_PATH,
    is_loopback,
)
from crypto.keys import load_keyholder_bundle

logger = logging.getLogger(__name__)

MIN_TOKEN_CHARS = 32
DEFAULT_MAX_CONCURRENT = 2
"""Decryption requests in flight at once; more are answered 429."""


def default_max_body_bytes(streams: Mapping[str, DPHEParams], key_bits: int) -> int:
    """Largest honest request body for ``streams``, plus 25 % and 64 KiB.

    A request carries at most ``num_blocks`` ciphertexts of ``2 * key_bits`` bits in
    hex plus block ids, and per contributor (at most ``max_summands``) a base64
    bitmap of ``num_blocks`` bits and a MAC.
    """
    largest = 0
    digits = (2 * key_bits + 3) // 4
    for params in streams.values():
        blocks = params.num_blocks
        per_contributor = 4 * ((blocks + 7) // 8 + 2) // 3 + 160
        size = (
            blocks * (digits + 16)
            + params.fixed_point.max_summands * per_contributor
            + 2048
        )
        largest = max(largest, size)
    return largest + largest // 4 + 65536


def create_app(
    keyholder: Keyholder,
    auth_token: str,
    *,
    max_body_bytes: int | None = None,
    max_concurrent: int = DEFAULT_MAX_CONCURRENT,
) -> FastAPI:
    """Build the keyholder's FastAPI app.

    Parameters
    ----------
    keyholder : Keyholder
        Decrypts the sums (its streams are pinned).
    auth_token : str
        Bearer token the aggregator must present (>= 32 characters).
    max_body_bytes : int, optional
        Largest request body; default :func:`default_max_body_bytes`.
    max_concurrent : int
        Decryption requests in flight at once (>= 1); more are answered 429.

    Returns
    -------
    FastAPI
        The app (serve it with uvicorn; see :func:`main`).

    Raises
    ------
    ValueError
        If the token is shorter than 32 characters or a limit is not positive.
    """
    if not isinstance(auth_token, str) or len(auth_token) < MIN_TOKEN_CHARS:
        raise ValueError(f"auth_token must be a string of >= {MIN_TOKEN_CHARS} chars")
    if max_body_bytes is None:
        max_body_bytes = default_max_body_bytes(keyholder.streams, keyholder.key_bits)
    if max_body_bytes < 1 or max_concurrent < 1:
        raise ValueError("max_body_bytes and max_concurrent must be >= 1")
    expected = auth_token.encode("utf-8")
    slots = threading.BoundedSemaphore(max_concurrent)
    app = FastAPI(
        title="DPHE keyholder", docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.max_body_bytes = max_body_bytes
    app.state.max_concurrent = max_concurrent
    most = max(
        (p.fixed_point.max_summands for p in keyholder.streams.values()), default=1
    )
    identify_limit = max_body_bytes * (most + 1)

    def authorized(request: Request) -> bool:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(given.strip().encode("utf-8"), expected)

    def unauthorized() -> JSONResponse:
        return JSONResponse(
            {"detail": "missing or invalid bearer token"},
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )

    @app.get(HEALTH_PATH)
    def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "key_id": keyholder.key_id.hex(),
            "key_bits": keyholder.key_bits,
            "min_contributors": keyholder.min_contributors,
            "streams": sorted(keyholder.streams),
        }

    @app.get(SESSION_PATH)
    def session(request: Request) -> JSONResponse:
        if not authorized(request):
            return unauthorized()
        return JSONResponse(
            {
                "session": keyholder.session_id().hex(),
                "decrypted_rounds": keyholder.decrypted_rounds(),
                "run_id": keyholder.run_id,
            }
        )

    @app.post(BIND_PATH)
    async def bind_run(request: Request) -> JSONResponse:
        if not authorized(request):
            return unauthorized()
        body = await _small_json(request)
        run_id = body.get("run_id") if isinstance(body, dict) else None
        try:
            proof = keyholder.bind_run(run_id)  # type: ignore[arg-type]
        except AggregateRefused as error:
            return _refused(error, None)
        return JSONResponse(
            {"session": keyholder.session_id().hex(), "proof": proof.hex()}
        )

    async def guarded(
        request: Request,
        limit: int,
        handle: Callable[[bytes], Awaitable[JSONResponse]],
    ) -> JSONResponse:
        """Gate every endpoint that reads a body, then call ``handle(body)``.

        The token, the size (declared, then as streamed) and a request slot.
        """
        if not authorized(request):
            return unauthorized()
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            return _too_large(limit)
        if not slots.acquire(blocking=False):
            return JSONResponse(
                {"detail": "keyholder busy, retry later"},
                status_code=429,
                headers={"Retry-After": "1"},
            )
        try:
            chunks, size = [], 0
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    return _too_large(limit)
                chunks.append(chunk)
            return await handle(b"".join(chunks))
        finally:
            slots.release()

    async def _identify(raw: bytes) -> JSONResponse:
        try:
            stream, round_, masked = _parse_identify(json.loads(raw))
            culprits = await run_in_threadpool(
                keyholder.identify, stream, round_, masked
            )
        except AggregateRefused as error:
            return _refused(error, None)
        except Exception as error:  # malformed: the caller's error, never a 500
            return _refused(AggregateRefused("malformed"), type(error).__name__)
        return JSONResponse({"culprits": list(culprits)})

    async def _decrypt(raw: bytes) -> JSONResponse:
        try:
            body = json.loads(raw)
        except Exception:  # undecodable, too deep: the client's error
            return _refused(AggregateRefused("malformed"), "body is not valid JSON")
        if not isinstance(body, dict) or set(body) != {"encrypted_sum"}:
            return _refused(
                AggregateRefused("malformed"), 'body must be {"encrypted_sum": {...}}'
            )
        try:
            encrypted_sum = keyholder.parse_request(body["encrypted_sum"])
            sums = await run_in_threadpool(keyholder.decrypt_aggregate, encrypted_sum)
        except AggregateRefused as error:
            return _refused(error, None)
        except Exception as error:  # never a 500 with details for the caller
            logger.exception("keyholder: unexpected error on a request")
            return _refused(AggregateRefused("malformed"), type(error).__name__)
        return JSONResponse({"sums": [str(value) for value in sums.tolist()]})

    @app.post(IDENTIFY_PATH)
    async def identify(request: Request) -> JSONResponse:
        return await guarded(request, identify_limit, _identify)

    @app.post(DECRYPT_PATH)
    async def decrypt_aggregate(request: Request) -> JSONResponse:
        return await guarded(request, max_body_bytes, _decrypt)

    return app


async def _small_json(request: Request) -> object:
    """Return a JSON body of at most 4 KiB (``None`` if larger or not JSON)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > 4096:
            return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def _parse_identify(body: object) -> tuple[str, int, dict]:
    """``(stream, round, masked)`` of an identify body (ValueError if malformed)."""
    if not isinstance(body, dict) or set(body) != {"stream", "round", "masked"}:
        raise ValueError("identify body must be {stream, round, masked}")
    stream, round_, raw = body["stream"], body["round"], body["masked"]
    if not isinstance(stream, str) or not isinstance(round_, int):
        raise ValueError("identify: stream must be a string, round an integer")
    if not isinstance(raw, dict):
        raise ValueError("identify: masked must be an object")
    masked = {}
    for key, item in raw.items():
        if not isinstance(item, dict) or set(item) != {"blocks", "ciphertexts"}:
            raise ValueError("identify: each entry must be {blocks, ciphertexts}")
        blocks, cts = item["blocks"], item["ciphertexts"]
        if not isinstance(blocks, list) or not isinstance(cts, list):
            raise ValueError("identify: blocks and ciphertexts must be lists")
        masked[int(key)] = (
            np.asarray([int(b) for b in blocks], dtype=np.int64),
            [int(c, 16) for c in cts],
        )
    return stream, round_, masked


def _too_large(limit: int) -> JSONResponse:
    return JSONResponse(
        {"detail": f"request body above {limit} bytes"}, status_code=413
    )


def _refused(error: AggregateRefused, detail: str | None) -> JSONResponse:
    if detail is not None:
        logger.warning("keyholder refused a request (%s): %s", error.category, detail)
    return JSONResponse(
        {
            "detail": str(error),
            "culprits": list(error.culprits),
            "identify": error.identify,
        },
        status_code=422,
    )


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the keyholder service."""
    parser = argparse.ArgumentParser(
        prog="python -m crypto.keyholder_service",
        description="Serve DPHE aggregate decryption for the aggregator.",
    )
    parser.add_argument("--bundle", required=True, help="keyholder.json")
    parser.add_argument(
        "--streams",
        required=True,
        help="pinned stream parameters (python -m strategies.dphe.keyholder_streams)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=0,
        help="largest request body (0 = sized from the pinned streams)",
    )
    parser.add_argument(
        "--max-concurrent",
        type=int,
        default=DEFAULT_MAX_CONCURRENT,
        help="decryption requests in flight at once; more get HTTP 429",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind")
    parser.add_argument("--port", type=int, default=8765, help="TCP port")
    parser.add_argument("--ssl-certfile", default=None, help="TLS certificate (PEM)")
    parser.add_argument("--ssl-keyfile", default=None, help="TLS private key (PEM)")
    parser.add_argument(
        "--min-contributors",
        type=int,
        default=3,
        help="smallest number of users per aggregate (>= 3)",
    )
    parser.add_argument(
        "--state",
        default=None,
        help="state file kept across restarts: the run ids bound and, per stream, "
        "round and model, the contributor set decrypted (refuses a repeated "
        "round with another set); without it that protection ends at a restart",
    )
    parser.add_argument(
        "--allow-plain-http",
        action="store_true",
        help="serve without TLS on a non-loopback interface (token sent in clear)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Load the keyholder bundle and serve the app with uvicorn.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        Exit status (2 on a refused configuration).
    """
    args = build_parser().parse_args(argv)
    if (args.ssl_certfile is None) != (args.ssl_keyfile is None):
        print("keyholder: give both --ssl-certfile and --ssl-keyfile", file=sys.stderr)
        return 2
    if args.ssl_certfile is None and not is_loopback(args.host):
        if not args.allow_plain_http:
            print(
                f"keyholder: refusing plain HTTP on {args.host}: the auth token would "
                "travel in clear; give --ssl-certfile/--ssl-keyfile or "
                "--allow-plain-http",
                file=sys.stderr,
            )
            return 2
    try:
        bundle = load_keyholder_bundle(args.bundle)
        streams = read_streams_file(args.streams)
        keyholder = Keyholder(
            bundle,
            streams,
            min_contributors=args.min_contributors,
            state_path=args.state,
        )
        app = create_app(
            keyholder,
            bundle.auth_token,
            max_body_bytes=args.max_body_bytes or None,
            max_concurrent=args.max_concurrent,
        )
    except (OSError, ValueError) as error:
        print(f"keyholder: {error}", file=sys.stderr)
        return 2
    if bundle.test_key:
        print("keyholder: WARNING: serving an insecure test-size key", file=sys.stderr)
    if args.state is None:
        print(
            "keyholder: WARNING: no --state file: a restarted keyholder forgets the "
            "runs and contributor sets it served",
            file=sys.stderr,
        )
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    print(
        f"keyholder: streams {sorted(streams)}, body limit "
        f"{app.state.max_body_bytes} bytes, {args.max_concurrent} in flight",
        file=sys.stderr,
    )
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile,
        ws="none",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

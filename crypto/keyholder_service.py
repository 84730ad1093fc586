"""HTTP service of the keyholder: ``python -m crypto.keyholder_service --bundle ...``.

The keyholder runs apart from the aggregator (the ServerApp), holding the secret key
and phi; the aggregator sends it encrypted sums over HTTP(S) through
:class:`crypto.keyholder_client.RemoteKeyholder`.

Endpoints:

* ``POST /v1/decrypt-aggregate`` -- body ``{"encrypted_sum": EncryptedSum.to_json(),
  "contributors": int}``, header ``Authorization: Bearer <auth token>``; answers
  ``{"sums": [decimal strings]}`` (``D + 1`` int64 sums in original order), 401 on a
  missing or wrong token (checked before the body is read, compared in constant
  time), 422 with ``{"detail": reason}`` on a malformed request or a refusal
  (:class:`~crypto.keyholder.AggregateRefused`).
* ``GET /v1/health`` -- ``{"status": "ok", "key_id": hex, "key_bits": int,
  "min_contributors": int}`` (public information, no token needed).

The auth token travels in a header: outside the loopback interface serve TLS
(``--ssl-certfile``/``--ssl-keyfile``); plain HTTP on another interface needs
``--allow-plain-http``.

No Flower imports.
"""

from __future__ import annotations

import argparse
import hmac
import sys
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from crypto.dphe import EncryptedSum
from crypto.keyholder import AggregateRefused, Keyholder
from crypto.keyholder_client import DECRYPT_PATH, HEALTH_PATH, is_loopback
from crypto.keys import load_keyholder_bundle

MIN_TOKEN_CHARS = 32


def create_app(keyholder: Keyholder, auth_token: str) -> FastAPI:
    """Build the keyholder's FastAPI app.

    Parameters
    ----------
    keyholder : Keyholder
        Decrypts the sums.
    auth_token : str
        Bearer token the aggregator must present (>= 32 characters).

    Returns
    -------
    FastAPI
        The app (serve it with uvicorn; see :func:`main`).

    Raises
    ------
    ValueError
        If the token is shorter than 32 characters.
    """
    if not isinstance(auth_token, str) or len(auth_token) < MIN_TOKEN_CHARS:
        raise ValueError(f"auth_token must be a string of >= {MIN_TOKEN_CHARS} chars")
    expected = auth_token.encode("utf-8")
    app = FastAPI(
        title="DPHE keyholder", docs_url=None, redoc_url=None, openapi_url=None
    )

    def authorized(request: Request) -> bool:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(given.strip().encode("utf-8"), expected)

    @app.get(HEALTH_PATH)
    def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "key_id": keyholder.key_id.hex(),
            "key_bits": keyholder.key_bits,
            "min_contributors": keyholder.min_contributors,
        }

    @app.post(DECRYPT_PATH)
    async def decrypt_aggregate(request: Request) -> JSONResponse:
        if not authorized(request):
            return JSONResponse(
                {"detail": "missing or invalid bearer token"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        try:
            body = await request.json()
        except Exception:  # any undecodable body is the client's error
            return _unprocessable("request body is not valid JSON")
        if not isinstance(body, dict) or set(body) != {"encrypted_sum", "contributors"}:
            return _unprocessable(
                'body must be {"encrypted_sum": {...}, "contributors": int}'
            )
        try:
            encrypted_sum = EncryptedSum.from_json(body["encrypted_sum"])
            sums = await run_in_threadpool(
                keyholder.decrypt_aggregate, encrypted_sum, body["contributors"]
            )
        except AggregateRefused as error:
            return _unprocessable(f"refused: {error}")
        except ValueError as error:
            return _unprocessable(f"malformed encrypted_sum: {error}")
        return JSONResponse({"sums": [str(value) for value in sums.tolist()]})

    return app


def _unprocessable(reason: str) -> JSONResponse:
    return JSONResponse({"detail": reason}, status_code=422)


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the keyholder service."""
    parser = argparse.ArgumentParser(
        prog="python -m crypto.keyholder_service",
        description="Serve DPHE aggregate decryption for the aggregator.",
    )
    parser.add_argument("--bundle", required=True, help="keyholder.json")
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
        keyholder = Keyholder(bundle, min_contributors=args.min_contributors)
    except (OSError, ValueError) as error:
        print(f"keyholder: {error}", file=sys.stderr)
        return 2
    if bundle.test_key:
        print("keyholder: WARNING: serving an insecure test-size key", file=sys.stderr)
    import uvicorn

    uvicorn.run(
        create_app(keyholder, bundle.auth_token),
        host=args.host,
        port=args.port,
        ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile,
        ws="none",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Client of the keyholder service, standard library only (``urllib``).

:class:`RemoteKeyholder` has the same ``decrypt_aggregate`` as
:class:`crypto.keyholder.Keyholder` (both are :class:`~crypto.keyholder.KeyholderLike`),
so the aggregator's code does not care whether the keyholder is in-process (tests)
or a separate service (deployment).

Environment proxies are ignored on purpose: the bearer token goes straight to the
keyholder.

No Flower imports.
"""

from __future__ import annotations

import ipaddress
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import numpy as np

from crypto.dphe import SESSION_BYTES, EncryptedSum
from crypto.keyholder import REFUSAL_CATEGORIES, AggregateRefused

DECRYPT_PATH = "/v1/decrypt-aggregate"
HEALTH_PATH = "/v1/health"
SESSION_PATH = "/v1/session"
BIND_PATH = "/v1/bind-run"
IDENTIFY_PATH = "/v1/identify"


class RemoteKeyholder:
    """Ask a keyholder service to decrypt aggregates.

    Parameters
    ----------
    url : str
        Base URL, e.g. ``https://keyholder:8765`` or ``http://127.0.0.1:8765``.
    auth_token : str
        Bearer token (the ``auth_token`` of the aggregator bundle).
    timeout : float
        Seconds to wait for one request.
    ca_file : str, optional
        CA bundle (PEM) to verify an ``https`` keyholder's certificate.
    allow_plain_http : bool
        Accept ``http`` to a non-loopback host (the token then travels in clear).

    Raises
    ------
    ValueError
        On an unusable URL, a ``ca_file`` with ``http``, or plain HTTP to a
        non-loopback host without ``allow_plain_http``.
    """

    def __init__(
        self,
        url: str,
        auth_token: str,
        *,
        timeout: float = 60,
        ca_file: str | None = None,
        allow_plain_http: bool = False,
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(
                f"keyholder url must be http(s)://host[:port], got {url!r}"
            )
        if not isinstance(auth_token, str) or not auth_token:
            raise ValueError("auth_token must be a non-empty string")
        if parsed.scheme == "http":
            if ca_file is not None:
                raise ValueError("ca_file needs an https keyholder url")
            if not allow_plain_http and not is_loopback(parsed.hostname):
                raise ValueError(
                    f"refusing plain http to {parsed.hostname}: the token would travel "
                    "in clear; use https or allow_plain_http=True"
                )
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._token = auth_token
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if parsed.scheme == "https":
            context = ssl.create_default_context(cafile=ca_file)
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self) -> str:
        return f"RemoteKeyholder({self.url!r})"

    def session_id(self) -> bytes:
        """Return the keyholder service's current 16-byte session id.

        Raises
        ------
        RuntimeError
            If the keyholder is unreachable, rejects the token or answers garbage.
        """
        return self.session()[0]

    def decrypted_rounds(self) -> dict[str, int]:
        """Last round decrypted per stream in the service's session (``{}``: unused).

        Raises
        ------
        RuntimeError
            As :meth:`session_id`.
        """
        return self.session()[1]

    def session(self) -> tuple[bytes, dict[str, int]]:
        """``(session id, decrypted rounds)`` from one ``/v1/session`` request.

        Raises
        ------
        RuntimeError
            If the keyholder is unreachable, rejects the token or answers garbage.
        """
        answer = self._request(SESSION_PATH, None)
        if not isinstance(answer, dict):
            answer = {}
        value = answer.get("session")
        try:
            session = bytes.fromhex(value) if isinstance(value, str) else b""
        except ValueError:
            session = b""
        if len(session) != SESSION_BYTES:
            raise RuntimeError(f"keyholder at {self.url} answered a malformed session")
        rounds = answer.get("decrypted_rounds")
        if not isinstance(rounds, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            for k, v in rounds.items()
        ):
            raise RuntimeError(
                f"keyholder at {self.url} answered malformed decrypted rounds"
            )
        return session, dict(rounds)

    def decrypt_aggregate(self, encrypted_sum: EncryptedSum) -> np.ndarray:
        """Have the keyholder decrypt and un-permute an encrypted sum.

        Parameters
        ----------
        encrypted_sum : EncryptedSum
            The aggregator's result.

        Returns
        -------
        np.ndarray
            ``(D + 1,)`` int64 sums in original coordinate order.

        Raises
        ------
        AggregateRefused
            If the keyholder refused (HTTP 422, or 413 for a body above its limit),
            with its generic reason category.
        RuntimeError
            If the token was rejected, the keyholder is unreachable or its answer is
            malformed.
        """
        body = json.dumps({"encrypted_sum": encrypted_sum.to_json()}).encode("utf-8")
        answer = self._request(DECRYPT_PATH, body)
        sums = answer.get("sums") if isinstance(answer, dict) else None
        expected = encrypted_sum.params.padded_dimension
        if not isinstance(sums, list) or len(sums) != expected:
            raise RuntimeError(
                f"keyholder at {self.url} answered without {expected} sums"
            )
        try:
            return np.asarray([int(value) for value in sums], dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            raise RuntimeError(
                f"keyholder at {self.url} answered malformed sums"
            ) from None

    def bind_run(self, run_id: int) -> bytes:
        """Bind the service's session to ``run_id``; return the 32-byte proof.

        Raises
        ------
        AggregateRefused
            ``session`` if the service serves another run or bound it before.
        RuntimeError
            If the keyholder is unreachable or answers garbage.
        """
        body = json.dumps({"run_id": int(run_id)}).encode("utf-8")
        answer = self._request(BIND_PATH, body)
        try:
            proof = bytes.fromhex(answer.get("proof", ""))
        except (AttributeError, TypeError, ValueError):
            proof = b""
        if len(proof) != 32:
            raise RuntimeError(f"keyholder at {self.url} answered a malformed proof")
        return proof

    def identify(
        self,
        stream: str,
        server_round: int,
        masked: dict[int, tuple[np.ndarray, list[int]]],
    ) -> tuple[int, ...]:
        """Have the keyholder name the contributors whose tags are wrong.

        Raises
        ------
        AggregateRefused
            As :meth:`crypto.keyholder.Keyholder.identify`.
        RuntimeError
            If the keyholder is unreachable or answers garbage.
        """
        body = json.dumps(
            {
                "stream": stream,
                "round": int(server_round),
                "masked": {
                    str(i): {
                        "blocks": [int(b) for b in blocks],
                        "ciphertexts": [format(int(c), "x") for c in cts],
                    }
                    for i, (blocks, cts) in masked.items()
                },
            }
        ).encode("utf-8")
        answer = self._request(IDENTIFY_PATH, body)
        culprits = answer.get("culprits") if isinstance(answer, dict) else None
        if not isinstance(culprits, list) or not all(
            isinstance(i, int) for i in culprits
        ):
            raise RuntimeError(f"keyholder at {self.url} answered malformed culprits")
        return tuple(culprits)

    def health(self) -> dict[str, Any]:
        """Return the keyholder's ``/v1/health`` answer (key id, key size).

        Raises
        ------
        RuntimeError
            If the keyholder is unreachable or answers an error.
        """
        answer = self._request(HEALTH_PATH, None)
        if not isinstance(answer, dict):
            raise RuntimeError(f"keyholder at {self.url} answered malformed health")
        return answer

    def _request(self, path: str, body: bytes | None) -> Any:
        url = self.url + path
        request = urllib.request.Request(
            url,
            data=body,
            method="GET" if body is None else "POST",
            headers={
                "Authorization": f"Bearer {self._token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as error:
            detail, culprits, identify = _refusal(error)
            if error.code in (413, 422):
                raise AggregateRefused(
                    _category(detail), culprits=culprits, identify=identify
                ) from None
            if error.code in (401, 403):
                raise RuntimeError(
                    f"keyholder at {self.url} rejected the auth token "
                    f"(HTTP {error.code}); check the bundles come from one keygen run"
                ) from None
            raise RuntimeError(
                f"keyholder at {self.url} answered HTTP {error.code}: {detail}"
            ) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise RuntimeError(f"cannot reach keyholder at {url}: {reason}") from error
        try:
            return json.loads(payload)
        except ValueError:
            raise RuntimeError(f"keyholder at {url} answered invalid JSON") from None


def _refusal(error: urllib.error.HTTPError) -> tuple[str, tuple[int, ...], bool]:
    """``(detail, culprits, identify)`` of an error body (empty when unreadable)."""
    try:
        body = json.loads(error.read())
        culprits = body.get("culprits", [])
        if not isinstance(culprits, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in culprits
        ):
            culprits = []
        return (
            str(body.get("detail", "")),
            tuple(culprits),
            body.get("identify") is True,
        )
    except Exception:  # the status code alone is enough when the body is unreadable
        return "", (), False


def _category(detail: str) -> str:
    """Return the category of a refusal ``aggregate refused (<category>)``."""
    for category in REFUSAL_CATEGORIES:
        if detail == f"aggregate refused ({category})":
            return category
    return "malformed"


def is_loopback(host: str) -> bool:
    """Whether ``host`` names the loopback interface (``localhost``, 127.0.0.0/8, ::1).

    Parameters
    ----------
    host : str
        Host name or IP address.

    Returns
    -------
    bool
        True for loopback.
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

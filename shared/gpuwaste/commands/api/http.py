"""The read API over HTTP: `ReadApi`, the WSGI app `serve` mounts at `/api/v1`.

GET/HEAD only, a bearer token (`read_token`), a capped query string and a token bucket per client address
(`RateLimiter`).
"""

from __future__ import annotations

import hmac
import json
import re
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from gpuwaste.commands.api.documents import DEFAULT_LIMIT, ApiError, ReadError, api_json
from gpuwaste.commands.api.openapi import openapi_document
from gpuwaste.commands.api.reader import FindingsReader

#: Longest query string accepted (bytes); longer is 414.
MAX_QUERY_BYTES = 2048
#: Per client address: sustained requests per second and the burst above it.
RATE_PER_S = 10.0
RATE_BURST = 20


#: Environment variable holding the API's bearer token (from a Kubernetes Secret).
TOKEN_ENV = "GPUWASTE_API_TOKEN"


class _Bucket:
    __slots__ = ("at", "tokens")

    def __init__(self, tokens: float, at: float) -> None:
        self.tokens, self.at = tokens, at


class RateLimiter:
    """A token bucket per key (client address): `rate` per second, `burst` at most (default: the module's
    `RATE_PER_S` / `RATE_BURST` when created); at most `max_keys` remembered (the oldest forgotten first)."""

    def __init__(
        self,
        rate: float | None = None,
        burst: int | None = None,
        *,
        max_keys: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = RATE_PER_S if rate is None else rate
        self.burst = RATE_BURST if burst is None else burst
        self.max_keys, self.clock = max_keys, clock
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """0.0 when a request of `key` may go now, else the seconds to wait."""
        with self._lock:
            now = self.clock()
            b = self._buckets.pop(key, None) or _Bucket(float(self.burst), now)
            b.tokens = min(float(self.burst), b.tokens + (now - b.at) * self.rate)
            b.at = now
            self._buckets[key] = b  # most recent last
            while len(self._buckets) > self.max_keys:
                self._buckets.pop(next(iter(self._buckets)))
            if b.tokens >= 1:
                b.tokens -= 1
                return 0.0
            return (1 - b.tokens) / self.rate


def read_token(token_file: Path | None, environ: dict[str, str]) -> str | None:
    """The API's bearer token: the file's first line (a mounted Secret), else `GPUWASTE_API_TOKEN`; None: API off.

    Raises:
        ReadError: the file cannot be read or is empty.
    """
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise ReadError(f"{token_file}: cannot read the API token ({exc.strerror})") from exc
        if not token:
            raise ReadError(f"{token_file}: the API token file is empty")
        return token
    return environ.get(TOKEN_ENV, "").strip() or None


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class ReadApi:
    """The WSGI application of `/api/v1/…` (see the module's HTTP rules).

    Args:
        reader: the read functions. token: the bearer token (None: every request is 404, the API is off).
        limiter: the per-address rate limit.
    """

    PREFIX = "/api/v1/"

    def __init__(self, reader: FindingsReader, token: str | None, limiter: RateLimiter | None = None) -> None:
        self.reader, self.token = reader, token
        self.limiter = limiter or RateLimiter()
        self._openapi = json.dumps(openapi_document()).encode()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        status, body, headers = self._answer(environ)
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        start_response(
            status,
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(data))),
                ("Cache-Control", "no-store"),
                *headers,
            ],
        )
        return [b"" if environ.get("REQUEST_METHOD") == "HEAD" else data]

    @staticmethod
    def _error(code: int, message: str, *headers: tuple[str, str]) -> tuple[str, Any, list[tuple[str, str]]]:
        reasons = {
            400: "Bad Request",
            401: "Unauthorized",
            404: "Not Found",
            409: "Conflict",
            405: "Method Not Allowed",
            413: "Content Too Large",
            414: "URI Too Long",
            429: "Too Many Requests",
            500: "Internal Server Error",
        }
        return f"{code} {reasons[code]}", ApiError(error=message, status=code).model_dump(), list(headers)

    def _answer(self, environ: dict[str, Any]) -> tuple[str, Any, list[tuple[str, str]]]:
        from gpuwaste.errors import StoreError

        if self.token is None:
            return self._error(404, f"the read API is off: give serve a token ({TOKEN_ENV} or --api-token-file)")
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return self._error(405, "read-only: GET or HEAD", ("Allow", "GET, HEAD"))
        length = environ.get("CONTENT_LENGTH") or "0"
        if not length.isdigit() or int(length) > 0 or environ.get("HTTP_TRANSFER_ENCODING"):
            return self._error(413, "no request body is accepted")
        query = environ.get("QUERY_STRING", "")
        if len(query.encode()) > MAX_QUERY_BYTES:
            return self._error(414, f"query string over {MAX_QUERY_BYTES} bytes")
        wait = self.limiter.take(str(environ.get("REMOTE_ADDR", "")))
        if wait > 0:
            return self._error(429, "rate limit: slow down", ("Retry-After", str(max(1, round(wait + 0.5)))))
        given = str(environ.get("HTTP_AUTHORIZATION", ""))
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), self.token.encode()):
            return self._error(
                401, "send Authorization: Bearer <token>", ("WWW-Authenticate", 'Bearer realm="gpuwaste"')
            )
        path = str(environ.get("PATH_INFO", ""))
        try:
            multi = parse_qs(query, keep_blank_values=True, strict_parsing=False)
            params = {k: v[-1] for k, v in multi.items()}
            return "200 OK", self._route(path, params, multi), []
        except ReadError as exc:
            return self._error(exc.status if exc.status in (400, 404, 409) else 400, str(exc))
        except StoreError as exc:
            return self._error(500, f"the state file cannot be read: {exc}")

    def _route(self, path: str, params: dict[str, str], multi: dict[str, list[str]]) -> Any:
        def integer(name: str, default: int) -> int:
            raw = params.get(name)
            if raw is None or raw == "":
                return default
            if not re.fullmatch(r"-?\d{1,9}", raw):
                raise ReadError(f"{name}={raw!r}: an integer")
            return int(raw)

        if path == "/api/v1/openapi.json":
            return self._openapi
        if path == "/api/v1/findings":
            known = {"cluster", "namespace", "team", "kind", "state", "since", "limit", "offset"}
            unknown = sorted(set(params) - known)
            if unknown:
                raise ReadError(f"unknown parameter(s) {', '.join(unknown)}: use {', '.join(sorted(known))}")
            page = self.reader.list_findings(
                cluster=params.get("cluster"),
                namespace=params.get("namespace"),
                team=params.get("team"),
                kind=params.get("kind"),
                state=params.get("state"),
                since=params.get("since"),
                limit=integer("limit", DEFAULT_LIMIT),
                offset=integer("offset", 0),
            )
            return api_json(page)
        if path.startswith("/api/v1/findings/"):
            return api_json(self.reader.explain(path.removeprefix("/api/v1/findings/")), exact=("finding",))
        if path == "/api/v1/summary":
            return api_json(self.reader.summary(params.get("period")))
        if path == "/api/v1/showback":
            unknown = sorted(set(params) - {"by"})
            if unknown:
                raise ReadError(f"unknown parameter(s) {', '.join(unknown)}: use by")
            by = [b.strip() for raw in multi.get("by", []) for b in raw.split(",") if b.strip()]
            return api_json(self.reader.showback(by))
        raise ReadError(f"{path}: no such endpoint (see /api/v1/openapi.json)", status=404)

"""The Prometheus HTTP client.

The bounded-answer transport adapter (answer size, deadline, decoding), HTTP errors and which are transient,
Prometheus durations, and `make_client` (a `PrometheusConnect` on that session).
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
import zlib
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3
from prometheus_api_client import PrometheusConnect
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from gpuwaste.models.settings import PrometheusSettings
from gpuwaste.sources.prometheus.auth import auth_from_settings

QueryResult = list[dict[str, Any]]


class _HttpStatusError(Exception):
    """A non-200 answer, raised from the session's response hook (carries the status, not the text)."""

    def __init__(self, status: int, error: str) -> None:
        super().__init__(status)
        self.status = status
        self.error = error


class _AnswerBoundError(requests.RequestException):
    """An answer the bounded adapter stopped reading (caught wherever a requests error is; never retried)."""


class _AnswerTooLarge(_AnswerBoundError):
    """The answer grew past `max_answer_mb` (received, or decoded from gzip/deflate)."""

    def __init__(self, limit_mb: float, *, decoded: bool) -> None:
        super().__init__(limit_mb)
        self.limit_mb = limit_mb
        self.decoded = decoded


class _AnswerTooSlow(_AnswerBoundError):
    """The answer was not complete within `answer_deadline_s` of its request."""

    def __init__(self, deadline_s: float, received: int) -> None:
        super().__init__(deadline_s)
        self.deadline_s = deadline_s
        self.received = received


class _AnswerUndecodable(_AnswerBoundError):
    """An encoding this client did not ask for, or a corrupt gzip/deflate stream."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


#: A non-200 answer's body is read up to this many bytes (for its `error` field), the rest is dropped unread.
_ERROR_BODY_BYTES = 64 << 10
_READ_BYTES = 64 << 10


class _Watch:
    """One request's deadline watchdog: the connection it uses (noted by the pool), and whether the deadline fired."""

    def __init__(self) -> None:
        self.conn: Any = None
        self.fired = False
        self.done = False
        self.received = 0
        self.lock = threading.Lock()

    def cut(self) -> None:
        """At the deadline: shut the request's socket down (a blocked read returns at once), unless it finished."""
        with self.lock:
            if self.done:
                return
            self.fired = True
            sock = getattr(self.conn, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed
                sock.shutdown(socket.SHUT_RDWR)

    def finish(self) -> None:
        """The answer is read (or failed): the watchdog must not touch the connection any more."""
        with self.lock:
            self.done = True


#: the watch of the request this thread is sending (set by `BoundedAdapter.send`, read by the pools)
_WATCHED = threading.local()


def _note_connection(conn: Any) -> None:
    watch = getattr(_WATCHED, "watch", None)
    if watch is not None:
        with watch.lock:
            watch.conn = conn
            late = watch.fired
        if late:  # the deadline passed while connecting: cut now
            watch.cut()
            raise urllib3.exceptions.ProtocolError("answer deadline passed")


class _WatchedHTTPPool(urllib3.HTTPConnectionPool):
    """An HTTP pool that tells the request's watch which connection it uses."""

    def _make_request(self, conn: Any, *args: Any, **kwargs: Any) -> Any:
        _note_connection(conn)
        return super()._make_request(conn, *args, **kwargs)


class _WatchedHTTPSPool(urllib3.HTTPSConnectionPool):
    """An HTTPS pool that tells the request's watch which connection it uses."""

    def _make_request(self, conn: Any, *args: Any, **kwargs: Any) -> Any:
        _note_connection(conn)
        return super()._make_request(conn, *args, **kwargs)


class BoundedAdapter(HTTPAdapter):
    """An `HTTPAdapter` that reads each answer itself: at most `max_bytes` (as received and after decoding), complete
    within `deadline_s` of the request (headers included: a watchdog shuts the connection down at the deadline), each
    read waiting no longer than what is left of the deadline.

    The body is read in 64 KiB pieces with `read1` (a dripping server returns what it has, so the deadline is checked
    between pieces); gzip and deflate are decoded here with `zlib` and a bounded output (`max_length`), so a
    compression bomb stops at the cap instead of being inflated whole. urllib3 retries are off (retries are the
    source's). A non-200 answer's body is read up to 64 KiB and truncated (only its `error` field is used).

    Raises (from `send`):
        _AnswerTooLarge, _AnswerTooSlow, _AnswerUndecodable: subclasses of `requests.RequestException`.
    """

    def __init__(self, *, max_bytes: int, deadline_s: float, limit_mb: float) -> None:
        super().__init__(max_retries=Retry(total=0, read=False))
        self.max_bytes = max_bytes
        self.deadline_s = deadline_s
        self.limit_mb = limit_mb

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any) -> None:
        """requests' pool manager, its pools noting the connection each request uses (for the deadline's watchdog)."""
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}

    def send(self, request: requests.PreparedRequest, stream: bool = False, timeout: Any = None, verify: Any = True,
             cert: Any = None, proxies: Any = None) -> requests.Response:
        """Send the request and read its whole answer within the bounds (the answer comes back already read).

        A watchdog shuts the request's socket down at the deadline, so headers that trickle in (each byte within
        the per-read timeout) are cut too; between body pieces the deadline is also checked directly.
        """
        t0 = time.monotonic()
        connect, read = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        read = self.deadline_s if read is None else min(float(read), self.deadline_s)
        watch = _Watch()
        _WATCHED.watch = watch
        timer = threading.Timer(self.deadline_s, watch.cut)
        timer.daemon = True
        timer.start()
        try:
            response = super().send(request, stream=True, timeout=(connect, read), verify=verify, cert=cert, proxies=proxies)
            try:
                body = self._read(response, t0 + self.deadline_s, read, truncate=response.status_code != 200, watch=watch)
            except BaseException:
                watch.finish()
                response.close()  # never reuse a connection left mid-answer
                raise
            watch.finish()  # before the connection goes back to the pool: the watchdog never cuts it after this
        except _AnswerBoundError:
            raise
        except Exception as exc:
            if watch.fired:
                raise _AnswerTooSlow(self.deadline_s, watch.received) from exc
            raise
        finally:
            watch.finish()
            timer.cancel()
            _WATCHED.watch = None
        response._content = body
        response._content_consumed = True  # type: ignore[attr-defined]
        response.raw.release_conn()
        return response

    def _read(self, response: requests.Response, deadline: float, read_timeout: float, *, truncate: bool, watch: _Watch) -> bytes:
        raw = response.raw
        cap = _ERROR_BODY_BYTES if truncate else self.max_bytes
        encoding = response.headers.get("Content-Encoding", "").strip().lower()
        decoder: Any = None
        if encoding in ("gzip", "x-gzip"):
            decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            decoder = zlib.decompressobj()
        elif encoding not in ("", "identity"):
            raise _AnswerUndecodable(f"Content-Encoding {encoding[:40]!r} (asked for gzip, deflate or identity)")
        parts: list[bytes] = []
        received = 0
        size = 0
        sock = getattr(getattr(raw, "_connection", None), "sock", None)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _AnswerTooSlow(self.deadline_s, received)
            if isinstance(sock, socket.socket):
                sock.settimeout(max(0.01, min(read_timeout, left)))
            try:
                chunk = raw.read1(_READ_BYTES, decode_content=False)
            except urllib3.exceptions.ReadTimeoutError as exc:
                if time.monotonic() >= deadline:
                    raise _AnswerTooSlow(self.deadline_s, received) from exc
                raise requests.exceptions.ReadTimeout(exc) from exc
            except (urllib3.exceptions.ProtocolError, urllib3.exceptions.HTTPError, OSError) as exc:
                raise requests.exceptions.ConnectionError(exc) from exc
            if not chunk:
                break
            received += len(chunk)
            watch.received = received
            if received > self.max_bytes and not truncate:
                raise _AnswerTooLarge(self.limit_mb, decoded=False)
            if decoder is not None:  # decoded no further than the cap: a bomb stops here, never inflated whole
                decoded: list[bytes] = []
                room = cap + 1 - size
                data = chunk
                try:
                    while data and room > 0:
                        piece = decoder.decompress(data, room)
                        decoded.append(piece)
                        room -= len(piece)
                        if decoder.unconsumed_tail:
                            if not truncate:
                                raise _AnswerTooLarge(self.limit_mb, decoded=True)
                            break
                        data = decoder.unused_data if decoder.eof else b""
                        if data:  # another gzip member follows (RFC 1952 allows several)
                            decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
                except zlib.error as exc:
                    raise _AnswerUndecodable(f"corrupt {encoding} stream") from exc
                chunk = b"".join(decoded)
            size += len(chunk)
            if size > cap:
                if truncate:
                    parts.append(chunk[: cap - (size - len(chunk))])
                    break
                raise _AnswerTooLarge(self.limit_mb, decoded=decoder is not None)
            parts.append(chunk)
            if truncate and size >= cap:
                break
        return b"".join(parts)


def _raise_for_status(response: requests.Response, *_args: Any, **_kwargs: Any) -> requests.Response:
    if response.status_code != 200:
        error = ""
        try:
            body = response.json()
            if isinstance(body, dict):
                error = str(body.get("error", ""))[:300]
        except ValueError:
            error = ""
        raise _HttpStatusError(response.status_code, error)
    return response


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, _HttpStatusError):
        return exc.status >= 500 or exc.status == 429
    return isinstance(exc, requests.Timeout | requests.ConnectionError | urllib3.exceptions.HTTPError)


_DURATION = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def parse_duration_s(text: str) -> float | None:
    """A Prometheus duration ("15d", "100y", "1w2d", "0s") in seconds; None when absent, zero or not a duration."""
    parts = _DURATION.findall(text.strip())
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        return None
    total = sum(int(n) * _UNIT_S[u] for n, u in parts)
    return total or None


def make_client(settings: PrometheusSettings) -> PrometheusConnect:
    """A `PrometheusConnect` with auth, headers, TLS verification and timeout; its own retries are off.

    Raises:
        ConfigError: when the auth settings are incomplete.
    """
    session = requests.Session()
    session.verify = settings.verify_tls
    if urlsplit(settings.url).scheme == "http":
        # plain HTTP is a Prometheus next to the scan (in-cluster, loopback): gzip would cost its CPU and ours for no
        # bandwidth worth saving (measured in bench/RESULTS.md); https (AMP, remote) keeps requests' gzip. A header in
        # prometheus.headers overrides either.
        session.headers["Accept-Encoding"] = "identity"
    else:
        session.headers["Accept-Encoding"] = "gzip, deflate"  # what BoundedAdapter decodes (bounded); never br/zstd
    session.hooks["response"].append(_raise_for_status)
    client = PrometheusConnect(
        url=settings.url.rstrip("/"),
        headers=dict(settings.headers) or None,
        disable_ssl=not settings.verify_tls,
        retry=Retry(total=0, read=False),  # no urllib3 retries (tenacity retries here); read timeouts stay ReadTimeout
        auth=auth_from_settings(settings),
        session=session,
        timeout=settings.timeout_s,
    )
    # every answer through this session is read bounded (replacing the adapter PrometheusConnect mounted for its URL)
    adapter = BoundedAdapter(max_bytes=int(settings.max_answer_mb * 1_000_000), deadline_s=settings.answer_deadline_s,
                             limit_mb=settings.max_answer_mb)
    for prefix in (client.url, "http://", "https://"):
        session.mount(prefix, adapter)
    return client

"""Benchmark helper: a threaded HTTP proxy on 127.0.0.1 that counts requests and bytes and can add latency.

Put it between a client and Prometheus to count PromQL queries and response bytes, to record which
queries were sent (so the floor can replay exactly the same plan), and, with `delay_s=0.002`, to add
the 2 ms of an in-region network round trip to every request (on loopback a per-pod query costs almost
nothing, which hides the real cost of per-pod strategies).

    with LatencyProxy("http://127.0.0.1:9090", delay_s=0.002) as proxy:
        requests.get(proxy.url + "/api/v1/query", params={...})
        proxy.requests, proxy.bytes_out, proxy.queries

The body is forwarded as Prometheus sent it (gzip when the client asked for it), so `bytes_out` is what
crossed the wire.
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection", "host", "content-length"}


@dataclass(frozen=True)
class RecordedQuery:
    """One PromQL request seen by the proxy: path (`/api/v1/query` …) and its parameters."""

    path: str
    params: tuple[tuple[str, str], ...]


class LatencyProxy:
    """Forward every request to `upstream` after `delay_s`; count requests, bytes and PromQL queries.

    Args:
        upstream: base URL of the real server (http only).
        delay_s: seconds added before each request is forwarded.
    """

    def __init__(self, upstream: str, delay_s: float = 0.0) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream_host = parsed.hostname or "127.0.0.1"
        self.upstream_port = parsed.port or 80
        self.delay_s = delay_s
        self.requests = 0
        self.bytes_out = 0
        self.queries: list[RecordedQuery] = []
        self._lock = threading.Lock()
        self._local = threading.local()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """`http://127.0.0.1:<port>` of the proxy."""
        assert self._server is not None, "proxy not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def reset(self) -> None:
        """Zero the counters and forget the recorded queries."""
        with self._lock:
            self.requests = 0
            self.bytes_out = 0
            self.queries = []

    def start(self) -> Self:
        """Listen on a free loopback port, serving on a daemon thread."""
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving. Idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=300)
            self._local.conn = conn
        return conn

    def forward(self, method: str, path: str, headers: dict[str, str], body: bytes | None) -> tuple[int, list[tuple[str, str]], bytes]:
        """Send one request upstream (reusing this thread's connection) and return status, headers, body."""
        if self.delay_s:
            time.sleep(self.delay_s)
        for attempt in range(2):
            conn = self._connection()
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                break
            except (http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
        split = urllib.parse.urlsplit(path)
        if split.path.startswith("/api/v1/query"):
            params = urllib.parse.parse_qsl(split.query, keep_blank_values=True)
            if body and "x-www-form-urlencoded" in headers.get("Content-Type", headers.get("content-type", "")):
                params += urllib.parse.parse_qsl(body.decode(), keep_blank_values=True)
            recorded: RecordedQuery | None = RecordedQuery(split.path, tuple(params))
        else:
            recorded = None
        with self._lock:
            self.requests += 1
            self.bytes_out += len(data)
            if recorded is not None:
                self.queries.append(recorded)
        return resp.status, [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP], data


def _handler(proxy: LatencyProxy) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out in two writes: avoid the 40 ms delayed-ACK stall

        def _do(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            try:
                status, out_headers, data = proxy.forward(self.command, self.path, headers, body)
            except OSError as exc:
                status, out_headers, data = 502, [("Content-Type", "text/plain")], str(exc).encode()
            self.send_response(status)
            for key, value in out_headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _do  # noqa: N815 - BaseHTTPRequestHandler dispatch names

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            return

    return _Handler

"""Test servers: local wire-format fakes and real-server wrappers started by the pytest fixtures.

Every in-process fake (:mod:`tests.servers.kube_api`, :mod:`tests.servers.slack_api`,
:mod:`tests.servers.jira_api`) subclasses :class:`FakeHttpServer`: a ``ThreadingHTTPServer`` bound to
``127.0.0.1`` on a port chosen by the kernel, run on a daemon thread and stopped by handle. Subclasses
implement :meth:`FakeHttpServer.handle`, a plain function from :class:`HttpRequest` to
:class:`HttpResponse`, so the HTTP plumbing lives in one place.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import parse_qsl, urlsplit

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self

__all__ = ["FakeHttpServer", "HttpRequest", "HttpResponse"]


@dataclass(frozen=True)
class HttpRequest:
    """One request as received by a fake.

    ``query`` keeps the last value of each repeated parameter; ``headers`` has lower-cased names.
    """

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes = b""

    def json(self) -> Any:
        """Decode the body as JSON (``None`` for an empty body).

        Raises:
            ValueError: the body is not valid JSON.
        """
        return json.loads(self.body) if self.body else None


@dataclass(frozen=True)
class HttpResponse:
    """What a fake answers: status, extra headers and a body (bytes, or any JSON-serialisable value)."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"

    @classmethod
    def json_body(cls, status: int, payload: Any, headers: dict[str, str] | None = None) -> HttpResponse:
        """Build a JSON response."""
        return cls(status=status, body=payload, headers=headers or {})

    def encoded(self) -> bytes:
        """The body as bytes (JSON-encoded unless it already is bytes)."""
        if self.body is None:
            return b""
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body).encode()


class FakeHttpServer:
    """Base class: run :meth:`handle` behind a threaded HTTP server on 127.0.0.1:<random port>.

    Use as a context manager or call :meth:`start` / :meth:`stop`. ``url`` is ``http://127.0.0.1:<port>``.
    """

    #: Name used for the server thread and in error messages.
    server_name: ClassVar[str] = "fake"

    def __init__(self) -> None:
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.RLock()

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> Self:
        """Bind a free loopback port and serve on a daemon thread. Starting twice is a no-op."""
        if self._httpd is not None:
            return self
        handler = _make_handler(self)
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=f"{self.server_name}-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket. Stopping a stopped server is a no-op."""
        httpd, thread = self._httpd, self._thread
        self._httpd, self._thread = None, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port.

        Raises:
            RuntimeError: the server is not started.
        """
        if self._httpd is None:
            raise RuntimeError(f"{self.server_name} server is not started; call start() first")
        port: int = self._httpd.server_address[1]
        return port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``, without a trailing slash."""
        return f"http://127.0.0.1:{self.port}"

    # -- to implement ----------------------------------------------------------------------------------
    def handle(self, request: HttpRequest) -> HttpResponse:
        """Answer one request. Runs on a server thread; guard shared state with ``self._lock``."""
        raise NotImplementedError


def _make_handler(app: FakeHttpServer) -> type[BaseHTTPRequestHandler]:
    """Build a request-handler class bound to ``app``."""

    class _Handler(BaseHTTPRequestHandler):
        disable_nagle_algorithm = True
        protocol_version = "HTTP/1.1"
        timeout = 10  # seconds; closes idle keep-alive connections so their threads and sockets go away
        server_version = f"{app.server_name}/1.0"

        def _dispatch(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length > 0 else b""
            request = HttpRequest(
                method=self.command,
                path=parts.path,
                query=dict(parse_qsl(parts.query, keep_blank_values=True)),
                headers={name.lower(): value for name, value in self.headers.items()},
                body=body,
            )
            try:
                response = app.handle(request)
            except Exception as exc:  # a bug in the fake must reach the test as a 500, not hang the client
                response = HttpResponse.json_body(500, {"fake_server_error": f"{type(exc).__name__}: {exc}"})
            payload = response.encoded()
            self.send_response(response.status)
            if payload or response.status not in (204, 304):
                self.send_header("Content-Type", response.content_type)
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _dispatch  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature fixed by the stdlib
            """Silence the per-request log line."""

    return _Handler

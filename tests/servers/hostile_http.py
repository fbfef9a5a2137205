"""A local HTTP server that answers every request with one kind of trouble (for the hostile-input sweep).

It speaks raw HTTP/1.1 over a socket (no framework between the test and the bytes on the wire), one thread per
connection, on 127.0.0.1 and an ephemeral port. Kinds:

* ``huge``: a 200 answer whose body is `size` bytes of a valid-looking Prometheus JSON prefix then padding, sent in
  1 MiB pieces with a Content-Length (the client must stop reading at its cap);
* ``gzip_bomb``: a 200 answer, `Content-Encoding: gzip`, whose few-hundred-KB body inflates to `size` bytes;
* ``slow_drip``: headers at once, then one byte of body every `drip_s` seconds, forever;
* ``header_drip``: the status line, then one byte of a header every `drip_s` seconds, forever (no body ever);
* ``malformed``: a 200 answer that is not JSON;
* ``status``: the status line `status` (401, 302 with a Location, 422, 503 …) with a small JSON error body.

`requests_seen` counts the requests received (counted here, at the server, not by the client).
"""

from __future__ import annotations

import functools
import socket
import struct
import threading
import time
import zlib
from typing import Any

_REASONS = {200: "OK", 302: "Found", 401: "Unauthorized", 422: "Unprocessable Entity", 503: "Service Unavailable"}


@functools.lru_cache(maxsize=4)
def gzip_bomb(size: int) -> bytes:
    """A valid gzip stream of a JSON prefix then about `size` bytes of spaces (~1000:1), built in well under a second:
    each 1 MiB block is deflated after a full flush, so its compressed form is the same every time and is repeated."""
    prefix = b'{"status":"success","data":{"resultType":"vector","result":['
    block = b" " * (1 << 20)
    count = max(1, size // len(block))
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = deflate.compress(prefix) + deflate.flush(zlib.Z_FULL_FLUSH)
    deflate.compress(block)
    deflate.flush(zlib.Z_FULL_FLUSH)  # the first block after the prefix may differ; the next ones repeat
    repeated = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    crc = zlib.crc32(prefix)
    for _ in range(count + 1):
        crc = zlib.crc32(block, crc)
    total = len(prefix) + (count + 1) * len(block)
    first = zlib.compressobj(9, zlib.DEFLATED, -15)
    first.compress(prefix)
    first.flush(zlib.Z_FULL_FLUSH)
    first_block = first.compress(block) + first.flush(zlib.Z_FULL_FLUSH)
    body = head + first_block + repeated * count + deflate.flush(zlib.Z_FINISH)
    return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + body + struct.pack("<II", crc & 0xFFFFFFFF, total & 0xFFFFFFFF))


class HostileHttpServer:
    """Serve one kind of trouble on 127.0.0.1 (see the module docstring); use as a context manager."""

    def __init__(self, kind: str, *, size: int = 64 << 20, status: int = 503, drip_s: float = 2.0) -> None:
        self.kind = kind
        self.size = size
        self.status = status
        self.drip_s = drip_s
        self.requests_seen = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._bomb = gzip_bomb(size) if kind == "gzip_bomb" else b""
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> HostileHttpServer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self._stop.set()
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    piece = conn.recv(65536)
                    if not piece:
                        return
                    data += piece
                with self._lock:
                    self.requests_seen += 1
                self._answer(conn)
        except OSError:
            return

    def _head(self, status: int, length: int | None, extra: str = "") -> bytes:
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}", "Content-Type: application/json", "Connection: close"]
        if length is not None:
            lines.append(f"Content-Length: {length}")
        return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()

    def _answer(self, conn: socket.socket) -> None:
        if self.kind == "huge":
            conn.sendall(self._head(200, self.size))
            prefix = b'{"status":"success","data":{"resultType":"vector","result":['
            conn.sendall(prefix)
            block = b" " * (1 << 20)
            left = self.size - len(prefix)
            while left > 0 and not self._stop.is_set():
                conn.sendall(block[: min(left, len(block))])
                left -= len(block)
        elif self.kind == "gzip_bomb":
            conn.sendall(self._head(200, len(self._bomb), "Content-Encoding: gzip\r\n"))
            conn.sendall(self._bomb)
        elif self.kind == "slow_drip":
            conn.sendall(self._head(200, 1 << 30))
            while not self._stop.is_set():
                conn.sendall(b" ")
                time.sleep(self.drip_s)
        elif self.kind == "header_drip":  # the status line, then one byte of a header every `drip_s`, forever
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            while not self._stop.is_set():
                conn.sendall(b"a")
                time.sleep(self.drip_s)
        elif self.kind == "malformed":
            body = b"<html><body>Welcome to nginx!</body></html>"
            conn.sendall(self._head(200, len(body)) + body)
        elif self.kind == "status":
            body = b'{"status":"error","errorType":"bad_data","error":"hostile answer"}'
            extra = f"Location: http://127.0.0.1:{self.port}/elsewhere\r\n" if 300 <= self.status < 400 else ""
            conn.sendall(self._head(self.status, len(body), extra) + body)
        else:
            raise ValueError(self.kind)

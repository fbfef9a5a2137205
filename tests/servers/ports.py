"""Test helper: pick a free TCP port on the loopback interface for servers started by the suite."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that was free a moment ago.

    The socket is closed before returning, so another process could take the port before the caller
    binds it. That race is acceptable for test servers that cannot bind port 0 themselves (Prometheus,
    moto). In-process fakes bind port 0 directly and never need this.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port

"""Unit tests run without the network: pytest-socket blocks inet sockets in every unit test (tests/unit/conftest.py),
and a test marked `loopback` reaches 127.0.0.1 only."""

from __future__ import annotations

import socket

import pytest
import pytest_socket

#: pytest-socket warns each time it refuses; here refusing is the point
pytestmark = pytest.mark.filterwarnings("ignore:A test tried:UserWarning")


def test_a_unit_test_cannot_open_an_inet_socket() -> None:
    # GIVEN an ordinary unit test (no marker)
    # WHEN it tries to open a TCP socket, even to loopback
    # THEN pytest-socket refuses before any connection is attempted
    with pytest.raises(pytest_socket.SocketBlockedError):
        socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with pytest.raises(pytest_socket.SocketBlockedError):
        socket.create_connection(("127.0.0.1", 9), timeout=0.1)


@pytest.mark.loopback
def test_a_loopback_test_reaches_127_0_0_1_and_nothing_else() -> None:
    # GIVEN a unit test marked loopback, and a listening socket on 127.0.0.1
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        # WHEN it connects to loopback, and to an address elsewhere (TEST-NET-1, never routed)
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            pass
        # THEN loopback connects and the other address is refused by pytest-socket, not by the network
        with pytest.raises(pytest_socket.SocketConnectBlockedError):
            socket.create_connection(("192.0.2.1", 80), timeout=0.1)
    finally:
        server.close()

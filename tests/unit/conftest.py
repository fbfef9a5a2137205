"""Unit-tree fixtures: unit tests run with network sockets disabled (pytest-socket).

A unit test that needs a server belongs in tests/integration; here every test gets
`pytest_socket.disable_socket()` (Unix sockets stay allowed), so a test that reaches for the network fails
with `SocketBlockedError` instead of silently depending on it. A test that must see a connection refused
(a closed port on 127.0.0.1) is marked `@pytest.mark.loopback` and may reach 127.0.0.1 / ::1 only.
"""

from __future__ import annotations

import pytest
import pytest_socket


def pytest_configure(config: pytest.Config) -> None:
    """Register the unit tree's marker."""
    config.addinivalue_line("markers", "loopback: the unit test may open sockets to 127.0.0.1 / ::1 only")


@pytest.fixture(autouse=True)
def _no_network(request: pytest.FixtureRequest) -> None:
    """Block inet sockets for each unit test (pytest-socket lifts the restriction at teardown)."""
    if request.node.get_closest_marker("loopback"):
        pytest_socket.socket_allow_hosts(["127.0.0.1", "::1"], allow_unix_socket=True)
    else:
        pytest_socket.disable_socket(allow_unix_socket=True)

"""Test server: moto's AWS emulator (SQS, DynamoDB, Secrets Manager, ...) on a random loopback port.

``AWS_ENDPOINT_URL`` is honoured by every boto3 client, including the ones Powertools builds itself, so
setting :func:`aws_env` in the environment points the code under test at this server without code changes.
Reset state between tests with :meth:`MotoServer.reset`.
"""

from __future__ import annotations

import logging
import urllib.request
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self

    from moto.server import ThreadedMotoServer

__all__ = ["AWS_REGION", "MotoServer", "aws_env"]

AWS_REGION = "us-east-1"


def aws_env(endpoint: str) -> dict[str, str]:
    """Environment variables that send boto3 to ``endpoint`` with dummy credentials in us-east-1.

    ``AWS_REGION`` is set too because Lambda sets it and Powertools reads it.
    """
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": AWS_REGION,
        "AWS_REGION": AWS_REGION,
    }


class MotoServer:
    """``moto.server.ThreadedMotoServer`` bound to 127.0.0.1 on a port chosen by the kernel."""

    def __init__(self) -> None:
        self._server: ThreadedMotoServer | None = None
        self._port = 0

    def start(self) -> Self:
        """Start serving on a daemon thread (about 0.4 s for the first import). Idempotent."""
        if self._server is not None:
            return self
        from moto.server import ThreadedMotoServer  # heavy import, paid only by tests that need AWS

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # verbose=False does not silence request logs
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        self._port = server.get_host_and_port()[1]
        self._server = server
        return self

    def stop(self) -> None:
        """Stop the server. Idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.stop()

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``, the value for ``AWS_ENDPOINT_URL`` / ``endpoint_url``."""
        if self._server is None:
            raise RuntimeError("moto server is not started; call start() first")
        return f"http://127.0.0.1:{self._port}"

    def env(self) -> dict[str, str]:
        """:func:`aws_env` for this server."""
        return aws_env(self.endpoint)

    def reset(self) -> None:
        """Drop every emulated resource (``POST /moto-api/reset``, about 10 ms)."""
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST", data=b"")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

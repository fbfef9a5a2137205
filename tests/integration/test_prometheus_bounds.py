"""The Prometheus source's bounded reads against a hostile raw-socket server: the answer deadline holds even when the
server sends nothing for longer than the deadline between bytes, over-cap and over-deadline answers are not retried,
and each unusable answer is the error the CLI maps to exit 3. Requests counted at the server."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from gpuwaste.errors import SourceAnswerError, SourceAuthError, SourceUnavailableError
from gpuwaste.models.settings import PrometheusSettings
from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource
from tests.servers.hostile_http import HostileHttpServer

pytestmark = pytest.mark.integration

AT = datetime(2026, 1, 1, tzinfo=UTC)


def _source(url: str, **settings: float) -> PrometheusGpuMetricsSource:
    return PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=url, max_retries=2, **settings), cluster="c", backoff_s=0.0)


def test_deadline_holds_when_the_server_is_silent_longer_than_the_deadline() -> None:
    # GIVEN a server that sends its headers, then one byte every 3 s; a 1 s deadline and a 10 s per-read timeout
    with HostileHttpServer("slow_drip", drip_s=3.0) as server:
        source = _source(server.url, answer_deadline_s=1.0, timeout_s=10.0)
        t0 = time.monotonic()
        # WHEN a query runs / THEN it stops at the deadline (each read waits at most what is left), not after 3 or 10 s
        with pytest.raises(SourceUnavailableError, match=r"did not finish its answer .* within 1 s"):
            source.instant_query("up", at=AT)
        elapsed = time.monotonic() - t0
        seen = server.requests_seen
    assert elapsed < 2.5, elapsed
    assert seen == 1  # not retried: a stalled answer would only stall again


def test_deadline_holds_when_the_headers_trickle_in() -> None:
    # GIVEN a server that sends the status line, then a header one byte every 0.3 s (each read within the 10 s timeout)
    with HostileHttpServer("header_drip", drip_s=0.3) as server:
        source = _source(server.url, answer_deadline_s=1.0, timeout_s=10.0)
        t0 = time.monotonic()
        # WHEN a query runs / THEN the deadline's watchdog cuts the connection at 1 s: no headers, no hang
        with pytest.raises(SourceUnavailableError, match=r"did not finish its answer .* within 1 s"):
            source.instant_query("up", at=AT)
        elapsed = time.monotonic() - t0
        seen = server.requests_seen
    assert elapsed < 2.5, elapsed
    assert seen == 1


def test_a_finished_answer_is_never_cut_by_its_watchdog() -> None:
    # GIVEN a 0.5 s deadline and a quick, valid (malformed-JSON) answer, asked many times on kept-alive connections
    with HostileHttpServer("malformed") as server:
        source = _source(server.url, answer_deadline_s=0.5)
        for _ in range(5):
            with pytest.raises(SourceAnswerError):
                source.instant_query("up", at=AT)
        # WHEN the watchdogs' deadlines pass after the answers were read
        time.sleep(0.8)
        # THEN nothing was cut late: the next query still gets its answer (not a deadline error)
        with pytest.raises(SourceAnswerError, match="did not answer like a Prometheus HTTP API"):
            source.instant_query("up", at=AT)


def test_answer_over_the_cap_is_refused_without_retry_and_names_the_setting() -> None:
    with HostileHttpServer("huge", size=50_000_000) as server:
        source = _source(server.url, max_answer_mb=2)
        with pytest.raises(SourceAnswerError, match=r"answer over 2 MB \(received\) .* raise prometheus.max_answer_mb"):
            source.instant_query("up", at=AT)
        seen = server.requests_seen
    assert seen == 1


def test_gzip_bomb_stops_at_the_cap_of_decoded_bytes() -> None:
    with HostileHttpServer("gzip_bomb", size=1_000_000_000) as server:
        source = _source(server.url, max_answer_mb=2)
        t0 = time.monotonic()
        with pytest.raises(SourceAnswerError, match=r"answer over 2 MB \(decoded from its compression\)"):
            source.instant_query("up", at=AT)
        assert time.monotonic() - t0 < 5


@pytest.mark.parametrize(("status", "error", "says"), [
    (401, SourceAuthError, "rejected the credentials"),
    (302, SourceAnswerError, "redirected the query query (HTTP 302); redirects are not followed"),
    (422, SourceAnswerError, "refused the query query (HTTP 422): hostile answer"),
])
def test_unusable_status_answers_are_source_errors_not_retried(status: int, error: type[Exception], says: str) -> None:
    with HostileHttpServer("status", status=status) as server:
        with pytest.raises(error, match=says.replace("(", r"\(").replace(")", r"\)")):
            _source(server.url).instant_query("up", at=AT)
        assert server.requests_seen == 1  # a 302's Location was not followed (it points back here)


def test_malformed_answer_is_a_source_answer_error() -> None:
    with HostileHttpServer("malformed") as server, pytest.raises(SourceAnswerError, match="did not answer like a Prometheus HTTP API"):
        _source(server.url).instant_query("up", at=AT)


def test_gzip_answer_of_several_members_is_decoded_whole() -> None:
    # GIVEN a real BoundedAdapter reading a 200 answer sent as two gzip members (RFC 1952 allows several)
    import gzip
    import socket
    import threading

    doc = b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"b"},"value":[1,"2"]}]}}'
    body = gzip.compress(doc[:40]) + gzip.compress(doc[40:])
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
                         + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)

    threading.Thread(target=serve, daemon=True).start()
    try:
        # WHEN queried / THEN the whole document was decoded (both members)
        assert _source(f"http://127.0.0.1:{port}").instant_query("up", at=AT) == [{"metric": {"a": "b"}, "value": [1, "2"]}]
    finally:
        listener.close()

"""Integration: `gpuwaste serve`'s read API over plain HTTP (a real `Server.run` on 127.0.0.1 over the demo recording
and its state file): bearer auth, read-only methods, body and query limits, the rate limit, and the answers compared
with the store's own records and the read functions."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app
from gpuwaste.commands.api import RATE_BURST, FindingsReader
from gpuwaste.commands.serve import Server
from gpuwaste.config import GpuWasteConfig
from tests.servers.ports import free_port

pytestmark = pytest.mark.integration
TOKEN = "s3cret-token-for-tests"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Server]]:
    state = tmp_path_factory.mktemp("api") / "state.db"
    ran = CliRunner().invoke(app, ["demo", "-q", "--state", str(state)], env={"COLUMNS": "200"})
    assert ran.exit_code == 0, ran.output
    recording = local.demo_recording()
    sources = local.recording_sources(recording, GpuWasteConfig())
    assert sources.recording is not None
    cfg, _ = local.recording_config(GpuWasteConfig(), sources, config_given=False)
    server = Server(
        sources,
        cfg,
        cluster=sources.recording.cluster,
        window_s=sources.recording.meta.window_s,
        state=state,
        interval_s=3600,
        fixed_time=sources.recording.end_time(),
        api_token=TOKEN,
    )
    port = free_port()
    thread = threading.Thread(target=server.run, kwargs={"host": "127.0.0.1", "port": port}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(f"{base}/healthz", timeout=2).read()
            break
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.05)
    yield base, state, server
    server.stopped.set()
    thread.join(timeout=30)


def _get(
    url: str, token: str | None = TOKEN, method: str = "GET", data: bytes | None = None
) -> tuple[int, dict[str, Any], Any]:
    req = urllib.request.Request(url, method=method, data=data)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read() or b"null")


def test_findings_over_http_are_the_read_functions(served: tuple[str, Path, Server]) -> None:
    base, state, server = served
    # WHEN the open findings of the demo are asked for over HTTP, and read through the read functions
    status, headers, body = _get(f"{base}/api/v1/findings?state=open&limit=500")
    direct = FindingsReader(state, server.cfg).list_findings(state="open", limit=500)
    # THEN the answer is the page, as JSON
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert body == direct.model_dump(mode="json") and body["total"] > 0
    # AND a finding's explain document and the summary answer too
    fp = body["items"][0]["fingerprint"]
    status, _, doc = _get(f"{base}/api/v1/findings/{fp[:10]}")
    assert status == 200 and doc["record"]["fingerprint"] == fp and doc["text"]
    status, _, summary = _get(f"{base}/api/v1/summary?period=7d")
    assert status == 200 and summary["open_findings"] == FindingsReader(state, server.cfg).summary("7d").open_findings
    status, _, spec = _get(f"{base}/api/v1/openapi.json")
    assert status == 200 and spec["openapi"] == "3.1.0"


def test_auth_methods_and_limits(served: tuple[str, Path, Server]) -> None:
    base, _, _ = served
    assert _get(f"{base}/api/v1/findings", token=None)[0] == 401
    status, headers, body = _get(f"{base}/api/v1/findings", token="wrong")
    assert status == 401 and "Bearer" in headers["WWW-Authenticate"] and TOKEN not in json.dumps(body)
    assert _get(f"{base}/api/v1/findings", method="POST", data=b"")[0] == 405
    assert _get(f"{base}/api/v1/findings", method="DELETE")[0] == 405
    req = urllib.request.Request(f"{base}/api/v1/findings", method="GET", data=b"x" * 10)
    req.add_header("Authorization", f"Bearer {TOKEN}")
    with pytest.raises(urllib.error.HTTPError) as big:
        urllib.request.urlopen(req, timeout=10)
    assert big.value.code == 413
    assert _get(f"{base}/api/v1/findings?namespace={'a' * 3000}")[0] == 414
    status, _, body = _get(f"{base}/api/v1/findings?kind=nope")
    assert status == 400 and "kind" in body["error"]
    assert _get(f"{base}/api/v1/findings?colour=red")[0] == 400
    assert _get(f"{base}/api/v1/findings/ffffffffffffffffff")[0] == 404
    assert _get(f"{base}/api/v1/showback")[0] == 404


def test_rate_limit_answers_429_with_retry_after(served: tuple[str, Path, Server]) -> None:
    base, _, _ = served
    time.sleep(RATE_BURST / 10 + 0.5)  # the bucket of 127.0.0.1 refilled after the other tests
    codes = [_get(f"{base}/api/v1/openapi.json")[:2] for _ in range(RATE_BURST + 10)]
    limited = [h for c, h in codes if c == 429]
    assert limited and all(int(h["Retry-After"]) >= 1 for h in limited)
    assert [c for c, _ in codes[:RATE_BURST]] == [200] * RATE_BURST


def test_without_a_token_the_api_is_off(tmp_path: Path) -> None:
    recording = local.demo_recording()
    sources = local.recording_sources(recording, GpuWasteConfig())
    server = Server(sources, GpuWasteConfig(), cluster="demo", window_s=3600, state=tmp_path / "s.db", interval_s=60)
    calls: list[str] = []
    body = b"".join(
        server.wsgi_app()(
            {"PATH_INFO": "/api/v1/findings", "REQUEST_METHOD": "GET"}, lambda status, headers: calls.append(status)
        )
    )
    assert calls == ["404 Not Found"] and b"GPUWASTE_API_TOKEN" in body

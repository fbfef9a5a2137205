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
from gpuwaste.commands.api import FindingsReader, api_json
from gpuwaste.commands.api.http import RATE_BURST
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
    assert body == api_json(direct) and body["total"] > 0
    # AND a finding's explain document and the summary answer too
    fp = body["items"][0]["fingerprint"]
    status, _, doc = _get(f"{base}/api/v1/findings/{fp[:10]}")
    assert status == 200 and doc["record"]["fingerprint"] == fp and doc["text"]
    status, _, summary = _get(f"{base}/api/v1/summary?period=7d")
    assert status == 200 and summary["open_findings"] == FindingsReader(state, server.cfg).summary("7d").open_findings
    status, _, spec = _get(f"{base}/api/v1/openapi.json")
    assert status == 200 and spec["openapi"] == "3.1.0"


def test_kind_short_names_and_money_to_the_cent(served: tuple[str, Path, Server]) -> None:
    base, state, server = served
    # WHEN findings are asked for by the CLI's short kind names and by the JSON value
    status, _, idle = _get(f"{base}/api/v1/findings?kind=idle&limit=500")
    _, _, value = _get(f"{base}/api/v1/findings?kind=idle_allocation&limit=500")
    _, _, wrong_hw = _get(f"{base}/api/v1/findings?kind=wrong-hw&limit=500")
    bad_status, _, bad = _get(f"{base}/api/v1/findings?kind=idel")
    # THEN the short names select what the values select, and an unknown one names the CLI's names
    assert status == 200 and idle == value and idle["total"] > 0
    assert wrong_hw == api_json(FindingsReader(state, server.cfg).list_findings(kind="wrong_hardware", limit=500))
    assert bad_status == 400 and "under-used" in bad["error"]
    # AND money is a decimal string to the cent, as `gpuwaste summary -o json` writes it
    _, _, summary = _get(f"{base}/api/v1/summary?period=7d")
    # (to a file: serve's own scans run in a thread of this process and may print while CliRunner holds stdout)
    written = state.parent / "summary-7d.json"
    cli = CliRunner().invoke(app, ["summary", "--state", str(state), "--since", "7d", "-o", "json",
                                   "--out-file", str(written)])
    assert cli.exit_code == 0, cli.output
    assert summary["wasted_usd"] == json.loads(written.read_text())["wasted_usd"]
    money = [i[k] for i in idle["items"] for k in ("cumulative_usd", "usd_per_day") if i[k] is not None]
    assert money and all(len(m.split(".")[1]) == 2 for m in money)


def test_showback_over_http_is_the_showback_command(served: tuple[str, Path, Server]) -> None:
    base, _, server = served
    # WHEN the showback is asked for (after serve's first scan handed over its ledger) by repeated and comma-separated
    # groupings, and printed by `gpuwaste showback -o json` over the same recording
    for _ in range(600):
        status, _, repeated = _get(f"{base}/api/v1/showback?by=team&by=namespace")
        if status != 409:
            break
        time.sleep(0.05)
    _, _, comma = _get(f"{base}/api/v1/showback?by=team,namespace")
    recording = local.demo_recording()
    cli = CliRunner().invoke(
        app, ["showback", "--recording", str(recording), "--by", "team", "--by", "namespace", "-o", "json"]
    )
    # THEN all three are the same document, to the number
    assert status == 200 and cli.exit_code == 0, cli.output
    assert repeated == comma == json.loads(cli.stdout)
    assert repeated["groups"]["team"] and repeated["conservation"]["holds"]
    # AND the default grouping is team; bad groupings and parameters are 400s
    assert _get(f"{base}/api/v1/showback")[2]["groups"].keys() == {"team"}
    status, _, bad = _get(f"{base}/api/v1/showback?by=label:secret")
    assert status == 400 and "not allow-listed" in bad["error"]
    assert _get(f"{base}/api/v1/showback?period=1d")[0] == 400


def test_showback_before_the_first_scan_is_409(tmp_path: Path) -> None:
    sources = local.recording_sources(local.demo_recording(), GpuWasteConfig())
    server = Server(
        sources,
        GpuWasteConfig(),
        cluster="demo",
        window_s=3600,
        state=tmp_path / "s.db",
        interval_s=60,
        api_token=TOKEN,
    )
    calls: list[str] = []
    body = b"".join(
        server.wsgi_app()(
            {"PATH_INFO": "/api/v1/showback", "REQUEST_METHOD": "GET", "HTTP_AUTHORIZATION": f"Bearer {TOKEN}"},
            lambda status, headers: calls.append(status),
        )
    )
    assert calls == ["409 Conflict"] and b"no scan ledger" in body


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
    assert _get(f"{base}/api/v1/reclaim")[0] == 404


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

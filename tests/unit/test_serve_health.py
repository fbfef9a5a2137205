"""`gpuwaste serve`'s WSGI app without a socket: /healthz turns 503 when the schedule is stuck, /metrics serves the
snapshot of the last scan (here over the demo recording), other paths are 404."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from gpuwaste.bootstrap import local
from gpuwaste.commands.serve import Server
from gpuwaste.config import GpuWasteConfig


def _call(app: Any, path: str) -> tuple[str, bytes]:
    seen: dict[str, str] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        seen["status"] = status

    environ = {"PATH_INFO": path, "REQUEST_METHOD": "GET", "QUERY_STRING": "", "wsgi.url_scheme": "http",
               "SERVER_NAME": "localhost", "SERVER_PORT": "9402", "HTTP_ACCEPT": "text/plain"}
    body = b"".join(app(environ, start_response))
    return seen["status"], body


def _server(tmp_path: Path) -> Server:
    cfg = GpuWasteConfig()
    sources = local.recording_sources(local.demo_recording(), cfg)
    assert sources.recording is not None
    return Server(sources, cfg, cluster=sources.recording.cluster, window_s=sources.recording.meta.window_s,
                  state=tmp_path / "state.db", interval_s=60, fixed_time=sources.recording.end_time())


def test_healthz_is_503_when_the_schedule_is_stuck(tmp_path: Path) -> None:
    # GIVEN a server that scanned the demo once
    server = _server(tmp_path)
    assert server.scan_once() is True
    app = server.wsgi_app()
    status, body = _call(app, "/healthz")
    assert status.startswith("200") and json.loads(body)["scans"] == {"success": 1}
    # WHEN no scan has started or ended for longer than 2 intervals + 5 minutes
    server._tick = time.monotonic() - (2 * 60 + 301)
    status, body = _call(app, "/healthz")
    # THEN /healthz says so with 503 (the liveness probe restarts the pod), /metrics still serves, others are 404
    assert status.startswith("503") and json.loads(body)["status"] == "stalled"
    status, body = _call(app, "/metrics")
    assert status.startswith("200") and b'gpuwaste_waste_usd_per_day{cluster="demo"' in body
    assert _call(app, "/")[0].startswith("404")

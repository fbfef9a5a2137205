"""Integration: `gpuwaste mcp` through the official MCP SDK's own client — in process and over stdio (the command
started as a subprocess) — against the demo's state file: the five tools are read-only, answer what the read
functions answer (money as the API writes it, to the cent), showback over the last scan's ledger (an error over
stdio, where no scan runs), and bad input is a tool error. Skipped without the `mcp` extra (pip install 'gpuwaste[mcp]')."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.commands.api import FindingsReader, api_json
from gpuwaste.config import GpuWasteConfig

mcp = pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'gpuwaste[mcp]' (mcp>=2.3,<3)")
anyio = pytest.importorskip("anyio")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from gpuwaste.commands.mcp_server import build_server  # noqa: E402

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    state = tmp_path_factory.mktemp("mcp") / "state.db"
    ran = CliRunner().invoke(app, ["demo", "-q", "--state", str(state)], env={"COLUMNS": "200"})
    assert ran.exit_code == 0, ran.output
    return state


def _call(server: Any, calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[Any], list[Any]]:
    async def main() -> tuple[list[Any], list[Any]]:
        async with Client(server) as client:
            tools = (await client.list_tools()).tools
            return tools, [await client.call_tool(name, args) for name, args in calls]

    return anyio.run(main)


def test_tools_in_process_answer_the_read_functions(demo_state: Path) -> None:
    # GIVEN the MCP server over the demo's state file and the ledger of a scan of the demo recording, and the read
    # functions over the same
    from gpuwaste.bootstrap import local
    from gpuwaste.commands.showback import scan_window

    report, cfg = scan_window(local.demo_recording(), None, None, None, None, None)
    reader = FindingsReader(demo_state, cfg)
    reader.observe_scan(report.cluster, report.showback, report.findings)
    first = reader.list_findings(state="open", limit=1).items[0]
    # WHEN the SDK's client lists the tools and calls each
    tools, (page, doc, summary, top, bad, showback, kind, bad_by) = _call(
        build_server(reader),
        [
            ("list_findings", {"state": "open", "limit": 5}),
            ("explain_finding", {"id": first.fingerprint[:8]}),
            ("waste_summary", {"period": "7d"}),
            ("top_offenders", {"period": "7d", "limit": 3}),
            ("list_findings", {"kind": "bogus"}),
            ("showback", {"by": ["team", "namespace"]}),
            ("list_findings", {"kind": "idle", "limit": 500}),
            ("showback", {"by": ["label:secret"]}),
        ],
    )
    # THEN there are the five tools, each read-only, idempotent and closed-world
    assert sorted(t.name for t in tools) == [
        "explain_finding",
        "list_findings",
        "showback",
        "top_offenders",
        "waste_summary",
    ]
    assert all(
        t.annotations.read_only_hint
        and not t.annotations.destructive_hint
        and t.annotations.idempotent_hint
        and t.annotations.open_world_hint is False
        for t in tools
    )
    # AND each answer is the read function's document
    assert page.structured_content == api_json(reader.list_findings(state="open", limit=5))
    assert doc.structured_content == api_json(reader.explain(first.fingerprint[:8]), exact=("finding",))
    assert summary.structured_content == api_json(reader.summary("7d"))
    assert top.structured_content == api_json(reader.top_offenders("7d", 3))
    assert showback.structured_content == reader.showback(["team", "namespace"]).model_dump(mode="json")
    assert showback.structured_content["groups"]["team"]
    assert kind.structured_content == api_json(reader.list_findings(kind="idle_allocation", limit=500))
    assert kind.structured_content["total"] > 0
    # AND bad input is a tool error with the read function's message
    assert bad.is_error and "kind='bogus'" in bad.content[0].text
    assert bad_by.is_error and "not allow-listed" in bad_by.content[0].text


def test_gpuwaste_mcp_over_stdio(demo_state: Path) -> None:
    # GIVEN `gpuwaste mcp --state FILE` started by the SDK's stdio client
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", "from gpuwaste.cli import run; run()", "mcp", "--state", str(demo_state)],
        env={"PYTHONPATH": os.pathsep.join([str(ROOT / "shared"), str(ROOT)])},
    )
    reader = FindingsReader(demo_state, GpuWasteConfig())
    # WHEN it is asked for the top offenders and an unknown finding
    tools, (top, unknown, showback) = _call(
        params,
        [
            ("top_offenders", {"period": "7d", "limit": 3}),
            ("explain_finding", {"id": "ffffffffffff"}),
            ("showback", {}),
        ],
    )
    # THEN it answers as in process; showback says why it cannot answer there (no scan runs over stdio)
    assert len(tools) == 5
    assert top.structured_content == api_json(reader.top_offenders("7d", 3))
    assert unknown.is_error and "no finding" in unknown.content[0].text
    assert showback.is_error and "no scan ledger" in showback.content[0].text


def test_mcp_command_refuses_a_missing_state_file(tmp_path: Path) -> None:
    ran = CliRunner().invoke(app, ["mcp", "--state", str(tmp_path / "none.db")])
    assert ran.exit_code == 2 and "no such state file" in ran.output


def test_serve_mounts_the_mcp_server_over_http_behind_the_token(demo_state: Path) -> None:
    import threading
    import time
    import urllib.error
    import urllib.request

    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from gpuwaste.bootstrap import local
    from gpuwaste.commands.serve import Server
    from tests.servers.ports import free_port

    # GIVEN `serve` over the demo recording and its state file, with the API token and an MCP port
    sources = local.recording_sources(local.demo_recording(), GpuWasteConfig())
    assert sources.recording is not None
    cfg, _ = local.recording_config(GpuWasteConfig(), sources, config_given=False)
    server = Server(
        sources,
        cfg,
        cluster=sources.recording.cluster,
        window_s=sources.recording.meta.window_s,
        state=demo_state,
        interval_s=3600,
        fixed_time=sources.recording.end_time(),
        api_token="tok-123",
        mcp_port=0,
    )
    thread = threading.Thread(target=server.run, kwargs={"host": "127.0.0.1", "port": free_port()}, daemon=True)
    thread.start()
    try:
        for _ in range(300):
            if server.mcp_bound:
                break
            time.sleep(0.05)
        assert server.mcp_bound, "the MCP listener did not start"
        url = f"http://127.0.0.1:{server.mcp_bound}/mcp"
        # WHEN a request comes without the token, THEN it is refused before the SDK sees it
        req = urllib.request.Request(url, method="POST", data=b"{}", headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=10)
        assert refused.value.code == 401

        # WHEN the SDK's client connects with the token over Streamable HTTP
        async def main() -> tuple[list[Any], Any, Any]:
            async with (
                httpx2.AsyncClient(headers={"Authorization": "Bearer tok-123"}) as http,
                Client(streamable_http_client(url, http_client=http)) as client,
            ):
                tools = (await client.list_tools()).tools
                page = await client.call_tool("list_findings", {"state": "open", "limit": 3})
                for _ in range(600):  # the first scan may still run: 409 until it hands over its ledger
                    showback = await client.call_tool("showback", {"by": ["namespace"]})
                    if not showback.is_error:
                        break
                    await anyio.sleep(0.05)
                return tools, page, showback

        tools, page, showback = anyio.run(main)
        # THEN it answers what the read functions answer, showback the serve process's last scan
        assert len(tools) == 5
        reader = FindingsReader(demo_state, cfg)
        assert page.structured_content["total"] == reader.list_findings(state="open").total
        assert not showback.is_error, showback.content
        assert showback.structured_content == server.reader.showback(["namespace"]).model_dump(mode="json")
        assert showback.structured_content["groups"]["namespace"]
    finally:
        server.stopped.set()
        thread.join(timeout=30)
    assert not thread.is_alive()

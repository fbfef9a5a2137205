"""Integration: `gpuwaste mcp` through the official MCP SDK's own client — in process and over stdio (the command
started as a subprocess) — against the demo's state file: the four tools are read-only, answer what the read
functions answer, and bad input is a tool error. Skipped without the `mcp` extra (pip install 'gpuwaste[mcp]')."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.commands.api import FindingsReader
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
    # GIVEN the MCP server over the demo's state file, and the read functions over the same file
    reader = FindingsReader(demo_state, GpuWasteConfig())
    first = reader.list_findings(state="open", limit=1).items[0]
    # WHEN the SDK's client lists the tools and calls each
    tools, (page, doc, summary, top, bad) = _call(
        build_server(reader),
        [
            ("list_findings", {"state": "open", "limit": 5}),
            ("explain_finding", {"id": first.fingerprint[:8]}),
            ("waste_summary", {"period": "7d"}),
            ("top_offenders", {"period": "7d", "limit": 3}),
            ("list_findings", {"kind": "bogus"}),
        ],
    )
    # THEN there are the four tools, each read-only, idempotent and closed-world
    assert sorted(t.name for t in tools) == ["explain_finding", "list_findings", "top_offenders", "waste_summary"]
    assert all(
        t.annotations.read_only_hint
        and not t.annotations.destructive_hint
        and t.annotations.idempotent_hint
        and t.annotations.open_world_hint is False
        for t in tools
    )
    # AND each answer is the read function's document
    assert page.structured_content == reader.list_findings(state="open", limit=5).model_dump(mode="json")
    assert doc.structured_content == reader.explain(first.fingerprint[:8]).model_dump(mode="json")
    assert summary.structured_content == reader.summary("7d").model_dump(mode="json")
    assert top.structured_content == reader.top_offenders("7d", 3).model_dump(mode="json")
    # AND bad input is a tool error with the read function's message
    assert bad.is_error and "kind='bogus'" in bad.content[0].text


def test_gpuwaste_mcp_over_stdio(demo_state: Path) -> None:
    # GIVEN `gpuwaste mcp --state FILE` started by the SDK's stdio client
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", "from gpuwaste.cli import run; run()", "mcp", "--state", str(demo_state)],
        env={"PYTHONPATH": os.pathsep.join([str(ROOT / "shared"), str(ROOT)])},
    )
    reader = FindingsReader(demo_state, GpuWasteConfig())
    # WHEN it is asked for the top offenders and an unknown finding
    tools, (top, unknown) = _call(
        params, [("top_offenders", {"period": "7d", "limit": 3}), ("explain_finding", {"id": "ffffffffffff"})]
    )
    # THEN it answers as in process
    assert len(tools) == 4
    assert top.structured_content == reader.top_offenders("7d", 3).model_dump(mode="json")
    assert unknown.is_error and "no finding" in unknown.content[0].text


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
        async def main() -> tuple[list[Any], Any]:
            async with (
                httpx2.AsyncClient(headers={"Authorization": "Bearer tok-123"}) as http,
                Client(streamable_http_client(url, http_client=http)) as client,
            ):
                tools = (await client.list_tools()).tools
                return tools, await client.call_tool("list_findings", {"state": "open", "limit": 3})

        tools, page = anyio.run(main)
        # THEN it answers what the read functions answer
        assert len(tools) == 4
        reader = FindingsReader(demo_state, cfg)
        assert page.structured_content["total"] == reader.list_findings(state="open").total
    finally:
        server.stopped.set()
        thread.join(timeout=30)
    assert not thread.is_alive()

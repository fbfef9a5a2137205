"""`gpuwaste mcp`: a read-only MCP server (official `mcp` Python SDK, the optional extra `gpuwaste[mcp]`) over stdio.

Its five tools call the same read functions as `serve`'s `/api/v1` (`api.FindingsReader`) over a state
file, and answer the same JSON documents (structured content):

- `list_findings` (filters cluster, namespace, team, kind, state, since; limit/offset) → `FindingsPage`
- `explain_finding` (id: the start of a fingerprint) → `ExplainDocument`
- `waste_summary` (period, e.g. 1d, 7d) → `DailySummary`
- `top_offenders` (period, limit) → `TopOffenders`
- `showback` (by: team, namespace, label:KEY, …) → `ShowbackDocument`, the last scan's window (only where the server
  runs inside `gpuwaste serve`: over stdio there is no scan ledger, and the tool answers the API's 409 message)

Every tool is annotated read-only, idempotent and closed-world; bad input is a tool error (`is_error`) carrying the
same message as the API's 400/404/409 body. Money is written as the API writes it (`api_json`: to the cent).
Nothing here writes the store or a cluster.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuwaste import __version__
from gpuwaste.cli_support import DEFAULT_STATE, app, check_state_path, config_or_exit, escape_markup, fail

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from gpuwaste.commands.api import FindingsReader, RateLimiter

#: The extra that brings the SDK.
EXTRA_HINT = ("the MCP server needs the official MCP SDK, the extra gpuwaste[mcp]: from a clone `pip install '.[mcp]'` "
              "(or `pipx install '.[mcp]'`), or `pip install 'mcp>=2.3,<3'` into gpuwaste's environment")


def build_server(reader: FindingsReader) -> MCPServer:
    """The MCP server with the five read-only tools over `reader`.

    Raises:
        ModuleNotFoundError: the `mcp` SDK is not installed (the extra `gpuwaste[mcp]`).
    """
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import ToolAnnotations

    from gpuwaste.commands.api import DEFAULT_LIMIT, ReadError, api_json
    from gpuwaste.errors import StoreError

    server = MCPServer(
        name="gpuwaste",
        version=__version__,
        log_level="WARNING",
        instructions="Read-only access to gpuwaste's GPU waste findings (DCGM telemetry joined with "
        "Kubernetes state, priced in USD/day). Money is a decimal string in USD.",
    )

    def read_only(title: str) -> ToolAnnotations:
        return ToolAnnotations(
            title=title, read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        )

    def answer(call: Any, exact: tuple[str, ...] = ()) -> dict[str, Any]:
        try:
            result: dict[str, Any] = api_json(call(), exact=exact)
        except ReadError as exc:
            raise ToolError(str(exc)) from exc
        except StoreError as exc:
            raise ToolError(f"the state file cannot be read: {exc}") from exc
        return result

    def list_findings(
        cluster: str | None = None,
        namespace: str | None = None,
        team: str | None = None,
        kind: str | None = None,
        state: str | None = None,
        since: str | None = None,
        limit: int = DEFAULT_LIMIT,
        offset: int = 0,
    ) -> dict[str, Any]:
        """Findings (newest activity first) matching every filter given: cluster, namespace, team, kind (the names
        `gpuwaste scan --kind` takes: idle, under-used, unallocated, wrong-hw, ..., or idle_allocation and the other
        JSON values), state (open or resolved), since (RFC 3339, unix seconds or a duration such as 7d); a page of
        `limit` (1-500) from `offset`, with `total` and `next_offset`."""
        return answer(
            lambda: reader.list_findings(
                cluster=cluster,
                namespace=namespace,
                team=team,
                kind=kind,
                state=state,
                since=since,
                limit=limit,
                offset=offset,
            )
        )

    def explain_finding(id: str) -> dict[str, Any]:  # noqa: A002 - the tool's argument name clients see
        """One finding's explanation (its ID: 4+ hex characters of the fingerprint): evidence, thresholds, waste
        formula, cost and how to fix it; `text` is what `gpuwaste explain` prints."""
        return answer(lambda: reader.explain(id), exact=("finding",))

    def waste_summary(period: str = "1d") -> dict[str, Any]:
        """The waste summary of the period (a duration up to 90d, default 1d) ending at the last scan: USD wasted,
        open USD/day, totals by team, namespace, kind and cluster, trend, top offenders, savings."""
        return answer(lambda: reader.summary(period))

    def top_offenders(period: str = "1d", limit: int = 10) -> dict[str, Any]:
        """The costliest findings of the period (USD wasted in it), at most `limit` (1-50)."""
        return answer(lambda: reader.top_offenders(period, limit))

    def showback(by: list[str] | None = None) -> dict[str, Any]:
        """Showback of the last scan's window: GPU-hours and USD allocated, used, wasted and efficiency per group, for
        each grouping in `by` (default team; also namespace, label:KEY with an allow-listed KEY such as cost_center,
        cluster, gpu_model, node, mechanism), with the share-conservation check; the same document as `gpuwaste
        showback --output json`."""
        return answer(lambda: reader.showback(by or ["team"]))

    server.add_tool(list_findings, annotations=read_only("List GPU waste findings"))
    server.add_tool(explain_finding, annotations=read_only("Explain one finding"))
    server.add_tool(waste_summary, annotations=read_only("GPU waste summary"))
    server.add_tool(top_offenders, annotations=read_only("Top GPU waste offenders"))
    server.add_tool(showback, annotations=read_only("GPU showback by team, namespace or label"))
    return server


#: Largest MCP request body over HTTP (bytes); a tool call is a few hundred.
MAX_MCP_BODY_BYTES = 64 * 1024


def http_app(reader: FindingsReader, token: str, limiter: RateLimiter | None = None) -> Any:
    """The MCP server over Streamable HTTP at `/mcp` (stateless, JSON answers) as an ASGI application, behind the
    read API's rules: `Authorization: Bearer <token>` (401), a body of at most `MAX_MCP_BODY_BYTES` (413) and the
    per-address rate limit (429 with Retry-After). The SDK's DNS-rebinding check is off: the bearer token, which a
    browser cannot add on its own, guards the endpoint, and in a pod the Host header is the Service's name.

    Raises:
        ModuleNotFoundError: the `mcp` SDK is not installed (the extra `gpuwaste[mcp]`).
    """
    import hmac
    import json

    from mcp.server.transport_security import TransportSecuritySettings

    from gpuwaste.commands.api import RateLimiter

    inner = build_server(reader).streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    bucket = limiter or RateLimiter()
    expected = token.encode()

    async def refuse(send: Any, code: int, message: str, *headers: tuple[bytes, bytes]) -> None:
        body = json.dumps({"error": message, "status": code}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": code,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    *headers,
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await inner(scope, receive, send)  # lifespan: the SDK's session manager
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        wait = bucket.take(str((scope.get("client") or ("", 0))[0]))
        if wait > 0:
            await refuse(send, 429, "rate limit: slow down", (b"retry-after", str(max(1, round(wait + 0.5))).encode()))
            return
        scheme, _, value = headers.get(b"authorization", b"").partition(b" ")
        if scheme.lower() != b"bearer" or not hmac.compare_digest(value.strip(), expected):
            await refuse(
                send, 401, "send Authorization: Bearer <token>", (b"www-authenticate", b'Bearer realm="gpuwaste"')
            )
            return
        length = headers.get(b"content-length", b"0")
        if not length.isdigit() or int(length) > MAX_MCP_BODY_BYTES:
            await refuse(send, 413, f"a request body of at most {MAX_MCP_BODY_BYTES} bytes, with Content-Length")
            return
        await inner(scope, receive, send)

    return application


class McpHttpServer:
    """`http_app` served by uvicorn on a thread of the `serve` process (`gpuwaste serve --mcp-port PORT`)."""

    def __init__(self, app: Any, *, host: str, port: int) -> None:
        import uvicorn

        self._server = uvicorn.Server(
            uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on", access_log=False)
        )
        self._thread = threading.Thread(target=self._server.run, name="gpuwaste-mcp", daemon=True)

    def start(self, timeout_s: float = 15.0) -> int:
        """Start listening; returns the port (0 picks a free one).

        Raises:
            OSError: the port cannot be bound (or the server did not start within `timeout_s`).
        """
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise OSError("the MCP listener did not start (is the port free?)")
            time.sleep(0.02)
        return int(self._server.servers[0].sockets[0].getsockname()[1])

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=15)


@app.command("mcp")
def mcp_cmd(
    state: Annotated[
        Path,
        typer.Option("--state", help=f"The SQLite state file `gpuwaste serve`/`run` write (default {DEFAULT_STATE})."),
    ] = DEFAULT_STATE,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Configuration file (routing decides teams; detector thresholds)."),
    ] = None,
) -> None:
    """Serve the findings to AI assistants over MCP (stdio, read-only): list findings, explain a finding, waste
    summary, top offenders (showback needs a scan: it answers inside `gpuwaste serve --mcp-port`)."""
    from gpuwaste.commands.api import FindingsReader

    cfg = config_or_exit(config)
    path = check_state_path(state)
    if not path.is_file():
        fail(escape_markup(f"{path}: no such state file (write one with `gpuwaste run --state {path}` or serve)"))
    try:
        server = build_server(FindingsReader(path, cfg))
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in ("mcp", "mcp_types"):
            raise
        fail(escape_markup(EXTRA_HINT))
    server.run("stdio")


__all__ = ["EXTRA_HINT", "MAX_MCP_BODY_BYTES", "McpHttpServer", "build_server", "http_app", "mcp_cmd"]

"""The read API of `gpuwaste serve` (`/api/v1/…`) and the read functions it shares with the MCP server (`gpuwaste mcp`).

Everything here only reads the SQLite lifecycle store that `serve` / `run` write (`FindingStore.history`, read again
when the file changes; the store is in WAL mode, so reads never block the scan that writes). Responses are the existing models dumped
as JSON (`FindingRecord` fields, `Finding`, `DailySummary`); money is a decimal string rounded to the cent, as in the
CLI's JSON (`api_json`: `gpuwaste.people.money`, what `summary --output json` writes), times are RFC 3339.
`/api/v1/showback` answers `gpuwaste showback --output json`'s document over the ledger of the last scan this `serve`
process ran (the state file keeps findings, not the share ledger: 409 until the first scan, and always from the
stdio MCP server, which has no scan). `openapi_document()` builds the OpenAPI 3.1 document from the same models (committed as
docs/openapi.json; tests/unit/test_read_api.py compares it).

HTTP rules (`ReadApi`): GET/HEAD only (405 otherwise), a request body is refused (413), the query string is capped
(414 past `MAX_QUERY_BYTES`), every request needs `Authorization: Bearer <token>` (the token from a Kubernetes Secret:
`GPUWASTE_API_TOKEN` or `--api-token-file`; 401 otherwise; without a token the API is off, 404), and each client
address gets a token bucket of `RATE_PER_S` requests per second with a burst of `RATE_BURST` (429 with Retry-After).

The package, by concern: `documents` (the response models, the query parsers, `api_json`), `reader`
(`FindingsReader`), `openapi` (the OpenAPI document, `write_openapi`) and `http` (`ReadApi`, `RateLimiter`,
`read_token`). The names other modules use are re-exported here.
"""

from gpuwaste.commands.api.documents import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    ApiError,
    ExplainDocument,
    FindingsPage,
    FindingView,
    ReadError,
    ShowbackDocument,
    TopOffenders,
    api_json,
    parse_kind_filter,
    parse_period,
    parse_since,
)
from gpuwaste.commands.api.http import TOKEN_ENV, RateLimiter, ReadApi, read_token
from gpuwaste.commands.api.openapi import openapi_document, write_openapi
from gpuwaste.commands.api.reader import FindingsReader

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "TOKEN_ENV",
    "ApiError",
    "ExplainDocument",
    "FindingView",
    "FindingsPage",
    "FindingsReader",
    "RateLimiter",
    "ReadApi",
    "ReadError",
    "ShowbackDocument",
    "TopOffenders",
    "api_json",
    "openapi_document",
    "parse_kind_filter",
    "parse_period",
    "parse_since",
    "read_token",
    "write_openapi",
]

"""The OpenAPI 3.1 document of the read API, built from the response models.

It is committed as docs/openapi.json: `write_openapi` regenerates it, tests/unit/test_read_api.py compares it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuwaste import __version__
from gpuwaste.commands.api.documents import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    MAX_PERIOD_DAYS,
    ApiError,
    ExplainDocument,
    FindingsPage,
    ShowbackDocument,
)
from gpuwaste.models.findings import WasteKind
from gpuwaste.models.notices import DailySummary
from gpuwaste.people import kind_names


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of `/api/v1`, its schemas generated from the response models (pydantic)."""
    from pydantic.json_schema import models_json_schema

    _, defs = models_json_schema(
        [(m, "serialization") for m in (FindingsPage, ExplainDocument, DailySummary, ShowbackDocument, ApiError)],
        ref_template="#/components/schemas/{model}",
    )

    def ref(name: str) -> dict[str, Any]:
        return {"$ref": f"#/components/schemas/{name}"}

    def answer(name: str, description: str) -> dict[str, Any]:
        return {"description": description, "content": {"application/json": {"schema": ref(name)}}}

    errors = {
        str(code): answer("ApiError", text)
        for code, text in (
            (400, "bad input"),
            (401, "no or wrong bearer token"),
            (413, "a request body was sent"),
            (414, "query string too long"),
            (429, "rate limit: retry after the Retry-After seconds"),
        )
    }

    def q(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}

    text = {"type": "string"}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "gpuwaste read API",
            "version": __version__,
            "description": "Read-only findings, explanations, summaries and showback of `gpuwaste serve`. Money in "
            "USD as decimal strings rounded to the cent (as the CLI's JSON; showback: numbers to the cent, as "
            "`gpuwaste showback --output json`), times RFC 3339 UTC.",
        },
        "security": [{"bearer": []}],
        "paths": {
            "/api/v1/findings": {
                "get": {
                    "operationId": "listFindings",
                    "summary": "Findings, newest activity first",
                    "parameters": [
                        q("cluster", "cluster name", text),
                        q("namespace", "namespace", text),
                        q("team", "owning team (routing)", text),
                        q(
                            "kind",
                            "waste kind: a name `gpuwaste scan --kind` accepts (idle, under-used, …) or the JSON value",
                            {"type": "string", "enum": sorted({*kind_names(), *(k.value for k in WasteKind)})},
                        ),
                        q("state", "lifecycle state", {"type": "string", "enum": ["open", "resolved"]}),
                        q("since", "activity at or after: RFC 3339, unix seconds or a duration (7d)", text),
                        q(
                            "limit",
                            "page size",
                            {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
                        ),
                        q("offset", "first item", {"type": "integer", "minimum": 0, "default": 0}),
                    ],
                    "responses": {"200": answer("FindingsPage", "a page of findings"), **errors},
                }
            },
            "/api/v1/findings/{id}": {
                "get": {
                    "operationId": "explainFinding",
                    "summary": "One finding's explain document",
                    "parameters": [
                        {
                            "name": "id",
                            "in": "path",
                            "required": True,
                            "description": "the start of the fingerprint (4+ hex characters)",
                            "schema": {"type": "string", "pattern": "^[0-9a-fA-F]{4,64}$"},
                        }
                    ],
                    "responses": {
                        "200": answer("ExplainDocument", "the finding explained"),
                        "404": answer("ApiError", "no finding has this ID"),
                        **errors,
                    },
                }
            },
            "/api/v1/summary": {
                "get": {
                    "operationId": "wasteSummary",
                    "summary": "Waste summary of a period ending at the last scan",
                    "parameters": [
                        q("period", f"a duration up to {MAX_PERIOD_DAYS}d", {"type": "string", "default": "1d"})
                    ],
                    "responses": {"200": answer("DailySummary", "the summary"), **errors},
                }
            },
            "/api/v1/showback": {
                "get": {
                    "operationId": "showback",
                    "summary": "Showback of the last scan's window (as `gpuwaste showback --output json`)",
                    "parameters": [
                        {
                            "name": "by",
                            "in": "query",
                            "required": False,
                            "description": "grouping, repeatable or comma-separated (at most 8): team, namespace, "
                            "label:KEY (KEY allow-listed: GPUWASTE_SHOWBACK_LABELS), cluster, gpu_model, node, mechanism",
                            "schema": {"type": "array", "items": {"type": "string"}, "default": ["team"]},
                            "style": "form",
                            "explode": True,
                        }
                    ],
                    "responses": {
                        "200": answer("ShowbackDocument", "the showback"),
                        "409": answer("ApiError", "no scan has run in this process yet"),
                        **errors,
                    },
                }
            },
            "/api/v1/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document",
                    "responses": {"200": {"description": "OpenAPI 3.1"}},
                }
            },
        },
        "components": {"schemas": defs["$defs"], "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }


def write_openapi(path: Path | None = None) -> Path:
    """Write the OpenAPI document (default: docs/openapi.json of the source tree); returns the path."""
    target = path or Path(__file__).resolve().parents[4] / "docs" / "openapi.json"
    target.write_text(json.dumps(openapi_document(), indent=1, sort_keys=True) + "\n")
    return target

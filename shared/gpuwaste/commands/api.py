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
"""

from __future__ import annotations

import hmac
import json
import re
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from pydantic import BaseModel, Field
from pydantic_core import to_jsonable_python

from gpuwaste import __version__
from gpuwaste.models.base import Frozen
from gpuwaste.models.findings import Finding, WasteKind
from gpuwaste.models.lifecycle import FindingRecord, FindingState
from gpuwaste.models.notices import DailySummary, Offender
from gpuwaste.people import kind_names, money, parse_kind

if TYPE_CHECKING:
    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.services.showback import ScanLedger
    from gpuwaste.services.summary import SummaryService
    from gpuwaste.store.sqlite import SqliteFindingStore

#: Largest page of `/api/v1/findings` (`limit`); the default page is `DEFAULT_LIMIT`.
MAX_LIMIT = 500
DEFAULT_LIMIT = 100
#: Longest query string accepted (bytes); longer is 414.
MAX_QUERY_BYTES = 2048
#: Per client address: sustained requests per second and the burst above it.
RATE_PER_S = 10.0
RATE_BURST = 20
#: Longest summary period (`period`), days.
MAX_PERIOD_DAYS = 90
#: Environment variable holding the API's bearer token (from a Kubernetes Secret).
TOKEN_ENV = "GPUWASTE_API_TOKEN"

_DURATION = re.compile(r"^(\d+)([smhd])$")
_ALL_TIME = (datetime(1970, 1, 1, tzinfo=UTC), datetime(9999, 1, 1, tzinfo=UTC))


class ReadError(ValueError):
    """A request the read functions cannot answer: `status` is the HTTP status (400 bad input, 404 unknown ID, 409 no
    scan ledger yet)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class FindingView(Frozen):
    """One finding as the store keeps it (a `FindingRecord` without the delivery bookkeeping), with its team.

    Money in USD (decimal strings in JSON, exact), times RFC 3339 UTC. `title` and `confidence` come from the stored
    finding (empty when the record has none).
    """

    fingerprint: str
    cluster: str
    namespace: str | None = None
    workload: str | None = None
    team: str
    kind: str
    detector: str
    state: FindingState
    title: str = ""
    confidence: str = ""
    first_seen: datetime
    last_seen: datetime
    resolved_at: datetime | None = None
    usd_per_day: Decimal | None = None
    peak_usd_per_day: Decimal | None = None
    cumulative_usd: Decimal
    saved_usd_per_day: Decimal | None = None
    missed_scans: int = 0
    ticket_key: str | None = None
    snoozed_until: datetime | None = None
    acknowledged: str | None = None


class FindingsPage(Frozen):
    """A page of `/api/v1/findings`: newest activity first (then fingerprint); `next_offset` is None on the last page."""

    items: tuple[FindingView, ...]
    total: int = Field(ge=0, description="findings matching the filters, over all pages")
    offset: int = Field(ge=0)
    limit: int = Field(ge=1, le=MAX_LIMIT)
    next_offset: int | None = None


class ExplainDocument(Frozen):
    """`/api/v1/findings/{id}`: the finding as last stored (its evidence, subject, cost), its record, the detector's
    thresholds, and `text`, the same explanation `gpuwaste explain` prints."""

    record: FindingView
    finding: Finding | None = None
    thresholds: dict[str, Any] = Field(default_factory=dict)
    text: str = ""


class TopOffenders(Frozen):
    """The costliest findings of a period (`DailySummary.top`, up to `summary_top` of the delivery settings)."""

    since: datetime
    until: datetime
    items: tuple[Offender, ...]


class ShowbackPeriod(Frozen):
    """The scan window the showback covers (RFC 3339, as `showback --output json` writes it)."""

    start: str
    end: str


class ShowbackConservation(Frozen):
    """The share-conservation check of the window's ledger (`services.showback.conservation_figures`): every physical
    GPU-hour charged once; GPU-hours to 4 decimals, USD numbers to the cent (`usd_exact`: to 6 decimals)."""

    holds: bool
    physical_gpus: int
    unpriced_gpus: int
    gpu_hours: float
    holder_gpu_hours: float
    unsold_slices_gpu_hours: float
    unallocated_gpu_hours: float
    usd: float
    usd_exact: float
    holders_usd: float
    unsold_slices_usd: float
    unallocated_usd: float
    problems: tuple[str, ...]
    text: str


class ShowbackGroup(Frozen):
    """One group of a showback (`services.showback.ShowbackRow.as_dict`): GPU-hours allocated (charged by the ledger),
    used, wasted (the scan's priced waste findings), effective (allocated × mean activity), USD to the cent,
    efficiency used ÷ allocated (0–1, None when nothing is allocated)."""

    group: str
    holders: int
    allocated_gpu_hours: float
    allocated_usd: float
    used_gpu_hours: float
    wasted_gpu_hours: float
    wasted_usd: float
    effective_gpu_hours: float
    efficiency: float | None
    unpriced_gpu_hours: float


class ShowbackDocument(Frozen):
    """`/api/v1/showback`: `gpuwaste showback --output json`'s document over the last scan's window; `groups` maps each
    grouping asked for (team, namespace, label:KEY, …) to its rows, costliest first, unheld capacity last."""

    cluster: str
    period: ShowbackPeriod
    conservation: ShowbackConservation
    groups: dict[str, tuple[ShowbackGroup, ...]]


class ApiError(BaseModel):
    """Every error body: `{"error": "...", "status": 400}`."""

    error: str
    status: int


def parse_since(text: str | None, *, now: datetime) -> datetime | None:
    """`since`: RFC 3339 (with a zone), unix seconds, or a duration before `now` ("7d", "12h") → UTC; None passes.

    Raises:
        ReadError: on anything else.
    """
    if text is None or text == "":
        return None
    m = _DURATION.match(text.strip())
    if m:
        return now - timedelta(seconds=int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)])
    try:
        t = (
            datetime.fromtimestamp(float(text), tz=UTC)
            if re.fullmatch(r"\d+(\.\d+)?", text)
            else datetime.fromisoformat(text.replace("Z", "+00:00"))
        )
    except (ValueError, OverflowError) as exc:
        raise ReadError(f"since={text!r}: expected RFC 3339 (2024-01-01T00:00:00Z), unix seconds or 7d/12h") from exc
    if t.tzinfo is None:
        raise ReadError(f"since={text!r}: add a time zone (e.g. Z for UTC)")
    return t.astimezone(UTC)


def parse_period(text: str | None) -> timedelta:
    """`period`: a duration ("1d", "7d", "12h"; default 1d), longer than zero and at most `MAX_PERIOD_DAYS`.

    Raises:
        ReadError: on anything else.
    """
    m = _DURATION.match((text or "1d").strip())
    if not m:
        raise ReadError(f"period={text!r}: use a number and a unit, e.g. 1d, 7d, 12h")
    span = timedelta(seconds=int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)])
    if span <= timedelta(0) or span > timedelta(days=MAX_PERIOD_DAYS):
        raise ReadError(f"period={text!r}: must be longer than zero and at most {MAX_PERIOD_DAYS}d")
    return span


def _cents(value: Any) -> Any:
    """Every Decimal of a dumped document as `gpuwaste.people.money` writes it (a decimal string to the cent)."""
    if isinstance(value, Decimal):
        return money(value)
    if isinstance(value, dict):
        return {k: _cents(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_cents(v) for v in value]
    return value


def api_json(model: BaseModel, *, exact: tuple[str, ...] = ()) -> Any:
    """`model` as the API's JSON: its fields dumped, money (every Decimal) a decimal string rounded to the cent — the
    same as the CLI's JSON (`summary --output json`) — times RFC 3339. `exact`: top-level fields kept as pydantic
    dumps them (the stored `Finding` of the explain document, as `scan --output json` writes it)."""
    data = model.model_dump(mode="python")
    keep = {name: model.model_dump(mode="json", include={name})[name] for name in exact if name in data}
    doc = to_jsonable_python(_cents({k: v for k, v in data.items() if k not in keep}))
    return {**doc, **keep}


def parse_kind_filter(text: str | None) -> str | None:
    """`kind`: the names `gpuwaste scan --kind` accepts (`idle`, `under-used`, `wrong-hw`, … or the JSON values such
    as `idle_allocation`; `people.parse_kind`) → the stored kind value; None passes.

    Raises:
        ReadError: an unknown kind.
    """
    if text is None:
        return None
    kind = parse_kind(text)
    if kind is None:
        raise ReadError(f"kind={text!r}: not a kind; use one of {', '.join(kind_names())} (or the JSON names)")
    return kind.value


class FindingsReader:
    """The read functions of the API and the MCP server, over one SQLite state file (opened per read, closed after;
    its records and summaries are kept until the file or its WAL changes, so the requests between two scans do not
    parse the whole history again). Thread-safe: `serve` answers requests on several threads.

    Args:
        state: the state file `gpuwaste serve` / `run` write (`serve.state`).
        cfg: the configuration (routing decides teams, the detectors' settings are the thresholds).
        now: the clock for relative `since` values.

    Raises (every method):
        ReadError: bad input (400) or an unknown / ambiguous ID (404 / 400).
        StoreError: the state file cannot be read.
    """

    def __init__(self, state: Path, cfg: GpuWasteConfig, *, now: Callable[[], datetime] | None = None) -> None:
        self.state, self.cfg = state, cfg
        self.now = now or (lambda: datetime.now(UTC))
        self._lock = threading.Lock()
        self._cached: tuple[object, list[FindingRecord]] = (None, [])
        self._summaries: dict[tuple[object, timedelta], DailySummary] = {}
        self._scan: tuple[str, ScanLedger, tuple[Finding, ...]] | None = None

    def observe_scan(self, cluster: str, ledger: ScanLedger | None, findings: Iterable[Finding]) -> None:
        """Keep the ledger and findings of the scan `serve` just ran (what `showback` groups); None: no ledger."""
        with self._lock:
            self._scan = None if ledger is None else (cluster, ledger, tuple(findings))

    def showback(self, by: Iterable[str] = ("team",)) -> ShowbackDocument:
        """The showback of the last scan's window grouped by each of `by` (team, namespace, label:KEY with KEY
        allow-listed, cluster, gpu_model, node, mechanism): the same document as `gpuwaste showback --output json`.

        Raises:
            ReadError: 400 for an unknown or not allow-listed grouping; 409 before this process ran a scan (the state
                file keeps findings, not the share ledger).
        """
        from gpuwaste.commands.showback import grouping_problem, showback_document

        groupings = list(dict.fromkeys(by)) or ["team"]
        if len(groupings) > 8:
            raise ReadError(f"by: at most 8 groupings, got {len(groupings)}")
        for b in groupings:
            problem = grouping_problem(b)
            if problem is not None:
                raise ReadError(f"by={b!r}: {problem}")
        with self._lock:
            scan = self._scan
        if scan is None:
            raise ReadError(
                "no scan ledger yet: showback groups the share ledger of a scan, which the state file does not keep; "
                "`gpuwaste serve` answers after its first scan (or run `gpuwaste showback`)",
                status=409,
            )
        cluster, ledger, findings = scan
        doc = showback_document(cluster, ledger, findings, groupings, self.cfg.delivery)
        return ShowbackDocument.model_validate(doc)

    def _signature(self) -> tuple[tuple[int, int, int] | None, ...]:
        """What identifies the state file's content: (inode, mtime ns, size) of the file and of its WAL."""
        parts: list[tuple[int, int, int] | None] = []
        for path in (self.state, self.state.with_name(self.state.name + "-wal")):
            try:
                st = path.stat()
            except FileNotFoundError:
                parts.append(None)
                continue
            parts.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(parts)

    def _records(self) -> list[FindingRecord]:
        """Every record of the store, read again only when the file or its WAL changed since the last read (the
        signature is taken before reading, so a write during the read makes the next call read again)."""
        from gpuwaste.store.sqlite import SqliteFindingStore

        if not self.state.is_file():
            return []  # no scan has written the store yet
        signature = self._signature()
        with self._lock:
            if signature == self._cached[0]:
                return self._cached[1]
        store = SqliteFindingStore(self.state)
        try:
            records = store.history(since=_ALL_TIME[0], until=_ALL_TIME[1])
        finally:
            store.close()
        with self._lock:
            self._cached = (signature, records)
            self._summaries.clear()
        return records

    def _summary_service(self, store: SqliteFindingStore | None = None) -> SummaryService:
        """The summary service (its `team_of` routes teams; without `store` it has one that is never opened)."""
        from gpuwaste.services.summary import SummaryService
        from gpuwaste.store.sqlite import SqliteFindingStore

        return SummaryService(store=store or SqliteFindingStore(":memory:"), settings=self.cfg.delivery, now=self.now)

    def view(self, record: FindingRecord, team_of: Callable[[FindingRecord], str]) -> FindingView:
        """The record as the API shows it."""
        from gpuwaste.services.notify import finding_from_record

        finding = finding_from_record(record)
        return FindingView(
            fingerprint=record.fingerprint,
            cluster=record.cluster,
            namespace=record.namespace,
            workload=record.workload,
            team=team_of(record),
            kind=record.kind,
            detector=record.detector,
            state=record.state,
            title=finding.title if finding else "",
            confidence=finding.confidence.value if finding else "",
            first_seen=record.first_seen,
            last_seen=record.last_seen,
            resolved_at=record.resolved_at,
            usd_per_day=record.usd_per_day,
            peak_usd_per_day=record.peak_usd_per_day,
            cumulative_usd=record.cumulative_usd,
            saved_usd_per_day=record.saved_usd_per_day,
            missed_scans=record.missed_scans,
            ticket_key=record.ticket_key,
            snoozed_until=record.snoozed_until,
            acknowledged=record.acknowledged,
        )

    def list_findings(
        self,
        *,
        cluster: str | None = None,
        namespace: str | None = None,
        team: str | None = None,
        kind: str | None = None,
        state: str | None = None,
        since: str | None = None,
        limit: int = DEFAULT_LIMIT,
        offset: int = 0,
    ) -> FindingsPage:
        """The findings matching every filter given (exact matches; `since`: activity — last sighting or resolution —
        at or after it), newest activity first, `limit` (1–`MAX_LIMIT`) from `offset`."""
        if not 1 <= limit <= MAX_LIMIT:
            raise ReadError(f"limit={limit}: must be 1 to {MAX_LIMIT}")
        if offset < 0:
            raise ReadError(f"offset={offset}: must be 0 or more")
        kind = parse_kind_filter(kind)
        if state is not None and state not in {s.value for s in FindingState}:
            raise ReadError(f"state={state!r}: one of open, resolved")
        start = parse_since(since, now=self.now())
        service = self._summary_service()
        chosen: list[tuple[datetime, FindingRecord]] = []
        for r in self._records():
            activity = max(r.last_seen, r.resolved_at or r.last_seen)
            if (
                (cluster is not None and r.cluster != cluster)
                or (namespace is not None and r.namespace != namespace)
                or (kind is not None and r.kind != kind)
                or (state is not None and r.state.value != state)
                or (start is not None and activity < start)
                or (team is not None and service.team_of(r) != team)
            ):
                continue
            chosen.append((activity, r))
        chosen.sort(key=lambda ar: (-ar[0].timestamp(), ar[1].fingerprint))
        page = [self.view(r, service.team_of) for _, r in chosen[offset : offset + limit]]
        more = offset + limit < len(chosen)
        return FindingsPage(
            items=tuple(page),
            total=len(chosen),
            offset=offset,
            limit=limit,
            next_offset=offset + limit if more else None,
        )

    def explain(self, finding_id: str) -> ExplainDocument:
        """The explain document of the finding whose fingerprint starts with `finding_id` (4+ hex characters).

        Raises:
            ReadError: 400 for a malformed or ambiguous ID, 404 when no finding has it.
        """
        from gpuwaste.commands.explain import explain_text
        from gpuwaste.services.notify import finding_from_record

        p = finding_id.strip().lower()
        if not re.fullmatch(r"[0-9a-f]{4,64}", p):
            raise ReadError(f"{finding_id!r}: a finding ID is 4 to 64 hex characters (the start of its fingerprint)")
        matches = [r for r in self._records() if r.fingerprint.startswith(p)]
        if not matches:
            raise ReadError(f"no finding with ID {finding_id!r}", status=404)
        if len({r.fingerprint for r in matches}) > 1:
            raise ReadError(f"{finding_id!r} matches {len(matches)} findings; give more characters")
        record = matches[0]
        finding = finding_from_record(record)
        settings = self.cfg.detectors.by_name().get(record.detector)
        text = explain_text(finding, settings) if finding is not None else ""
        return ExplainDocument(
            record=self.view(record, self._summary_service().team_of),
            finding=finding,
            thresholds=settings.model_dump(mode="json") if settings is not None else {},
            text=text,
        )

    def summary(self, period: str | None = None) -> DailySummary:
        """The waste summary of the `period` (default 1d) ending at the last scan (the same as `gpuwaste summary
        --since PERIOD`): totals by team, namespace, kind and cluster, trend, top offenders, savings."""
        span = parse_period(period)
        if not self.state.is_file():
            from gpuwaste.services.summary import summarize

            end = self.now()
            return summarize([], since=end - span, until=end + timedelta(seconds=1), team_of=lambda _: "unassigned")
        from gpuwaste.store.sqlite import SqliteFindingStore

        key = (self._signature(), span)
        with self._lock:
            cached = self._summaries.get(key)
        if cached is not None:
            return cached
        store = SqliteFindingStore(self.state)
        try:
            service = self._summary_service(store)
            end = service.last_activity() or self.now()
            summary = service.build(since=end - span, until=end + timedelta(seconds=1))
        finally:
            store.close()
        with self._lock:
            if len(self._summaries) >= 16:
                self._summaries.clear()
            self._summaries[key] = summary
        return summary

    def top_offenders(self, period: str | None = None, limit: int = 10) -> TopOffenders:
        """The costliest findings of the period (USD wasted in it), at most `limit` (1–50)."""
        if not 1 <= limit <= 50:
            raise ReadError(f"limit={limit}: must be 1 to 50")
        s = self.summary(period)
        return TopOffenders(since=s.since, until=s.until, items=s.top[:limit])


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


class _Bucket:
    __slots__ = ("at", "tokens")

    def __init__(self, tokens: float, at: float) -> None:
        self.tokens, self.at = tokens, at


class RateLimiter:
    """A token bucket per key (client address): `rate` per second, `burst` at most (default: the module's
    `RATE_PER_S` / `RATE_BURST` when created); at most `max_keys` remembered (the oldest forgotten first)."""

    def __init__(
        self,
        rate: float | None = None,
        burst: int | None = None,
        *,
        max_keys: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = RATE_PER_S if rate is None else rate
        self.burst = RATE_BURST if burst is None else burst
        self.max_keys, self.clock = max_keys, clock
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """0.0 when a request of `key` may go now, else the seconds to wait."""
        with self._lock:
            now = self.clock()
            b = self._buckets.pop(key, None) or _Bucket(float(self.burst), now)
            b.tokens = min(float(self.burst), b.tokens + (now - b.at) * self.rate)
            b.at = now
            self._buckets[key] = b  # most recent last
            while len(self._buckets) > self.max_keys:
                self._buckets.pop(next(iter(self._buckets)))
            if b.tokens >= 1:
                b.tokens -= 1
                return 0.0
            return (1 - b.tokens) / self.rate


def read_token(token_file: Path | None, environ: dict[str, str]) -> str | None:
    """The API's bearer token: the file's first line (a mounted Secret), else `GPUWASTE_API_TOKEN`; None: API off.

    Raises:
        ReadError: the file cannot be read or is empty.
    """
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise ReadError(f"{token_file}: cannot read the API token ({exc.strerror})") from exc
        if not token:
            raise ReadError(f"{token_file}: the API token file is empty")
        return token
    return environ.get(TOKEN_ENV, "").strip() or None


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class ReadApi:
    """The WSGI application of `/api/v1/…` (see the module's HTTP rules).

    Args:
        reader: the read functions. token: the bearer token (None: every request is 404, the API is off).
        limiter: the per-address rate limit.
    """

    PREFIX = "/api/v1/"

    def __init__(self, reader: FindingsReader, token: str | None, limiter: RateLimiter | None = None) -> None:
        self.reader, self.token = reader, token
        self.limiter = limiter or RateLimiter()
        self._openapi = json.dumps(openapi_document()).encode()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        status, body, headers = self._answer(environ)
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        start_response(
            status,
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(data))),
                ("Cache-Control", "no-store"),
                *headers,
            ],
        )
        return [b"" if environ.get("REQUEST_METHOD") == "HEAD" else data]

    @staticmethod
    def _error(code: int, message: str, *headers: tuple[str, str]) -> tuple[str, Any, list[tuple[str, str]]]:
        reasons = {
            400: "Bad Request",
            401: "Unauthorized",
            404: "Not Found",
            409: "Conflict",
            405: "Method Not Allowed",
            413: "Content Too Large",
            414: "URI Too Long",
            429: "Too Many Requests",
            500: "Internal Server Error",
        }
        return f"{code} {reasons[code]}", ApiError(error=message, status=code).model_dump(), list(headers)

    def _answer(self, environ: dict[str, Any]) -> tuple[str, Any, list[tuple[str, str]]]:
        from gpuwaste.errors import StoreError

        if self.token is None:
            return self._error(404, f"the read API is off: give serve a token ({TOKEN_ENV} or --api-token-file)")
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return self._error(405, "read-only: GET or HEAD", ("Allow", "GET, HEAD"))
        length = environ.get("CONTENT_LENGTH") or "0"
        if not length.isdigit() or int(length) > 0 or environ.get("HTTP_TRANSFER_ENCODING"):
            return self._error(413, "no request body is accepted")
        query = environ.get("QUERY_STRING", "")
        if len(query.encode()) > MAX_QUERY_BYTES:
            return self._error(414, f"query string over {MAX_QUERY_BYTES} bytes")
        wait = self.limiter.take(str(environ.get("REMOTE_ADDR", "")))
        if wait > 0:
            return self._error(429, "rate limit: slow down", ("Retry-After", str(max(1, round(wait + 0.5)))))
        given = str(environ.get("HTTP_AUTHORIZATION", ""))
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), self.token.encode()):
            return self._error(
                401, "send Authorization: Bearer <token>", ("WWW-Authenticate", 'Bearer realm="gpuwaste"')
            )
        path = str(environ.get("PATH_INFO", ""))
        try:
            multi = parse_qs(query, keep_blank_values=True, strict_parsing=False)
            params = {k: v[-1] for k, v in multi.items()}
            return "200 OK", self._route(path, params, multi), []
        except ReadError as exc:
            return self._error(exc.status if exc.status in (400, 404, 409) else 400, str(exc))
        except StoreError as exc:
            return self._error(500, f"the state file cannot be read: {exc}")

    def _route(self, path: str, params: dict[str, str], multi: dict[str, list[str]]) -> Any:
        def integer(name: str, default: int) -> int:
            raw = params.get(name)
            if raw is None or raw == "":
                return default
            if not re.fullmatch(r"-?\d{1,9}", raw):
                raise ReadError(f"{name}={raw!r}: an integer")
            return int(raw)

        if path == "/api/v1/openapi.json":
            return self._openapi
        if path == "/api/v1/findings":
            known = {"cluster", "namespace", "team", "kind", "state", "since", "limit", "offset"}
            unknown = sorted(set(params) - known)
            if unknown:
                raise ReadError(f"unknown parameter(s) {', '.join(unknown)}: use {', '.join(sorted(known))}")
            page = self.reader.list_findings(
                cluster=params.get("cluster"),
                namespace=params.get("namespace"),
                team=params.get("team"),
                kind=params.get("kind"),
                state=params.get("state"),
                since=params.get("since"),
                limit=integer("limit", DEFAULT_LIMIT),
                offset=integer("offset", 0),
            )
            return api_json(page)
        if path.startswith("/api/v1/findings/"):
            return api_json(self.reader.explain(path.removeprefix("/api/v1/findings/")), exact=("finding",))
        if path == "/api/v1/summary":
            return api_json(self.reader.summary(params.get("period")))
        if path == "/api/v1/showback":
            unknown = sorted(set(params) - {"by"})
            if unknown:
                raise ReadError(f"unknown parameter(s) {', '.join(unknown)}: use by")
            by = [b.strip() for raw in multi.get("by", []) for b in raw.split(",") if b.strip()]
            return api_json(self.reader.showback(by))
        raise ReadError(f"{path}: no such endpoint (see /api/v1/openapi.json)", status=404)


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


def write_openapi(path: Path | None = None) -> Path:
    """Write the OpenAPI document (default: docs/openapi.json of the source tree); returns the path."""
    target = path or Path(__file__).resolve().parents[3] / "docs" / "openapi.json"
    target.write_text(json.dumps(openapi_document(), indent=1, sort_keys=True) + "\n")
    return target

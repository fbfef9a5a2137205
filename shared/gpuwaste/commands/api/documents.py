"""The read API's documents and their parsing.

The response models (`FindingView`, `FindingsPage`, …; the OpenAPI schemas are built from them), the query-parameter
parsers and `api_json` (money as decimal strings).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, Field
from pydantic_core import to_jsonable_python

from gpuwaste.models.base import Frozen
from gpuwaste.models.findings import Finding
from gpuwaste.models.lifecycle import FindingState
from gpuwaste.models.notices import Offender
from gpuwaste.people import kind_names, money, parse_kind

#: Largest page of `/api/v1/findings` (`limit`); the default page is `DEFAULT_LIMIT`.
MAX_LIMIT = 500
DEFAULT_LIMIT = 100


#: Longest summary period (`period`), days.
MAX_PERIOD_DAYS = 90


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

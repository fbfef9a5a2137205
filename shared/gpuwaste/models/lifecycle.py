"""Models: the finding lifecycle record kept in the store (DynamoDB item / SQLite row)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, model_validator

from gpuwaste.models.base import Frozen
from gpuwaste.models.ledger import LedgerSpan
from gpuwaste.models.legacy import upgrade_message_fields
from gpuwaste.models.notices import MessageRef
from gpuwaste.models.reclaim import ReclaimAction


class FindingState(StrEnum):
    """Lifecycle state of a finding."""

    OPEN = "open"
    RESOLVED = "resolved"


class Justification(Frozen):
    """An owner's reason for leaving a finding be, for a bounded time (the "Expected" / "Snooze" buttons, the CLI).

    Attributes:
        kind: `expected` (no reminders nor tickets) or `snooze` (nothing told at all) until `until`.
        reason: the owner's words (1..500 characters), shown in the thread and the daily summary.
        by: who gave it (a chat mention such as `<@U123>`, or the CLI user's name).
        at / until: when it was given and when it ends (UTC); at `until` the finding is told again (REMINDER,
            "justification ended") and escalates by the lifecycle's rules.
        source: where it came from (the chat sink's name, `cli`, `reclaim-keep`: the Keep button of a reclaim notice).
    """

    kind: Literal["expected", "snooze"]
    reason: str = Field(min_length=1, max_length=500)
    by: str = Field(min_length=1, max_length=200)
    at: datetime
    until: datetime
    source: str = "chat"

    def active(self, at: datetime) -> bool:
        """True while `at` is before `until`."""
        return at < self.until


class FindingRecord(Frozen):
    """One finding's history across scans.

    Attributes:
        usd_per_day: the latest priced cost (USD/day); `peak_usd_per_day` the highest seen.
        cumulative_usd: USD wasted so far: `waste_usd(ledger)` (models/ledger.py), unrounded — surfaces round to the
            cent when they print, so a group's total is rounded once, as the daily summary rounds it.
        ledger: the stretches of time the sightings' evidence covered, each at its USD/day — the one source of the
            money of this finding over any period (store, chat, tickets and the daily summary read it).
        missed_scans: consecutive scans of the cluster that did not see it.
        saved_usd_per_day: on resolution, the USD/day no longer wasted.
        alerted_usd_per_day: the cost when the owner was last told (for "worse by a share").
        messages: where owners were told, one reference per chat sink (threads for updates, edits on resolution).
            Records stored before carry the first chat sink's two fields instead (models/legacy.py); they are read into this list.
        ticket_requested_at: when a ticket was requested (requested once per open period).
        last_checked_scan_id: the last ScanCompleted applied (a redelivered completion is a no-op).
        outbox_json: messages decided but not yet confirmed sent (JSON list); flushed on redelivery.
        activity_at: the latest of last_seen and resolved_at (the daily-summary index sorts on its day).
        justification: the owner's current reason to leave it be (`Justification`), until it ends; None when none.
        reclaims: reclaim actions planned or performed on it (`models/reclaim.py`), oldest first, at most 10.
        delivery_keys: idempotency keys (`fingerprint:action:scan_id:sink`) of deliveries already made, newest
            last, at most 20 (a redelivered alert is not posted twice).
        version: optimistic-concurrency counter for conditional writes.
        expires_at: epoch seconds for the store's TTL.
    """

    fingerprint: str
    cluster: str
    namespace: str | None = None
    workload: str | None = None
    kind: str
    detector: str
    state: FindingState = FindingState.OPEN
    first_seen: datetime
    last_seen: datetime
    last_scan_id: str = ""
    usd_per_day: Decimal | None = None
    peak_usd_per_day: Decimal | None = None
    alerted_usd_per_day: Decimal | None = None
    cumulative_usd: Decimal = Decimal(0)
    last_alert_at: datetime | None = None
    missed_scans: int = Field(0, ge=0)
    resolved_at: datetime | None = None
    saved_usd_per_day: Decimal | None = None
    messages: tuple[MessageRef, ...] = ()
    ticket_key: str | None = None
    snoozed_until: datetime | None = None
    acknowledged: str | None = None
    justification: Justification | None = None
    reclaims: tuple[ReclaimAction, ...] = ()
    team: str | None = None
    finding_json: str = ""
    ticket_requested_at: datetime | None = None
    last_checked_scan_id: str = ""
    outbox_json: str = ""
    activity_at: datetime | None = None
    delivery_keys: tuple[str, ...] = ()
    ledger: tuple[LedgerSpan, ...] = ()
    version: int = Field(0, ge=0)
    expires_at: int = 0

    @model_validator(mode="before")
    @classmethod
    def _read_old_message_fields(cls, data: Any) -> Any:
        return upgrade_message_fields(data)


def money_spans(record: FindingRecord) -> tuple[LedgerSpan, ...]:
    """The record's ledger; for a record written before the ledger existed, one span [first_seen − its evidence
    window, last_seen] at its USD/day (the model it was accounted with)."""
    if record.ledger or record.usd_per_day is None:
        return record.ledger
    window_s = 0
    if record.finding_json:
        try:
            window_s = int(json.loads(record.finding_json).get("window_s") or 0)
        except (ValueError, TypeError, AttributeError):
            window_s = 0
    start = record.first_seen - timedelta(seconds=window_s)
    return (LedgerSpan(start=start, end=record.last_seen, usd_per_day=record.usd_per_day),) \
        if record.last_seen > start else ()

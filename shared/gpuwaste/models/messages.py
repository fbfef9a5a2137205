"""Models: versioned queue message envelopes exchanged by the pipeline's functions."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, model_validator

from gpuwaste.models.base import Frozen
from gpuwaste.models.findings import Finding
from gpuwaste.models.legacy import upgrade_message_fields
from gpuwaste.models.notices import MessageRef


class _CarriesFinding(Frozen):
    """Envelope base: accepts its own JSON back (drops `finding.fingerprint`, which is computed, not input)."""

    @model_validator(mode="before")
    @classmethod
    def _drop_computed_fingerprint(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("finding"), dict) and "fingerprint" in data["finding"]:
            data = {**data, "finding": {k: v for k, v in data["finding"].items() if k != "fingerprint"}}
        return data


class ScanRequest(Frozen):
    """dispatch_scans → scan_gpu_waste: scan one cluster at the scheduled time."""

    schema_version: Literal[1] = 1
    cluster: str = Field(min_length=1)
    scheduled_time: datetime
    scan_id: str = Field(min_length=1)


class FindingMessage(_CarriesFinding):
    """scan → price (unpriced) and price → dedupe (priced): one finding.

    Attributes:
        scan_id: the scan that saw it; `scan_seq` the finding's index in that scan and `scan_total`
            how many findings the scan produced, so dedupe can tell when a scan is complete.
    """

    schema_version: Literal[1] = 1
    scan_id: str
    scan_seq: int = Field(0, ge=0)
    scan_total: int = Field(0, ge=0)
    finding: Finding


class ScanCompleted(Frozen):
    """scan → dedupe: the scan finished; fingerprints it saw (for resolving waste that disappeared).

    Attributes:
        judged: False when the scan could judge nothing (no telemetry in the window, or one sample only):
            such a scan never counts as a miss.
        unjudged: "namespace/pod" (or node) subjects the scan gave no verdict on; their open findings are
            not counted as missed either."""

    schema_version: Literal[1] = 1
    scan_id: str
    cluster: str
    scheduled_time: datetime
    fingerprints: tuple[str, ...] = ()
    judged: bool = True
    unjudged: tuple[str, ...] = ()


class AlertAction(StrEnum):
    """Why the lifecycle asks for a message."""

    NEW = "new"
    WORSE = "worse"
    REMINDER = "reminder"
    ESCALATE = "escalate"
    RESOLVED = "resolved"


class AlertMessage(_CarriesFinding):
    """dedupe → notify (AlertsQueue) / create_tickets (TicketsQueue, action ESCALATE): something to tell.

    Attributes:
        cumulative_usd / saved_usd_per_day: decimal strings (USD; USD/day).
        scan_id: the scan that caused the decision (with `fingerprint` and `action`, an idempotency key).
        reason: why, for people ("cost up 40 %", "open 3 days", "not seen for 3 scans").
        messages: the finding's earlier messages, one per chat sink (to thread an update on, or edit on resolution).
            Messages queued before carry the first chat sink's two fields instead (models/legacy.py); they are read into this list.
    """

    schema_version: Literal[1] = 1
    action: AlertAction
    fingerprint: str
    finding: Finding
    first_seen: datetime
    cumulative_usd: str = "0"
    messages: tuple[MessageRef, ...] = ()
    ticket_key: str | None = None
    saved_usd_per_day: str | None = None
    scan_id: str = ""
    reason: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _read_old_message_fields(cls, data: Any) -> Any:
        return upgrade_message_fields(data)


class SummaryDue(Frozen):
    """A daily summary to show or post for the day ending at `until` (the local chain's summary outbox entry)."""

    schema_version: Literal[1] = 1
    cluster: str
    until: datetime

    @property
    def dedupe_key(self) -> str:
        """One summary per cluster and period end."""
        return f"summary:{self.cluster}:{self.until.isoformat()}"

"""Models: versioned queue message envelopes exchanged by the pipeline's functions."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError, model_validator

from gpuwaste.models.base import Frozen
from gpuwaste.models.findings import Finding
from gpuwaste.models.legacy import upgrade_message_fields
from gpuwaste.models.notices import MessageRef


class _CarriesFinding(Frozen):
    """Envelope base: accepts its own JSON back (`Finding` drops the computed `fingerprint` it carries: no
    before-validator here, which would make pydantic build the whole input as Python objects first)."""


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


class FindingBatch(Frozen):
    """scan → price and price → dedupe: several findings in one queue message (packed by size under SQS's message
    limit, `queue.packing`), so each SQS call carries many findings. A queue may carry single `FindingMessage`s
    too (messages sent before batching, in flight during a deploy): consumers read both (`read_body`)."""

    schema_version: Literal[1] = 1
    findings: tuple[FindingMessage, ...] = Field(min_length=1)


class AlertBatch(Frozen):
    """dedupe → notify: several alerts in one queue message (as `FindingBatch`)."""

    schema_version: Literal[1] = 1
    alerts: tuple[AlertMessage, ...] = Field(min_length=1)


#: The list field of each batch envelope and the model of its items.
BATCH_ITEMS: dict[type[Frozen], tuple[str, type[Frozen]]] = {FindingBatch: ("findings", FindingMessage),
                                                              AlertBatch: ("alerts", AlertMessage)}

#: A findings- or priced-queue body: tried in this order (a "smart" union validates the body up to three times).
StageBody = Annotated[FindingBatch | FindingMessage | ScanCompleted, Field(union_mode="left_to_right")]
#: An alerts-queue body.
AlertBody = Annotated[AlertBatch | AlertMessage, Field(union_mode="left_to_right")]
_STAGE: TypeAdapter[FindingBatch | FindingMessage | ScanCompleted] = TypeAdapter(StageBody)
_ALERTS: TypeAdapter[AlertBatch | AlertMessage] = TypeAdapter(AlertBody)


def items_of(message: Any) -> list[Any]:
    """The messages a queue message carries: a batch's items, else the message itself."""
    if isinstance(message, FindingBatch):
        return list(message.findings)
    if isinstance(message, AlertBatch):
        return list(message.alerts)
    return [message]


def read_stage_body(body: str | bytes) -> list[FindingMessage | ScanCompleted]:
    """The findings / scan completion of one findings- or priced-queue body (a batch or a single message).

    Raises:
        ValidationError: the body is not such a message (see `salvage` to keep a batch's good items).
    """
    return items_of(_STAGE.validate_json(body))


def read_alert_body(body: str | bytes) -> list[AlertMessage]:
    """The alerts of one alerts-queue body (a batch or a single alert).

    Raises:
        ValidationError: as `read_stage_body`.
    """
    return items_of(_ALERTS.validate_json(body))


def salvage(body: str | bytes) -> tuple[str | None, list[tuple[str, ValidationError]]]:
    """Split a batch body that failed validation into its good items and its bad ones.

    Returns:
        (the body rebuilt with the items that validate — None when none does or `body` is no batch envelope —,
        [(a bad item's JSON, its validation error)]). A body that is not a batch envelope gives (None, []): the
        whole message is bad.
    """
    import json

    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes: the whole message is bad
        return None, []
    if not isinstance(doc, dict) or doc.get("schema_version", 1) != 1:
        return None, []
    for envelope, (field, item_model) in BATCH_ITEMS.items():
        items = doc.get(field)
        if not isinstance(items, list) or set(doc) - {"schema_version", field}:
            continue
        good: list[str] = []
        bad: list[tuple[str, ValidationError]] = []
        for item in items:
            text = json.dumps(item, separators=(",", ":"))
            try:
                item_model.model_validate_json(text)
            except ValidationError as exc:
                bad.append((text, exc))
                continue
            good.append(text)
        rebuilt = f'{{"schema_version":1,"{field}":[{",".join(good)}]}}' if good else None
        if rebuilt is not None:
            envelope.model_validate_json(rebuilt)  # the good items make a valid envelope
        return rebuilt, bad
    return None, []

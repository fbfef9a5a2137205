"""Models: versioned queue message envelopes exchanged by the pipeline's functions."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError, model_validator

from gpuwaste.models.base import Frozen
from gpuwaste.models.coverage import MAX_COVERAGE_KINDS, KindCoverage
from gpuwaste.models.findings import Finding
from gpuwaste.models.legacy import upgrade_message_fields
from gpuwaste.models.notices import MessageRef
from gpuwaste.models.spend import ScanAllocation


class _CarriesFinding(Frozen):
    """Envelope base: accepts its own JSON back (`Finding` drops the computed `fingerprint` it carries: no
    before-validator here, which would make pydantic build the whole input as Python objects first)."""


class ScanRequest(Frozen):
    """dispatch_scans → scan_gpu_waste: scan one cluster (or shard `shard` of `shard_count` of it) at the scheduled time.

    A scan's unit of work is `scan_id` × `shard`: the shards of one scan share its id and each scans one workload-closed
    node set (`services.shards`); messages written before shards existed are shard 0 of 1 (the whole cluster).
    """

    schema_version: Literal[1] = 1
    cluster: str = Field(min_length=1)
    scheduled_time: datetime
    scan_id: str = Field(min_length=1)
    shard: int = Field(0, ge=0)
    shard_count: int = Field(1, ge=1)
    #: seconds after it is sent before the scan may start (dispatch's pacing: SQS `DelaySeconds`, at most 900); the scan
    #: still evaluates at `scheduled_time`, never at the wall clock
    start_after_s: int = Field(0, ge=0, le=900)

    @model_validator(mode="after")
    def _shard_in_range(self) -> ScanRequest:
        if self.shard >= self.shard_count:
            raise ValueError(f"shard {self.shard} of {self.shard_count}: out of range")
        return self


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
    """scan → dedupe: the scan (or one shard of it) finished; fingerprints it saw (for resolving waste that
    disappeared).

    A scan's fingerprint set can outgrow one SQS message (256 KiB: about 3,900 fingerprints), so it travels as
    `parts` messages of bounded size (`split_completion`), each carrying a slice of the set; a scan split over
    `shard_count` shards sends such parts per shard. The lifecycle resolves by absence only once every part of
    every shard of `scan_id` is in (`models.scan_parts`); messages written before parts existed are part 0 of 1
    of shard 0 of 1.

    Attributes:
        judged: False when the scan could judge nothing (no telemetry in the window, or one sample only):
            such a scan never counts as a miss (nor does any scan with such a shard).
        unjudged: "namespace/pod" (or node) subjects the scan gave no verdict on; their open findings are
            not counted as missed either.
        shard / shard_count: which node set of the cluster this completion covers (0 of 1: the whole cluster).
        part / parts: this message's index among the shard's completion messages, and how many there are.
        coverage: the shard's attribution coverage per allocation kind (issue 21 §12; at most `MAX_COVERAGE_KINDS`);
            the lifecycle stores it from part 0 of each shard (`FindingStore.record_coverage`). Empty when no pod
            held a GPU, or from a scanner older than the field.
        allocation: the shard's allocation ledger (issue 24: funnel, allocated cost per team and namespace;
            `models.spend`); the lifecycle stores it from part 0 of each shard (`FindingStore.record_allocation`).
            None from a scanner older than the field."""

    schema_version: Literal[1] = 1
    scan_id: str
    cluster: str
    scheduled_time: datetime
    fingerprints: tuple[str, ...] = ()
    judged: bool = True
    unjudged: tuple[str, ...] = ()
    shard: int = Field(0, ge=0)
    shard_count: int = Field(1, ge=1)
    part: int = Field(0, ge=0)
    parts: int = Field(1, ge=1)
    coverage: tuple[KindCoverage, ...] = Field((), max_length=MAX_COVERAGE_KINDS)
    allocation: ScanAllocation | None = None

    @model_validator(mode="after")
    def _indices_in_range(self) -> ScanCompleted:
        if self.shard >= self.shard_count or self.part >= self.parts:
            raise ValueError(f"shard {self.shard} of {self.shard_count}, part {self.part} of {self.parts}: out of range")
        return self

    @property
    def whole(self) -> bool:
        """True when this one message is the scan's whole completion (one part, one shard)."""
        return self.parts == 1 and self.shard_count == 1

    @property
    def part_token(self) -> str:
        """This part's identity within its scan: "<shard>:<part>/<parts>"."""
        return f"{self.shard}:{self.part}/{self.parts}"


#: Largest body of one `ScanCompleted` part (bytes of UTF-8 JSON): under SQS's 262,144-byte message limit with room
#: for message attributes and the envelope fields, and under DynamoDB's 400 KB item limit where a part is stored.
COMPLETION_PART_BYTES = 200 * 1024


def split_completion(message: ScanCompleted, *, max_bytes: int = COMPLETION_PART_BYTES) -> list[ScanCompleted]:
    """`message` as parts whose JSON bodies are each at most `max_bytes`: its fingerprints and unjudged subjects cut
    into consecutive slices, in order (`part` 0.., `parts` their count); a message that fits is returned as is.

    Raises:
        ValueError: one fingerprint or subject alone does not fit in `max_bytes` with the envelope.
    """
    if len(message.model_dump_json().encode()) <= max_bytes:
        return [message]
    head = len(message.model_copy(update={"fingerprints": (), "unjudged": (), "part": 9999, "parts": 9999})
               .model_dump_json().encode())
    budget = max_bytes - head
    slices: list[tuple[list[str], list[str]]] = [([], [])]
    used = 0
    for index, values in ((0, message.fingerprints), (1, message.unjudged)):
        for value in values:
            n = len(value.encode()) + 4  # quotes, comma, and room for JSON escapes of the odd character
            if n > budget:
                raise ValueError(f"scan {message.scan_id}: one completion entry of {n} bytes exceeds {max_bytes} bytes")
            if used + n > budget:
                slices.append(([], []))
                used = 0
            slices[-1][index].append(value)
            used += n
    return [message.model_copy(update={"fingerprints": tuple(fps), "unjudged": tuple(subjects), "part": i,
                                       "parts": len(slices)})
            for i, (fps, subjects) in enumerate(slices)]


def merge_completion(parts: list[ScanCompleted]) -> ScanCompleted:
    """One completion from every part of every shard of a scan: the union of their fingerprints and unjudged
    subjects, judged only when every part is; the earliest scheduled time.

    Raises:
        ValueError: no parts, parts of different scans, or parts missing.
    """
    if not parts:
        raise ValueError("no completion parts to merge")
    first = parts[0]
    if any(p.scan_id != first.scan_id or p.cluster != first.cluster for p in parts):
        raise ValueError(f"scan {first.scan_id}: parts of different scans or clusters")
    if not completion_is_whole({p.part_token for p in parts}, first.shard_count):
        raise ValueError(f"scan {first.scan_id}: parts missing")
    fingerprints = dict.fromkeys(fp for p in parts for fp in p.fingerprints)
    unjudged = dict.fromkeys(s for p in parts for s in p.unjudged)
    return ScanCompleted(scan_id=first.scan_id, cluster=first.cluster,
                         scheduled_time=min(p.scheduled_time for p in parts), fingerprints=tuple(fingerprints),
                         judged=all(p.judged for p in parts), unjudged=tuple(unjudged))


def completion_is_whole(tokens: set[str], shard_count: int) -> bool:
    """True when `tokens` ("<shard>:<part>/<parts>", `ScanCompleted.part_token`) hold every part of every one of
    `shard_count` shards."""
    got: dict[int, tuple[set[int], set[int]]] = {}
    for token in tokens:
        shard_text, rest = token.split(":", 1)
        part, parts = rest.split("/", 1)
        seen, counts = got.setdefault(int(shard_text), (set(), set()))
        seen.add(int(part))
        counts.add(int(parts))
    for shard in range(shard_count):
        if shard not in got:
            return False
        seen, counts = got[shard]
        if len(counts) != 1 or seen != set(range(next(iter(counts)))):
            return False
    return True


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

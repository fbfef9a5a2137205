"""Adapter: notices → a generic JSON webhook (PagerDuty Events v2 or Opsgenie through a small relay, an internal bus).

One signed JSON event per finding and action (a digest of 12 findings is 12 events: receivers open one incident per
finding). The envelope (`schema_version` 1) is documented in docs/delivery.md:

    {"schema_version": 1, "source": "gpuwaste", "id": "<fingerprint>:<action>:<scan id>", "dedup_key": "<fingerprint>",
     "event_action": "trigger" | "resolve", "action": "new" | "update" | "resolved", "reason": "...",
     "sent_at": "<RFC 3339>", "scan_id": "...", "finding": {...}, "money": {"currency": "USD", "usd_per_day": "98.30", ...}}

Money is a decimal string (never a float). `id` is the same on every retry of one delivery (receivers deduplicate on
it; it is also sent as `Idempotency-Key`). Signature: `X-Gpuwaste-Signature: v1=<hex HMAC-SHA256(secret,
"<X-Gpuwaste-Timestamp>." + body)>` (`verify_signature` is the reference check). The URL can hold a token: it is never
logged. A webhook returns no message to thread on or edit: updates and resolutions are new events with the same
`dedup_key`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from gpuwaste.models.notices import DailySummary, MessageRef, Notice, NoticeItem, NoticeKind, PostedMessage
from gpuwaste.sinks.http_delivery import JsonPoster

SINK = "webhook"
SCHEMA_VERSION = 1
SIGNATURE_HEADER = "X-Gpuwaste-Signature"
TIMESTAMP_HEADER = "X-Gpuwaste-Timestamp"
#: Seconds a signature stays acceptable (receivers should refuse older timestamps: replays).
SIGNATURE_MAX_AGE_S = 300


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """`v1=<hex HMAC-SHA256(secret, timestamp + "." + body)>`."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"v1={digest}"


def verify_signature(secret: str, headers: Mapping[str, str], body: bytes, *, now: float | None = None,
                     max_age_s: int = SIGNATURE_MAX_AGE_S) -> bool:
    """The receiver's check (reference implementation): the signature matches and the timestamp is recent."""
    lower = {k.lower(): v for k, v in headers.items()}
    timestamp = lower.get(TIMESTAMP_HEADER.lower(), "")
    given = lower.get(SIGNATURE_HEADER.lower(), "")
    try:
        age = abs((now if now is not None else time.time()) - int(timestamp))
    except ValueError:
        return False
    return age <= max_age_s and hmac.compare_digest(sign(secret, timestamp, body), given)


def _money(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


def _cents(value: Decimal) -> Decimal:
    return value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def _action(notice: Notice, item: NoticeItem) -> str:
    if item.resolved or notice.kind is NoticeKind.RESOLVED:
        return "resolved"
    return "update" if notice.kind is NoticeKind.UPDATE else "new"


def event_for(notice: Notice, item: NoticeItem, *, sent_at: datetime) -> dict[str, Any]:
    """The envelope of one finding of `notice`."""
    f, s = item.finding, item.finding.subject
    action = _action(notice, item)
    cost = f.cost
    return {
        "schema_version": SCHEMA_VERSION,
        "source": "gpuwaste",
        "id": f"{item.fingerprint}:{action}:{notice.scan_id or '-'}",
        "dedup_key": item.fingerprint,
        "event_action": "resolve" if action == "resolved" else "trigger",
        "action": action,
        "reason": notice.reason,
        "sent_at": sent_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "scan_id": notice.scan_id,
        "finding": {
            "fingerprint": item.fingerprint,
            "kind": f.kind.value,
            "detector": f.detector,
            "title": f.title,
            "recommendation": f.recommendation,
            "confidence": f.confidence.value,
            "cluster": s.cluster,
            "namespace": s.namespace,
            "workload_kind": s.workload_kind,
            "workload_name": s.workload_name,
            "pod": s.pod,
            "node": s.node,
            "gpu_model": s.gpu_model,
            "team": notice.route.team,
            "routed_by": notice.route.source,
            "first_seen": item.first_seen.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "observed_at": f.observed_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "resolved_at": item.resolved_at.astimezone(UTC).isoformat().replace("+00:00", "Z") if item.resolved_at else None,
            "ticket_key": item.ticket_key,
            "links": [{"label": label, "url": url} for label, url in item.links],
            "evidence": [e.model_dump(mode="json") for e in f.evidence],
        },
        "money": {
            "currency": "USD",
            "usd_per_day": _money(f.usd_per_day),
            "cumulative_usd": _money(_cents(item.cumulative_usd)),  # the ledger's exact figure, rounded as people read it
            "saved_usd_per_day": _money(item.saved_usd_per_day),
            "formula": cost.formula if cost is not None else None,
        },
    }


def summary_event(summary: DailySummary, *, sent_at: datetime, note: str | None = None) -> dict[str, Any]:
    """The envelope of the daily summary (`action` "summary")."""
    until = summary.until.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return {
        "schema_version": SCHEMA_VERSION, "source": "gpuwaste", "id": f"summary:{until}", "action": "summary",
        "sent_at": sent_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "summary": {
            "since": summary.since.astimezone(UTC).isoformat().replace("+00:00", "Z"), "until": until,
            "open_findings": summary.open_findings, "opened": summary.opened, "resolved": summary.resolved,
            "by_team": [{"team": g.name, "wasted_usd": str(g.wasted_usd), "previous_usd": str(g.previous_usd)}
                        for g in summary.by_team],
            "note": note,
        },
        "money": {"currency": "USD", "wasted_usd": str(summary.wasted_usd), "previous_usd": str(summary.previous_usd),
                  "open_usd_per_day": str(summary.open_usd_per_day),
                  "saved_usd_per_day": str(summary.saved_usd_per_day),
                  "realised_savings_usd": str(summary.realised_savings_usd)},
    }


class WebhookNotifier:
    """Notifier over one JSON webhook.

    Args:
        url / signing_secret: the endpoint and the HMAC key (secrets; resolved by the composition root).
        poster: the HTTP poster (retries). max_payload_bytes: an event over it drops its evidence list.
    """

    name = SINK
    threads = False
    edits = False

    def __init__(self, *, url: str, signing_secret: str | None, poster: JsonPoster, max_payload_bytes: int = 256_000,
                 now: Callable[[], datetime] | None = None, clock: Callable[[], float] = time.time) -> None:
        self._url = url
        self._secret = signing_secret
        self.poster = poster
        self.max_payload_bytes = max_payload_bytes
        self._now = now or (lambda: datetime.now(UTC))
        self._clock = clock

    def set_time_left(self, time_left: Callable[[], float] | None) -> None:
        """Cap in-process `Retry-After` waits by the caller's remaining seconds."""
        self.poster.time_left = time_left

    def _send(self, event: dict[str, Any]) -> None:
        body = json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()
        if len(body) > self.max_payload_bytes and event.get("finding"):
            event = {**event, "finding": {**event["finding"], "evidence": [], "evidence_dropped": True}}
            body = json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()
        headers = {"Idempotency-Key": str(event["id"]), "User-Agent": "gpuwaste"}
        if self._secret:
            timestamp = str(int(self._clock()))
            headers[TIMESTAMP_HEADER] = timestamp
            headers[SIGNATURE_HEADER] = sign(self._secret, timestamp, body)
        self.poster.post(self._url, body, headers)

    def post(self, notice: Notice, *, reply_to: MessageRef | None = None,
             on_posted: Callable[[PostedMessage], None] | None = None) -> list[PostedMessage]:
        """See `gpuwaste.ports.Notifier.post`: one event per finding, each handed to `on_posted` once accepted."""
        posted = []
        for item in notice.items:
            event = event_for(notice, item, sent_at=self._now())
            self._send(event)
            message = PostedMessage(sink=SINK, destination=SINK, message_id=str(event["id"]),
                                    fingerprints=(item.fingerprint,))
            posted.append(message)
            if on_posted is not None:
                on_posted(message)
        return posted

    def find_posted(self, notice: Notice, *, reply_to: MessageRef | None = None) -> list[PostedMessage]:
        """A webhook cannot be searched: empty (receivers deduplicate on `id`)."""
        return []

    def update(self, notice: Notice, *, message: MessageRef) -> PostedMessage:
        """No edits: the notice's events are sent anew (same `dedup_key`)."""
        posted = self.post(notice)
        return posted[0] if posted else PostedMessage(sink=SINK, destination=SINK)

    def reply(self, *, message: MessageRef, text: str) -> PostedMessage:
        """A `note` event about the finding of `message`."""
        event = {"schema_version": SCHEMA_VERSION, "source": "gpuwaste", "id": f"note:{message.message_id}:{int(self._clock())}",
                 "action": "note", "about": message.message_id, "text": text,
                 "sent_at": self._now().astimezone(UTC).isoformat().replace("+00:00", "Z")}
        self._send(event)
        return PostedMessage(sink=SINK, destination=SINK, message_id=str(event["id"]))

    def user_id(self, email: str) -> str | None:
        """No directory: None."""
        return None

    def post_summary(
        self, summary: DailySummary, *, channel: str, chart_png: bytes | None, note: str | None = None
    ) -> PostedMessage:
        """The summary event (no chart)."""
        event = summary_event(summary, sent_at=self._now(), note=note)
        self._send(event)
        return PostedMessage(sink=SINK, destination=SINK, message_id=str(event["id"]))


__all__ = ["SIGNATURE_HEADER", "SINK", "TIMESTAMP_HEADER", "WebhookNotifier", "event_for", "sign", "summary_event",
           "verify_signature"]

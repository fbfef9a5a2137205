"""Hardening harness: an at-least-once queue with a dead-letter queue, the delivery chain over the fakes,
and the one invariant every fault test checks.

The local chain (`gpuwaste run`) uses `MemoryQueue`, which has no redelivery and no DLQ. This harness
plays SQS's contract instead: a message whose handler raises a retryable error comes back (up to
``max_receive`` receives, as the template's ``maxReceiveCount``), a permanent failure goes to the DLQ at
once with its reason (as ``bootstrap.batch.process_batch`` does; the harness classifies failures with its
own ``is_permanent``/``reason_of``), and duplicates can be injected (SQS may deliver a message twice).
The stages call the same services as the Lambda functions: price → lifecycle → notify (Slack) / tickets
(Jira).

Invariant (:func:`check_invariant`): every alert the lifecycle produced is either delivered exactly once
or sits in a dead-letter queue with a non-empty reason. Never both, never neither. "Delivered" is counted at
the fakes, not taken from the product: the fake Slack's accepted posts, keyed by the finding and scan each
message's metadata names, and the fake Jira's issues by dedupe label. The product's own records are then
checked against them in both directions: every recorded delivery was accepted by the fake (recorded ≤
accepted), and every accepted post is recorded (accepted ≤ recorded: otherwise a retry would post it again).

The queue here classifies failures by the error hierarchy's two roots (`RetryableError` comes back,
anything else — `PermanentError`, a body that does not parse — goes to the DLQ at once), as the template's
redrive contract says; it does not ask the product's own batch processor.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, TypeAdapter

from gpuwaste.errors import RetryableError
from gpuwaste.models.messages import AlertAction, AlertMessage, FindingMessage, ScanCompleted, ScanRequest
from gpuwaste.ports import FindingStore
from gpuwaste.services.lifecycle import LifecycleService
from gpuwaste.services.notify import NotifyService, delivery_key
from gpuwaste.services.price import PriceService
from gpuwaste.services.tickets import TicketService, dedupe_label
from gpuwaste.sinks.slack import SlackNotifier
from tests.servers import FakeHttpServer, HttpRequest, HttpResponse
from tests.servers.jira_api import FakeJira
from tests.servers.slack_api import FakeSlack, parse_params

STAGE_ADAPTER: TypeAdapter[FindingMessage | ScanCompleted] = TypeAdapter(FindingMessage | ScanCompleted)


# -- Slack that remembers what it accepted -----------------------------------------------------------------
@dataclass(frozen=True)
class Accepted:
    """A Slack Web API call the fake answered with ``ok: true``."""

    method: str
    params: dict[str, Any]
    response: dict[str, Any]

    @property
    def top_level(self) -> bool:
        """A new top-level message (not a thread reply, not an edit)."""
        return self.method == "chat.postMessage" and not self.params.get("thread_ts")

    def mentions(self, fingerprint: str) -> bool:
        """The call's blocks/text carry the finding's full fingerprint (button / overflow values)."""
        return fingerprint in json.dumps(self.params.get("blocks") or []) + str(self.params.get("text") or "")


class AuditedSlack(FakeSlack):
    """FakeSlack that also keeps every accepted call (``FakeSlack.calls`` holds refused ones too)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.accepted: list[Accepted] = []
        self.missing_all_but: str | None = None

    def reset(self) -> None:
        """Forget accepted calls and `missing_all_but` too."""
        super().reset()
        with self._lock:
            self.accepted = []
            self.missing_all_but = None

    def _channel_or_error(self, params: Any, key: str = "channel") -> Any:
        """With `missing_all_but` set, every channel but that one (by name or id) is `channel_not_found`."""
        keep = self.missing_all_but
        channel = str(params.get(key) or "")
        if keep and channel:
            name = keep.removeprefix("#")
            if channel.removeprefix("#") != name and channel != self._state.channel_ids.get(name):
                return {"ok": False, "error": "channel_not_found"}
        return super()._channel_or_error(params, key)

    def handle(self, request: HttpRequest) -> HttpResponse:
        response = super().handle(request)
        body = response.body if isinstance(response.body, dict) else {}
        if response.status == 200 and body.get("ok") and request.path.startswith("/api/"):
            # the params of this request itself: `calls[-1]` may be another thread's request by now (overlapping
            # requests were attributed to the wrong call)
            params = parse_params(request)
            with self._lock:
                self.accepted.append(Accepted(request.path.removeprefix("/api/").strip("/"), params, body))
        return response

    def top_level_posts(self, fingerprint: str) -> int:
        """Accepted top-level posts that carry `fingerprint`."""
        return sum(1 for a in self.accepted if a.top_level and a.mentions(fingerprint))

    def accepted_keys(self, method: str = "chat.postMessage") -> Counter[tuple[str, str]]:
        """(fingerprint prefix, scan id) → accepted calls of `method` whose message metadata names them."""
        out: Counter[tuple[str, str]] = Counter()
        with self._lock:
            calls = list(self.accepted)
        for call in calls:
            if call.method != method:
                continue
            payload = (call.params.get("metadata") or {}).get("event_payload") or {}
            for fp in payload.get("fps") or []:
                out[(str(fp), str(payload.get("scan")))] += 1
        return out


# -- every delivery the fakes accepted, by what it is -----------------------------------------------------
def _adf_plain(node: Any) -> str:
    if isinstance(node, dict):
        return str(node.get("text") or "") + "".join(_adf_plain(c) for c in node.get("content") or [])
    return ""


_LISTED = re.compile(r"finding ([0-9a-f]{6})|(?:: |; )([0-9a-f]{6}) \$")


def delivered(slack: AuditedSlack, jira: FakeJira) -> Counter[tuple[str, ...]]:
    """Every delivery the fakes accepted, by what it is (counted at the fakes, from what they hold and received):

    top-level posts by (finding, scan); thread replies by (scan, kind, findings); edits by the alert they carry (the
    key in their metadata), and each finding a message shows resolved (once, however many edits show it); Jira issues by dedupe label; comments by (ticket label, text); transitions by
    ticket label; and each finding an overflow ticket lists (in its description or a comment) by (label, finding).
    """
    out: Counter[tuple[str, ...]] = Counter()
    with slack._lock:
        calls = list(slack.accepted)
    for call in calls:
        meta = (call.params.get("metadata") or {}).get("event_payload") or {}
        fps = tuple(str(f) for f in meta.get("fps") or [])
        scan = str(meta.get("scan"))
        if call.method == "chat.postMessage" and call.params.get("thread_ts"):
            out[("slack reply", scan, str(meta.get("kind")), *fps)] += 1
        elif call.method == "chat.postMessage":
            for fp in fps:
                out[("slack post", fp, scan)] += 1
        elif call.method == "chat.update":
            # an edit is the delivery of its alert's resolution (its key: two alerts resolving in one scan edit the
            # same message twice); and what a message shows resolved is there once, however often it is edited
            out[("slack edit", str(meta.get("key")))] += 1
            for fp in meta.get("resolved") or []:
                out[("slack shows resolved", str(fp), *fps)] = 1
    with jira._lock:
        issues = copy.deepcopy(jira.issues)
        requests = list(jira.requests)
    label_of = {}
    for issue in issues.values():
        label = sorted(x for x in issue.labels if x.startswith("gpuwaste-") and x != "gpuwaste")[0]
        label_of[issue.key] = label
        out[("jira issue", label)] += 1
        texts = [_adf_plain(c) for c in issue.comments]
        if label.startswith("gpuwaste-team-"):
            for text in [_adf_plain(issue.fields.get("description")), *texts]:
                for m in _LISTED.finditer(text):
                    out[("overflow lists", label, m[1] or m[2])] += 1
        else:
            for text in texts:
                out[("jira comment", label, text)] += 1
    for method, path in requests:
        match = re.match(r"^/rest/api/3/issue/([^/]+)/transitions$", path.rstrip("/"))
        if method == "POST" and match and match[1] in label_of:
            out[("jira transition", label_of[match[1]])] += 1
    return out



# -- an at-least-once queue with a DLQ ---------------------------------------------------------------------
def is_permanent(exc: BaseException) -> bool:
    """The harness's own classification: only `RetryableError` is worth a redelivery."""
    return not isinstance(exc, RetryableError)


def reason_of(exc: BaseException) -> str:
    """`<type>: <message>` of a failure (what the DLQ entry carries)."""
    return f"{type(exc).__name__}: {exc}"[:1000]


@dataclass
class DeadLetter:
    """A message in a dead-letter queue, with why it is there."""

    queue: str
    body: str
    error_type: str
    reason: str
    receives: int


@dataclass
class _Entry:
    body: str
    receives: int = 0


class SimQueue:
    """An SQS stand-in with SQS's delivery contract (implements every queue port).

    Args:
        name: queue name (in dead-letter entries).
        dlq: where failed messages go.
        max_receive: receives before a retryable failure is dead-lettered (the redrive ``maxReceiveCount``).
        duplicate: probability that a processed message is delivered once more (at-least-once).
        rng: the seeded source of duplicates.
    """

    def __init__(self, name: str, dlq: list[DeadLetter], *, max_receive: int = 5, duplicate: float = 0.0,
                 rng: random.Random | None = None) -> None:
        self.name = name
        self.dlq = dlq
        self.max_receive = max_receive
        self.duplicate = duplicate
        self.rng = rng or random.Random(0)
        self.sent: list[str] = []
        self.duplicates_injected = 0
        self._entries: list[_Entry] = []

    # queue ports
    def send(self, messages: Sequence[BaseModel]) -> None:
        """Enqueue the messages' JSON bodies."""
        for m in messages:
            body = m.model_dump_json()
            self.sent.append(body)
            self._entries.append(_Entry(body))

    def send_raw(self, body: str) -> None:
        """Enqueue a body as given (bad-input tests)."""
        self.sent.append(body)
        self._entries.append(_Entry(body))

    send_findings = send_alerts = send_scan_requests = send

    def send_scan_completed(self, message: ScanCompleted) -> None:
        """`FindingQueue.send_scan_completed`."""
        self.send([message])

    def after_sent(self, callback: Callable[[], object]) -> None:
        """`AlertQueue.after_sent`: `send` enqueued the messages already, so the callback runs now."""
        callback()

    def __len__(self) -> int:
        return len(self._entries)

    def pump(self, handle_batch: Callable[[list[str]], list[Exception | None]], *, batch_size: int = 10) -> int:
        """Deliver until the queue is empty: batches of `batch_size`, failures redelivered or dead-lettered.

        `handle_batch` returns one outcome per body (None: success), as a partial batch response.
        Returns how many deliveries were made.
        """
        deliveries = 0
        while self._entries:
            batch, self._entries = self._entries[:batch_size], self._entries[batch_size:]
            for entry in batch:
                entry.receives += 1
            outcomes = handle_batch([e.body for e in batch])
            deliveries += len(batch)
            for entry, exc in zip(batch, outcomes, strict=True):
                if exc is None:
                    if self.duplicate and self.rng.random() < self.duplicate:
                        self.duplicates_injected += 1
                        self._entries.append(_Entry(entry.body, entry.receives))
                    continue
                if is_permanent(exc):
                    self.dlq.append(DeadLetter(self.name, entry.body, type(exc).__name__, reason_of(exc), entry.receives))
                elif entry.receives >= self.max_receive:
                    reason = f"maxReceiveCount {self.max_receive} exceeded; last error: {reason_of(exc)}"
                    self.dlq.append(DeadLetter(self.name, entry.body, type(exc).__name__, reason, entry.receives))
                else:
                    self._entries.append(entry)
        return deliveries


def per_record(handler: Callable[[str], Any]) -> Callable[[list[str]], list[Exception | None]]:
    """A batch handler that runs `handler` per body and reports each record's exception (or None)."""
    def run(bodies: list[str]) -> list[Exception | None]:
        out: list[Exception | None] = []
        for body in bodies:
            try:
                handler(body)
            except Exception as exc:  # noqa: BLE001 - the queue classifies it, as the batch processor does
                out.append(exc)
            else:
                out.append(None)
        return out
    return run


# -- the delivery chain ------------------------------------------------------------------------------------
@dataclass
class Chain:
    """price → lifecycle → Slack / Jira over `SimQueue`s, with one shared DLQ list."""

    pricer: PriceService
    lifecycle: LifecycleService
    notify: NotifyService
    tickets: TicketService | None
    findings_q: SimQueue
    priced_q: SimQueue
    alerts_q: SimQueue
    tickets_q: SimQueue
    dlq: list[DeadLetter]
    store: FindingStore
    requests_q: SimQueue | None = None
    scanner: Any = None

    def _scan(self, body: str) -> None:
        request = ScanRequest.model_validate_json(body)
        self.scanner.scan(at=request.scheduled_time, scan_id=request.scan_id)

    def request_scan(self, at: datetime, scan_id: str, cluster: str = "demo") -> None:
        """Put a ScanRequest on the scan-requests queue (as dispatch_scans does)."""
        assert self.requests_q is not None
        self.requests_q.send([ScanRequest(cluster=cluster, scheduled_time=at, scan_id=scan_id)])

    def _price(self, body: str) -> None:
        message = STAGE_ADAPTER.validate_json(body)
        if isinstance(message, ScanCompleted):
            self.pricer.forward_completed(message)
        else:
            self.pricer.price_and_forward(message)

    def _dedupe(self, body: str) -> None:
        message = STAGE_ADAPTER.validate_json(body)
        if isinstance(message, ScanCompleted):
            self.lifecycle.handle_scan_completed(message)
        else:
            self.lifecycle.handle_finding(message)

    def _notify_batch(self, bodies: list[str]) -> list[Exception | None]:
        plan = self.notify.plan_bodies(bodies)
        out: list[Exception | None] = []
        for body in bodies:
            try:
                plan.deliver(AlertMessage.model_validate_json(body))
            except Exception as exc:  # noqa: BLE001 - classified by the queue
                out.append(exc)
            else:
                out.append(None)
        return out

    def _ticket(self, body: str) -> None:
        assert self.tickets is not None
        self.tickets.handle(AlertMessage.model_validate_json(body))

    def drain(self) -> None:
        """Run every stage until all queues are empty (redeliveries included)."""
        while (self.requests_q and self.scanner) or self.findings_q or self.priced_q or self.alerts_q or self.tickets_q:
            if self.requests_q is not None and self.scanner is not None:
                self.requests_q.pump(per_record(self._scan))
            self.findings_q.pump(per_record(self._price))
            self.priced_q.pump(per_record(self._dedupe))
            self.alerts_q.pump(self._notify_batch)
            if self.tickets is not None:
                self.tickets_q.pump(per_record(self._ticket))
            else:
                self.tickets_q._entries.clear()


def build_chain(*, store: FindingStore, slack: FakeSlack, jira: FakeJira | None, config: Any, clock: Any,
                now: Callable[[], datetime], rng: random.Random | None = None, duplicate: float = 0.0,
                max_receive: int = 5) -> Chain:
    """A chain over the given store, the fake Slack and (optionally) the fake Jira."""
    from gpuwaste.bootstrap.local import price_book
    from gpuwaste.models.settings import JiraSettings, SlackSettings
    from gpuwaste.sinks.jira import JiraTicketSink

    rng = rng or random.Random(0)
    dlq: list[DeadLetter] = []
    queues = {name: SimQueue(name, dlq, duplicate=duplicate, rng=rng, max_receive=max_receive)
              for name in ("scan-requests", "findings", "priced", "alerts", "tickets")}
    delivery = config.delivery.model_copy(update={
        "slack": SlackSettings(base_url=slack.url, rate_limit_retries=1, server_error_retries=1, timeout_s=5),
    })
    if jira is not None:
        delivery = delivery.model_copy(update={"jira": JiraSettings(base_url=jira.url, email=jira.email,
                                                                    default_project="OPS")})
    notifier = SlackNotifier.from_settings(delivery.slack, token=slack.token, default_channel=delivery.default_channel,
                                           sleep=lambda s: None)
    notifier._now = now
    tickets = None
    if jira is not None:
        sink = JiraTicketSink.from_settings(delivery.jira, api_token=str(jira.api_token))
        tickets = TicketService(sink=sink, store=store, settings=delivery, now=now)
    return Chain(
        pricer=PriceService(price_book=price_book(config), queue=queues["priced"]),
        lifecycle=LifecycleService(store=store, alerts=queues["alerts"], tickets=queues["tickets"],
                                   settings=config.lifecycle, clock=clock),
        notify=NotifyService(notifier=notifier, store=store, settings=delivery, now=now),
        tickets=tickets,
        findings_q=queues["findings"], priced_q=queues["priced"], alerts_q=queues["alerts"], tickets_q=queues["tickets"],
        dlq=dlq, store=store, requests_q=queues["scan-requests"],
    )


# -- the invariant -----------------------------------------------------------------------------------------
@dataclass
class InvariantReport:
    """Outcome of one invariant check, counted at the fakes.

    Attributes:
        produced: distinct alerts (fingerprint:action:scan_id) the lifecycle sent to Slack's queue and ticket
            requests sent to Jira's. delivered: how many the fakes accepted; dead_lettered: how many sit in a DLQ.
        lost: produced, neither accepted by a fake nor dead-lettered (must be empty).
        duplicates: more than one accepted post for one (finding, scan), more than one Jira issue for a finding, or
            accepted *and* dead-lettered (must be empty).
        unconfirmed: the product recorded a delivery the fake never accepted (recorded ≤ accepted fails).
        unrecorded: the fake accepted a delivery the product did not record (accepted ≤ recorded fails: a retry
            would repeat it).
        unreasoned: dead letters without a reason (must be empty).
    """

    produced: int = 0
    delivered: int = 0
    dead_lettered: int = 0
    lost: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    unconfirmed: list[str] = field(default_factory=list)
    unrecorded: list[str] = field(default_factory=list)
    unreasoned: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Nothing lost, nothing twice, the product's records match the fakes, every dead letter explained."""
        return not (self.lost or self.duplicates or self.unreasoned or self.unconfirmed or self.unrecorded)

    def __str__(self) -> str:
        return (f"produced {self.produced}, delivered {self.delivered}, dead-lettered {self.dead_lettered}, "
                f"lost {self.lost[:5]}, duplicates {self.duplicates[:5]}, unconfirmed {self.unconfirmed[:5]}, "
                f"unrecorded {self.unrecorded[:5]}, unreasoned {self.unreasoned[:5]}")


def _alert_key(alert: AlertMessage, sink: str) -> str:
    return delivery_key(alert, sink)


def _parse_alerts(bodies: Iterable[str]) -> list[AlertMessage]:
    out = []
    for body in bodies:
        try:
            out.append(AlertMessage.model_validate_json(body))
        except ValueError:
            continue
    return out


def check_invariant(chain: Chain, slack: AuditedSlack, jira: FakeJira | None = None, *,
                    silenced: Callable[[AlertMessage], bool] | None = None,
                    explained: set[tuple[str, str]] | None = None) -> InvariantReport:
    """Every produced alert is delivered exactly once (counted at the fakes) or dead-lettered with its reason,
    and the product's records agree with the fakes in both directions.

    Slack: an alert is accepted when the fake accepted a `chat.postMessage` (or, for RESOLVED, a `chat.update`)
    whose metadata names its finding and scan; more than one accepted post per (finding, scan) is a duplicate.
    Jira: an ESCALATE is accepted when the fake holds an issue with the finding's dedupe label; more than one is a
    duplicate. `explained`: (fingerprint prefix, scan) of alerts produced earlier whose harness state was dropped
    (a long soak); updated with this check's alerts.
    """
    report = InvariantReport()
    dead_keys: dict[str, DeadLetter] = {}
    for letter in chain.dlq:
        if not letter.reason.strip():
            report.unreasoned.append(f"{letter.queue}: {letter.body[:60]}")
        for alert in _parse_alerts([letter.body]):
            sink = "jira" if letter.queue == "tickets" else "slack"
            dead_keys[_alert_key(alert, sink)] = letter
    # Slack
    posts = slack.accepted_keys("chat.postMessage")
    edits = slack.accepted_keys("chat.update")
    slack_alerts = {_alert_key(a, "slack"): a for a in _parse_alerts(chain.alerts_q.sent)}
    expected: set[tuple[str, str]] = set()
    for key, alert in slack_alerts.items():
        mark = (alert.fingerprint[:16], alert.scan_id)
        accepted = posts[mark] + (edits[mark] if alert.action is AlertAction.RESOLVED else 0)
        record = chain.store.get(alert.fingerprint)
        recorded = record is not None and key in record.delivery_keys
        if silenced is not None and silenced(alert):
            if accepted:
                report.duplicates.append(f"{key}: silenced, yet posted {accepted}×")
            continue
        expected.add(mark)
        report.produced += 1
        dead = key in dead_keys
        if posts[mark] > 1:
            report.duplicates.append(f"{key}: {posts[mark]} accepted posts")
        if recorded and not accepted:
            report.unconfirmed.append(key)
        if accepted and not recorded and not dead:
            report.unrecorded.append(key)
        if accepted and dead:
            report.duplicates.append(f"{key} accepted and dead-lettered")
        elif accepted:
            report.delivered += 1
        elif dead:
            report.dead_lettered += 1
        else:
            report.lost.append(key)
    scans = {a.scan_id for a in slack_alerts.values()}
    explained = explained if explained is not None else set()
    explained.update((a.fingerprint[:16], a.scan_id) for a in slack_alerts.values())
    for mark, n in posts.items():
        if mark[1] in scans and mark not in explained:
            report.duplicates.append(f"{mark}: {n} accepted posts no alert explains")
    # Jira
    if jira is not None:
        escalations = {_alert_key(a, "jira"): a for a in _parse_alerts(chain.tickets_q.sent)
                       if a.action is AlertAction.ESCALATE}
        for key, alert in escalations.items():
            report.produced += 1
            record = chain.store.get(alert.fingerprint)
            labelled = [i for i in jira.issues.values() if dedupe_label(alert.fingerprint) in i.labels]
            recorded_key = record.ticket_key if record is not None else None
            if len(labelled) > 1:
                report.duplicates.append(f"{alert.fingerprint[:16]}: {len(labelled)} Jira issues")
            if recorded_key and not any(i.key == recorded_key for i in labelled):
                report.unconfirmed.append(f"{key}: {recorded_key} recorded, no such issue")
            if labelled and not recorded_key and key not in dead_keys:
                report.unrecorded.append(f"{key}: {labelled[0].key} not recorded")
            if labelled:
                report.delivered += 1
            elif key in dead_keys:
                report.dead_lettered += 1
            else:
                report.lost.append(key)
    return report


def findings_accounted(chain: Chain) -> list[str]:
    """Findings the scan produced that neither reached the store nor a DLQ (must be empty)."""
    dead = {letter.body for letter in chain.dlq}
    missing = []
    for body in chain.findings_q.sent:
        try:
            message = STAGE_ADAPTER.validate_json(body)
        except ValueError:
            if body not in dead:
                missing.append(body[:60])
            continue
        if isinstance(message, ScanCompleted):
            continue
        record = chain.store.get(message.finding.fingerprint)
        if record is None and body not in dead and not any(
                message.finding.fingerprint in letter.body for letter in chain.dlq):
            missing.append(message.finding.fingerprint[:16])
    return missing


class DayClock:
    """`ports.Clock` at a fixed time (TTL only)."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        """The fixed time."""
        return self.at


def by_fingerprint(alerts: Iterable[AlertMessage]) -> dict[str, list[AlertMessage]]:
    """Group alerts by fingerprint."""
    out: dict[str, list[AlertMessage]] = defaultdict(list)
    for a in alerts:
        out[a.fingerprint].append(a)
    return out


ONE_DAY = timedelta(days=1)


def attach_scanner(chain: Chain, *, cluster_source: Any, telemetry_source: Any, config: Any, window: timedelta) -> None:
    """Give the chain a scan stage (ScanService → the chain's findings queue)."""
    from gpuwaste.services.scan import ScanService

    chain.scanner = ScanService(cluster_source=cluster_source, telemetry_source=telemetry_source,
                                settings=config.detectors, window=window, queue=chain.findings_q)


class Shifted:
    """Sources over a fixed recording, answering as if it were recorded at the asked time.

    Lets a soak run hundreds of scans with increasing evaluation times over a few recordings.
    """

    def __init__(self, cluster: Any, telemetry: Any, end: datetime) -> None:
        self.cluster, self.inner, self.end = cluster, telemetry, end

    def telemetry(self, *, at: datetime, window: timedelta) -> Any:
        """The recording's window at its end, relabelled to `at`."""
        return self.inner.telemetry(at=self.end, window=window).model_copy(update={"eval_time": at})

    def cluster_state(self, *, at: datetime) -> Any:
        """The recording's cluster state."""
        return self.cluster.cluster_state(at=self.end)


# -- Prometheus behind a fault-injecting proxy -------------------------------------------------------------
class PromProxy(FakeHttpServer):
    """Forwards to a real Prometheus, or injects a fault: ``mode`` is one of

    ``pass``; ``5xx`` (HTTP 503 for the next ``times`` requests, then pass); ``slow`` (hold the answer until
    released — longer than any client timeout); ``empty`` (a success with no series); ``partial`` (drop the
    series whose ``UUID``/``gpu_uuid`` label is in ``drop``); ``huge`` (every series ``copies`` times, with
    a distinct label each).
    """

    server_name = "prometheus-proxy"

    def __init__(self, upstream: str) -> None:
        import threading

        super().__init__()
        self.upstream = upstream.rstrip("/")
        self.mode = "pass"
        self.times = 0
        self.drop: set[str] = set()
        self.copies = 1
        self.requests = 0
        self.release = threading.Event()
        self.bearer: str | None = None
        self.seen_authorization: set[str] = set()
        #: faults this proxy answered, by mode (counted where they are injected)
        self.faults_served: Counter[str] = Counter()

    def stop(self) -> None:
        """Release held requests, then stop."""
        self.release.set()
        super().stop()

    def _forward(self, request: HttpRequest) -> tuple[int, bytes]:
        import urllib.error
        import urllib.parse
        import urllib.request

        url = f"{self.upstream}{request.path}"
        data = request.body or None
        if request.method == "GET" and request.query:
            url += "?" + urllib.parse.urlencode(request.query)
        req = urllib.request.Request(url, data=data, method=request.method,
                                     headers={"Content-Type": request.headers.get("content-type", "application/x-www-form-urlencoded")})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def handle(self, request: HttpRequest) -> HttpResponse:
        with self._lock:
            self.requests += 1
            auth = request.headers.get("authorization", "")
            self.seen_authorization.add(auth)
            if self.bearer is not None and auth != f"Bearer {self.bearer}":
                return HttpResponse(401, b"unauthorized", content_type="text/plain")
            mode = self.mode
            if mode == "401":
                if self.times > 0:
                    self.times -= 1
                    self.faults_served["401"] += 1
                    return HttpResponse(401, b"unauthorized", content_type="text/plain")
                mode = "pass"
            if mode == "5xx":
                if self.times > 0:
                    self.times -= 1
                else:
                    mode = "pass"
        if mode != "pass":
            with self._lock:
                self.faults_served[mode] += 1
        if mode == "5xx":
            return HttpResponse(503, b"overloaded", content_type="text/plain")
        if mode == "slow":
            self.release.wait(10)
            return HttpResponse(503, b"too late", content_type="text/plain")
        if mode == "empty":
            return HttpResponse.json_body(200, {"status": "success", "data": {"resultType": "vector", "result": []}})
        status, body = self._forward(request)
        if mode in ("partial", "huge") and status == 200:
            doc = json.loads(body)
            result = doc.get("data", {}).get("result", [])
            if mode == "partial":
                result = [r for r in result
                          if not ({r["metric"].get("UUID"), r["metric"].get("gpu_uuid")} & self.drop)]
            else:
                result = [{**r, "metric": {**r["metric"], "gpuwaste_copy": str(k)}}
                          for r in result for k in range(self.copies)]
            doc["data"]["result"] = result
            return HttpResponse.json_body(200, doc)
        return HttpResponse(status, body)

"""Service: the finding lifecycle (dedupe) — decide what an owner must hear, with conditional writes.

Rules (design §5; thresholds in `LifecycleSettings`):

* New fingerprint → record it, alert NEW.
* Still open → silent, unless its USD/day rose by `worse_share` over the cost last alerted (WORSE) or
  the last alert is `reminder_after` old (REMINDER). Its money is the ledger of the time its sightings' evidence
  covered (`models/ledger.py`); the cumulative USD is that ledger's total.
* Open for `ticket_after`, or costing ≥ `ticket_usd_per_day` → one ticket request (ESCALATE) on the
  tickets queue per open period.
* Snoozed (until `snoozed_until`, set by the chat buttons or by the workload/namespace annotation
  `gpuwaste.io/snooze-until`, read on every sighting) → stored but silent, tickets included; once the
  snooze is over, a finding never told is alerted NEW ("snooze ended"). A relative annotation (`7d`)
  counts from the finding's first sighting. Acknowledged → no reminders and no ticket until resolved
  (a WORSE alert still goes out: the owner has not seen that cost).
* A justification (`FindingRecord.justification`: "Expected" or "Snooze" with a reason, who, when and until when)
  silences as above until its `until`; the first sighting at or after it clears it (and the "expected"
  acknowledgement it set), alerts a REMINDER "justification ended" and lets the ticket rules apply again.
* A finding with a ticket (`ticket_key`) also sends its WORSE and RESOLVED alerts to the tickets queue,
  so create_tickets comments on (and transitions) the ticket.
* A cluster's `ScanCompleted` without an open fingerprint counts a missed scan; after
  `resolve_after_missed_scans` → RESOLVED with `saved_usd_per_day`, and (when the owner was alerted)
  an alert that carries the original messages' references so they can be edited.
* A resolved fingerprint seen again is reopened as NEW.
* With `heartbeat` set (off by default), a sighting that changes nothing but the record's times (same cost and
  ledger rate, nothing to tell, no unsent messages) is not written while the last written sighting is younger than
  `heartbeat` and than half its evidence window (`_unchanged`): the store is written when something changes, and at
  most once per heartbeat otherwise. The price: `last_seen` lags by up to that window, so a scan completion
  delivered out of order — older than an unwritten sighting, arriving after it — counts a missed scan that the
  written sighting would have shown stale (the next written sighting resets it).
* A scan completion sent in parts (`ScanCompleted.parts` > 1, or a scan over several shards) resolves nothing
  until every part of every shard is in: each part is recorded with `FindingStore.record_scan_part` (idempotent:
  a redelivered part is counted once), and only the part that completes the scan applies the merged completion.
  A scan with a part or shard that never arrives resolves nothing by absence.

The lifecycle's "now" is the scan's evaluation time (the finding's `observed_at`, the completion's
`scheduled_time`), never the wall clock, so replays and redeliveries decide the same way. The injected
clock only sets the store TTL (`expires_at`), which must count from real time.

Exactly-once telling under at-least-once delivery: every decision is one conditional write
(`put_new`, or `update` on the version read) that also stores the messages to send in the record's
outbox; then the messages are sent and the outbox cleared with another conditional write. A
redelivered message finds its scan already applied (`last_scan_id` / `last_checked_scan_id`) and only
re-sends a non-empty outbox (left by a crash or failed send between write and send); a newer decision
carries such unsent messages along. A lost race re-reads and decides again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from gpuwaste.errors import DeadlineError, StoreError
from gpuwaste.models.findings import Finding
from gpuwaste.models.ledger import add_sighting, waste_usd
from gpuwaste.models.lifecycle import FindingRecord, FindingState, money_spans
from gpuwaste.models.messages import AlertAction, AlertMessage, FindingMessage, ScanCompleted, merge_completion
from gpuwaste.models.settings import DeliverySettings, LifecycleSettings
from gpuwaste.ports import AlertQueue, Clock, FindingStore
from gpuwaste.services.routing import snoozed_until

logger = logging.getLogger(__name__)

DAY = Decimal(86400)
MAX_ATTEMPTS = 5
#: records read together when resolving by absence (one BatchGetItem of 100 keys in DynamoDB)
MISSED_CHUNK = 100
#: seconds a batch keeps in hand: a message is not started with less left (`LifecycleBatch.check_deadline`)
DEADLINE_RESERVE_S = 10.0


@dataclass
class Outcome:
    """What handling one message did (for logs, tests and the local chain's summary)."""

    alerts: list[AlertMessage] = field(default_factory=list)
    tickets: list[AlertMessage] = field(default_factory=list)
    duplicate: bool = False
    stale: bool = False
    #: a scan completion: False for a part that left the scan incomplete (or that another part completed)
    applied: bool = True


class LifecycleService:
    """Apply findings and scan completions to the store and send what must be told.

    Args:
        store: the lifecycle store (conditional writes).
        alerts: the alerts queue (the notify function).
        tickets: the tickets queue (create_tickets); None drops ticket requests (a local run without Jira).
        settings: thresholds.
        clock: real time, for the store TTL only.
        delivery: routing settings (the snooze annotation's key); defaults to `DeliverySettings()`.
        outbox: keep each decision's messages in the record until they are sent (see the module docstring); pass
            False only when the queues write in the store's own transaction.
    """

    def __init__(self, *, store: FindingStore, alerts: AlertQueue, tickets: AlertQueue | None,
                 settings: LifecycleSettings, clock: Clock, delivery: DeliverySettings | None = None,
                 outbox: bool = True) -> None:
        self.store = store
        self.alerts = alerts
        self.tickets = tickets
        self.settings = settings
        self.clock = clock
        self.delivery = delivery or DeliverySettings()
        #: keep decided messages in the record's outbox until sent; False only when the queues commit in the same
        #: transaction as the store (the local chain's SQLite state), where a record and its messages cannot part
        self.outbox = outbox
        #: compatibility only (`prefetch` / `defer_clears` / `clear_outboxes`, see there): new code passes a batch
        self._legacy: LifecycleBatch | None = None

    # -- batches ---------------------------------------------------------------------------------------------
    def begin(self, fingerprints: Sequence[str] = (), *, alerts: AlertQueue | None = None,
              tickets: AlertQueue | None = None, deferred: bool = True,
              time_left: Callable[[], float] | None = None) -> LifecycleBatch:
        """Open a unit of work (`LifecycleBatch`): the records of `fingerprints` read in one batch read, its messages
        sent through `alerts` / `tickets` (the service's queues unless given: the Lambda passes queues that send the
        whole batch's outputs together), its outboxes cleared in one write by `LifecycleBatch.close` (`deferred`) or
        as each send completes, and no message started with less than `DEADLINE_RESERVE_S` of `time_left()` left.
        """
        found = self.store.get_many(list(fingerprints)) if fingerprints else {}
        return LifecycleBatch(store=self.store, alerts=self.alerts if alerts is None else alerts,
                              tickets=self.tickets if tickets is None else tickets, deferred=deferred,
                              time_left=time_left, read={fp: found.get(fp) for fp in fingerprints})

    def _once(self) -> LifecycleBatch:
        """The batch of a message handled alone: nothing read ahead, its outbox cleared as soon as it is sent."""
        return self._legacy or LifecycleBatch(store=self.store, alerts=self.alerts, tickets=self.tickets, deferred=False)

    def handle(self, message: FindingMessage | ScanCompleted, batch: LifecycleBatch | None = None) -> Outcome:
        """Apply one priced finding or scan completion (`handle_finding`, `handle_scan_completed`) in `batch`."""
        if isinstance(message, ScanCompleted):
            return self.handle_scan_completed(message, batch)
        return self.handle_finding(message, batch)

    # compatibility: the mutable batch of earlier versions (bench/pipeline_scale.py drives it); use `begin`
    @property
    def defer_clears(self) -> bool:
        """Compatibility: True while a deferred batch opened by `prefetch` / this flag is open."""
        return self._legacy is not None and self._legacy.deferred

    @defer_clears.setter
    def defer_clears(self, value: bool) -> None:
        self._legacy = self.begin(deferred=True) if value else None

    def prefetch(self, fingerprints: list[str]) -> None:
        """Compatibility: open the service's own batch over `fingerprints` (prefer `begin`)."""
        old = self._legacy
        self._legacy = self.begin(fingerprints, deferred=old is not None and old.deferred)
        if old is not None:
            self._legacy.to_clear = old.to_clear

    def clear_outboxes(self) -> int:
        """Compatibility: close the service's own batch (`LifecycleBatch.close`) and open the next one."""
        batch = self._legacy
        if batch is None:
            return 0
        self._legacy = self.begin(deferred=batch.deferred)
        return batch.close()

    def _outboxed(self, record: FindingRecord, out: Outcome) -> FindingRecord:
        return _with_outbox(record, out) if self.outbox else record

    # -- findings ------------------------------------------------------------------------------------
    def handle_finding(self, message: FindingMessage, batch: LifecycleBatch | None = None) -> Outcome:
        """Apply one priced finding seen by scan `message.scan_id`, in `batch` (alone when None).

        Raises:
            StoreError: the store failed, or kept conflicting (retryable: the record fails and SQS redelivers).
            RetryableError: a queue could not take the messages (the outbox keeps them for the redelivery).
        """
        batch = batch or self._once()
        batch.check_deadline()
        finding = message.finding
        for attempt in range(MAX_ATTEMPTS):
            current = batch.read_record(finding.fingerprint, attempt)
            if current is None:
                record, out = self._first_sight(finding, message.scan_id)
                if self.store.put_new(record):
                    return self._flush(batch, record, out)
                continue
            if current.last_scan_id == message.scan_id or _older_than_known(current, finding):
                # already applied (redelivery) or older than what we know (out of order): only finish sending
                return self._resend(batch, current, stale=current.last_scan_id != message.scan_id)
            record, out = self._seen_again(current, finding, message.scan_id)
            if self._unchanged(current, record, out, finding):
                return out  # nothing to write: the last written sighting stands for this one (heartbeat)
            if self.store.update(record, expected_version=current.version):
                return self._flush(batch, record, out)
        raise StoreError(f"finding {finding.fingerprint}: conflicting writes, gave up after {MAX_ATTEMPTS} attempts")

    def _unchanged(self, current: FindingRecord, record: FindingRecord, out: Outcome, finding: Finding) -> bool:
        """True when `record` (the decision on a sighting) differs from `current` only in what every sighting moves
        (times, scan id, the finding's text, the last ledger span's end) and the last written sighting is recent:
        younger than `heartbeat` and than half the sighting's evidence span (so the next written sighting's
        evidence covers the ones skipped: the ledger keeps no gap)."""
        heartbeat = self.settings.heartbeat
        if not heartbeat or out.alerts or out.tickets or current.outbox_json:
            return False
        if current.state is not FindingState.OPEN or record.state is not FindingState.OPEN:
            return False
        span = timedelta(seconds=finding.observed_s or finding.window_s)
        if finding.observed_at - current.last_seen >= min(heartbeat, span / 2):
            return False
        if record.model_dump(exclude=_SIGHTING_FIELDS) != current.model_dump(exclude=_SIGHTING_FIELDS):
            return False
        old, new = current.ledger, record.ledger
        if len(old) != len(new) or old[:-1] != new[:-1]:
            return False
        return not old or (old[-1].start == new[-1].start and old[-1].usd_per_day == new[-1].usd_per_day)

    def _first_sight(self, finding: Finding, scan_id: str) -> tuple[FindingRecord, Outcome]:
        at = finding.observed_at
        usd = finding.usd_per_day
        record = FindingRecord(
            fingerprint=finding.fingerprint,
            cluster=finding.subject.cluster,
            namespace=finding.subject.namespace,
            workload=finding.subject.workload_name,
            kind=finding.kind.value,
            detector=finding.detector,
            first_seen=at,
            last_seen=at,
            last_scan_id=scan_id,
            usd_per_day=usd,
            peak_usd_per_day=usd,
            # the waste was already there during the window that proved it: the time its evidence covers
            ledger=(ledger := add_sighting((), finding)),
            cumulative_usd=waste_usd(ledger),
            team=_team(finding),
            finding_json=finding.model_dump_json(exclude={"fingerprint"}),
            activity_at=at,
            version=1,
            expires_at=self._expiry(),
        )
        out = Outcome()
        until = snoozed_until(finding, self.delivery, now=at, anchor=at)
        if until is not None:  # snoozed by annotation: stored, told nothing until then
            record = record.model_copy(update={"snoozed_until": until})
            return self._outboxed(record, out), out
        if self._alertable(finding):
            out.alerts.append(self._alert(record, finding, AlertAction.NEW, scan_id, "new waste"))
            record = record.model_copy(update={"alerted_usd_per_day": usd, "last_alert_at": at})
        record, ticket = self._maybe_ticket(record, finding, scan_id)
        if ticket is not None:
            out.tickets.append(ticket)
        return self._outboxed(record, out), out

    def _seen_again(self, current: FindingRecord, finding: Finding, scan_id: str) -> tuple[FindingRecord, Outcome]:
        record, out = self._decide_seen_again(current, finding, scan_id)
        return _carry_unsent(current, record, out, keep=self.outbox)

    def _decide_seen_again(self, current: FindingRecord, finding: Finding, scan_id: str) -> tuple[FindingRecord, Outcome]:
        if current.state is FindingState.RESOLVED:
            record, out = self._first_sight(finding, scan_id)
            ledger = add_sighting(money_spans(current), finding)  # the finding's money over all its open periods
            return record.model_copy(update={"version": current.version + 1, "ledger": ledger,
                                             "cumulative_usd": waste_usd(ledger)}), out
        at = finding.observed_at
        usd = finding.usd_per_day
        ledger = add_sighting(money_spans(current), finding)  # only time its evidence covers, each moment once
        peak = max((v for v in (current.peak_usd_per_day, usd) if v is not None), default=None)
        record = current.model_copy(update={
            "last_seen": at, "last_scan_id": scan_id, "usd_per_day": usd, "peak_usd_per_day": peak,
            "ledger": ledger, "cumulative_usd": waste_usd(ledger), "missed_scans": 0,
            "finding_json": finding.model_dump_json(exclude={"fingerprint"}), "team": _team(finding) or current.team,
            "activity_at": at, "version": current.version + 1, "expires_at": self._expiry(),
        })
        out = Outcome()
        ended = current.justification if current.justification is not None and not current.justification.active(at) else None
        if ended is not None:  # the owner's reason ran out: told again, and escalated as if never acknowledged
            lapsed: dict[str, object] = {"justification": None}
            if ended.kind == "expected" and current.acknowledged and current.acknowledged.startswith("expected"):
                lapsed["acknowledged"] = None
            record = record.model_copy(update=lapsed)
            current = current.model_copy(update=lapsed)
        annotated = snoozed_until(finding, self.delivery, now=at, anchor=current.first_seen)
        if annotated is not None and (record.snoozed_until is None or annotated > record.snoozed_until):
            record = record.model_copy(update={"snoozed_until": annotated})
        snoozed = record.snoozed_until is not None and at < record.snoozed_until
        if not snoozed and self._alertable(finding):
            action, reason = self._repeat_alert(current, usd, at)
            if ended is not None and action in (None, AlertAction.REMINDER):
                action, reason = AlertAction.REMINDER, (f"justification ended: {ended.kind} by {ended.by} until "
                                                        f"{ended.until:%Y-%m-%d %H:%M}Z ({ended.reason})")
            if action is not None:
                alert = self._alert(record, finding, action, scan_id, reason)
                out.alerts.append(alert)
                if action is AlertAction.WORSE and current.ticket_key:
                    out.tickets.append(alert)  # create_tickets comments on the ticket
                record = record.model_copy(update={"alerted_usd_per_day": usd, "last_alert_at": at})
        if not snoozed and not current.acknowledged:
            record, ticket = self._maybe_ticket(record, finding, scan_id)
            if ticket is not None:
                out.tickets.append(ticket)
        return self._outboxed(record, out), out

    def _repeat_alert(self, current: FindingRecord, usd: Decimal | None, at: datetime) -> tuple[AlertAction | None, str]:
        base = current.alerted_usd_per_day
        if usd is not None and base is not None and base > 0 and usd >= base * (1 + self.settings.worse_share):
            return AlertAction.WORSE, f"cost up {((usd / base - 1) * 100).quantize(Decimal(1))} % since the last alert"
        if current.last_alert_at is None:  # never told: snoozed, unpriced or below the minimum until now
            if current.snoozed_until is not None:
                return AlertAction.NEW, "snooze ended"
            return AlertAction.NEW, "now priced" if usd is not None and base is None else "new waste"
        if current.acknowledged:
            return None, ""
        if current.last_alert_at is not None and at - current.last_alert_at >= self.settings.reminder_after:
            return AlertAction.REMINDER, f"still open since {current.first_seen:%Y-%m-%d %H:%M}Z"
        return None, ""

    def _maybe_ticket(self, record: FindingRecord, finding: Finding, scan_id: str) -> tuple[FindingRecord, AlertMessage | None]:
        if record.ticket_requested_at is not None or record.ticket_key or not finding.kind.is_waste:
            return record, None
        if 0 < finding.observed_s < self.settings.ticket_min_observed_s:
            return record, None  # too little observed to escalate (a short window); the alert still goes out
        at = finding.observed_at
        age = at - record.first_seen
        usd = record.usd_per_day
        if age >= self.settings.ticket_after:
            reason = f"open {_age_text(age)}"
        elif usd is not None and usd >= self.settings.ticket_usd_per_day:
            reason = f"cost ${usd}/day ≥ ${self.settings.ticket_usd_per_day}/day"
        else:
            return record, None
        record = record.model_copy(update={"ticket_requested_at": at})
        return record, self._alert(record, finding, AlertAction.ESCALATE, scan_id, reason)

    # -- scan completions ----------------------------------------------------------------------------
    def handle_scan_completed(self, message: ScanCompleted, batch: LifecycleBatch | None = None) -> Outcome:
        """Count a missed scan for each open finding of the cluster the scan did not see; resolve after N (in
        `batch`; alone when None).

        Raises:
            StoreError, RetryableError: as `handle_finding`.
        """
        batch = batch or self._once()
        batch.check_deadline()
        total = Outcome()
        if message.part == 0:  # each shard's attribution coverage, once per shard (issue 21 §12: the daily summary)
            self.store.record_coverage(message, expires_at=self._expiry())
            if message.allocation is not None:  # its allocation ledger, once per shard (issue 24: spend, the funnel)
                self.store.record_allocation(message, expires_at=self._expiry())
        if not message.whole:
            parts = self.store.record_scan_part(message, expires_at=self._scan_expiry())
            if parts is None:
                total.applied = False
                return total  # parts or shards still missing (or another part completed the scan): nothing yet
            message = merge_completion(parts)
            logger.info("scan completion whole", extra={"scan_id": message.scan_id, "parts": len(parts),
                                                        "fingerprints": len(message.fingerprints)})
        seen = set(message.fingerprints)
        if not message.judged:
            return total  # a scan that could judge nothing (no telemetry, one sample) is not evidence that waste ended
        unjudged = set(message.unjudged)
        for candidate in self._missed_candidates(message.cluster, seen):
            if _subject_key(candidate) in unjudged:
                continue
            outcome = self._miss(batch, candidate, message)
            total.alerts += outcome.alerts
            total.tickets += outcome.tickets
            total.duplicate = total.duplicate or outcome.duplicate
        return total

    def _missed_candidates(self, cluster: str, seen: set[str]) -> Iterator[FindingRecord]:
        """Open records of `cluster` the scan did not see, by fingerprint: the open fingerprints (no record read),
        then only the records of those the scan did not see, read `MISSED_CHUNK` at a time (memory stays bounded
        however many findings disappeared at once)."""
        missing = [fp for fp in self.store.open_fingerprints(cluster) if fp not in seen]
        for k in range(0, len(missing), MISSED_CHUNK):
            chunk = missing[k:k + MISSED_CHUNK]
            found = self.store.get_many(chunk)
            yield from (found[fp] for fp in chunk if fp in found)

    def _miss(self, batch: LifecycleBatch, candidate: FindingRecord, message: ScanCompleted) -> Outcome:
        at = message.scheduled_time
        fingerprint = candidate.fingerprint
        for attempt in range(MAX_ATTEMPTS):
            # the record just read (strongly consistent) for the first attempt; a lost race reads it again
            current = candidate if attempt == 0 else self.store.get(fingerprint)
            if current is None or current.state is not FindingState.OPEN:
                return Outcome()
            if current.last_checked_scan_id == message.scan_id or current.last_scan_id == message.scan_id:
                return self._resend(batch, current, stale=False)
            if current.last_seen >= at:
                return Outcome(stale=True)  # seen by this scan or a later one
            missed = current.missed_scans + 1
            update: dict[str, object] = {"missed_scans": missed, "last_checked_scan_id": message.scan_id,
                                         "version": current.version + 1, "expires_at": self._expiry()}
            out = Outcome()
            if missed >= self.settings.resolve_after_missed_scans:
                update |= {"state": FindingState.RESOLVED, "resolved_at": at, "saved_usd_per_day": current.usd_per_day,
                           "activity_at": at}
                record = current.model_copy(update=update)
                told = current.last_alert_at is not None  # only owners who were told hear that it is over
                if told or current.ticket_key:
                    finding = Finding.model_validate_json(current.finding_json)
                    alert = self._alert(record, finding, AlertAction.RESOLVED, message.scan_id,
                                        f"not seen for {missed} scans")
                    if told:
                        out.alerts.append(alert)
                    if current.ticket_key:
                        out.tickets.append(alert)  # create_tickets comments and transitions
            else:
                record = current.model_copy(update=update)
            record, out = _carry_unsent(current, self._outboxed(record, out), out, keep=self.outbox)
            if self.store.update(record, expected_version=current.version):
                return self._flush(batch, record, out)
        raise StoreError(f"finding {fingerprint}: conflicting writes, gave up after {MAX_ATTEMPTS} attempts")

    def recover(self, records: list[FindingRecord], batch: LifecycleBatch | None = None) -> Outcome:
        """Send what the outboxes of `records` still hold (left by a crash between a decision and its send) and
        clear them; the delivery queues drop messages they already hold.

        Raises:
            StoreError, RetryableError: as `handle_finding`.
        """
        batch = batch or self._once()
        total = Outcome()
        for record in records:
            out = self._resend(batch, record, stale=False)
            total.alerts += out.alerts
            total.tickets += out.tickets
        return total

    # -- helpers -------------------------------------------------------------------------------------
    def _alertable(self, finding: Finding) -> bool:
        if not finding.kind.is_waste:
            return self.settings.alert_data_quality
        usd = finding.usd_per_day
        return usd is None or usd >= self.settings.min_usd_per_day

    def _alert(self, record: FindingRecord, finding: Finding, action: AlertAction, scan_id: str, reason: str) -> AlertMessage:
        return AlertMessage(
            action=action, fingerprint=record.fingerprint, finding=finding, first_seen=record.first_seen,
            cumulative_usd=str(record.cumulative_usd), messages=record.messages,
            ticket_key=record.ticket_key,
            saved_usd_per_day=None if record.saved_usd_per_day is None else str(record.saved_usd_per_day),
            scan_id=scan_id, reason=reason,
        )

    def _scan_expiry(self) -> int:
        """TTL of a scan's stored completion parts: two days (a scan whose parts are not all in by then never will)."""
        return int((self.clock.now() + timedelta(days=2)).timestamp())

    def _expiry(self) -> int:
        return int((self.clock.now() + timedelta(days=self.settings.retention_days)).timestamp())

    def _flush(self, batch: LifecycleBatch, record: FindingRecord, out: Outcome) -> Outcome:
        """Send a decision's messages through the batch's queues; its outbox is cleared once they are out."""
        if out.alerts:
            batch.alerts.send_alerts(out.alerts)
        if out.tickets and batch.tickets is not None:
            batch.tickets.send_alerts(out.tickets)
        if record.outbox_json:
            batch.handed_over(record)
            # a queue that sends a whole batch of records' outputs together (`queue.batching.DeferredQueue`)
            # runs this only once the messages are out; any other queue has sent them already
            batch.alerts.after_sent(lambda: batch.sent(record))
        if out.alerts or out.tickets:
            logger.info("lifecycle decided", extra={"fingerprint": record.fingerprint,
                                                    "actions": [a.action.value for a in out.alerts + out.tickets]})
        return out

    def _resend(self, batch: LifecycleBatch, current: FindingRecord, *, stale: bool) -> Outcome:
        if not current.outbox_json or batch.already_handed(current):
            return Outcome(duplicate=not stale, stale=stale)
        alerts, tickets = _read_outbox(current.outbox_json)
        out = Outcome(alerts=alerts, tickets=tickets, duplicate=True)
        pending = alerts + tickets
        logger.warning("lifecycle resending unsent messages", extra={"fingerprint": current.fingerprint, "count": len(pending)})
        return self._flush(batch, current, out)


@dataclass
class LifecycleBatch:
    """The lifecycle's unit of work: one SQS batch of dedupe_findings, one scan of the local chain, or one message.

    Every rule that makes telling exactly-once under at-least-once delivery batch-shaped lives here (the rules on a
    single record are in the module docstring):

    * **what it read** (`read`): the records of the batch's findings, read in one batch read by
      `LifecycleService.begin`; each is used once, for a message's first attempt (a lost race reads the record again).
    * **its outbox** (`alerts`, `tickets`): the queues its decisions go to. The Lambda passes queues that hold the
      whole batch's messages until the batch is flushed (`queue.batching.DeferredQueue` over the invocation's
      `SendBatch`) and run `sent` for a record only once its messages are out: an unsent message stays in its
      record's outbox, and the redelivery sends it.
    * **what it will write** (`to_clear`): the records whose outboxes were sent; `close` clears them in one batch
      write (`deferred`; else each is cleared when sent). A clear that lost a race is retried on the record as it is
      now if it still holds the messages sent (`_clear_again`).
    * `handed`: the record versions whose outbox went to the queues in this batch; a copy of the same message later in
      the batch finds its scan applied and hands nothing over again.
    * **its deadline** (`time_left`, seconds; None: none): a message is not started with less than
      `DEADLINE_RESERVE_S` left; it fails retryable, and the records already handled are flushed and cleared before
      the invocation ends (SQS redelivers the rest).
    """

    store: FindingStore
    alerts: AlertQueue
    tickets: AlertQueue | None
    deferred: bool = True
    time_left: Callable[[], float] | None = None
    read: dict[str, FindingRecord | None] = field(default_factory=dict)
    to_clear: list[FindingRecord] = field(default_factory=list)
    handed: dict[str, int] = field(default_factory=dict)

    def check_deadline(self) -> None:
        """Refuse to start a message too close to the deadline.

        Raises:
            DeadlineError: less than `DEADLINE_RESERVE_S` left (retryable: the queue redelivers the message).
        """
        if self.time_left is not None and (left := self.time_left()) < DEADLINE_RESERVE_S:
            raise DeadlineError(f"deferred: {left:.0f} s left in this invocation; the queue redelivers the message")

    def read_record(self, fingerprint: str, attempt: int) -> FindingRecord | None:
        """The record read ahead (first attempt, once), else the store's."""
        if attempt == 0 and fingerprint in self.read:
            return self.read.pop(fingerprint)
        return self.store.get(fingerprint)

    def handed_over(self, record: FindingRecord) -> None:
        """`record`'s outbox went to the queues in this batch."""
        if self.deferred:
            self.handed[record.fingerprint] = record.version

    def already_handed(self, record: FindingRecord) -> bool:
        """True when this very version's outbox went to the queues in this batch already."""
        return self.handed.get(record.fingerprint) == record.version

    def sent(self, record: FindingRecord) -> None:
        """`record`'s messages are out: clear its outbox (at `close` when deferred)."""
        if self.deferred:
            self.to_clear.append(record)
            return
        if not self.store.update(_cleared(record), expected_version=record.version):
            self._clear_again(record)

    def close(self) -> int:
        """Clear, in one batch write, the outboxes whose messages were sent. A record changed meanwhile is re-read and
        cleared if it still holds the messages sent; one whose outbox a newer decision replaced keeps it (that
        decision sends and clears it). Returns how many were cleared.

        Raises:
            StoreError: the store failed (the outboxes stay set: the next decision carries them, keys dedupe).
        """
        pending, self.to_clear = self.to_clear, []
        self.read = {}
        self.handed = {}
        latest: dict[str, FindingRecord] = {}
        for r in pending:  # one write per record (a message redelivered within the batch re-sends the same outbox)
            if r.fingerprint not in latest or r.version > latest[r.fingerprint].version:
                latest[r.fingerprint] = r
        records = list(latest.values())
        outcomes = self.store.update_many([(_cleared(r), r.version) for r in records])
        return sum(ok or self._clear_again(r) for ok, r in zip(outcomes, records, strict=True))

    def _clear_again(self, sent: FindingRecord) -> bool:
        """After a clear lost a race (a delivery key recorded, a button pressed meanwhile): clear the outbox on the
        record as it is now if it still holds the messages that were sent; leave it when a newer decision replaced
        them (that decision's own send clears it). Without this a resolved record, never revisited, kept its outbox
        for good."""
        for _ in range(MAX_ATTEMPTS):
            now = self.store.get(sent.fingerprint)
            if now is None or now.outbox_json != sent.outbox_json:
                return False
            if self.store.update(_cleared(now), expected_version=now.version):
                return True
        logger.warning("outbox not cleared: the record kept changing", extra={"fingerprint": sent.fingerprint})
        return False


#: what every sighting of an unchanged finding moves (`LifecycleService._unchanged`); the ledger is compared apart
_SIGHTING_FIELDS: set[str] = {"last_seen", "last_scan_id", "finding_json", "activity_at", "version", "expires_at",
                             "ledger", "cumulative_usd"}


def _cleared(record: FindingRecord) -> FindingRecord:
    """`record` with its outbox emptied (the next version)."""
    return record.model_copy(update={"outbox_json": "", "version": record.version + 1})


def _carry_unsent(current: FindingRecord, record: FindingRecord, out: Outcome, *, keep: bool = True
                  ) -> tuple[FindingRecord, Outcome]:
    """Keep messages a failed send left in `current`'s outbox: they go out with this decision's messages."""
    if not current.outbox_json:
        return record, out
    alerts, tickets = _read_outbox(current.outbox_json)
    out.alerts[:0] = alerts
    out.tickets[:0] = tickets
    return (_with_outbox(record, out) if keep else record), out


def _read_outbox(text: str) -> tuple[list[AlertMessage], list[AlertMessage]]:
    """(alerts, ticket requests) of an outbox. Entries are `{"to": "alerts"|"tickets", "message": {...}}`;
    a bare message (older records) goes to tickets when it is an ESCALATE, else to alerts."""
    alerts: list[AlertMessage] = []
    tickets: list[AlertMessage] = []
    for entry in json.loads(text):
        if isinstance(entry, dict) and "message" in entry and "to" in entry:
            message = AlertMessage.model_validate(entry["message"])
            to_tickets = entry["to"] == "tickets"
        else:
            message = AlertMessage.model_validate(entry)
            to_tickets = message.action is AlertAction.ESCALATE
        (tickets if to_tickets else alerts).append(message)
    return alerts, tickets


def _with_outbox(record: FindingRecord, out: Outcome) -> FindingRecord:
    # the same JSON as `json.dumps([{"to": …, "message": …}])`, with each message serialised once, by pydantic
    entries = [f'{{"to": "alerts", "message": {m.model_dump_json()}}}' for m in out.alerts]
    entries += [f'{{"to": "tickets", "message": {m.model_dump_json()}}}' for m in out.tickets]
    return record.model_copy(update={"outbox_json": f"[{', '.join(entries)}]" if entries else ""})


def _older_than_known(current: FindingRecord, finding: Finding) -> bool:
    """True for a late message: observed before the record's last sighting, or — for a resolved record — not
    after the scan that resolved it (old data must not reopen a newer resolution)."""
    if finding.observed_at < current.last_seen:
        return True
    return (current.state is FindingState.RESOLVED and current.resolved_at is not None
            and finding.observed_at <= current.resolved_at)


def _team(finding: Finding) -> str | None:
    s = finding.subject
    for key in ("gpuwaste.io/team", "team"):
        if key in s.annotations:
            return s.annotations[key]
        if key in s.labels:
            return s.labels[key]
    return None


def _age_text(age: timedelta) -> str:
    days = age.total_seconds() / 86400
    return f"{days:.1f} days" if days >= 1 else f"{age.total_seconds() / 3600:.1f} h"


__all__ = ["LifecycleService", "Outcome"]


def _subject_key(record: FindingRecord) -> str:
    """The "namespace/pod" (or node) a stored finding is about, as `ScanCompleted.unjudged` names subjects."""
    try:
        subject = Finding.model_validate_json(record.finding_json).subject
    except ValueError:
        return ""
    if subject.pod:
        return f"{subject.namespace}/{subject.pod}"
    return subject.node or ""

"""Unit tests: the finding lifecycle (services/lifecycle.py) over the SQLite store and in-memory queues."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from gpuwaste.errors import RetryableError, StoreError
from gpuwaste.models.findings import Cost, Finding, Subject, WasteKind
from gpuwaste.models.lifecycle import FindingRecord, FindingState
from gpuwaste.models.messages import AlertAction, AlertMessage, FindingMessage, ScanCompleted
from gpuwaste.models.settings import LifecycleSettings
from gpuwaste.queue.memory import MemoryQueue
from gpuwaste.services.lifecycle import LifecycleService
from gpuwaste.store.sqlite import SqliteFindingStore

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SCAN = timedelta(minutes=10)


class FixedClock:
    def now(self) -> datetime:
        return datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def finding(usd: str | None = "50.00", *, at: datetime = T0, workload: str = "trainer",
            kind: WasteKind = WasteKind.IDLE) -> Finding:
    cost = None if usd is None else Cost(priced=True, usd_per_day=Decimal(usd), wasted_gpu_share=Decimal(1),
                                         usd_per_gpu_hour=Decimal(usd) / 24, formula="test")
    return Finding(kind=kind, detector=kind.value, title=f"{workload} idle", recommendation="scale down",
                   subject=Subject(cluster="c1", namespace="ml", workload_kind="Deployment", workload_name=workload),
                   observed_at=at, window_s=3600, wasted_gpu_share=Decimal(1), cost=cost)


def seen(f: Finding, n: int) -> FindingMessage:
    return FindingMessage(scan_id=f"scan-{n}", finding=f)


def completed(n: int, *fingerprints: str) -> ScanCompleted:
    return ScanCompleted(scan_id=f"scan-{n}", cluster="c1", scheduled_time=T0 + n * SCAN, fingerprints=fingerprints)


class Harness:
    def __init__(self, **settings: object) -> None:
        self.store = SqliteFindingStore(":memory:")
        self.alerts = MemoryQueue("alerts")
        self.tickets = MemoryQueue("tickets")
        self.service = LifecycleService(store=self.store, alerts=self.alerts, tickets=self.tickets,
                                        settings=LifecycleSettings(**settings), clock=FixedClock())

    def sent(self) -> list[AlertMessage]:
        return [AlertMessage.model_validate_json(b) for b in self.alerts.drain()]

    def ticketed(self) -> list[AlertMessage]:
        return [AlertMessage.model_validate_json(b) for b in self.tickets.drain()]


@pytest.fixture
def h() -> Harness:
    return Harness()


def test_lifecycle_new_finding_alerts_new_and_is_stored(h: Harness) -> None:
    # GIVEN an empty store
    f = finding("50.00")
    # WHEN a finding is seen for the first time
    h.service.handle_finding(seen(f, 0))
    # THEN one NEW alert goes out and the record is open with its cost
    alerts = h.sent()
    assert [a.action for a in alerts] == [AlertAction.NEW]
    record = h.store.get(f.fingerprint)
    assert record is not None and record.state is FindingState.OPEN and record.usd_per_day == Decimal("50.00")
    assert record.outbox_json == ""  # sent and cleared


def test_lifecycle_same_message_twice_alerts_once(h: Harness) -> None:
    # GIVEN a finding message already applied
    message = seen(finding(), 0)
    h.service.handle_finding(message)
    # WHEN the same message is delivered again (SQS at-least-once)
    outcome = h.service.handle_finding(message)
    # THEN it is recognised as a duplicate and nothing more is sent
    assert outcome.duplicate
    assert len(h.sent()) == 1


def test_lifecycle_still_open_is_silent_and_accrues_cost(h: Harness) -> None:
    # GIVEN a finding alerted at T0 costing $48/day
    h.service.handle_finding(seen(finding("48.00"), 0))
    h.sent()
    # WHEN the next two scans (10 min apart) see it at the same cost
    for n in (1, 2):
        h.service.handle_finding(seen(finding("48.00", at=T0 + n * SCAN), n))
    # THEN nobody is told again; the evidence covers the 1 h window of the first sight plus the 20 minutes the next
    # windows add (each moment once), kept unrounded and printed to the cent: 48 × 80/1440 = 2.666… → $2.67
    assert h.sent() == []
    record = h.store.get(finding().fingerprint)
    assert record is not None and abs(record.cumulative_usd - Decimal(48) * 80 / 1440) < Decimal("1e-20")
    assert record.cumulative_usd.quantize(Decimal("0.01")) == Decimal("2.67")


def test_lifecycle_cost_up_by_the_share_alerts_worse(h: Harness) -> None:
    # GIVEN a finding alerted at $40/day
    h.service.handle_finding(seen(finding("40.00"), 0))
    h.sent()
    # WHEN it rises 10 % (silent), then 30 % over the alerted cost
    h.service.handle_finding(seen(finding("44.00", at=T0 + SCAN), 1))
    quiet = h.sent()
    h.service.handle_finding(seen(finding("52.00", at=T0 + 2 * SCAN), 2))
    # THEN only the 30 % rise alerts, as WORSE, and later rises compare with $52
    assert quiet == []
    alerts = h.sent()
    assert [a.action for a in alerts] == [AlertAction.WORSE]
    assert h.store.get(finding().fingerprint).alerted_usd_per_day == Decimal("52.00")  # type: ignore[union-attr]


def test_lifecycle_reminder_after_24h(h: Harness) -> None:
    # GIVEN a finding alerted at T0
    h.service.handle_finding(seen(finding(), 0))
    h.sent()
    # WHEN it is still there 23 h later, then 24 h later
    h.service.handle_finding(seen(finding(at=T0 + timedelta(hours=23)), 1))
    early = h.sent()
    h.service.handle_finding(seen(finding(at=T0 + timedelta(hours=24)), 2))
    # THEN only the 24 h sighting sends a REMINDER
    assert early == []
    assert [a.action for a in h.sent()] == [AlertAction.REMINDER]


def test_lifecycle_ticket_requested_once_when_cost_over_limit(h: Harness) -> None:
    # GIVEN the default $100/day ticket limit
    # WHEN a $150/day finding is seen in three scans
    for n in range(3):
        h.service.handle_finding(seen(finding("150.00", at=T0 + n * SCAN), n))
    # THEN exactly one ESCALATE goes to the tickets queue, and the alerts queue only has the NEW alert
    tickets = h.ticketed()
    assert [t.action for t in tickets] == [AlertAction.ESCALATE]
    assert "150.00" in (tickets[0].reason or "")
    assert [a.action for a in h.sent()] == [AlertAction.NEW]


def test_lifecycle_ticket_requested_when_open_past_age(h: Harness) -> None:
    # GIVEN a cheap finding first seen at T0 (never reaches the cost limit)
    h.service.handle_finding(seen(finding("5.00"), 0))
    # WHEN it is still open 3 days later
    h.service.handle_finding(seen(finding("5.00", at=T0 + timedelta(days=3)), 1))
    # THEN a ticket is requested because of its age
    tickets = h.ticketed()
    assert len(tickets) == 1 and "open 3.0 days" in (tickets[0].reason or "")


def test_lifecycle_snoozed_is_silent_until_expiry(h: Harness) -> None:
    # GIVEN a finding snoozed for 2 days right after its first alert
    f = finding("150.00")
    h.service.handle_finding(seen(finding("20.00"), 0))
    h.sent()
    record = h.store.get(f.fingerprint)
    assert record is not None
    h.store.update(record.model_copy(update={"snoozed_until": T0 + timedelta(days=2), "version": record.version + 1}),
                   expected_version=record.version)
    # WHEN it gets much worse during the snooze, and is still there after it
    h.service.handle_finding(seen(finding("150.00", at=T0 + timedelta(days=1)), 1))
    during = (h.sent(), h.ticketed())
    h.service.handle_finding(seen(finding("150.00", at=T0 + timedelta(days=2, minutes=10)), 2))
    # THEN nothing is sent while snoozed; after expiry the owner hears (WORSE) and a ticket is requested
    assert during == ([], [])
    assert [a.action for a in h.sent()] == [AlertAction.WORSE]
    assert len(h.ticketed()) == 1


def test_lifecycle_acknowledged_gets_no_reminder(h: Harness) -> None:
    # GIVEN an alerted finding that its owner acknowledged
    h.service.handle_finding(seen(finding(), 0))
    h.sent()
    record = h.store.get(finding().fingerprint)
    assert record is not None
    h.store.update(record.model_copy(update={"acknowledged": "U123", "version": record.version + 1}),
                   expected_version=record.version)
    # WHEN it is still open two days later at the same cost
    h.service.handle_finding(seen(finding(at=T0 + timedelta(days=2)), 1))
    # THEN no reminder and no ticket
    assert h.sent() == [] and h.ticketed() == []


def test_lifecycle_resolved_after_n_missed_scans_with_saving(h: Harness) -> None:
    # GIVEN an alerted $60/day finding seen by scan 0
    f = finding("60.00")
    h.service.handle_finding(seen(f, 0))
    h.sent()
    # WHEN scans 1 and 2 complete without it (and scan 2's completion is delivered twice), then scan 3
    h.service.handle_scan_completed(completed(1))
    h.service.handle_scan_completed(completed(2))
    h.service.handle_scan_completed(completed(2))
    after_two = h.store.get(f.fingerprint)
    h.service.handle_scan_completed(completed(3))
    # THEN the redelivery did not count twice; the third miss resolves it with the saving, alerting RESOLVED
    assert after_two is not None and after_two.missed_scans == 2 and after_two.state is FindingState.OPEN
    record = h.store.get(f.fingerprint)
    assert record is not None and record.state is FindingState.RESOLVED
    assert record.saved_usd_per_day == Decimal("60.00") and record.resolved_at == T0 + 3 * SCAN
    alerts = h.sent()
    assert [a.action for a in alerts] == [AlertAction.RESOLVED] and alerts[0].saved_usd_per_day == "60.00"


def test_lifecycle_seen_again_resets_missed_scans(h: Harness) -> None:
    # GIVEN a finding missed by two scans
    f = finding()
    h.service.handle_finding(seen(f, 0))
    h.service.handle_scan_completed(completed(1))
    h.service.handle_scan_completed(completed(2))
    # WHEN scan 3 sees it again, and scan 4 misses it
    h.service.handle_finding(seen(finding(at=T0 + 3 * SCAN), 3))
    h.service.handle_scan_completed(completed(3, f.fingerprint))
    h.service.handle_scan_completed(completed(4))
    # THEN it is still open with one miss
    record = h.store.get(f.fingerprint)
    assert record is not None and record.state is FindingState.OPEN and record.missed_scans == 1


def test_lifecycle_resolved_finding_seen_again_is_new(h: Harness) -> None:
    # GIVEN a resolved finding
    f = finding()
    h.service.handle_finding(seen(f, 0))
    for n in (1, 2, 3):
        h.service.handle_scan_completed(completed(n))
    h.sent()
    # WHEN the waste comes back in scan 10
    h.service.handle_finding(seen(finding(at=T0 + 10 * SCAN), 10))
    # THEN it is open again and alerted as NEW
    assert [a.action for a in h.sent()] == [AlertAction.NEW]
    record = h.store.get(f.fingerprint)
    assert record is not None and record.state is FindingState.OPEN and record.missed_scans == 0


def test_lifecycle_older_message_after_newer_is_ignored(h: Harness) -> None:
    # GIVEN a finding last seen by scan 5
    h.service.handle_finding(seen(finding("40.00", at=T0 + 5 * SCAN), 5))
    h.sent()
    # WHEN a late message from scan 1 with a higher cost arrives
    outcome = h.service.handle_finding(seen(finding("90.00", at=T0 + SCAN), 1))
    # THEN it changes nothing
    assert outcome.stale and h.sent() == []
    assert h.store.get(finding().fingerprint).usd_per_day == Decimal("40.00")  # type: ignore[union-attr]


class FlakyQueue(MemoryQueue):
    def __init__(self, failures: int) -> None:
        super().__init__("flaky")
        self.failures = failures

    def send_alerts(self, messages):  # type: ignore[no-untyped-def]
        if self.failures > 0:
            self.failures -= 1
            raise RetryableError("queue down")
        super().send_alerts(messages)


def test_lifecycle_unsent_alert_is_sent_on_redelivery_exactly_once() -> None:
    # GIVEN an alerts queue that fails the first send
    h = Harness()
    h.service.alerts = h.alerts = FlakyQueue(failures=1)
    message = seen(finding(), 0)
    # WHEN the first delivery fails after the decision was stored, and SQS redelivers the message twice
    with pytest.raises(RetryableError):
        h.service.handle_finding(message)
    h.service.handle_finding(message)
    h.service.handle_finding(message)
    # THEN the NEW alert was sent exactly once, from the stored outbox
    assert [a.action for a in h.sent()] == [AlertAction.NEW]
    assert h.store.get(message.finding.fingerprint).outbox_json == ""  # type: ignore[union-attr]


def test_lifecycle_unsent_alert_survives_a_newer_scan_before_redelivery() -> None:
    # GIVEN the NEW alert of scan 0 whose send failed (left in the record's outbox)
    h = Harness()
    h.service.alerts = h.alerts = FlakyQueue(failures=1)
    with pytest.raises(RetryableError):
        h.service.handle_finding(seen(finding(), 0))
    # WHEN scan 1's sighting is applied before scan 0's message is redelivered, then scan 0 comes back
    h.service.handle_finding(seen(finding(at=T0 + SCAN), 1))
    late = h.service.handle_finding(seen(finding(), 0))
    # THEN the NEW alert went out exactly once (with scan 1's decision), and the late redelivery is stale
    assert [a.action for a in h.sent()] == [AlertAction.NEW]
    assert late.stale


class RacingStore(SqliteFindingStore):
    """Loses the first conditional update: another consumer wrote in between (same decision)."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.lost = 0

    def update(self, record: FindingRecord, *, expected_version: int) -> bool:
        if self.lost == 0 and record.outbox_json:
            self.lost += 1
            super().update(record.model_copy(update={"outbox_json": ""}), expected_version=expected_version)
            return False
        return super().update(record, expected_version=expected_version)


def test_lifecycle_lost_race_rereads_and_does_not_alert_twice() -> None:
    # GIVEN a finding alerted at $40/day, and a store where a concurrent consumer wins the next write
    h = Harness()
    h.service.store = h.store = RacingStore()
    h.service.handle_finding(seen(finding("40.00"), 0))
    h.sent()
    # WHEN the worse sighting is applied by us after the other consumer applied it
    outcome = h.service.handle_finding(seen(finding("60.00", at=T0 + SCAN), 1))
    # THEN we see the scan as already applied and send nothing (the winner told the owner)
    assert outcome.duplicate and h.sent() == []


class AlwaysConflicting(SqliteFindingStore):
    def update(self, record: FindingRecord, *, expected_version: int) -> bool:
        return False


def test_lifecycle_endless_conflicts_raise_retryable_store_error() -> None:
    # GIVEN a store whose every conditional update conflicts
    h = Harness()
    h.service.store = h.store = AlwaysConflicting(":memory:")
    h.service.handle_finding(seen(finding(), 0))  # put_new works
    # WHEN a later sighting is applied
    # THEN a StoreError (retryable) is raised so SQS redelivers the message
    with pytest.raises(StoreError):
        h.service.handle_finding(seen(finding(at=T0 + SCAN), 1))


def test_lifecycle_data_quality_and_cheap_findings_are_tracked_not_alerted() -> None:
    # GIVEN a $5/day minimum for alerts
    h = Harness(min_usd_per_day=Decimal(5))
    # WHEN a data-quality finding and a $2/day finding are seen
    h.service.handle_finding(seen(finding(None, kind=WasteKind.DATA_QUALITY, workload="dq"), 0))
    h.service.handle_finding(seen(finding("2.00", workload="cheap"), 0))
    # THEN both are stored and nobody is alerted
    assert h.sent() == []
    assert h.store.get(finding(None, kind=WasteKind.DATA_QUALITY, workload="dq").fingerprint) is not None
    assert h.store.get(finding("2.00", workload="cheap").fingerprint) is not None


def test_lifecycle_scans_that_could_judge_nothing_never_resolve_waste(h: Harness) -> None:
    # GIVEN an alerted finding
    f = finding("34.03")
    h.service.handle_finding(seen(f, 0))
    h.sent()
    # WHEN three later scans could judge nothing (no telemetry / one sample), then three that did not see the pod's subject
    for n in (1, 2, 3):
        h.service.handle_scan_completed(ScanCompleted(scan_id=f"scan-{n}", cluster="c1", scheduled_time=T0 + n * SCAN,
                                                      judged=False))
    after_blind = h.store.get(f.fingerprint)
    # THEN it stays open with no miss counted and nobody is told it was "saved"
    assert after_blind is not None and after_blind.state is FindingState.OPEN and after_blind.missed_scans == 0
    assert h.sent() == []


def test_lifecycle_subject_without_a_verdict_is_not_a_miss(h: Harness) -> None:
    # GIVEN an alerted finding about pod ml/trainer-0
    f = finding("20.00")
    f = f.model_copy(update={"subject": f.subject.model_copy(update={"pod": "trainer-0"})})
    h.service.handle_finding(seen(f, 0))
    h.sent()
    # WHEN three scans gave that pod no verdict (e.g. partial coverage), then three scans judged it and did not see it
    for n in (1, 2, 3):
        h.service.handle_scan_completed(ScanCompleted(scan_id=f"scan-{n}", cluster="c1", scheduled_time=T0 + n * SCAN,
                                                      unjudged=("ml/trainer-0",)))
    kept = h.store.get(f.fingerprint)
    for n in (4, 5, 6):
        h.service.handle_scan_completed(completed(n))
    resolved = h.store.get(f.fingerprint)
    # THEN only the judged scans count: open after the first three, resolved after the next three
    assert kept is not None and kept.state is FindingState.OPEN and kept.missed_scans == 0
    assert resolved is not None and resolved.state is FindingState.RESOLVED


class RacingAlerts(MemoryQueue):
    """An alerts queue whose consumer records a delivery on the record as soon as an alert is queued (notify racing
    the lifecycle's clear of its outbox): the record's version moves on between the send and the clear."""

    def __init__(self, store: SqliteFindingStore) -> None:
        super().__init__("alerts")
        self.store = store

    def send(self, messages):  # type: ignore[no-untyped-def]
        super().send(messages)
        for m in messages:
            record = self.store.get(m.fingerprint)
            assert record is not None
            key = f"{m.fingerprint}:{m.action.value}:{m.scan_id}:chat"
            moved = record.model_copy(update={"delivery_keys": (*record.delivery_keys, key), "version": record.version + 1})
            assert self.store.update(moved, expected_version=record.version)


@pytest.mark.parametrize("batched", [False, True])
def test_lifecycle_resolved_record_whose_clear_lost_a_race_keeps_no_outbox(batched: bool) -> None:
    # GIVEN an alerted finding and an alerts consumer that writes the record right after each alert is queued
    store = SqliteFindingStore(":memory:")
    alerts = RacingAlerts(store)
    service = LifecycleService(store=store, alerts=alerts, tickets=None, settings=LifecycleSettings(), clock=FixedClock())
    f = finding("60.00")
    # (batched: the Lambda clears a batch's outboxes together, `LifecycleBatch.close`; else each as it is sent)
    batch = service.begin(deferred=batched)
    service.handle_finding(seen(f, 0), batch)
    batch.close()
    # WHEN three scans miss it (the third resolves it and alerts RESOLVED), each clear losing the race to that write
    for n in (1, 2, 3):
        batch = service.begin(deferred=batched)
        service.handle_scan_completed(completed(n), batch)
        batch.close()
    # THEN the resolved record's outbox is empty (a resolved record is never revisited), the delivery key kept
    record = store.get(f.fingerprint)
    assert record is not None and record.state is FindingState.RESOLVED
    assert record.outbox_json == ""
    assert any(k.endswith(":resolved:scan-3:chat") for k in record.delivery_keys)
    assert [AlertMessage.model_validate_json(b).action for b in alerts.drain()] == [AlertAction.NEW, AlertAction.RESOLVED]


# -- heartbeat: a sighting that changes nothing writes nothing ------------------------------------------------------
class CountingStore(SqliteFindingStore):
    """The SQLite store, counting the record writes it receives."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.writes = 0

    def put_new(self, record: FindingRecord) -> bool:
        self.writes += 1
        return super().put_new(record)

    def update(self, record: FindingRecord, *, expected_version: int) -> bool:
        self.writes += 1
        return super().update(record, expected_version=expected_version)


def counted(**settings: object) -> tuple[Harness, CountingStore]:
    h = Harness(**settings)
    store = CountingStore()
    h.store = store
    h.service.store = store
    return h, store


def test_lifecycle_unchanged_sightings_are_written_once_per_half_window_and_keep_the_money_exact() -> None:
    # GIVEN a $48/day finding with a 1 h evidence window, seen every 10 minutes for 2 hours, once with a 1 h heartbeat
    # (capped at half the window: 30 min) and once writing every sighting (the default)
    beat, beat_store = counted(heartbeat=timedelta(hours=1))
    every, every_store = counted()
    # WHEN both apply the same 13 sightings
    for n in range(13):
        for harness in (beat, every):
            harness.service.handle_finding(seen(finding("48.00", at=T0 + n * SCAN), n))
    # THEN the heartbeat store took a write every third sighting (0, 3, 6, 9, 12: 5 writes, not 13), told nobody twice,
    # and its ledger after the last write holds exactly the money of writing every sighting: 1 h + 2 h at $48/day
    assert (beat_store.writes, every_store.writes) == (5 + 1, 13 + 1)  # +1: the outbox clear after the NEW alert
    fp = finding().fingerprint
    a, b = beat_store.get(fp), every_store.get(fp)
    assert a is not None and b is not None
    assert a.cumulative_usd == b.cumulative_usd == Decimal(48) * 180 / 1440
    assert a.last_seen == T0 + 12 * SCAN and [x.action for x in beat.sent()] == [AlertAction.NEW]


def test_lifecycle_a_sighting_that_changes_the_cost_is_written_at_once() -> None:
    # GIVEN a $48/day finding written at T0, with a 1 h heartbeat
    h, store = counted(heartbeat=timedelta(hours=1))
    h.service.handle_finding(seen(finding("48.00"), 0))
    writes = store.writes
    # WHEN the next scan, 10 minutes later, prices it at $50/day (under the WORSE share: nothing to tell)
    h.service.handle_finding(seen(finding("50.00", at=T0 + SCAN), 1))
    # THEN the sighting is written (its cost and ledger changed)
    record = store.get(finding().fingerprint)
    assert store.writes == writes + 1 and record is not None and record.usd_per_day == Decimal("50.00")
    assert record.last_scan_id == "scan-1"


# -- a completion in parts -----------------------------------------------------------------------------------------
def parts_of(n: int, parts: list[tuple[str, ...]], *, shard: int = 0, shard_count: int = 1) -> list[ScanCompleted]:
    return [ScanCompleted(scan_id=f"scan-{n}", cluster="c1", scheduled_time=T0 + n * SCAN, fingerprints=fps,
                          part=i, parts=len(parts), shard=shard, shard_count=shard_count) for i, fps in enumerate(parts)]


def test_lifecycle_resolves_by_absence_only_once_every_part_is_in_and_a_part_counted_twice_completes_nothing() -> None:
    # GIVEN two open findings (a, b) alerted by scan 0; resolution after one missed scan
    h = Harness(resolve_after_missed_scans=1)
    a, b = finding(workload="a"), finding(workload="b")
    for f in (a, b):
        h.service.handle_finding(seen(f, 0))
    h.sent()
    # WHEN scan 1 completes in two parts — part 0 (seeing a) delivered twice — then part 1 (seeing nothing more)
    part0, part1 = parts_of(1, [(a.fingerprint,), ()])
    h.service.handle_scan_completed(part0)
    h.service.handle_scan_completed(part0)
    before = {f.fingerprint: h.store.get(f.fingerprint) for f in (a, b)}
    h.service.handle_scan_completed(part1)
    h.service.handle_scan_completed(part1)  # the completing part redelivered: the same resolution, told once
    # THEN nothing was resolved before the last part; then only b (absent from every part) is, with one RESOLVED
    assert all(r is not None and r.state is FindingState.OPEN and r.missed_scans == 0 for r in before.values())
    states = {f.fingerprint: h.store.get(f.fingerprint).state for f in (a, b)}  # type: ignore[union-attr]
    assert states == {a.fingerprint: FindingState.OPEN, b.fingerprint: FindingState.RESOLVED}
    assert [(x.action, x.fingerprint) for x in h.sent()] == [(AlertAction.RESOLVED, b.fingerprint)]


def test_lifecycle_a_shard_that_never_completes_leaves_every_finding_open() -> None:
    # GIVEN two open findings; a scan over 2 shards of which only shard 0 completes (seeing neither finding)
    h = Harness(resolve_after_missed_scans=1)
    for f in (finding(workload="a"), finding(workload="b")):
        h.service.handle_finding(seen(f, 0))
    h.sent()
    # WHEN shard 0's completion (all its parts) is applied and shard 1's never arrives
    for part in parts_of(1, [(), ()], shard=0, shard_count=2):
        h.service.handle_scan_completed(part)
    # THEN nothing is resolved by absence, nobody is told
    assert h.store.open_fingerprints("c1") == sorted(f.fingerprint for f in (finding(workload="a"), finding(workload="b")))
    assert h.sent() == []
    # AND once shard 1 completes too, the scan is whole and both are resolved
    for part in parts_of(1, [()], shard=1, shard_count=2):
        h.service.handle_scan_completed(part)
    assert h.store.open_fingerprints("c1") == [] and {x.action for x in h.sent()} == {AlertAction.RESOLVED}

"""Unit tests: the lifecycle's seams with delivery — ticket follow-ups (WORSE/RESOLVED to the tickets
queue) and the `gpuwaste.io/snooze-until` annotation — over the SQLite store and in-memory queues."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from gpuwaste.models.findings import Finding
from gpuwaste.models.lifecycle import FindingState
from gpuwaste.models.messages import AlertAction
from tests.unit.test_lifecycle import SCAN, T0, Harness, completed, finding, seen

SNOOZE = "gpuwaste.io/snooze-until"


def with_ticket(h: Harness, fingerprint: str, key: str = "OPS-7") -> None:
    """Store a ticket key on the record, as create_tickets does after opening the ticket."""
    record = h.store.get(fingerprint)
    assert record is not None
    assert h.store.update(record.model_copy(update={"ticket_key": key, "version": record.version + 1}),
                          expected_version=record.version)


def annotated(f: Finding, value: str, *, on_namespace: bool = False) -> Finding:
    field = "namespace_annotations" if on_namespace else "annotations"
    return f.model_copy(update={"subject": f.subject.model_copy(update={field: {SNOOZE: value}})})


def test_lifecycle_worse_finding_with_ticket_goes_to_the_tickets_queue_too() -> None:
    # GIVEN an alerted $50/day finding whose ticket OPS-7 is recorded
    h = Harness()
    f = finding("50.00")
    h.service.handle_finding(seen(f, 0))
    h.sent(), h.ticketed()
    with_ticket(h, f.fingerprint)
    # WHEN it is seen again at $80/day (60 % worse)
    h.service.handle_finding(seen(finding("80.00", at=T0 + SCAN), 1))
    # THEN the WORSE alert goes to Slack and to the tickets queue, carrying the ticket key
    assert [a.action for a in h.sent()] == [AlertAction.WORSE]
    tickets = h.ticketed()
    assert [(t.action, t.ticket_key) for t in tickets] == [(AlertAction.WORSE, "OPS-7")]


def test_lifecycle_worse_finding_without_ticket_sends_nothing_to_tickets() -> None:
    # GIVEN an alerted $50/day finding without a ticket
    h = Harness()
    f = finding("50.00")
    h.service.handle_finding(seen(f, 0))
    h.sent(), h.ticketed()
    # WHEN it gets 60 % worse
    h.service.handle_finding(seen(finding("80.00", at=T0 + SCAN), 1))
    # THEN only Slack hears about it
    assert [a.action for a in h.sent()] == [AlertAction.WORSE]
    assert h.ticketed() == []


def test_lifecycle_resolved_finding_with_ticket_goes_to_the_tickets_queue() -> None:
    # GIVEN an alerted finding with ticket OPS-7
    h = Harness()
    f = finding("60.00")
    h.service.handle_finding(seen(f, 0))
    h.sent(), h.ticketed()
    with_ticket(h, f.fingerprint)
    # WHEN three scans miss it (the third completion delivered twice)
    for n in (1, 2, 3, 3):
        h.service.handle_scan_completed(completed(n))
    # THEN RESOLVED goes to Slack and once to the tickets queue, with the saving and the key
    assert [a.action for a in h.sent()] == [AlertAction.RESOLVED]
    tickets = h.ticketed()
    assert [(t.action, t.ticket_key, t.saved_usd_per_day) for t in tickets] == [(AlertAction.RESOLVED, "OPS-7", "60.00")]


def test_lifecycle_outbox_keeps_the_ticket_destination_of_a_worse_alert() -> None:
    # GIVEN a ticketed finding whose WORSE decision could not be sent (the tickets queue failed)
    h = Harness()
    f = finding("50.00")
    h.service.handle_finding(seen(f, 0))
    h.sent(), h.ticketed()
    with_ticket(h, f.fingerprint)

    class Broken:
        def send_alerts(self, messages: object) -> None:
            raise RuntimeError("queue down")

    good_tickets = h.service.tickets
    h.service.tickets = Broken()  # type: ignore[assignment]
    with pytest.raises(RuntimeError):
        h.service.handle_finding(seen(finding("80.00", at=T0 + SCAN), 1))
    h.sent()
    record = h.store.get(f.fingerprint)
    assert record is not None and record.outbox_json
    # WHEN the message is redelivered with the queue back
    h.service.tickets = good_tickets
    h.service.handle_finding(seen(finding("80.00", at=T0 + SCAN), 1))
    # THEN the outbox recorded where each message goes: the WORSE reaches the tickets queue again
    assert {e["to"] for e in json.loads(record.outbox_json)} == {"alerts", "tickets"}
    assert [t.action for t in h.ticketed()] == [AlertAction.WORSE]


def test_lifecycle_snooze_annotation_stores_but_does_not_alert_until_then() -> None:
    # GIVEN a $500/day finding whose workload is annotated snooze-until T0 + 1 day
    h = Harness()
    until = T0 + timedelta(days=1)
    f = annotated(finding("500.00"), until.isoformat())
    # WHEN it is seen now and an hour later
    h.service.handle_finding(seen(f, 0))
    h.service.handle_finding(seen(annotated(finding("500.00", at=T0 + timedelta(hours=1)), until.isoformat()), 1))
    # THEN it is stored with the snooze, and nobody is alerted nor ticketed (even above the ticket cost)
    record = h.store.get(f.fingerprint)
    assert record is not None and record.state is FindingState.OPEN and record.snoozed_until == until
    assert h.sent() == [] and h.ticketed() == []


def test_lifecycle_snooze_annotation_over_alerts_new_once() -> None:
    # GIVEN a finding snoozed by annotation until T0 + 1 day, seen while snoozed
    h = Harness()
    until = (T0 + timedelta(days=1)).isoformat()
    h.service.handle_finding(seen(annotated(finding("50.00"), until), 0))
    # WHEN it is still seen after the snooze ends (twice)
    later = T0 + timedelta(days=1, minutes=10)
    h.service.handle_finding(seen(annotated(finding("50.00", at=later), until), 1))
    h.service.handle_finding(seen(annotated(finding("50.00", at=later + SCAN), until), 2))
    # THEN the owner is told once, as NEW, because the snooze ended
    alerts = h.sent()
    assert [(a.action, a.reason) for a in alerts] == [(AlertAction.NEW, "snooze ended")]


def test_lifecycle_relative_snooze_counts_from_first_sighting() -> None:
    # GIVEN a namespace annotated "1h" (relative), the finding first seen at T0
    h = Harness()
    h.service.handle_finding(seen(annotated(finding("50.00"), "1h", on_namespace=True), 0))
    # WHEN it is seen at T0 + 30 min and then at T0 + 70 min, still annotated "1h"
    h.service.handle_finding(seen(annotated(finding("50.00", at=T0 + timedelta(minutes=30)), "1h", on_namespace=True), 1))
    quiet = h.sent()
    h.service.handle_finding(seen(annotated(finding("50.00", at=T0 + timedelta(minutes=70)), "1h", on_namespace=True), 2))
    # THEN it stays silent for the hour after first sight, then alerts (the snooze does not move with each scan)
    assert quiet == []
    assert [a.action for a in h.sent()] == [AlertAction.NEW]


def test_lifecycle_snooze_annotation_added_later_silences_reminders() -> None:
    # GIVEN an alerted finding
    h = Harness(reminder_after=timedelta(hours=1))
    h.service.handle_finding(seen(finding("50.00"), 0))
    h.sent()
    # WHEN the owner annotates it snoozed for a week, and it is seen again past the reminder time
    until = datetime(2026, 1, 12, tzinfo=UTC).isoformat()
    h.service.handle_finding(seen(annotated(finding("50.00", at=T0 + timedelta(hours=2)), until), 1))
    # THEN no reminder goes out and the record carries the snooze
    assert h.sent() == []
    record = h.store.get(finding().fingerprint)
    assert record is not None and record.snoozed_until == datetime(2026, 1, 12, tzinfo=UTC)

"""Service: lifecycle alerts → owner notices (alert, digest, thread update, resolution), delivered once per sink.

Sinks: every configured chat sink (`Notifier`, named by `Notifier.name`) gets each alert. Idempotency: every
delivery has a key `fingerprint:action:scan_id:<sink>`. The key (and, for a new alert, the posted message's
reference) is written to the finding's lifecycle record right after the sink accepts each part of the message
(not after the whole digest), before the queue message is acknowledged; a redelivered alert whose key is recorded
for a sink is skipped for that sink. So a failure of one sink sends the message back through the queue, and the
retry posts only to the sinks that have not accepted it yet (one sink's outage never re-posts to another). A
redelivered alert whose key is not recorded (the process died, or the Lambda timed out, between the sink's
acceptance and the write) is first looked up in the sink (`Notifier.find_posted`): found, it is recorded instead
of posted again. That holds for every kind of post: a NEW alert or digest is found among the channel's top-level
messages by scan, kind and findings; a thread reply (WORSE, REMINDER), an edit and a resolution carry their
delivery key (`Notice.delivery_key`, in the message's metadata) and are found in the original's thread by it.

Time: with `time_left` set (a Lambda's remaining seconds), a group is not started when less than
`DEFER_RESERVE_S` is left: it fails with DeliveryError and comes back through the queue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from gpuwaste.errors import DeliveryError, StoreError
from gpuwaste.models.lifecycle import FindingRecord, FindingState
from gpuwaste.models.messages import AlertAction, AlertMessage, read_alert_body, salvage
from gpuwaste.models.notices import (
    MessageRef,
    Notice,
    NoticeItem,
    NoticeKind,
    PostedMessage,
    Route,
    message_for,
)
from gpuwaste.models.settings import DeliverySettings
from gpuwaste.ports import FindingStore, Notifier
from gpuwaste.services.delivery_records import (  # re-exported: where the other services import them
    MAX_DELIVERY_KEYS,
    _first_scan,
    decimal_or_zero,
    delivery_key,
    finding_from_record,
    record_deliveries,
    record_delivery,
    ticket_delivery_key,
)
from gpuwaste.services.routing import links_for, route_for, snoozed_until, ticket_url_for

logger = logging.getLogger(__name__)

EXPECTED = "expected"
#: Seconds of an invocation's remaining time under which no new delivery group is started.
DEFER_RESERVE_S = 15.0


@dataclass
class DeliveryReport:
    """What one `deliver` call did.

    Attributes:
        posted: messages posted or edited. skipped: alerts already delivered to every sink, snoozed, or not for chat.
        failed: (alert, error) for alerts whose delivery failed (their queue messages must come back).
    """

    posted: list[PostedMessage] = field(default_factory=list)
    skipped: list[AlertMessage] = field(default_factory=list)
    failed: list[tuple[AlertMessage, Exception]] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)


@dataclass
class _Group:
    alerts: list[AlertMessage]
    done: bool = False
    error: Exception | None = None
    redelivered: bool = False


class DeliveryPlan:
    """A batch of alerts grouped for delivery (digests), delivered group by group on demand.

    `deliver(alert)` delivers the alert's whole group the first time any member is asked for and
    re-raises the group's error for every member, so a queue batch processor reports each failed record.
    """

    def __init__(self, service: NotifyService, groups: list[list[AlertMessage]],
                 redelivered: Iterable[tuple[str, str, str]] = ()) -> None:
        self._service = service
        again = set(redelivered)
        self._groups = [_Group(g, redelivered=any(self._key(a) in again for a in g)) for g in groups]
        self._index = {self._key(a): grp for grp in self._groups for a in grp.alerts}
        self.report = DeliveryReport()

    @staticmethod
    def _key(alert: AlertMessage) -> tuple[str, str, str]:
        return (alert.fingerprint, alert.action.value, alert.scan_id)

    def deliver(self, alert: AlertMessage) -> None:
        """Deliver the group holding `alert` (once).

        Raises:
            DeliveryError / PermanentDeliveryError / StoreError: the group's delivery failed.
        """
        group = self._index.get(self._key(alert))
        if group is None:
            group = _Group([alert])
            self._index[self._key(alert)] = group
        if not group.done:
            group.done = True
            try:
                self._service.deliver_group(group.alerts, self.report, redelivered=group.redelivered)
            except Exception as exc:  # every member of the group re-raises it below
                group.error = exc
                self.report.failed.extend((a, exc) for a in group.alerts)
        if group.error is not None:
            raise group.error

    def deliver_all(self) -> DeliveryReport:
        """Deliver every group; failures are collected in the report, not raised."""
        for group in self._groups:
            for alert in group.alerts:
                try:
                    self.deliver(alert)
                except Exception:  # recorded in report.failed by deliver()
                    logger.warning("delivery failed", extra={"fingerprint": alert.fingerprint[:16]})
                break
        return self.report


class NotifyService:
    """Turns lifecycle alerts into notices for their owners, delivered to every configured chat sink.

    Args:
        notifier / notifiers: the chat sinks (chat tools, webhooks, the terminal); each alert goes to each.
        store: the lifecycle store (idempotency keys, message refs); None disables both (dry runs).
        settings: routing, links and digest threshold.
        now: the clock (UTC).
    """

    def __init__(
        self,
        *,
        notifier: Notifier | None = None,
        notifiers: Sequence[Notifier] = (),
        store: FindingStore | None,
        settings: DeliverySettings,
        now: Callable[[], datetime],
        time_left: Callable[[], float] | None = None,
    ) -> None:
        sinks = [n for n in (notifier, *notifiers) if n is not None]
        if not sinks:
            raise ValueError("NotifyService needs at least one notifier")
        names = [n.name for n in sinks]
        if len(set(names)) != len(names):
            raise ValueError(f"two sinks share a name: {names}")
        self.notifiers: tuple[Notifier, ...] = tuple(sinks)
        self.store = store
        self.settings = settings
        self.now = now
        self.time_left = time_left

    @property
    def notifier(self) -> Notifier:
        """The first sink (the one whose channel routes digests)."""
        return self.notifiers[0]

    # -- planning ----------------------------------------------------------------------------------------
    def plan(self, alerts: Sequence[AlertMessage], *, redelivered: Iterable[AlertMessage] = ()) -> DeliveryPlan:
        """Group alerts: NEW alerts of one owner (channel + team) and one scan become one digest at `digest_threshold` or more.

        `redelivered`: alerts whose delivery may have been tried before (an SQS receive count above 1, a local
        outbox entry with attempts): their group looks for an accepted post before posting.
        """
        groups: list[list[AlertMessage]] = []
        new_by_route: dict[tuple[str, str, str], list[AlertMessage]] = {}
        for alert in alerts:
            if alert.action is AlertAction.NEW:
                route = route_for(alert.finding, self.settings)
                new_by_route.setdefault((route.channel, route.team or "", alert.scan_id), []).append(alert)
            else:
                groups.append([alert])
        for members in new_by_route.values():
            if len(members) >= self.settings.digest_threshold:
                groups.append(members)
            else:
                groups.extend([m] for m in members)
        return DeliveryPlan(self, groups, redelivered=(DeliveryPlan._key(a) for a in redelivered))

    def plan_bodies(self, bodies: Iterable[str], *, redelivered: Iterable[str] = ()) -> DeliveryPlan:
        """`plan` over raw queue bodies — single alerts or packed `AlertBatch`es — (`redelivered`: bodies received
        before); unreadable bodies (and the bad alerts of a batch) are left out (the batch processor fails them)."""
        again = set(redelivered)
        alerts, repeated = [], []
        for body in bodies:
            try:
                items = read_alert_body(body)
            except ValidationError:
                rebuilt, _ = salvage(body)  # a packed batch with bad alerts: plan the good ones
                if rebuilt is None:
                    continue
                items = read_alert_body(rebuilt)
            alerts.extend(items)
            if body in again:
                repeated.extend(items)
        return self.plan(alerts, redelivered=repeated)

    def deliver(self, alerts: Sequence[AlertMessage]) -> DeliveryReport:
        """Plan and deliver a batch (the local chain); failures are in the report."""
        return self.plan(alerts).deliver_all()

    # -- delivery ----------------------------------------------------------------------------------------
    def _record(self, fingerprint: str) -> FindingRecord | None:
        return self.store.get(fingerprint) if self.store is not None else None

    def _silenced(self, alert: AlertMessage, record: FindingRecord | None, now: datetime) -> bool:
        if alert.action in (AlertAction.RESOLVED, AlertAction.ESCALATE):
            return False
        if record is not None:
            if record.acknowledged and record.acknowledged.startswith(EXPECTED):
                return True
            if record.snoozed_until is not None and record.snoozed_until > now:
                return True
        return snoozed_until(alert.finding, self.settings, now=now, anchor=alert.first_seen) is not None

    def _item(self, alert: AlertMessage, record: FindingRecord | None) -> NoticeItem:
        resolved = alert.action is AlertAction.RESOLVED
        return NoticeItem(
            fingerprint=alert.fingerprint,
            finding=alert.finding,
            first_seen=alert.first_seen,
            cumulative_usd=decimal_or_zero(alert.cumulative_usd),
            links=links_for(alert.finding, self.settings),
            resolved=resolved,
            resolved_at=(record.resolved_at if record and record.resolved_at else self.now()) if resolved else None,
            saved_usd_per_day=decimal_or_zero(alert.saved_usd_per_day) if alert.saved_usd_per_day else None,
            ticket_key=(key := alert.ticket_key or (record.ticket_key if record else None)),
            ticket_url=ticket_url_for(key, self.settings),
        )

    def deliver_group(self, alerts: Sequence[AlertMessage], report: DeliveryReport, *, redelivered: bool = False) -> None:
        """Deliver one planned group (one digest, or one alert) to every sink that has not accepted it yet.

        A sink's failure does not stop the others: each sink records what it accepted, then the failure is raised
        (a retryable one first), so the queue brings the group back and only the sinks that failed are tried again.

        Raises:
            DeliveryError: a sink failed transiently (the alerts must be retried through the queue).
            PermanentDeliveryError: a sink refused (bad credentials or payload).
            StoreError: the delivery could not be recorded (retrying is safe: a sink is not called twice
                for keys already recorded).
        """
        if self.time_left is not None and self.time_left() < DEFER_RESERVE_S:
            raise DeliveryError(f"deferred: {self.time_left():.0f} s left in this invocation; the queue retries it")
        now = self.now()
        known = self.store.get_many([a.fingerprint for a in alerts]) if self.store is not None else {}
        told: list[tuple[AlertMessage, FindingRecord | None]] = []
        for alert in alerts:
            record = known.get(alert.fingerprint)
            if alert.action is AlertAction.ESCALATE or self._silenced(alert, record, now):
                report.skipped.append(alert)
            else:
                told.append((alert, record))
        errors: list[Exception] = []
        done_everywhere = {a.fingerprint for a, _ in told}
        for notifier in self.notifiers:
            pending = [(a, r) for a, r in told if r is None or delivery_key(a, notifier.name) not in r.delivery_keys]
            done_everywhere -= {a.fingerprint for a, _ in pending}
            if not pending:
                continue
            try:
                self._deliver_to(notifier, pending, report, now, redelivered=redelivered)
            except Exception as exc:  # the other sinks still get it; raised below
                if len(self.notifiers) == 1:
                    raise
                logger.warning("delivery to a sink failed; the others go on", extra={"sink": notifier.name,
                                                                                      "error": str(exc)})
                errors.append(exc)
        report.skipped.extend(a for a, _ in told if a.fingerprint in done_everywhere)
        if errors:
            raise next((e for e in errors if isinstance(e, (DeliveryError, StoreError))), errors[0])

    def _deliver_to(self, notifier: Notifier, pending: list[tuple[AlertMessage, FindingRecord | None]],
                    report: DeliveryReport, now: datetime, *, redelivered: bool) -> None:
        first, first_record = pending[0]
        route = route_for(first.finding, self.settings)
        mention = notifier.user_id(route.user_email) if route.user_email else None
        if first.action is AlertAction.NEW:
            kind = NoticeKind.DIGEST if len(pending) > 1 else NoticeKind.ALERT
            notice = Notice(kind=kind, route=route, items=tuple(self._item(a, r) for a, r in pending),
                            scan_id=first.scan_id, reason=first.reason, mention=mention)
            self._post_new(notifier, notice, pending, report, now, redelivered=redelivered)
        elif first.action in (AlertAction.WORSE, AlertAction.REMINDER):
            self._post_update(notifier, first, first_record, route, mention, report, now, redelivered=redelivered)
        else:
            self._resolve(notifier, first, first_record, route, report, redelivered=redelivered)

    def _found(self, notifier: Notifier, notice: Notice, alert: AlertMessage, reply_to: MessageRef | None,
               changes: dict[str, Any], report: DeliveryReport) -> bool:
        """A redelivered single-alert notice the sink accepted before (`Notifier.find_posted`): recorded, True."""
        found = notifier.find_posted(notice, reply_to=reply_to)
        if not found:
            return False
        logger.info("already posted before a crash or timeout; recorded, not posted again",
                    extra={"findings": 1, "sink": notifier.name, "action": alert.action.value})
        if reply_to is None and "message" in changes:
            changes = {**changes, "message": found[0].ref()}
        record_delivery(self.store, alert.fingerprint, delivery_key(alert, notifier.name), changes)
        report.skipped.append(alert)
        return True

    @staticmethod
    def _ref(notifier: Notifier, alert: AlertMessage, record: FindingRecord | None) -> MessageRef | None:
        """The finding's earlier message in this sink (the stored record's, else the one the alert carries)."""
        return (message_for(record.messages, notifier.name) if record else None) or \
            message_for(alert.messages, notifier.name)

    def _post_new(
        self, notifier: Notifier, notice: Notice, pending: list[tuple[AlertMessage, FindingRecord | None]],
        report: DeliveryReport, now: datetime, *, redelivered: bool = False,
    ) -> None:
        by_fp = {a.fingerprint: a for a, _ in pending}
        # read by deliver_group: the first sink writes them on without a second read (a later sink's writes would
        # find them changed by the first one's, so it reads them again)
        known = {a.fingerprint: r for a, r in pending} if notifier is self.notifiers[0] else {}

        def record(message: PostedMessage) -> None:
            ref = message.ref()
            if len(message.fingerprints) > 1:  # a digest: its siblings are found by key when it is edited
                ref = ref.model_copy(update={"carries": tuple(message.fingerprints)})
            changes = {"message": ref, "last_alert_at": now}
            entries = [(fp, delivery_key(by_fp[fp], notifier.name), changes) for fp in message.fingerprints]
            record_deliveries(self.store, entries, known)
            for fp in message.fingerprints:
                known.pop(fp, None)  # written: its version moved on (a later part or sink re-reads it)

        if redelivered:
            found = notifier.find_posted(notice)
            seen: set[str] = set()
            for message in found:
                record(message)
                seen.update(message.fingerprints)
            if seen:
                logger.info("already posted before a crash or timeout; recorded, not posted again",
                            extra={"findings": len(seen), "sink": notifier.name})
                rest = tuple(i for i in notice.items if i.fingerprint not in seen)
                if not rest:
                    return
                notice = notice.model_copy(update={"items": rest})
        report.notices.append(notice)
        # each part is recorded as soon as the sink accepted it: a failure on a later part never re-posts it
        posted = notifier.post(notice, on_posted=record)
        report.posted.extend(posted)

    def _post_update(
        self, notifier: Notifier, alert: AlertMessage, record: FindingRecord | None, route: Route,
        mention: str | None, report: DeliveryReport, now: datetime, *, redelivered: bool = False,
    ) -> None:
        ref = self._ref(notifier, alert, record)
        default_reason = "Worse" if alert.action is AlertAction.WORSE else "Reminder"
        item = self._item(alert, record)
        key = delivery_key(alert, notifier.name)
        changes: dict[str, Any] = {"last_alert_at": now}
        if ref is not None:  # a reply in the original's conversation (a sink without threads: next to it)
            notice = Notice(kind=NoticeKind.UPDATE, route=route, items=(item,), scan_id=alert.scan_id,
                            reason=alert.reason or default_reason, mention=mention, delivery_key=key)
            if redelivered and self._found(notifier, notice, alert, ref, changes, report):
                return
            posted = notifier.post(notice, reply_to=ref, on_posted=lambda _m: record_delivery(
                self.store, alert.fingerprint, key, changes))
        else:  # the original was never posted (or was lost): post a full alert and remember it
            notice = Notice(kind=NoticeKind.ALERT, route=route, items=(item,), scan_id=alert.scan_id,
                            reason=alert.reason or default_reason, mention=mention, delivery_key=key)
            if redelivered and self._found(notifier, notice, alert, None, {**changes, "message": None}, report):
                return
            posted = notifier.post(notice)
            changes = {"last_alert_at": now, "message": posted[0].ref()} if posted else {"last_alert_at": now}
            record_delivery(self.store, alert.fingerprint, key, changes)
        report.notices.append(notice)
        report.posted.extend(posted)

    def _siblings(self, notifier: Notifier, record: FindingRecord, ref: MessageRef) -> list[FindingRecord]:
        """Records carried by the same message of this sink (a digest), this one included."""
        if self.store is None or not ref.message_id:
            return [record]
        found = []
        if ref.carries:  # the digest's findings, by key (O(its size), whatever the fleet's size)
            candidates = list(self.store.get_many([fp for fp in ref.carries if fp != record.fingerprint]).values())
        else:  # a reference stored before `carries`: the history since its first sighting, as before
            candidates = self.store.history(since=record.first_seen - timedelta(days=1), until=self.now())
        for r in candidates:
            theirs = message_for(r.messages, notifier.name)
            if theirs is not None and (theirs.destination, theirs.message_id) == (ref.destination, ref.message_id):
                found.append(r)
        if all(r.fingerprint != record.fingerprint for r in found):
            found.append(record)
        return sorted(found, key=lambda r: r.fingerprint)

    def _resolve(self, notifier: Notifier, alert: AlertMessage, record: FindingRecord | None, route: Route,
                 report: DeliveryReport, *, redelivered: bool = False) -> None:
        ref = self._ref(notifier, alert, record)
        item = self._item(alert, record)
        key = delivery_key(alert, notifier.name)
        if ref is None or not (notifier.edits and ref.message_id):
            # never posted, or a sink that cannot edit: a new message (next to the original where there is one)
            notice = Notice(kind=NoticeKind.RESOLVED, route=route, items=(item,), scan_id=alert.scan_id,
                            interactive=False, delivery_key=key)
            if redelivered and self._found(notifier, notice, alert, ref, {}, report):
                return
            posted = notifier.post(notice, reply_to=ref)
        else:
            items = [item]
            if record is not None:
                items += [i for sib in self._siblings(notifier, record, ref)
                          if sib.fingerprint != alert.fingerprint and (i := self._stored_item(sib)) is not None]
            kind = NoticeKind.DIGEST if len(items) > 1 else NoticeKind.RESOLVED
            notice = Notice(kind=kind, route=route, items=tuple(items), scan_id=alert.scan_id, delivery_key=key)
            # an edit accepted before a crash shows the finding resolved already (its metadata says so)
            if redelivered and self._found(notifier, notice, alert, ref, {}, report):
                return
            posted = [notifier.update(notice, message=ref)]
        report.notices.append(notice)
        report.posted.extend(posted)
        record_delivery(self.store, alert.fingerprint, key)

    def _stored_item(self, record: FindingRecord) -> NoticeItem | None:
        """A finding of a message as its lifecycle record has it now (None when its stored finding is unreadable)."""
        finding = finding_from_record(record)
        if finding is None:
            return None
        return NoticeItem(
            fingerprint=record.fingerprint, finding=finding, first_seen=record.first_seen,
            cumulative_usd=record.cumulative_usd, links=links_for(finding, self.settings),
            resolved=record.state is FindingState.RESOLVED, resolved_at=record.resolved_at,
            saved_usd_per_day=record.saved_usd_per_day, ticket_key=record.ticket_key,
            ticket_url=ticket_url_for(record.ticket_key, self.settings),
        )

    def show_tickets(self, fingerprints: Iterable[str]) -> list[PostedMessage]:
        """Edit each sink's message of these findings in place so it shows their tickets (a chat sink edits the
        same message: the alert's Ticket field, the digest line's key and no "Create ticket" button), once per
        finding, ticket and sink: the key `ticket_delivery_key` is recorded on every finding the edit shows with its
        ticket, so calling this again (a rerun, a redelivered batch) edits nothing. A digest carrying several of the
        findings is edited once. Sinks that cannot edit (Teams, webhooks) and findings without a ticket or a message
        are left alone. Returns the messages edited.

        Raises:
            DeliveryError / PermanentDeliveryError: the sink failed (what was edited before is recorded).
            StoreError: an edit could not be recorded.
        """
        if self.store is None:
            return []
        records = self.store.get_many(list(dict.fromkeys(fingerprints)))
        edited: list[PostedMessage] = []
        for notifier in self.notifiers:
            if not notifier.edits:
                continue
            done: set[tuple[str, str]] = set()
            for fp in sorted(records):
                record = records[fp]
                ref = message_for(record.messages, notifier.name)
                if (not record.ticket_key or ref is None or not ref.message_id
                        or ticket_delivery_key(record, notifier.name) in record.delivery_keys
                        or (ref.destination, ref.message_id) in done):
                    continue
                done.add((ref.destination, ref.message_id))
                shown = self._siblings(notifier, record, ref)
                items = tuple(i for r in shown if (i := self._stored_item(r)) is not None)
                if not items:
                    continue
                kind = NoticeKind.DIGEST if len(items) > 1 or ref.carries else NoticeKind.ALERT
                notice = Notice(kind=kind, route=route_for(items[0].finding, self.settings), items=items,
                                scan_id=_first_scan(record, notifier.name),
                                interactive=not all(i.resolved for i in items),
                                delivery_key=ticket_delivery_key(record, notifier.name))
                # a run that died between the sink's acceptance and the record: the message already carries this
                # edit's key (its metadata), so it is recorded, not edited again
                if not notifier.find_posted(notice, reply_to=ref):
                    edited.append(notifier.update(notice, message=ref))
                record_deliveries(self.store, [(r.fingerprint, ticket_delivery_key(r, notifier.name), {})
                                               for r in shown if r.ticket_key])
                logger.info("message edited to show its tickets", extra={
                    "sink": notifier.name, "tickets": [r.ticket_key for r in shown if r.ticket_key]})
        return edited


__all__ = ["DEFER_RESERVE_S", "EXPECTED", "MAX_DELIVERY_KEYS", "DeliveryPlan", "DeliveryReport", "NotifyService",
           "decimal_or_zero", "delivery_key", "finding_from_record", "record_deliveries", "record_delivery",
           "ticket_delivery_key"]

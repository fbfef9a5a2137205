"""Service: lifecycle alerts → Jira tickets in the owner's project, each created once.

The lifecycle record's `ticket_key` is the primary guard; a search for the `gpuwaste-<fingerprint[:16]>`
label is the secondary one (a ticket created but not recorded before a crash is found, not duplicated).
ESCALATE opens the ticket, WORSE comments on it, RESOLVED comments and optionally transitions it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from gpuwaste.errors import PermanentDeliveryError, StoreError
from gpuwaste.models.findings import Finding
from gpuwaste.models.lifecycle import FindingRecord
from gpuwaste.models.messages import AlertAction, AlertMessage
from gpuwaste.models.notices import TicketDraft
from gpuwaste.ports import FindingStore, TicketSink
from gpuwaste.services.notify import decimal_or_zero, delivery_key, finding_from_record, record_delivery
from gpuwaste.services.routing import links_for, route_for
from gpuwaste.settings import DeliverySettings

logger = logging.getLogger(__name__)

_CONTROL_RUN = re.compile(r"[\x00-\x1f\x7f]+")


def one_line(text: str) -> str:
    """`text` with every run of control characters (newlines, tabs, ...) collapsed to one space.

    Jira Cloud refuses a multi-line summary with 400, and names from the cluster may carry line breaks.
    """
    return " ".join(_CONTROL_RUN.sub(" ", text).split())


def dedupe_label(fingerprint: str) -> str:
    """The Jira label that marks a finding's ticket (`gpuwaste-<first 16 hex of the fingerprint>`)."""
    return f"gpuwaste-{fingerprint[:16]}"


def _usd(text: Any) -> str:
    value = decimal_or_zero(str(text)) if text is not None else None
    return "unpriced" if value is None else f"${value.quantize(decimal_or_zero('0.01')):,}"


class TicketService:
    """Opens, comments on and resolves tickets for findings.

    Args:
        sink: the tracker port (Jira). store: the lifecycle store (ticket keys); settings: routing and ticket shape.
    """

    def __init__(
        self, *, sink: TicketSink, store: FindingStore | None, settings: DeliverySettings, now: Callable[[], datetime]
    ) -> None:
        self.sink = sink
        self.store = store
        self.settings = settings
        self.now = now

    def draft(self, finding: Finding, fingerprint: str, *, first_seen: datetime, cumulative_usd: str) -> TicketDraft:
        """The ticket for a finding in its owner's project.

        Raises:
            PermanentDeliveryError: no Jira project is routed for the finding and none is configured.
        """
        route = route_for(finding, self.settings)
        if not route.jira_project:
            raise PermanentDeliveryError(
                f"finding {fingerprint[:16]}: no Jira project (set {self.settings.keys.jira_project}, a team/namespace"
                " map entry, or delivery.jira.default_project)"
            )
        s = finding.subject
        where = "/".join(x for x in (s.cluster, s.namespace, s.workload_name or s.node) if x)
        jira = self.settings.jira
        cost = finding.cost
        facts = [
            ("Kind", finding.kind.value.replace("_", " ")),
            ("Cluster", s.cluster),
            ("Namespace", s.namespace or "-"),
            ("Workload", f"{s.workload_kind or '-'}/{s.workload_name or '-'}"),
            ("Team", route.team or "unassigned"),
            ("Open since", first_seen.strftime("%Y-%m-%d %H:%M UTC")),
            ("USD/day", _usd(finding.usd_per_day)),
            ("Cumulative so far", _usd(cumulative_usd)),
            ("Cost formula", cost.formula if cost else "unpriced"),
            ("Confidence", finding.confidence.value),
        ]
        paragraphs = [finding.title, f"Recommendation: {finding.recommendation}"]
        paragraphs += [f"Evidence: {e.signal} avg {e.avg} p95 {e.p95} max {e.max} ({e.unit}), coverage {e.coverage:.0%}"
                       for e in finding.evidence[:5]]
        label = dedupe_label(fingerprint)
        labels = tuple(dict.fromkeys((*jira.labels, *route.jira_labels, label)))
        summary = f"GPU waste: {finding.kind.value.replace('_', ' ')} in {where}"
        return TicketDraft(
            project=route.jira_project,
            summary=one_line(summary)[:255],
            issue_type=jira.issue_type,
            dedupe_label=label,
            labels=labels,
            components=tuple(dict.fromkeys((*jira.components, *route.jira_components))),
            paragraphs=tuple(paragraphs),
            facts=tuple(facts),
            links=links_for(finding, self.settings),
        )

    def handle(self, alert: AlertMessage) -> str | None:
        """Act on one alert; returns the ticket key involved (None when nothing was done).

        Raises:
            DeliveryError: Jira failed transiently (retry through the queue).
            PermanentDeliveryError: Jira refused (4xx incl. 410), or no project is routed.
            StoreError: the ticket key could not be recorded.
        """
        record = self.store.get(alert.fingerprint) if self.store is not None else None
        if alert.action is AlertAction.ESCALATE:
            return self.open_ticket(alert.finding, alert.fingerprint, first_seen=alert.first_seen,
                                    cumulative_usd=alert.cumulative_usd, record=record)
        key = (record.ticket_key if record else None) or alert.ticket_key
        if key is None or alert.action not in (AlertAction.WORSE, AlertAction.RESOLVED):
            return None
        dkey = delivery_key(alert, "jira")
        if record is not None and dkey in record.delivery_keys:
            return key
        if alert.action is AlertAction.WORSE:
            self.sink.comment(key, [
                f"Worse: {alert.reason or 'cost went up'}. Now {_usd(alert.finding.usd_per_day)}/day,"
                f" cumulative {_usd(alert.cumulative_usd)}.",
                f"Cost formula: {alert.finding.cost.formula if alert.finding.cost else 'unpriced'}",
            ])
        else:
            self.sink.comment(key, [
                f"Resolved by gpuwaste: the waste is no longer seen. Saves {_usd(alert.saved_usd_per_day)}/day;"
                f" {_usd(alert.cumulative_usd)} was wasted while it was open.",
            ])
            if self.settings.jira.resolve_transition:
                self.sink.transition(key, self.settings.jira.resolve_transition)
        record_delivery(self.store, alert.fingerprint, dkey)
        return key

    def open_ticket(
        self,
        finding: Finding,
        fingerprint: str,
        *,
        first_seen: datetime,
        cumulative_usd: str,
        record: FindingRecord | None = None,
    ) -> str:
        """Open the finding's ticket unless one exists (stored key, then label search); store the key.

        Raises:
            As `handle`.
        """
        if record is not None and record.ticket_key:
            return record.ticket_key
        draft = self.draft(finding, fingerprint, first_seen=first_seen, cumulative_usd=cumulative_usd)
        key = self.sink.find_open(draft.dedupe_label)
        if key is None:
            key = self.sink.create(draft)
            logger.info("ticket created", extra={"ticket": key, "fingerprint": fingerprint[:16]})
        self._store_key(fingerprint, key)
        return key

    def open_ticket_for(self, fingerprint: str) -> str:
        """Open a ticket for a stored finding (the "create ticket" button).

        Raises:
            PermanentDeliveryError: the finding is unknown or its stored data is unreadable; as `handle`.
        """
        record = self.store.get(fingerprint) if self.store is not None else None
        finding = finding_from_record(record) if record is not None else None
        if record is None or finding is None:
            raise PermanentDeliveryError(f"finding {fingerprint[:16]}: not in the lifecycle store")
        return self.open_ticket(finding, fingerprint, first_seen=record.first_seen,
                                cumulative_usd=str(record.cumulative_usd), record=record)

    def _store_key(self, fingerprint: str, key: str) -> None:
        if self.store is None:
            return
        for _ in range(5):
            record = self.store.get(fingerprint)
            if record is None or record.ticket_key == key:
                return
            updated = record.model_copy(update={"ticket_key": key, "version": record.version + 1})
            if self.store.update(updated, expected_version=record.version):
                return
        raise StoreError(f"finding {fingerprint[:16]}: could not record ticket {key}")

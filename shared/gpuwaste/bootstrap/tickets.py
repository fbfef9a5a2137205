"""Bootstrap: composition root of create_tickets (tickets queue → Jira Cloud); the local chain's ticket service is
in `bootstrap.local_delivery`.

Each batch is planned as the local chain plans a run (`services.tickets.plan_tickets`): the ticket caps per run and
per team, the quiet start, one overflow ticket per team for what is over its cap, and requests over the run's cap
released for a later scan. A run's requests may arrive over several batches: tickets the same scans opened already
(from the store) count against the caps.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pydantic import ValidationError

from gpuwaste.bootstrap import delivery, pipeline
from gpuwaste.bootstrap.batch import process_batch
from gpuwaste.bootstrap.pipeline import LOG_HANDLER as LOG_HANDLER  # the function's log handler
from gpuwaste.errors import ConfigError, GpuWasteError
from gpuwaste.models.findings import Finding
from gpuwaste.models.lifecycle import FindingRecord
from gpuwaste.models.messages import AlertAction, AlertMessage
from gpuwaste.services.notify import NotifyService, finding_from_record
from gpuwaste.services.routing import route_for
from gpuwaste.services.tickets import (
    TicketPlan,
    TicketService,
    opened_in_run,
    plan_tickets,
    quiet_start_anchor,
    release_requests,
)

logger = logging.getLogger(__name__)
UNASSIGNED = "unassigned"


@cache
def ticket_service() -> TicketService:
    """TicketService over Jira (token from the config or Secrets Manager) and the DynamoDB lifecycle store.

    Raises:
        ConfigError: no configuration, Jira not configured, or FINDINGS_TABLE_NAME not set.
    """
    settings = pipeline.config().delivery
    sink = delivery.jira_sink(settings)
    if sink is None:
        raise ConfigError("delivery.jira.base_url: create_tickets needs a Jira site")
    return TicketService(sink=sink, store=delivery.lambda_store(), settings=settings, now=pipeline.SystemClock().now,
                         message_link=delivery.message_link(settings))


@cache
def chat_edits() -> NotifyService | None:
    """The notify service that edits a new ticket's Slack message to show it (`NotifyService.show_tickets`), or None
    when Slack is not configured (`delivery.slack_configured`)."""
    settings = pipeline.config().delivery
    if not delivery.slack_configured(settings):
        return None
    return NotifyService(notifier=delivery.slack_notifier(settings), store=delivery.lambda_store(), settings=settings,
                         now=pipeline.SystemClock().now)


def show_ticket(fingerprint: str) -> None:
    """Edit the finding's Slack message to show its ticket; a failure is logged, never fails the ticket request (the
    ticket exists and links the thread; the message keeps showing no ticket)."""
    try:
        edits = chat_edits()
        if edits is not None:
            edits.show_tickets([fingerprint])
    except GpuWasteError as exc:
        logger.warning("slack message not edited to show its ticket", extra={"fingerprint": fingerprint[:16],
                                                                              "error": str(exc)})


def _key(alert: AlertMessage) -> tuple[str, str, str]:
    return alert.fingerprint, alert.action.value, alert.scan_id


@dataclass
class BatchPlan:
    """What each request of one batch does: handled, folded into its team's overflow ticket, or released."""

    plan: TicketPlan
    team_of: Callable[[Finding], str]
    overflow_done: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.handled = {_key(a) for a in self.plan.open}
        self.folded = {_key(a): team for team, alerts in self.plan.folded.items() for a in alerts}
        self.released = {_key(a) for a in self.plan.deferred}

    def handle(self, service: TicketService, alert: AlertMessage) -> None:
        """Act on one request as planned (a request the plan did not see, e.g. unreadable siblings: handled)."""
        key = _key(alert)
        if key in self.released:
            release_requests([alert], service.store)
            logger.info("ticket request over the run's cap; released for a later scan",
                        extra={"fingerprint": alert.fingerprint[:16], "quiet_start": self.plan.quiet})
        elif key in self.folded:
            team = self.folded[key]
            if team not in self.overflow_done:
                ticket = service.open_overflow(team, self.plan.folded[team])
                self.overflow_done.add(team)
                logger.info("overflow ticket", extra={"ticket": ticket, "findings": len(self.plan.folded[team])})
        else:
            opened = service.handle(alert)
            if opened and alert.action is AlertAction.ESCALATE:
                show_ticket(alert.fingerprint)


def plan_batch(service: TicketService, event: dict[str, Any]) -> BatchPlan:
    """Plan the batch's readable requests like a local run (caps, quiet start, overflow), counting the tickets the
    same scans opened in earlier batches."""
    settings = service.settings
    requests = []
    for record in event.get("Records") or []:
        try:
            requests.append(AlertMessage.model_validate(json.loads(str(record.get("body") or ""))))
        except (ValueError, ValidationError, RecursionError):  # RecursionError: nested deeper than json goes
            continue  # process_batch dead-letters it with its reason

    def team_of(finding: Finding) -> str:
        return route_for(finding, settings).team or UNASSIGNED

    def record_team(record: FindingRecord) -> str:
        finding = finding_from_record(record)
        return team_of(finding) if finding is not None else (record.team or UNASSIGNED)

    now = service.now()
    scans = [r.finding.observed_at for r in requests if r.action is AlertAction.ESCALATE]
    plan = plan_tickets(requests, team_of=team_of, jira=settings.jira, now=now,
                        started_at=quiet_start_anchor(service.store, now=now, jira=settings.jira),
                        opened=opened_in_run(service.store, scans, team_of=record_team))
    return BatchPlan(plan, team_of)


__all__ = ["BatchPlan", "chat_edits", "plan_batch", "process_batch", "show_ticket", "ticket_service"]

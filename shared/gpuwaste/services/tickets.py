"""Service: lifecycle alerts → Jira tickets in the owner's project, each created once.

The lifecycle record's `ticket_key` is the primary guard; a search for the `gpuwaste-<fingerprint[:16]>`
label is the secondary one (a ticket created but not recorded before a crash is found, not duplicated).
ESCALATE opens the ticket, WORSE comments on it, RESOLVED comments and optionally transitions it.

Every comment carries an idempotency key (`delivery_key(alert, "jira")`; an overflow ticket and its comments: one
`overflow_key` per finding they list), and the ticket's accepted keys (`TicketSink.delivered`) are read before a
comment is posted: a comment Jira accepted before a crash, a timeout or a lost answer is recorded, not posted
again, and a retried overflow lists only the findings its ticket does not list yet.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from gpuwaste.errors import PermanentDeliveryError, StoreError
from gpuwaste.models.findings import Finding
from gpuwaste.models.lifecycle import FindingRecord
from gpuwaste.models.messages import AlertAction, AlertMessage
from gpuwaste.models.notices import MessageRef, TicketDraft, TicketSection
from gpuwaste.models.settings import DeliverySettings, JiraSettings
from gpuwaste.people import NO_OWNER, kind_label, usd
from gpuwaste.ports import FindingStore, TicketSink
from gpuwaste.services.notify import decimal_or_zero, delivery_key, finding_from_record, record_delivery
from gpuwaste.services.routing import links_for, route_for
from gpuwaste.services.ticket_content import priority_for, ticket_sections, ticket_summary, where_of, workload_fact

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
    return usd(value)  # cents rounded half-up, as every surface prints money


class TicketService:
    """Opens, comments on and resolves tickets for findings.

    Args:
        sink: the tracker port (Jira). store: the lifecycle store (ticket keys); settings: routing and ticket shape.
    """

    def __init__(
        self, *, sink: TicketSink, store: FindingStore | None, settings: DeliverySettings, now: Callable[[], datetime],
        message_link: Callable[[MessageRef], tuple[str, str] | None] | None = None,
    ) -> None:
        self.message_link = message_link
        self.sink = sink
        self.store = store
        self.settings = settings
        self.now = now
        #: what `gpuwaste explain ID` needs after the ID to find the finding again (e.g. " --state FILE" in a local
        #: run); empty: the ID alone (the command then reads `run`'s default state file)
        self.explain_args = ""

    def draft(self, finding: Finding, fingerprint: str, *, first_seen: datetime, cumulative_usd: str,
              messages: tuple[MessageRef, ...] = ()) -> TicketDraft:
        """The ticket for a finding in its owner's project: money in the summary, a priority from USD/day, and
        the sections of `services.ticket_content` (what, evidence, cost, how to fix, done when, snooze, the chat thread
        linked by `message_link`, when a sink gives one).

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
        jira = self.settings.jira
        # a node finding names its node and has no namespace line; a workload its workload and namespace
        where = ([("Workload", workload_fact(finding)), ("Namespace", str(s.namespace))] if s.namespace
                 else [("Node", s.node or s.workload_name or "-")])
        facts = [
            ("Team", route.team or NO_OWNER),
            *where,
            ("Cluster", s.cluster),
            ("Finding", f"{fingerprint[:6]} (gpuwaste explain {fingerprint[:6]}{self.explain_args})"),
        ]
        if cumulative_usd not in (None, "") and finding.usd_per_day != 0:  # a $0 sizing note has no money line
            facts.append(("Cumulative so far", usd(decimal_or_zero(str(cumulative_usd)))))  # the money ledger's figure
        thread_link = next((link for ref in messages if self.message_link and (link := self.message_link(ref))), None)
        sections = ticket_sections(finding, first_seen=first_seen, cumulative_usd=decimal_or_zero(str(cumulative_usd)),
                                   now=self.now(), thread_link=thread_link, snooze_key=self.settings.keys.snooze_until)
        label = dedupe_label(fingerprint)
        labels = tuple(dict.fromkeys((*jira.labels, *route.jira_labels, label)))
        return TicketDraft(
            project=route.jira_project,
            summary=one_line(ticket_summary(finding))[:255],
            issue_type=jira.issue_type,
            dedupe_label=label,
            labels=labels,
            components=tuple(dict.fromkeys((*jira.components, *route.jira_components))),
            facts=tuple((k, one_line(v)) for k, v in facts),
            links=links_for(finding, self.settings),
            sections=sections,
            priority=priority_for(finding.usd_per_day) if jira.set_priority else None,
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
        # looked up first: a comment Jira accepted before a crash, a timeout or a lost answer is not posted again
        posted = dkey in self.sink.delivered(key)
        if posted:
            logger.info("comment already on the ticket; recorded, not posted again",
                        extra={"ticket": key, "fingerprint": alert.fingerprint[:16]})
        elif alert.action is AlertAction.WORSE:
            self.sink.comment(key, [
                f"Worse: {alert.reason or 'cost went up'}. Now {_usd(alert.finding.usd_per_day)}/day,"
                f" cumulative {_usd(alert.cumulative_usd)}.",
                f"Cost formula: {alert.finding.cost.formula if alert.finding.cost else 'unpriced'}",
            ], delivery_keys=[dkey])
        else:
            self.sink.comment(key, [
                f"Resolved by gpuwaste: the waste is no longer seen. Saves {_usd(alert.saved_usd_per_day)}/day;"
                f" {_usd(alert.cumulative_usd)} was wasted while it was open.",
            ], delivery_keys=[dkey])
        if alert.action is AlertAction.RESOLVED and self.settings.jira.resolve_transition:
            # a transition already applied (a retry) is accepted: JiraTicketSink.transition
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
        draft = self.draft(finding, fingerprint, first_seen=first_seen, cumulative_usd=cumulative_usd,
                           messages=record.messages if record else ())
        key = self.sink.find_open(draft.dedupe_label)
        if key is None:
            key = self.sink.create(draft)
            logger.info("ticket created", extra={"ticket": key, "fingerprint": fingerprint[:16]})
        self._store_key(fingerprint, key)
        return key

    def open_overflow(self, team: str, alerts: Sequence[AlertMessage]) -> str:
        """Open (or comment on the open) overflow ticket of `team` listing `alerts`; returns its key.

        Raises:
            PermanentDeliveryError: no Jira project is routed for the team's findings; as `handle`.
        """
        project = next((p for a in alerts if (p := route_for(a.finding, self.settings).jira_project)), None)
        if project is None:
            raise PermanentDeliveryError(f"team {team}: no Jira project for its overflow ticket")
        draft = overflow_draft(team, alerts, project=project, settings=self.settings)
        key = self.sink.find_open(draft.dedupe_label)
        if key is None:
            return self.sink.create(draft)
        listed = self.sink.delivered(key)  # what the ticket and its comments list already (an earlier try)
        rest = [a for a in alerts if overflow_key(a) not in listed]
        if len(rest) < len(alerts):
            logger.info("overflow findings already on the ticket; not listed again",
                        extra={"ticket": key, "listed": len(alerts) - len(rest)})
        for start in range(0, len(rest), OVERFLOW_COMMENT_FINDINGS):
            part = rest[start:start + OVERFLOW_COMMENT_FINDINGS]
            self.sink.comment(key, [f"{len(part)} more findings: " + "; ".join(
                f"{a.fingerprint[:6]} {_usd(a.finding.usd_per_day)}/day" for a in part)],
                delivery_keys=[overflow_key(a) for a in part])
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


# -- how many tickets a run opens (caps per run and per team, quiet start, overflow folded per team) ----------


@dataclass(frozen=True)
class TicketPlan:
    """What a run does with its ticket requests.

    Attributes:
        open: requests handled one by one (every WORSE/RESOLVED, and the ESCALATEs within the caps).
        folded: team → ESCALATEs over that team's cap, folded into one overflow ticket for the team.
        deferred: ESCALATEs over the run's cap: not filed now (release them, so a later run requests them again).
        quiet: True while the quiet start applies (see `JiraSettings.quiet_start_days`).
    """

    open: tuple[AlertMessage, ...]
    folded: dict[str, tuple[AlertMessage, ...]]
    deferred: tuple[AlertMessage, ...]
    quiet: bool


def plan_tickets(requests: Sequence[AlertMessage], *, team_of: Callable[[Finding], str], jira: JiraSettings,
                 started_at: datetime | None, now: datetime, opened: Mapping[str, int] | None = None) -> TicketPlan:
    """Pure: which ticket requests of one run open a ticket, which fold into a team's overflow ticket, which wait.

    ESCALATEs are ranked by USD/day (highest first). Each team gets at most `max_per_team` tickets of its own and the
    run at most `max_per_run` tickets in all, overflow tickets included (one per team, listing the rest of the
    team's findings). During the quiet start — the first `quiet_start_days` after `started_at`, the oldest
    sighting in the store (None: this run is the first) — the caps are `quiet_start_per_run` and 1 per team, so a
    first run on a large fleet opens a handful of tickets, not dozens. What does not fit waits for a later run.
    `opened`: tickets per team this run opened already (an earlier queue batch of the same run), counted against
    both caps.
    """
    quiet = jira.quiet_start_days > 0 and (started_at is None or now - started_at < timedelta(days=jira.quiet_start_days))
    per_run = min(jira.max_per_run, jira.quiet_start_per_run) if quiet else jira.max_per_run
    per_team = 1 if quiet else jira.max_per_team
    escalate = [r for r in requests if r.action is AlertAction.ESCALATE]
    other = [r for r in requests if r.action is not AlertAction.ESCALATE]
    ranked = sorted(escalate, key=lambda r: (-(r.finding.usd_per_day or Decimal(0)), r.fingerprint))
    own: list[AlertMessage] = []
    taken: dict[str, int] = dict(opened or {})
    per_run = max(0, per_run - sum(taken.values()))
    over: dict[str, list[AlertMessage]] = {}
    for r in ranked:
        team = team_of(r.finding)
        if taken.get(team, 0) < per_team and len(own) < per_run:
            own.append(r)
            taken[team] = taken.get(team, 0) + 1
        else:
            over.setdefault(team, []).append(r)
    room = max(0, per_run - len(own))
    teams = sorted(over, key=lambda t: (-sum((r.finding.usd_per_day or Decimal(0) for r in over[t]), Decimal(0)), t))
    folded = {t: tuple(over[t]) for t in teams[:room]}
    deferred = tuple(r for t in teams[room:] for r in over[t])
    return TicketPlan(open=(*other, *own), folded=folded, deferred=deferred, quiet=quiet)


#: Findings one overflow comment lists at most (its idempotency keys fit one Jira entity property).
OVERFLOW_COMMENT_FINDINGS = 200


def overflow_key(alert: AlertMessage) -> str:
    """The idempotency key of one finding listed on a team's overflow ticket (`<fingerprint[:16]>:<scan_id>`)."""
    return f"{alert.fingerprint[:16]}:{alert.scan_id or '-'}"


def overflow_label(team: str) -> str:
    """The Jira label of a team's overflow ticket (`gpuwaste-team-<team>`, spaces and odd characters as dashes)."""
    return "gpuwaste-team-" + re.sub(r"[^a-z0-9]+", "-", team.lower()).strip("-")[:40]


def overflow_draft(team: str, alerts: Sequence[AlertMessage], *, project: str, settings: DeliverySettings) -> TicketDraft:
    """One ticket for the findings of `team` over its cap: the money in the summary, one line per finding."""
    total = sum((a.finding.usd_per_day or Decimal(0) for a in alerts), Decimal(0))
    lines = tuple(f"{_usd(a.finding.usd_per_day)}/day · {kind_label(a.finding.kind)} · "
                  f"{one_line(where_of(a.finding))} · finding {a.fingerprint[:6]}" for a in alerts)
    sections = (
        TicketSection(heading="What", lines=(
            f"{len(alerts)} more GPU waste findings of team {team}, over the ticket cap of this run. Each has its own "
            "Slack alert; open a ticket for one of them with its Create ticket button.",)),
        TicketSection(heading="Findings", lines=lines, bullets=True),
        TicketSection(heading="Done when", lines=("Every finding above is resolved (gpuwaste comments here as they go).",)),
    )
    label = overflow_label(team)
    jira = settings.jira
    return TicketDraft(
        project=project, summary=one_line(f"{_usd(total)}/day GPU waste: {len(alerts)} more findings of team {team}")[:255],
        issue_type=jira.issue_type, dedupe_label=label, labels=tuple(dict.fromkeys((*jira.labels, label))),
        components=jira.components, sections=sections,
        priority=priority_for(total) if jira.set_priority else None,
        delivery_keys=tuple(overflow_key(a) for a in alerts),
    )


def quiet_start_anchor(store: FindingStore | None, *, now: datetime, jira: JiraSettings) -> datetime | None:
    """The oldest first sighting among records active in the last `quiet_start_days` + 1 days: what the quiet start
    counts from in a store that cannot be read whole cheaply (DynamoDB: one query per day). A record first seen
    before the quiet start ended is found if it was active since, which is all the quiet start asks (None: nothing
    in the store yet, this run is the first)."""
    if store is None or jira.quiet_start_days == 0:
        return None
    records = store.history(since=now - timedelta(days=jira.quiet_start_days + 1), until=now)
    return min((r.first_seen for r in records), default=None)


def opened_in_run(store: FindingStore | None, scans: Sequence[datetime], *, team_of: Callable[[FindingRecord], str]
                  ) -> dict[str, int]:
    """Tickets per team already opened for the ticket requests of these scans (a run's requests may arrive over
    several queue batches): records seen at a scan's time whose ticket was requested then and exists."""
    if store is None:
        return {}
    out: dict[str, int] = {}
    for at in dict.fromkeys(scans):
        for record in store.history(since=at, until=at):
            if record.ticket_key and record.ticket_requested_at == at:
                team = team_of(record)
                out[team] = out.get(team, 0) + 1
    return out


def release_requests(requests: Sequence[AlertMessage], store: FindingStore | None) -> int:
    """Forget that tickets were requested for these ESCALATEs (not filed: over this run's cap), so a later scan of the
    finding requests its ticket again instead of losing it. Returns how many records were released."""
    released = 0
    for request in requests:
        if store is None or request.action is not AlertAction.ESCALATE:
            continue
        record = store.get(request.fingerprint)
        if record is None or record.ticket_key or record.ticket_requested_at is None:
            continue
        cleared = record.model_copy(update={"ticket_requested_at": None, "version": record.version + 1})
        if store.update(cleared, expected_version=record.version):
            released += 1
    return released

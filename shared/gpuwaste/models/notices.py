"""Models: what owners are told (alerts, digests, updates, the daily summary), independent of any chat tool or tracker.

Services build these; sinks render them (Block Kit, ADF, terminal text). Money is Decimal USD, times UTC.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import StrEnum

from pydantic import Field

from gpuwaste.models.base import Frozen
from gpuwaste.models.coverage import CoverageRow
from gpuwaste.models.findings import Finding
from gpuwaste.models.spend import SpendOfPeriod


class Route(Frozen):
    """Where a finding's owner hears about it, and why there.

    Attributes:
        channel: the chat channel name (`#ml-train`) or id of the channel-addressed sink; sinks with their own
            destinations (webhooks) pick them from `team` and the findings' namespaces.
        source: how the channel was chosen, stated on every message ("namespace annotation gpuwaste.io/slack-channel").
        user_email: an owner to mention, when known.
        jira_project: the owner's Jira project key, when known.
    """

    channel: str
    source: str
    team: str | None = None
    user_email: str | None = None
    jira_project: str | None = None
    jira_labels: tuple[str, ...] = ()
    jira_components: tuple[str, ...] = ()


class NoticeKind(StrEnum):
    """The shape of a chat message."""

    ALERT = "alert"  # one new finding, top-level message
    DIGEST = "digest"  # several new findings of one owner from one scan, one top-level message
    UPDATE = "update"  # worse / reminder: a reply in the original's thread (a sink without threads: a new message)
    RESOLVED = "resolved"  # the original message edited to say it is resolved (a sink that cannot edit: a new one)


class NoticeItem(Frozen):
    """One finding inside a notice.

    Attributes:
        cumulative_usd: USD wasted since first seen. saved_usd_per_day: USD/day no longer wasted (resolved).
        links: (label, URL) pairs from the configured templates.
        ticket_key / ticket_url: the finding's ticket and where people open it (Jira's `/browse/KEY`; None when
            the tracker has no web address, e.g. the local ticket file).
    """

    fingerprint: str
    finding: Finding
    first_seen: datetime
    cumulative_usd: Decimal = Decimal(0)
    links: tuple[tuple[str, str], ...] = ()
    resolved: bool = False
    resolved_at: datetime | None = None
    saved_usd_per_day: Decimal | None = None
    ticket_key: str | None = None
    ticket_url: str | None = None


class Notice(Frozen):
    """A message for one owner.

    Attributes:
        reason: why now (for updates: "cost up 40 %", "reminder: open 2 days").
        mention: a chat user id to mention (resolved from the route's e-mail by the sink), or None.
        interactive: add the snooze / expected / ticket buttons.
        delivery_key: the idempotency key of a single alert's notice (a thread reply, an edit, a resolution):
            the sink stores it with the message (Slack: message metadata) and `Notifier.find_posted` finds an
            accepted one by it. None for a NEW alert or digest (found by scan, kind and findings instead).
    """

    kind: NoticeKind
    route: Route
    items: tuple[NoticeItem, ...] = Field(min_length=1)
    scan_id: str = ""
    reason: str | None = None
    mention: str | None = None
    interactive: bool = True
    delivery_key: str | None = None


class MessageRef(Frozen):
    """Where a message a chat sink accepted lives, so a later update can be threaded on it or edit it.

    Attributes:
        sink: the sink's registered name (`Notifier.name`).
        destination: where the sink posted it (a channel id, a webhook's configured name — never a secret URL).
        message_id: the sink's id of the message ("" when the sink returns none: a webhook).
        thread: the conversation the message belongs to, when it is a reply (None: it starts its own).
        carries: the fingerprints of every finding the message carries, when it carries several (a digest): an edit
            of the message on a resolution reads its siblings by key, not from the fleet's history. Empty for a
            message of one finding, and in references stored before it existed.
    """

    sink: str = Field(min_length=1)
    destination: str
    message_id: str = ""
    thread: str | None = None
    carries: tuple[str, ...] = ()

    def ref(self) -> MessageRef:
        """The bare reference (what the lifecycle stores)."""
        return MessageRef(sink=self.sink, destination=self.destination, message_id=self.message_id, thread=self.thread,
                          carries=self.carries)


def message_for(refs: tuple[MessageRef, ...], sink: str) -> MessageRef | None:
    """The reference kept for `sink` (the latest), or None."""
    return next((r for r in reversed(refs) if r.sink == sink), None)


def with_message(refs: tuple[MessageRef, ...], ref: MessageRef) -> tuple[MessageRef, ...]:
    """`refs` with `ref` replacing the one kept for its sink (one reference per sink)."""
    return (*(r for r in refs if r.sink != ref.sink), ref.ref())


class PostedMessage(MessageRef):
    """A message a chat sink accepted (its reference), with what it carries.

    Attributes:
        fingerprints: the findings the message carries (a long digest is split over several messages).
        fell_back_from: the routed destination when it did not exist and the default one was used.
    """

    fingerprints: tuple[str, ...] = ()
    fell_back_from: str | None = None


class ChatAction(Frozen):
    """A button pressed on one of our messages, as the sink's interactions endpoint read it.

    Attributes:
        action: what was asked (`snooze_1d`, `snooze_7d`, `expected`, `ticket`). fingerprint: the finding.
        user: who pressed it, as the sink names them in a message (a mention).
        message: the message the button was on (the confirmation is a reply in its conversation), when known.
        reason: the owner's justification ("Expected" / "Snooze"), from the chat's form; None: not asked yet.
        days: how long "Expected" lasts (days), from the form; None: the default.
        trigger_id: the chat's handle to open a form in answer to this click (Slack `trigger_id`, valid 3 s).
        submitted: the request is a form's submission (answered with an empty body, which closes the form).
    """

    action: str
    fingerprint: str = Field(min_length=1, max_length=128)
    user: str = "someone"
    message: MessageRef | None = None
    reason: str | None = Field(None, max_length=500)
    days: int | None = Field(None, ge=1, le=366)
    trigger_id: str | None = None
    submitted: bool = False


class ChatRequest(Frozen):
    """What an interactions request asks: an action, or nothing to do (`answer`: the HTTP status to reply with)."""

    action: ChatAction | None = None
    answer: int = 200
    error: str | None = None


class TicketSection(Frozen):
    """One headed part of a ticket: its lines (paragraphs, or a bullet list) and commands to copy (code block)."""

    heading: str
    lines: tuple[str, ...] = ()
    bullets: bool = False
    commands: tuple[str, ...] = ()


class TicketDraft(Frozen):
    """A ticket to open in the owner's project (the Jira sink renders it as ADF).

    Attributes:
        dedupe_label: the `gpuwaste-<fingerprint[:16]>` label used to find an existing ticket.
        facts: (name, value) pairs shown as a list. paragraphs: free text, in order.
        sections: headed parts (What, Evidence, Cost, How to fix, Done when, Snooze), after the paragraphs.
        priority: the Jira priority name (from USD/day), or None to leave the project's default.
        delivery_keys: idempotency keys of what the ticket carries (an overflow ticket: one per finding it lists),
            stored with it (Jira: an issue entity property) so a retry finds them instead of listing them again.
    """

    project: str
    summary: str = Field(min_length=1, max_length=255)
    issue_type: str = "Task"
    dedupe_label: str
    labels: tuple[str, ...] = ()
    components: tuple[str, ...] = ()
    paragraphs: tuple[str, ...] = ()
    facts: tuple[tuple[str, str], ...] = ()
    links: tuple[tuple[str, str], ...] = ()
    sections: tuple[TicketSection, ...] = ()
    priority: str | None = None
    delivery_keys: tuple[str, ...] = ()


class GroupTotal(Frozen):
    """Waste of one group (team, namespace, kind or cluster) in the summary period and the one before.

    Attributes:
        wasted_usd: USD wasted in the period. previous_usd: USD wasted in the period before.
        new: no finding of the group was seen in the period before (its trend reads "new", whatever it cost).
    """

    name: str
    wasted_usd: Decimal
    previous_usd: Decimal = Decimal(0)
    findings: int = 0
    new: bool = False


class Offender(Frozen):
    """One of the costliest findings of the period.

    Attributes:
        first_seen: when gpuwaste first reported it. waste_since: when the waste began (the earliest episode its
            first report's evidence covers; `people.waste_since`), what "open for" counts from.
    """

    fingerprint: str
    cluster: str
    namespace: str | None
    workload: str | None
    kind: str
    team: str
    wasted_usd: Decimal
    usd_per_day: Decimal | None
    cumulative_usd: Decimal
    open: bool
    first_seen: datetime | None = None
    resolved_at: datetime | None = None
    waste_since: datetime | None = None


class TrendDay(Frozen):
    """One UTC day of the trend: USD wasted per team that day, and USD saved that day by earlier resolutions.

    Attributes:
        day: the day's start (00:00 UTC). by_team: (team, USD wasted that day), costliest first.
        saved_usd: realised savings that day (saved USD/day × the part of the day after the resolution).
    """

    day: datetime
    by_team: tuple[tuple[str, Decimal], ...] = ()
    saved_usd: Decimal = Decimal(0)

    @property
    def wasted_usd(self) -> Decimal:
        """USD wasted that day, all teams."""
        return sum((v for _, v in self.by_team), Decimal(0))


class JustifiedTotal(Frozen):
    """One team's active justifications at the summary's end.

    How many findings, the USD/day they cover (latest priced cost; unpriced count 0) and the soonest `until`.
    """

    team: str
    findings: int
    usd_per_day: Decimal
    next_end: datetime


class TeamMonth(Frozen):
    """One team's calendar month (UTC) in the summary: spend and waste to date, month-end at the current rate, budget.

    Attributes:
        spend_to_date_usd / spend_month_end_usd: allocated cost (the share ledger of the stored scans) since the
            month began, and that plus the team's USD/day over the last 24 hours × the days left in the month.
        wasted_to_date_usd / wasted_month_end_usd: the money ledger's waste since the month began, and that plus the
            open waste's USD/day per day left (`services.month_end`).
        budget_usd: the team's monthly budget (`serve.team_budgets_usd_per_month`, …); None: none set.
    """

    team: str
    spend_to_date_usd: Decimal
    spend_month_end_usd: Decimal
    wasted_to_date_usd: Decimal
    wasted_month_end_usd: Decimal
    budget_usd: Decimal | None = None

    @property
    def over_budget(self) -> bool:
        """True when the waste's month-end at the current rate exceeds the budget (the budget is a waste budget)."""
        return self.budget_usd is not None and self.wasted_month_end_usd > self.budget_usd


class DailySummary(Frozen):
    """The fleet's waste over one period (normally a day) compared with the period before.

    Every USD figure is computed from the lifecycle records: a record wastes `usd_per_day` from
    `first_seen` to `last_seen`; the part inside the period counts (USD = USD/day × overlapping days).

    Attributes:
        wasted_usd / previous_usd: USD wasted in the period and in the one before (trend).
        open_usd_per_day: USD/day of the findings still open at the end of the period.
        saved_usd_per_day: USD/day no longer wasted thanks to findings resolved in the period.
        realised_savings_usd: USD not spent inside the period thanks to resolutions (saved/day × days since).
        by_kind_and_team: (team, kind) → USD wasted in the period, for the stacked chart.
        unpriced: findings of the period without a price (not in the totals).
        trend: the last 30 UTC days up to the period's end, oldest first (the report's 7- and 30-day charts).
        justified: active justifications at the period's end by team (`services/justifications.active_by_team`).
        coverage: attribution coverage per cluster and allocation kind over the scans of the period's hours ("all"
            first in each cluster; `models.coverage.coverage_rows`); empty when the store holds no scan coverage.
        spend: the allocation ledger of the period's hours from the store (issue 24: the fleet funnel per cluster,
            allocated cost per team and namespace; `models.spend.spend_of`); None when the store holds none.
        month: per team, spend and waste month to date and at month-end at the current rate next to the monthly
            budget (`TeamMonth`); empty when the store holds no allocation ledger.
    """

    since: datetime
    until: datetime
    wasted_usd: Decimal
    previous_usd: Decimal
    open_usd_per_day: Decimal
    open_findings: int
    opened: int
    resolved: int
    saved_usd_per_day: Decimal
    realised_savings_usd: Decimal
    by_team: tuple[GroupTotal, ...] = ()
    by_namespace: tuple[GroupTotal, ...] = ()
    by_kind: tuple[GroupTotal, ...] = ()
    by_cluster: tuple[GroupTotal, ...] = ()
    top: tuple[Offender, ...] = ()
    by_kind_and_team: tuple[tuple[str, str, Decimal], ...] = ()
    unpriced: int = 0
    trend: tuple[TrendDay, ...] = ()
    justified: tuple[JustifiedTotal, ...] = ()
    coverage: tuple[CoverageRow, ...] = ()
    spend: SpendOfPeriod | None = None
    month: tuple[TeamMonth, ...] = ()

    @property
    def trend_usd(self) -> Decimal:
        """USD wasted in the period minus the period before (negative: better)."""
        return self.wasted_usd - self.previous_usd

    @property
    def trend_share(self) -> Decimal | None:
        """Relative change against the period before (0.25 = +25 %); None when the period before was 0."""
        if self.previous_usd == 0:
            return None
        return (self.wasted_usd - self.previous_usd) / self.previous_usd

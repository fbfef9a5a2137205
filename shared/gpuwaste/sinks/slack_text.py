"""Adapter (pure): a finding in a chat's words — workload, place, cost line, since when, owner hint, ticket link.

Plain-text helpers (also used by the Teams cards and the terminal notifier) and the mrkdwn pieces of the Slack
alert and digest. Names that come from the cluster are escaped for mrkdwn (`&`, `<`, `>`), so `<!channel>`,
`<@U123>` or `<http://x|y>` in a pod name can neither ping nor link.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from gpuwaste.headlines import title_line
from gpuwaste.models.findings import Evidence, Finding
from gpuwaste.models.notices import Notice, NoticeItem
from gpuwaste.people import age, elide, evidence_text, no_codes, price_source, since_words, usd, waste_since, when
from gpuwaste.people import kind_label as people_kind_label
from gpuwaste.sinks.slack_limits import (
    MAX_NAME,
    escape,
)

#: Where people read how owners are configured (said in words by the no-owner hint, never as a config key).
OWNER_DOCS = "docs/delivery.md, “Who gets told: owner routing”"


def kind_label(finding: Finding) -> str:
    """The waste kind as people read it on every surface ("idle", "serving idle": `people.kind_label`)."""
    return people_kind_label(finding.kind)


def workload_text(finding: Finding) -> str:
    """Kind/namespace/name of the workload, or the node (plain text, unescaped)."""
    s = finding.subject
    if s.workload_kind == "Node" or (not s.workload_name and s.node):
        return f"Node/{s.node or s.workload_name}"
    name = f"{s.namespace}/{s.workload_name}" if s.namespace else (s.workload_name or "-")
    return f"{s.workload_kind or 'Pod'}/{name}"


def where_text(finding: Finding) -> str:
    """Cluster, namespace, workload, pod, node and instance in one line (plain text, unescaped)."""
    s = finding.subject
    parts = [f"cluster {s.cluster}"]
    if s.namespace:
        parts.append(f"namespace {s.namespace}")
    if s.workload_name and s.workload_kind != "Node":
        parts.append(f"{s.workload_kind or 'workload'} {s.workload_name}")
    if s.pod and s.pod != s.workload_name:
        parts.append(f"pod {s.pod}")
    if s.node:
        node = f"node {s.node}"
        extra = ", ".join(x for x in (s.instance_type, s.capacity_type) if x)
        parts.append(f"{node} ({extra})" if extra else node)
    return " · ".join(parts)


def evidence_line(e: Evidence) -> str:
    """One evidence signal for people, with its note (plain text).

    The signal's line is `people.evidence_text`: the rule and the reading in one unit.
    """
    text = evidence_text(e)
    if e.note and not e.note.startswith("GPU_UTIL is percent"):
        text += f" — {no_codes(e.note)}"
    return text


def formula_text(finding: Finding, *, with_source: bool = True) -> str:
    """USD/day with its formula (and the price source's name and date, briefly.

    Its address is behind a link or in Details), or why it is unpriced (plain text).
    """
    return _cost_words(finding, with_source=with_source, link=False)


def cost_mrkdwn(finding: Finding) -> str:
    """The alert's Cost line as mrkdwn, escaped.

    The formula, then the price source by name linked to its address ("price:
    <https://github.com/aws/karpenter-provider-aws|Karpenter's AWS on-demand price table>, 2026-07-20"), never a raw URL
    at the end of the line.
    """
    return _cost_words(finding, with_source=True, link=True)


def _cost_words(finding: Finding, *, with_source: bool, link: bool) -> str:
    cost = finding.cost
    out = escape if link else str
    if cost is None:
        return out("unpriced (no price yet)")
    if not cost.priced:
        formula = no_codes(cost.formula)
        return out(formula if formula.startswith("unpriced") else f"unpriced: {formula}")
    name, url = price_source(cost.source) if cost.source else ("", None)
    dated = ", ".join(x for x in (out(name), out(cost.effective_date)) if x) if name else ""
    if link and url and name:
        dated = ", ".join(x for x in (f"<{escape(url)}|{escape(name)}>", escape(cost.effective_date)) if x)
    caveat = f" ⚠ {'; '.join(no_codes(w) for w in cost.warnings)}" if cost.warnings and with_source else ""
    return (out(no_codes(cost.formula)) + (f" (price: {dated})" if dated and with_source else "") + out(caveat))


def per_day(value: Decimal | None) -> str:
    """"$12.50/day", or "unpriced"."""
    return "unpriced" if value is None else f"{usd(value)}/day"


#: The money cell of a sizing note: a waste kind that holds no GPU share and so no money (KV-cache pressure on a
#: serving pod costs latency and recomputation, not idle GPUs: priced at 0), instead of "$0.00/day".
SIZING_NOTE = "sizing note, no GPU cost"


def finding_per_day(f: Finding) -> str:
    """A digest line's money: `per_day` of the finding, or `SIZING_NOTE`.

    `SIZING_NOTE` is for a finding that wastes no GPU share and costs nothing (never "$0.00/day · 0 GPU").
    """
    if f.kind.is_waste and not f.wasted_gpu_share and f.usd_per_day is not None and not f.usd_per_day:
        return SIZING_NOTE
    return per_day(f.usd_per_day)


def ticket_text(item: NoticeItem) -> str:
    """The item's ticket key (mrkdwn, escaped), a link to the ticket's page when it has one ("" without a ticket)."""
    if not item.ticket_key:
        return ""
    key = escape(item.ticket_key)
    return f"<{escape(item.ticket_url)}|{key}>" if item.ticket_url else key


def _links(item: NoticeItem) -> str:
    return " · ".join(f"<{escape(url)}|{escape(label)}>" for label, url in item.links)


def _route_line(notice: Notice, fell_back_from: str | None, *, team: bool = True) -> str:
    r = notice.route
    text = f"Routed to {escape(r.channel)} by {escape(r.source)}"
    if r.team and team:
        text += f" · team {escape(r.team)}"
    if fell_back_from:
        text += (f" · :warning: {escape(fell_back_from)} was not found (channel_not_found), posted to the default"
                 " channel")
    return text


def _resolved_line(item: NoticeItem) -> str:
    at = f" {when(item.resolved_at)}" if item.resolved_at else ""
    saved = f"; saves {usd(item.saved_usd_per_day)}/day" if item.saved_usd_per_day is not None else ""
    return f":white_check_mark: *Resolved*{at}{saved} (wasted {usd(item.cumulative_usd)} while open)"


def scan_time(item: NoticeItem) -> datetime:
    """The time of the scan that saw the finding (ages are counted to it, never to the wall clock.

    A replayed recording reads as it happened).
    """
    return item.finding.observed_at


def alert_title(item: NoticeItem) -> str:
    """An alert's header: the finding's short title (`people.title_line`, every kind within 80 characters), "Resolved.

    …" once resolved; the detector's whole sentence is the alert's What line, never cut into the header.
    """
    title = title_line(item.finding)
    return f"Resolved: {title.partition(': ')[2]}" if item.resolved else title


def _is_node_level(finding: Finding) -> bool:
    s = finding.subject
    return s.workload_kind == "Node" or (s.namespace is None and not s.workload_name)


def _whose_team(team: str) -> str:
    """"team ml", or "no owner" for a summary group without a team (its JSON value is "unassigned")."""
    return "no owner" if team in ("", "unassigned", "no owner") else f"team {team}"


def _addressee(notice: Notice) -> str:
    """Whom a message is for: the team, else "no owner" (never a channel name as if it were an owner)."""
    return f"team {notice.route.team}" if notice.route.team else "no owner"


def _for(notice: Notice) -> str:
    """" for team ml" or ", no owner" (a digest's header)."""
    return f" for team {notice.route.team}" if notice.route.team else ", no owner"


def _owner_hint(notice: Notice) -> str | None:
    """What to configure when a message has no owner (None when it has one)."""
    if notice.route.team:
        return None
    clusters = sorted({i.finding.subject.cluster for i in notice.items})
    where = escape(", ".join(clusters))
    if all(_is_node_level(i.finding) for i in notice.items):
        return (f":warning: *No owner:* no team is named for the nodes of cluster {where}, so their unrequested"
                " capacity comes to this channel. Name the cluster's platform team and its channel in the gpuwaste"
                f" configuration ({OWNER_DOCS}).")
    return (f":warning: *No owner:* nothing names a team for these workloads. Label their namespace with its team"
            f" (`gpuwaste.io/team`), map the namespace to a team in the gpuwaste configuration, or name the platform"
            f" team of cluster {where} there ({OWNER_DOCS}).")


def _subject_text(finding: Finding, width: int = MAX_NAME) -> str:
    """The workload as `namespace/name`, or `node NAME` (plain text, unescaped, elided to `width`)."""
    s = finding.subject
    if _is_node_level(finding):
        return "node " + elide(s.node or s.workload_name or "-", width)
    name = s.workload_name or s.pod or "-"
    return elide(f"{s.namespace}/{name}" if s.namespace else name, width)


def began(item: NoticeItem) -> datetime:
    """When the item's waste began (`people.waste_since`: its first episode, not when gpuwaste first reported it)."""
    return waste_since(item.first_seen, item.finding)


def since_text(item: NoticeItem) -> str:
    """When the waste began, as every surface says it (`people.since_words`; plain text)."""
    return since_words(item.first_seen, item.finding, scan_time(item))


def _since(item: NoticeItem) -> str:
    """How long the waste has gone on at the scan ("for 1h 10m", from when it began).

    And "new" when this scan first reported it ("new, for 1h 10m").
    """
    span = age(began(item), scan_time(item))
    if not item.finding.episodes and item.first_seen >= scan_time(item):
        return "new"
    if item.first_seen >= scan_time(item):
        return f"new, for {span}"
    return f"for {span}"


def kind_label_short(finding: Finding) -> str:
    """The kind in people's words, short ("idle", "wrong hw")."""
    return people_kind_label(finding.kind)


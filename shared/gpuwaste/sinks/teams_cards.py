"""Adapter (pure): notices and summaries → Microsoft Teams messages carrying one Adaptive Card each, within Teams' size.

Wire format (a Workflows webhook, "When a Teams webhook request is received" → "Post card in a chat or channel"):

    {"type": "message",
     "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": null,
                      "content": {"type": "AdaptiveCard", "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                                  "version": "1.4", "body": [...], "actions": [...]}}]}

Limits: Teams refuses a message over ~28 KB; every message is kept under `max_payload_bytes` of JSON (UTF-8), a digest
is split over several cards (costliest findings first), and a single finding too large on its own loses its evidence
lines, then has its texts cut.

Hostile text: names from the cluster (workloads, namespaces, teams, titles) go into `RichTextBlock` `TextRun`s, which
Adaptive Cards never read as markdown; the few places that need markdown (`TextBlock`, `FactSet`) carry only our own
words and numbers, and anything else there is escaped (`escape_markdown`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from gpuwaste.advice import advise
from gpuwaste.headlines import title_line
from gpuwaste.models.notices import DailySummary, GroupTotal, Notice, NoticeItem, NoticeKind
from gpuwaste.people import (
    NO_OWNER,
    group_label,
    namespace_label,
    no_codes,
    offender_name,
    period_date,
    trend_words,
    usd,
    versus_words,
    when,
)
from gpuwaste.people import kind_label as people_kind_label
from gpuwaste.sinks.slack_blocks import (  # plain-text helpers shared by the chat renderers (no Block Kit)
    SIZING_NOTE,
    evidence_line,
    finding_per_day,
    formula_text,
    kind_label,
    per_day,
    since_text,
    truncate,
    workload_text,
)

CARD_CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
CARD_SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
#: Teams renders Adaptive Cards up to 1.5; 1.4 is what every Teams client (desktop, web, mobile) shows.
CARD_VERSION = "1.4"
#: Teams' documented message size limit is ~28 KB; the default budget leaves room for the envelope.
MAX_PAYLOAD_BYTES = 27_000
#: Findings of a digest shown in full (facts, recommendation, links); the rest are one compact line each, so a large
#: digest is a few cards, not dozens (like the Slack digest's tail).
DIGEST_FULL_ITEMS = 10
#: Characters kept of one text run (a title or a name from the cluster can be arbitrarily long).
MAX_RUN_TEXT = 2_000
#: Characters that open a markdown construct Teams renders anywhere in a line (links and images need `[`, emphasis
#: `*`/`_`, code `` ` ``, strike `~`, tags `<`); line-start constructs (`#`, `-`, `1.`) cannot occur: lines are joined.
_MD_SPECIAL = set("\\`*_[]<>~")


def escape_markdown(text: str) -> str:
    """`text` on one line with every markdown-opening character backslash-escaped (CommonMark), so a value can neither
    link, emphasise, mention (`<at>`) nor start a heading or a list in a `TextBlock`/`FactSet`."""
    flat = "".join(f"\\{c}" if c in _MD_SPECIAL else c for c in " ".join(text.split("\n")))
    return ("\\" + flat) if flat[:1] in ("#", "-", "+") else flat


@dataclass
class TeamsMessage:
    """One webhook POST body (a message with one Adaptive Card) and the findings it carries."""

    body: dict[str, Any]
    fingerprints: tuple[str, ...] = ()
    summary: str = ""

    def encoded(self) -> bytes:
        """The JSON body as sent (UTF-8)."""
        return json.dumps(self.body, ensure_ascii=False, separators=(",", ":")).encode()

    @property
    def size(self) -> int:
        """Bytes of the JSON body."""
        return len(self.encoded())


def _message(body: list[dict[str, Any]], actions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    card: dict[str, Any] = {"type": "AdaptiveCard", "$schema": CARD_SCHEMA, "version": CARD_VERSION,
                            "msteams": {"width": "Full"}, "body": body}
    if actions:
        card["actions"] = actions
    return {"type": "message", "attachments": [{"contentType": CARD_CONTENT_TYPE, "contentUrl": None, "content": card}]}


def _heading(text: str, *, color: str = "Default") -> dict[str, Any]:
    """Our own heading text (markdown-safe: built from our words and escaped values)."""
    return {"type": "TextBlock", "text": text, "weight": "Bolder", "size": "Medium", "wrap": True, "color": color}


def _plain(*runs: str | tuple[str, dict[str, Any]], subtle: bool = False) -> dict[str, Any]:
    """A RichTextBlock of plain text runs (never markdown): for anything that comes from the cluster."""
    inlines = []
    for run in runs:
        text, style = (run, {}) if isinstance(run, str) else run
        inline: dict[str, Any] = {"type": "TextRun", "text": truncate(text, MAX_RUN_TEXT), **style}
        if subtle:
            inline["isSubtle"] = True
        inlines.append(inline)
    return {"type": "RichTextBlock", "inlines": inlines}


def _facts(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """A FactSet of our own labels and values (values escaped: FactSet values are read as markdown by Teams)."""
    return {"type": "FactSet", "facts": [{"title": t, "value": escape_markdown(v)} for t, v in pairs]}


def _links(item: NoticeItem) -> dict[str, Any] | None:
    """The configured links and the ticket's page (when it has one) as buttons that open them."""
    links = [*item.links, *(((f"Ticket {item.ticket_key}", item.ticket_url),) if item.ticket_key and item.ticket_url
                            else ())]
    if not links:
        return None
    return {"type": "ActionSet", "actions": [{"type": "Action.OpenUrl", "title": label, "url": url}
                                             for label, url in links]}


def _resolved_facts(item: NoticeItem) -> list[tuple[str, str]]:
    pairs = [("Resolved", when(item.resolved_at) if item.resolved_at else "yes")]
    if item.saved_usd_per_day is not None:
        pairs.append(("Saves", f"{usd(item.saved_usd_per_day)}/day"))
    pairs.append(("Wasted while open", usd(item.cumulative_usd)))
    return pairs


def _item(item: NoticeItem, now: datetime, *, evidence: bool) -> dict[str, Any]:
    """One finding as a Container: its title and workload (plain runs), money facts, recommendation, evidence, links."""
    f = item.finding
    items: list[dict[str, Any]] = [
        _plain((title_line(f), {"weight": "Bolder"})),  # the short title every surface shows for the finding
        _plain(workload_text(f), f" · cluster {f.subject.cluster}", subtle=True),
        _plain(no_codes(f.title)),  # the detector's whole sentence
    ]
    if item.resolved:
        facts = _resolved_facts(item)
    else:
        money = finding_per_day(f)
        wasted = [] if money == SIZING_NOTE else [("Wasted so far", usd(item.cumulative_usd))]  # a sizing note: no $0
        facts = [("Cost", money), *wasted, ("Wasting since", since_text(item)),
                 ("Kind", f"{kind_label(f)}, confidence {f.confidence.value}")]
    if item.ticket_key:
        facts.append(("Ticket", item.ticket_key))
    facts.append(("Finding", item.fingerprint[:6]))
    items.append(_facts(facts))
    if not item.resolved:
        advice = advise(f)
        items.append(_plain(advice.action))
        if advice.caution:
            items.append(_plain((advice.caution, {"weight": "Bolder"})))
        items.extend(_plain(f"$ {c.shell()}", subtle=True) for c in advice.commands)
        if evidence:
            if finding_per_day(f) != SIZING_NOTE:  # a sizing note has no formula ("$0.00/day")
                items.append(_plain(formula_text(f), subtle=True))
            items.extend(_plain(evidence_line(e), subtle=True) for e in f.evidence[:5])
    links = _links(item)
    if links is not None:
        items.append(links)
    return {"type": "Container", "separator": True, "spacing": "Medium", "items": items}


def _compact(item: NoticeItem) -> dict[str, Any]:
    """One finding of a digest's tail as a single plain line (money, workload, kind, short id)."""
    f = item.finding
    state = f"resolved, saves {usd(item.saved_usd_per_day)}/day" if item.resolved else finding_per_day(f)
    line = f"{state} · {workload_text(f)} · {kind_label(f)} · finding {item.fingerprint[:6]}"
    return {"type": "RichTextBlock", "separator": True, "inlines": [{"type": "TextRun", "text": truncate(line, 400)}]}


def _route(notice: Notice, destination: str, source: str, fell_back_from: str | None) -> dict[str, Any]:
    team = f"team {notice.route.team}" if notice.route.team else "no team"
    line = f"Sent to webhook {destination} ({source}; {team})"
    if fell_back_from:
        line += f" — the routed webhook {fell_back_from} is not configured, so the default one was used"
    return _plain(line, subtle=True)


def _whose(team: str) -> str:
    """"team ml", or "no owner" for a group without a team (the summary's JSON says "unassigned")."""
    label = group_label("team", team)
    return label if label == NO_OWNER else f"team {label}"


def _title(notice: Notice, items: list[NoticeItem], part: int, parts: int) -> tuple[str, str]:
    """(heading, colour) of one card."""
    total = sum((i.finding.usd_per_day or Decimal(0) for i in items if not i.resolved), Decimal(0))
    suffix = f" (part {part} of {parts})" if parts > 1 else ""
    if notice.kind is NoticeKind.RESOLVED or all(i.resolved for i in items):
        saved = sum((i.saved_usd_per_day or Decimal(0) for i in items), Decimal(0))
        return f"Resolved: GPU waste no longer seen — saves {usd(saved)}/day{suffix}", "Good"
    if notice.kind is NoticeKind.UPDATE:
        reason = escape_markdown(notice.reason or "Update")
        return f"{reason}: GPU waste still open — {usd(total)}/day{suffix}", "Warning"
    if len(notice.items) > 1:
        whose = f"for team {escape_markdown(notice.route.team)}" if notice.route.team else "no owner"
        return f"GPU waste: {len(notice.items)} findings {whose} — {usd(total)}/day{suffix}", "Attention"
    if all(finding_per_day(i.finding) == SIZING_NOTE for i in items):  # a $0 sizing note: no "$0.00/day"
        return f"GPU sizing note: no GPU cost{suffix}", "Attention"
    return f"GPU waste: {usd(total)}/day{suffix}", "Attention"


def render_notice(notice: Notice, *, now: datetime, destination: str, source: str, fell_back_from: str | None = None,
                  max_bytes: int = MAX_PAYLOAD_BYTES) -> list[TeamsMessage]:
    """The notice as Teams messages, each under `max_bytes` of JSON; a digest's findings costliest first, split over as
    few cards as fit. Never raises for size: a finding too large alone drops its evidence, then its texts are cut."""
    items = sorted(notice.items, key=lambda i: i.finding.usd_per_day or Decimal(0), reverse=True)
    groups: list[list[tuple[NoticeItem, dict[str, Any]]]] = [[]]
    base = TeamsMessage(_message(_frame(notice, [], now, destination, source, fell_back_from, 1, 99))).size
    used = base
    for index, item in enumerate(items):
        if index >= DIGEST_FULL_ITEMS:
            block = _compact(item)
        else:
            block = _item(item, now, evidence=len(items) == 1)
        size = len(json.dumps(block, ensure_ascii=False, separators=(",", ":")).encode()) + 1
        if size + base > max_bytes:
            block = _item(item, now, evidence=False)
            size = len(json.dumps(block, ensure_ascii=False, separators=(",", ":")).encode()) + 1
        if groups[-1] and used + size > max_bytes:
            groups.append([])
            used = base
        groups[-1].append((item, block))
        used += size
    out = []
    for n, group in enumerate(groups, start=1):
        body = _frame(notice, list(notice.items), now, destination, source, fell_back_from, n, len(groups))
        body.extend(block for _, block in group)
        message = TeamsMessage(_message(body), fingerprints=tuple(i.fingerprint for i, _ in group),
                               summary=body[0]["text"])
        if message.size > max_bytes:  # a finding whose own texts are enormous: cut every run to fit
            message = _cut(message, max_bytes)
        out.append(message)
    return out


def _frame(notice: Notice, items: list[NoticeItem], now: datetime, destination: str, source: str,
           fell_back_from: str | None, part: int, parts: int) -> list[dict[str, Any]]:
    heading, colour = _title(notice, items or list(notice.items), part, parts)
    body = [_heading(heading, color=colour)]
    if notice.kind is NoticeKind.UPDATE and notice.reason:
        body.append(_plain(f"Why now: {notice.reason}", subtle=True))
    body.append(_route(notice, destination, source, fell_back_from))
    return body


def _shorten(node: Any, limit: int) -> Any:
    """`node` with every TextRun's text cut to `limit` characters."""
    if isinstance(node, dict):
        return {k: (truncate(v, limit) if k == "text" and isinstance(v, str) and node.get("type") == "TextRun"
                    else _shorten(v, limit)) for k, v in node.items()}
    if isinstance(node, list):
        return [_shorten(v, limit) for v in node]
    return node


def _cut(message: TeamsMessage, max_bytes: int) -> TeamsMessage:
    """`message` with its text runs cut shorter and shorter until it fits `max_bytes`."""
    limit = MAX_RUN_TEXT
    while message.size > max_bytes and limit > 40:
        limit //= 2
        message = TeamsMessage(_shorten(message.body, limit), message.fingerprints, message.summary)
    return message


def render_text(text: str) -> TeamsMessage:
    """A short plain message (a reply: acknowledgements)."""
    return TeamsMessage(_message([_plain(text)]), summary=text[:80])


def _groups(title: str, groups: tuple[GroupTotal, ...], limit: int = 10) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"type": "TextBlock", "text": title, "weight": "Bolder", "wrap": True}]
    for g in groups[:limit]:
        out.append(_plain(f"{g.name}: {usd(g.wasted_usd)} ({trend_words(g.wasted_usd, g.previous_usd, new=g.new)}, {g.findings} open)"))
    if len(groups) > limit:
        out.append(_plain(f"… and {len(groups) - limit} more", subtle=True))
    if not groups:
        out.append(_plain("none", subtle=True))
    return out


def render_summary(summary: DailySummary, *, note: str | None = None, max_bytes: int = MAX_PAYLOAD_BYTES) -> TeamsMessage:
    """The daily summary as one card (groups cut to fit `max_bytes`)."""
    facts = [
        ("Wasted", f"{usd(summary.wasted_usd)} ({versus_words(summary.wasted_usd, summary.previous_usd)})"),
        ("Open now", f"{summary.open_findings} findings at {usd(summary.open_usd_per_day)}/day"),
        ("Opened / resolved", f"{summary.opened} / {summary.resolved}"),
        ("Savings", f"{usd(summary.saved_usd_per_day)}/day from resolutions, {usd(summary.realised_savings_usd)} realised"),
    ]
    if summary.unpriced:
        facts.append(("Unpriced", f"{summary.unpriced} findings (not in the totals)"))
    top = [_plain(f"{n}. {offender_name(o.workload, o.namespace)} ({namespace_label(o.namespace)}, {people_kind_label(o.kind)}, {_whose(o.team)}): "
                  f"{usd(o.wasted_usd)} · {per_day(o.usd_per_day)}" + ("" if o.open else " · resolved"))
           for n, o in enumerate(summary.top, start=1)]
    for limit in (10, 5, 2):
        body: list[dict[str, Any]] = [
            _heading(f"GPU waste summary {period_date(summary.until)}"),
            _plain(f"{when(summary.since)} → {when(summary.until)}", subtle=True),
            _facts(facts),
            *_groups("By team", summary.by_team, limit), *_groups("By kind", summary.by_kind, limit),
            *_groups("By cluster", summary.by_cluster, limit),
            {"type": "TextBlock", "text": "Top offenders", "weight": "Bolder", "wrap": True}, *top[:limit],
        ]
        if note:
            body.append(_plain(note, subtle=True))
        message = TeamsMessage(_message(body), summary=f"GPU waste summary: {usd(summary.wasted_usd)} wasted")
        if message.size <= max_bytes:
            return message
    return _cut(message, max_bytes)


__all__ = ["CARD_CONTENT_TYPE", "CARD_VERSION", "MAX_PAYLOAD_BYTES", "TeamsMessage", "escape_markdown",
           "render_notice", "render_summary", "render_text"]

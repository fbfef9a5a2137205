"""Adapter (pure): the daily summary as one Slack message (at most 12 blocks; every text within limits)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from gpuwaste.models.notices import DailySummary, GroupTotal
from gpuwaste.people import kind_label as people_kind_label
from gpuwaste.people import (  # one money/date/age format on every surface
    namespace_label,
    offender_name,
    period_date,
    trend_words,
    usd,
    versus_words,
    when,
)
from gpuwaste.sinks.slack_limits import (
    SlackPayload,
    _context,
    _header,
    _section,
    escape,
    truncate,
)
from gpuwaste.sinks.slack_text import (
    _whose_team,
    per_day,
)
from gpuwaste.sinks.summary_spend import slack_lines


def _trend(current: Decimal, previous: Decimal, *, new: bool | None = None) -> str:
    """`people.trend_words` (the summary report's words), with an arrow when there is a change to point."""
    words = trend_words(current, previous, new=new)
    if previous == 0:
        return words
    delta = current - previous
    arrow = ":arrow_up:" if delta > 0 else (":arrow_down:" if delta < 0 else ":left_right_arrow:")
    return f"{arrow} {words}"


def _group_lines(groups: tuple[GroupTotal, ...], limit: int) -> str:
    lines = [
        f"• {escape(g.name)}: *{usd(g.wasted_usd)}*"
        f" ({_trend(g.wasted_usd, g.previous_usd, new=g.new)}, {g.findings} open)"
        for g in groups[:limit]
    ]
    if len(groups) > limit:
        lines.append(f"… and {len(groups) - limit} more")
    return "\n".join(lines) or "none"


def render_summary(summary: DailySummary, *, chart_note: str | None = None) -> SlackPayload:
    """The daily summary as one message (at most 12 blocks; every text within limits)."""
    period = f"{when(summary.since)} → {when(summary.until)}"
    head = (
        f"*Wasted:* *{usd(summary.wasted_usd)}* ({versus_words(summary.wasted_usd, summary.previous_usd)})\n"
        f"*Open now:* {summary.open_findings} findings at {usd(summary.open_usd_per_day)}/day\n"
        f"*Opened:* {summary.opened} · *Resolved:* {summary.resolved} · *Savings:* {usd(summary.saved_usd_per_day)}/day"
        f" from resolutions, {usd(summary.realised_savings_usd)} realised in the period"
    )
    if summary.unpriced:
        head += f"\n_{summary.unpriced} findings are unpriced and not in the totals._"
    top = [
        f"{n}. {escape(offender_name(o.workload, o.namespace))} ({escape(namespace_label(o.namespace))},"
        f" {escape(people_kind_label(o.kind))}, {escape(_whose_team(o.team))}): *{usd(o.wasted_usd)}* ·"
        f" {per_day(o.usd_per_day)}"
        + ("" if o.open else " · resolved")
        for n, o in enumerate(summary.top, start=1)
    ]
    blocks: list[dict[str, Any]] = [
        _header(f"GPU waste summary {period_date(summary.until)}"),  # the same date as the report's title
        _context(period),
        _section(head),
        {"type": "divider"},
        _section(f"*By team*\n{_group_lines(summary.by_team, 10)}"),
        _section(f"*By kind*\n{_group_lines(summary.by_kind, 10)}"),
        _section(f"*By cluster*\n{_group_lines(summary.by_cluster, 10)}"),
        _section(f"*By namespace*\n{_group_lines(summary.by_namespace, 10)}"),
        _section("*Top offenders*\n" + ("\n".join(top) or "none")),
    ]
    if summary.spend is not None:  # the fleet funnel and the allocated cost per team (issue 24)
        blocks.append(_section("*Spend (allocated cost) · month to date and month-end at the current rate*\n"
                               + truncate(escape(slack_lines(summary)), 2900)))
    if summary.justified:  # owners' reasons still running: what they cover
        lines = [f"{escape(_whose_team(j.team))}: {j.findings} finding(s), {per_day(j.usd_per_day)} covered, "
                 f"first ends {j.next_end:%Y-%m-%d}" for j in summary.justified[:10]]
        blocks.append(_section("*Justified (Expected / Snooze)*\n" + "\n".join(lines)))
    if chart_note:
        blocks.append(_context(escape(chart_note)))
    text = f"GPU waste summary: {usd(summary.wasted_usd)} wasted, {usd(summary.open_usd_per_day)}/day open"
    return SlackPayload(text=text, blocks=blocks)


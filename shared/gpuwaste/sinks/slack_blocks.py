"""Adapter (pure): notices and summaries → Slack Block Kit payloads, escaped and split within Slack's limits.

The alert (one finding: every fact and the four buttons), the thread update, the text-only fallback and the Details
reply are here; the pieces are by concern: `slack_limits` (Block Kit's limits and blocks), `slack_text` (a finding
in a chat's words), `slack_digest` (the digest's lines and its split into messages), `slack_summary` (the daily
summary). Their public names are re-exported from here, where the sinks and tests import them.
Ages count to the scan that saw the finding.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from gpuwaste.advice import advise
from gpuwaste.headlines import title_line
from gpuwaste.models.findings import Finding
from gpuwaste.models.notices import Notice, NoticeItem, NoticeKind
from gpuwaste.people import details_lines, gpus, idle_mode_label, kind_heading, no_codes, usd, when
from gpuwaste.sinks.slack_digest import (
    _cost_order,
    _digest_messages,
    _full_blocks,
    _tail_sections,
)
from gpuwaste.sinks.slack_limits import (
    _ACTIONS,
    _DIGEST_MENU,
    ACTION_DETAILS,
    ACTION_EXPECTED,
    ACTION_PREFIX,
    ACTION_SNOOZE_1D,
    ACTION_SNOOZE_7D,
    ACTION_TICKET,
    CENT,
    DIGEST_FULL_BLOCKS,
    DIGEST_ITEMS_PER_MESSAGE,
    DIGEST_TAIL_SECTIONS,
    MAX_BLOCKS,
    MAX_CONTEXT_TEXT,
    MAX_FIELD_TEXT,
    MAX_FIX,
    MAX_HEADER_TEXT,
    MAX_NAME,
    MAX_OVERFLOW_OPTIONS,
    MAX_SECTION_TEXT,
    MAX_TAIL_LINE,
    MAX_TEXT,
    MESSAGE_TEXT_BUDGET,
    TEXT_ONLY_CHARS,
    SlackPayload,
    _buttons,
    _context,
    _fields,
    _header,
    _section,
    blocks_text_chars,
    escape,
    truncate,
    visible_chars,
)
from gpuwaste.sinks.slack_summary import render_summary
from gpuwaste.sinks.slack_text import (
    OWNER_DOCS,
    SIZING_NOTE,
    _addressee,
    _for,
    _links,
    _owner_hint,
    _resolved_line,
    _route_line,
    _subject_text,
    alert_title,
    began,
    cost_mrkdwn,
    evidence_line,
    finding_per_day,
    formula_text,
    kind_label,
    kind_label_short,
    per_day,
    scan_time,
    since_text,
    ticket_text,
    where_text,
    workload_text,
)


def _alert_blocks(notice: Notice, item: NoticeItem, fell_back_from: str | None) -> list[dict[str, Any]]:
    f = item.finding
    blocks: list[dict[str, Any]] = [_header(alert_title(item))]
    if item.resolved:
        blocks.append(_section(_resolved_line(item)))
    mention = f"<@{notice.mention}> " if notice.mention else ""
    what = (f"{mention}*What:* {escape(no_codes(f.title))}\n*Kind:* {escape(kind_heading(f.kind))} — confidence "
            f"{f.confidence.value}")
    if f.idle_mode:
        what += f" ({escape(idle_mode_label(f.idle_mode.value))})"
    lines = [
        what,
        f"*Where:* {escape(where_text(f))}",
        f"*Whose:* {escape(_addressee(notice))}",
        f"*Since:* {since_text(item)}",
    ]
    blocks.append(_section("\n".join(lines)))
    if hint := _owner_hint(notice):
        blocks.append(_section(hint))
    # no "Ticket: none": a ticket this run requests exists only after the message was posted
    ticket = (("Ticket", ticket_text(item)),) if item.ticket_key else ()
    sizing = finding_per_day(f) == SIZING_NOTE  # a $0 sizing note: no money, no "0 GPUs wasted", no buttons
    if sizing:
        blocks.append(_fields([("Cost", SIZING_NOTE), *ticket]))
    else:
        gpu_text = f"{gpus(f.wasted_gpu_share)} × {f.subject.gpu_model or 'GPU'}"
        blocks.append(_fields([("USD/day", usd(f.usd_per_day)), ("Cumulative so far", usd(item.cumulative_usd)),
                               ("GPUs wasted", escape(gpu_text)), *ticket]))
        blocks.append(_section(f"*Cost:* {cost_mrkdwn(f)}"))
    if f.evidence:
        ev = "\n".join(f"• {escape(evidence_line(e))}" for e in f.evidence[:5])
        blocks.append(_section(f"*Evidence*\n{ev}"))
    advice = advise(f)
    fix = escape(advice.action) + (f"\n_{escape(advice.caution)}_" if advice.caution else "")
    if advice.commands:
        fix += "\n```" + "\n".join(escape(c.shell()) for c in advice.commands) + "```"
    blocks.append(_section(f"*How to fix*\n{fix}"))
    short = item.fingerprint[:6]
    context = [_route_line(notice, fell_back_from), f"finding `{short}` (`gpuwaste explain {short}`)"]
    if item.links:
        context.insert(0, _links(item))
    blocks.append(_context(*context))
    if notice.interactive and not item.resolved and not sizing:
        blocks.append(_buttons(item.fingerprint, ticketed=bool(item.ticket_key)))
    return blocks


def _fallback_text(notice: Notice) -> str:
    items = notice.items
    total = sum((i.finding.usd_per_day or Decimal(0) for i in items), Decimal(0))
    if len(items) == 1:
        return escape(f"{alert_title(items[0])} — {finding_per_day(items[0].finding)}")
    return escape(f"GPU waste: {len(items)} findings{_for(notice)} — {usd(total)}/day")


def render_notice(notice: Notice, *, now: datetime | None = None, fell_back_from: str | None = None,
                  budget: int = MESSAGE_TEXT_BUDGET) -> list[SlackPayload]:
    """Block Kit payloads for `notice`, split so each respects Slack's limits.

    ALERT/RESOLVED of one item: one message with every fact and the four buttons. DIGEST (or a RESOLVED digest):
    a header (count, owner, USD/day), one context line (the scan's time, clusters, cumulative so far), then per kind
    a heading with its recommendation once and one line per finding (USD/day, workload, GPUs, how long open) with
    its buttons (snooze 7 days, expected, ticket, details: evidence, formula and price source go to the thread on
    request); what does not fit (50 blocks; `budget` characters of block text, Slack's cumulative limit, B33) are
    compact lines ("…and N more"), continued in further messages ("part 2/3"). UPDATE: a short thread reply.

    Ages count to the scan that saw each finding (`Finding.observed_at`), never to the wall clock: `now` is
    accepted for callers' symmetry and not read.
    """
    del now
    text = _fallback_text(notice)
    if notice.kind is NoticeKind.UPDATE:
        return [_update_payload(notice, fell_back_from)]
    if len(notice.items) == 1 and notice.kind is not NoticeKind.DIGEST:
        item = notice.items[0]
        alert = _alert_blocks(notice, item, fell_back_from)
        return [SlackPayload(text=text, blocks=alert, fingerprints=(item.fingerprint,))]
    items = sorted(notice.items, key=_cost_order)  # the costliest get buttons; `_full_blocks` groups them by kind
    clusters = sorted({i.finding.subject.cluster for i in items})
    chunks = _digest_messages(items, interactive=notice.interactive, clusters=len(clusters), budget=budget)
    total = sum((i.finding.usd_per_day or Decimal(0) for i in items if not i.resolved), Decimal(0))
    cumulative = sum((i.cumulative_usd for i in items), Decimal(0))
    resolved = sum(1 for i in items if i.resolved)
    scan = max(scan_time(i) for i in items)
    payloads: list[SlackPayload] = []
    for n, (full, tail) in enumerate(chunks, start=1):
        part = f" (part {n}/{len(chunks)})" if len(chunks) > 1 else ""
        title = f"GPU waste: {len(items)} findings{_for(notice)} — {usd(total)}/day{part}"
        blocks: list[dict[str, Any]] = [_header(title)]
        if n == 1:
            mention = f"<@{notice.mention}> " if notice.mention else ""
            intro = (f"{mention}Scan {when(scan)} · {escape(', '.join(clusters))} · cumulative so far {usd(cumulative)}"
                     + (f" · {resolved} resolved since" if resolved else ""))
            blocks.append(_context(intro))
            if hint := _owner_hint(notice):
                blocks.append(_section(hint))
        blocks.extend(_full_blocks(full, interactive=notice.interactive, clusters=len(clusters)))
        if tail:
            blocks.extend(_tail_sections(tail, clusters=len(clusters)))
        blocks.append(_context(_route_line(notice, fell_back_from, team=False)))  # the header names the team
        carried = full + tail
        fingerprints = tuple(i.fingerprint for i in carried)
        payloads.append(SlackPayload(text=text + part, blocks=blocks, fingerprints=fingerprints))
    return payloads


def details_text(item_finding: Finding, fingerprint: str) -> str:
    """The Details reply of a digest line (mrkdwn, escaped).

    Evidence in people's units, the cost formula, the price's public source, caveats and what to do, and the `gpuwaste
    explain` ID.
    """
    lines = [f"*Details* of `{fingerprint[:6]}` ({escape(_subject_text(item_finding, 80))}):"]
    lines += [f"• {escape(line)}" for line in details_lines(item_finding)]
    lines.append(f"More: `gpuwaste explain {fingerprint[:6]}`")
    return truncate("\n".join(lines), MAX_SECTION_TEXT)


def render_text_only(notice: Notice, *, now: datetime, fell_back_from: str | None = None) -> list[SlackPayload]:
    """The notice as plain mrkdwn text without blocks, in messages of at most `TEXT_ONLY_CHARS` characters.

    The last resort when Slack refuses the Block Kit rendering for its size (`msg_blocks_too_long`,
    `invalid_blocks`): the owner still hears about every finding, without buttons.
    """
    items = sorted(notice.items, key=lambda i: (-(i.finding.usd_per_day or Decimal(-1)), i.fingerprint))
    head = _fallback_text(notice)
    lines = []
    for n, item in enumerate(items, start=1):
        f = item.finding
        state = " (resolved)" if item.resolved else ""
        lines.append(truncate(
            f"{n}. {escape(workload_text(f))} — {escape(kind_label(f))} · {finding_per_day(f)}{state}"
            f" · since {when(began(item))} · cumulative {usd(item.cumulative_usd)} · {escape(f.subject.cluster)}"
            f" · finding {item.fingerprint[:6]}", MAX_TAIL_LINE))
    footer = _route_line(notice, fell_back_from) + (f" · scan {escape(notice.scan_id)}" if notice.scan_id else "")
    chunks: list[tuple[list[str], list[str]]] = []
    current: list[str] = []
    fps: list[str] = []
    size = len(head) + len(footer) + 40
    for line, item in zip(lines, items, strict=True):
        if current and size + len(line) + 1 > TEXT_ONLY_CHARS:
            chunks.append((current, fps))
            current, fps, size = [], [], len(head) + len(footer) + 40
        current.append(line)
        fps.append(item.fingerprint)
        size += len(line) + 1
    if current:
        chunks.append((current, fps))
    out = []
    for n, (chunk, chunk_fps) in enumerate(chunks, start=1):
        part = f" (part {n}/{len(chunks)})" if len(chunks) > 1 else ""
        text = "\n".join([f"*{head}{part}*", *chunk, f"_{footer}_"])
        out.append(SlackPayload(text=truncate(text, MAX_TEXT), blocks=[], fingerprints=tuple(chunk_fps)))
    return out


def _update_payload(notice: Notice, fell_back_from: str | None) -> SlackPayload:
    item = notice.items[0]
    f = item.finding
    mention = f"<@{notice.mention}> " if notice.mention else ""
    reason = escape(notice.reason or "update")
    lines = [
        f"{mention}*{reason}* — {escape(workload_text(f))}: *{finding_per_day(f)}*, cumulative"
        f" {usd(item.cumulative_usd)}"
        f", wasting since {since_text(item)}",
    ]
    sizing = finding_per_day(f) == SIZING_NOTE
    if not sizing:  # a sizing note has no formula to show ("$0.00/day")
        lines.append(escape(formula_text(f)))
    if f.evidence:
        lines.append(escape(evidence_line(f.evidence[0])))
    blocks = [_section("\n".join(lines)), _context(_route_line(notice, fell_back_from))]
    if notice.interactive and not sizing:
        blocks.append(_buttons(item.fingerprint, ticketed=bool(item.ticket_key)))
    text = escape(f"{notice.reason or 'Update'}: {title_line(f).partition(': ')[2]} — {finding_per_day(f)}")
    return SlackPayload(text=text, blocks=blocks, fingerprints=(item.fingerprint,))



__all__ = [
    "ACTION_DETAILS", "ACTION_EXPECTED", "ACTION_PREFIX", "ACTION_SNOOZE_1D", "ACTION_SNOOZE_7D", "ACTION_TICKET",
    "CENT", "DIGEST_FULL_BLOCKS", "DIGEST_ITEMS_PER_MESSAGE", "DIGEST_TAIL_SECTIONS", "MAX_BLOCKS",
    "MAX_CONTEXT_TEXT", "MAX_FIELD_TEXT", "MAX_FIX", "MAX_HEADER_TEXT", "MAX_NAME", "MAX_OVERFLOW_OPTIONS",
    "MAX_SECTION_TEXT", "MAX_TAIL_LINE", "MAX_TEXT", "MESSAGE_TEXT_BUDGET", "OWNER_DOCS", "SIZING_NOTE",
    "SlackPayload", "TEXT_ONLY_CHARS", "_ACTIONS", "_DIGEST_MENU", "alert_title", "began", "blocks_text_chars",
    "cost_mrkdwn", "details_text", "escape", "evidence_line", "finding_per_day", "formula_text", "kind_label",
    "kind_label_short", "per_day", "render_notice", "render_summary", "render_text_only", "scan_time", "since_text",
    "ticket_text", "truncate", "usd", "visible_chars", "where_text", "workload_text",
]

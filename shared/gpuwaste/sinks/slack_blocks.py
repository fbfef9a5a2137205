"""Adapter (pure): notices and summaries → Slack Block Kit payloads, escaped and split within Slack's limits.

Limits (Slack docs, enforced by tests/servers/slack_api.py): 50 blocks per message, section text 3000
characters, section fields 10 × 2000, header 150 characters of plain_text, top-level text 40000.
Names that come from the cluster are escaped for mrkdwn (`&`, `<`, `>`), so `<!channel>`, `<@U123>` or
`<http://x|y>` in a pod name can neither ping nor link.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from gpuwaste.models.findings import Evidence, Finding
from gpuwaste.models.notices import DailySummary, GroupTotal, Notice, NoticeItem, NoticeKind
from gpuwaste.people import age, period_date, usd, when  # one money/date/age format on every surface

MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_FIELD_TEXT = 2000
MAX_HEADER_TEXT = 150
MAX_TEXT = 40000
MAX_CONTEXT_TEXT = 2000
#: Findings of a digest shown in full (one section each, with its action menu) per message; the rest of
#: the message's 50 blocks (header, intro, footer and `DIGEST_TAIL_SECTIONS` sections) carries the tail.
DIGEST_ITEMS_PER_MESSAGE = 40
#: Sections per message for the digest's tail: one compact line per further finding, packed up to
#: `MAX_SECTION_TEXT` characters each (without action menus), so one owner's 50 findings are one message.
DIGEST_TAIL_SECTIONS = MAX_BLOCKS - 3 - DIGEST_ITEMS_PER_MESSAGE
MAX_TAIL_LINE = 400
#: Slack also refuses a message whose blocks carry too much text in total (`msg_blocks_too_long`, undocumented,
#: measured at ~11,300 characters; field guide B33). Digests are split so each message's blocks carry at most
#: this many characters of text; a refused message is retried at half this budget, then as text only.
MESSAGE_TEXT_BUDGET = 10_000
#: Characters per message of the text-only fallback (Slack shows up to 4,000 before "show more").
TEXT_ONLY_CHARS = 3_500

ACTION_SNOOZE_1D = "snooze_1d"
ACTION_SNOOZE_7D = "snooze_7d"
ACTION_EXPECTED = "expected"
ACTION_TICKET = "ticket"
ACTION_PREFIX = "gpuwaste_"
_ACTIONS = (
    (ACTION_SNOOZE_1D, "Snooze 1 day"),
    (ACTION_SNOOZE_7D, "Snooze 7 days"),
    (ACTION_EXPECTED, "Expected"),
    (ACTION_TICKET, "Create ticket"),
)
CENT = Decimal("0.01")


@dataclass
class SlackPayload:
    """One `chat.postMessage` / `chat.update` body (without channel/ts) and the findings it carries."""

    text: str
    blocks: list[dict[str, Any]]
    fingerprints: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def as_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `WebClient.chat_postMessage` / `chat_update`."""
        out: dict[str, Any] = {"text": self.text, **self.extra}
        if self.blocks:
            out["blocks"] = self.blocks
        return out


# -- text helpers (also used by the terminal notifier) -----------------------------------------------------
def escape(text: str) -> str:
    """Escape mrkdwn control characters: `&` → `&amp;`, `<` → `&lt;`, `>` → `&gt;` (Slack's rule)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def truncate(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, ending with "…" when cut."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def kind_label(finding: Finding) -> str:
    """The waste kind in words ("idle allocation")."""
    return finding.kind.value.replace("_", " ")


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


def _num(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ratio":
        return f"{value:.1%}"
    if unit == "percent":
        return f"{value:.1f}%"
    if unit == "count":
        return f"{value:g}"
    return f"{value:,.0f} {unit}" if abs(value) >= 100 else f"{value:,.2f} {unit}"


def evidence_line(e: Evidence) -> str:
    """One evidence signal: avg/p95/max over the window, coverage and threshold (plain text)."""
    name = e.signal.replace("DCGM_FI_PROF_", "").replace("DCGM_FI_DEV_", "")
    span = f"{e.window_s // 3600} h" if e.window_s % 3600 == 0 else f"{round(e.window_s / 60)} min"
    stats = ", ".join(f"{label} {_num(v, e.unit)}" for label, v in (("avg", e.avg), ("p95", e.p95), ("max", e.max))
                      if v is not None)
    text = f"{name}: {stats or 'no samples'} over {span}"
    if e.samples:
        text += f", coverage {e.coverage:.0%}"
    if e.comparison:
        text += f" (flagged when {e.comparison})"
    if e.note:
        text += f" — {e.note}"
    return text


def formula_text(finding: Finding, *, with_source: bool = True) -> str:
    """USD/day with its formula (and the price's source and date), or why it is unpriced (plain text)."""
    cost = finding.cost
    if cost is None:
        return "unpriced (no price yet)"
    if not cost.priced:
        return cost.formula if cost.formula.startswith("unpriced") else f"unpriced: {cost.formula}"
    src = ", ".join(x for x in (cost.source, cost.effective_date) if x)
    caveat = f" ⚠ {'; '.join(cost.warnings)}" if cost.warnings and with_source else ""
    return f"{cost.formula}" + (f" (price: {src})" if src and with_source else "") + caveat


def per_day(value: Decimal | None) -> str:
    """"$12.50/day", or "unpriced"."""
    return "unpriced" if value is None else f"{usd(value)}/day"


# -- blocks ----------------------------------------------------------------------------------------------
def _header(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text", "text": truncate(text, MAX_HEADER_TEXT), "emoji": True}}


def _section(text: str, **extra: Any) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": truncate(text, MAX_SECTION_TEXT)}, **extra}


def _fields(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "type": "section",
        "fields": [{"type": "mrkdwn", "text": truncate(f"*{k}*\n{v}", MAX_FIELD_TEXT)} for k, v in pairs[:10]],
    }


def _context(*texts: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": truncate(t, MAX_CONTEXT_TEXT)} for t in texts]}


def _links(item: NoticeItem) -> str:
    return " · ".join(f"<{escape(url)}|{escape(label)}>" for label, url in item.links)


def _route_line(notice: Notice, fell_back_from: str | None) -> str:
    r = notice.route
    text = f"Routed to {escape(r.channel)} by {escape(r.source)}"
    if r.team:
        text += f" · team {escape(r.team)}"
    if fell_back_from:
        text += f" · :warning: {escape(fell_back_from)} was not found (channel_not_found), posted to the default channel"
    return text


def _buttons(fingerprint: str) -> dict[str, Any]:
    elements = []
    for action, label in _ACTIONS:
        button: dict[str, Any] = {
            "type": "button",
            "action_id": f"{ACTION_PREFIX}{action}",
            "text": {"type": "plain_text", "text": label},
            "value": f"{action}|{fingerprint}",
        }
        if action == ACTION_EXPECTED:
            button["confirm"] = {
                "title": {"type": "plain_text", "text": "Mark as expected?"},
                "text": {"type": "plain_text", "text": "gpuwaste will stop alerting on this finding."},
                "confirm": {"type": "plain_text", "text": "Expected"},
                "deny": {"type": "plain_text", "text": "Cancel"},
            }
        elements.append(button)
    return {"type": "actions", "block_id": f"gpuwaste_actions_{fingerprint[:16]}", "elements": elements}


def _overflow(fingerprint: str) -> dict[str, Any]:
    return {
        "type": "overflow",
        "action_id": f"{ACTION_PREFIX}menu_{fingerprint[:16]}",
        "options": [
            {"text": {"type": "plain_text", "text": label}, "value": f"{action}|{fingerprint}"}
            for action, label in _ACTIONS
        ],
    }


def _resolved_line(item: NoticeItem) -> str:
    at = f" {when(item.resolved_at)}" if item.resolved_at else ""
    saved = f"; saves {usd(item.saved_usd_per_day)}/day" if item.saved_usd_per_day is not None else ""
    return f":white_check_mark: *Resolved*{at}{saved} (wasted {usd(item.cumulative_usd)} while open)"


def _alert_blocks(notice: Notice, item: NoticeItem, now: datetime, fell_back_from: str | None) -> list[dict[str, Any]]:
    f = item.finding
    prefix = "Resolved: " if item.resolved else "GPU waste: "
    blocks: list[dict[str, Any]] = [_header(prefix + f.title)]
    if item.resolved:
        blocks.append(_section(_resolved_line(item)))
    mention = f"<@{notice.mention}> " if notice.mention else ""
    what = f"{mention}*What:* {escape(kind_label(f))} — confidence {f.confidence.value}"
    if f.idle_mode:
        what += f" ({escape(f.idle_mode.value.replace('_', ' '))})"
    lines = [
        what,
        f"*Where:* {escape(where_text(f))}",
        f"*Whose:* {escape(notice.route.team or 'unassigned')}",
        f"*Since:* {when(item.first_seen)} ({age(item.first_seen, now)})",
    ]
    blocks.append(_section("\n".join(lines)))
    gpus = f"{f.wasted_gpu_share.normalize():f} × {f.subject.gpu_model or 'GPU'}"
    blocks.append(
        _fields(
            [
                ("USD/day", usd(f.usd_per_day)),
                ("Cumulative so far", usd(item.cumulative_usd)),
                ("GPUs wasted", escape(gpus)),
                ("Ticket", escape(item.ticket_key) if item.ticket_key else "none"),
            ]
        )
    )
    blocks.append(_section(f"*Cost:* {escape(formula_text(f))}"))
    if f.evidence:
        ev = "\n".join(f"• {escape(evidence_line(e))}" for e in f.evidence[:5])
        blocks.append(_section(f"*Evidence*\n{ev}"))
    blocks.append(_section(f"*Recommendation*\n{escape(f.recommendation)}"))
    context = [_route_line(notice, fell_back_from), f"finding `{item.fingerprint[:16]}`"]
    if item.links:
        context.insert(0, _links(item))
    blocks.append(_context(*context))
    if notice.interactive and not item.resolved:
        blocks.append(_buttons(item.fingerprint))
    return blocks


def _digest_item(index: int, item: NoticeItem, now: datetime, interactive: bool) -> dict[str, Any]:
    f = item.finding
    head = f"*{index}. {escape(workload_text(f))}* — {escape(kind_label(f))} · *{per_day(f.usd_per_day)}*"
    lines = [
        head,
        f"since {when(item.first_seen)} ({age(item.first_seen, now)}) · cumulative {usd(item.cumulative_usd)}"
        f" · {escape(f.subject.cluster)}",
        f"{escape(formula_text(f, with_source=False))}",
    ]
    if f.evidence:
        lines.append(escape(evidence_line(f.evidence[0])))
    lines.append(f"→ {escape(truncate(f.recommendation, 400))}")
    if item.links:
        lines.append(_links(item))
    if item.resolved:
        lines.insert(1, _resolved_line(item))
    extra = {"accessory": _overflow(item.fingerprint)} if interactive and not item.resolved else {}
    return _section("\n".join(lines), **extra)


def _tail_line(index: int, item: NoticeItem) -> str:
    """One compact line of a digest's tail: number, workload, kind, USD/day, cluster (no action menu)."""
    f = item.finding
    state = " · resolved" if item.resolved else ""
    line = f"{index}. *{escape(workload_text(f))}* — {escape(kind_label(f))} · *{per_day(f.usd_per_day)}* · {escape(f.subject.cluster)}{state}"
    return truncate(line, MAX_TAIL_LINE)


def blocks_text_chars(blocks: list[dict[str, Any]]) -> int:
    """Characters of text the blocks carry (what Slack's cumulative `msg_blocks_too_long` limit counts)."""
    total = 0
    stack: list[Any] = list(blocks)
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            text = node.get("text")
            if isinstance(text, str):
                total += len(text)
            stack.extend(v for k, v in node.items() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend(node)
    return total


#: Text reserved per message for the header, the intro and the footer.
_FRAME_CHARS = 1_200


def _digest_messages(items: list[NoticeItem], *, now: datetime, interactive: bool,
                     budget: int = MESSAGE_TEXT_BUDGET) -> list[tuple[list[NoticeItem], list[NoticeItem]]]:
    """(full items, tail items) per message: up to `DIGEST_ITEMS_PER_MESSAGE` full, then as many tail lines as
    `DIGEST_TAIL_SECTIONS` sections of `MAX_SECTION_TEXT` characters hold (one reserved line heads the tail),
    all within `budget` characters of text per message (Slack's cumulative limit)."""
    out: list[tuple[list[NoticeItem], list[NoticeItem]]] = []
    k = 0
    room = max(budget - _FRAME_CHARS, 500)
    while k < len(items):
        full: list[NoticeItem] = []
        used_text = 0
        # the costliest findings get a full section (with the action menu) in the first message, within half its
        # text; the rest are compact lines, so a large digest needs few messages
        full_room = room if len(items) - k <= DIGEST_ITEMS_PER_MESSAGE else (room // 2 if not out else 0)
        while k < len(items) and len(full) < DIGEST_ITEMS_PER_MESSAGE:
            n = blocks_text_chars([_digest_item(k + 1, items[k], now, interactive)])
            if (full or out) and used_text + n > full_room:
                break
            full.append(items[k])
            used_text += n
            k += 1
        tail: list[NoticeItem] = []
        sections, used = 1, MAX_TAIL_LINE + 1  # the tail's heading line
        used_text += MAX_TAIL_LINE + 1
        while k < len(items):
            n = len(_tail_line(k + 1, items[k])) + 1
            if used_text + n > room:
                break
            if used + n > MAX_SECTION_TEXT:
                if sections == DIGEST_TAIL_SECTIONS:
                    break
                sections, used = sections + 1, 0
            used += n
            used_text += n
            tail.append(items[k])
            k += 1
        out.append((full, tail))
    return out


def _tail_sections(first_index: int, tail: list[NoticeItem]) -> list[dict[str, Any]]:
    """The tail's sections: a heading line, then one line per finding, packed within `MAX_SECTION_TEXT`."""
    usd_tail = sum((i.finding.usd_per_day or Decimal(0) for i in tail if not i.resolved), Decimal(0))
    lines = [f"*…and {len(tail)} more, {usd(usd_tail)}/day together* (no action menu here; the costliest above have one):"]
    lines += [_tail_line(first_index + j, item) for j, item in enumerate(tail)]
    sections: list[dict[str, Any]] = []
    current: list[str] = []
    size = 0
    for line in lines:
        if current and size + len(line) + 1 > MAX_SECTION_TEXT:
            sections.append(_section("\n".join(current)))
            current, size = [], 0
        current.append(line)
        size += len(line) + 1
    if current:
        sections.append(_section("\n".join(current)))
    return sections


def _fallback_text(notice: Notice) -> str:
    items = notice.items
    total = sum((i.finding.usd_per_day or Decimal(0) for i in items), Decimal(0))
    if len(items) == 1:
        f = items[0].finding
        state = "Resolved" if items[0].resolved else "GPU waste"
        return escape(truncate(f"{state}: {f.title} — {per_day(f.usd_per_day)}", 3000))
    return escape(f"GPU waste: {len(items)} findings for {notice.route.team or notice.route.channel} — {usd(total)}/day")


def render_notice(notice: Notice, *, now: datetime, fell_back_from: str | None = None,
                  budget: int = MESSAGE_TEXT_BUDGET) -> list[SlackPayload]:
    """Block Kit payloads for `notice`, split so each respects Slack's limits.

    ALERT/RESOLVED of one item: one message. DIGEST (or a RESOLVED digest): a header, an intro, one section
    per finding for the costliest (at most `DIGEST_ITEMS_PER_MESSAGE`, within half the message's text budget when
    more follow; with an overflow menu of actions), then the rest as compact lines ("…and N more, $X/day
    together") packed into up to `DIGEST_TAIL_SECTIONS` sections, and a footer; each message's blocks carry at
    most `budget` characters of text (Slack's cumulative limit, B33), and what does not fit continues in further
    messages of compact lines ("part 2/3").
    UPDATE: a short thread reply.
    """
    text = _fallback_text(notice)
    if notice.kind is NoticeKind.UPDATE:
        return [_update_payload(notice, now, fell_back_from)]
    if len(notice.items) == 1 and notice.kind is not NoticeKind.DIGEST:
        item = notice.items[0]
        return [SlackPayload(text=text, blocks=_alert_blocks(notice, item, now, fell_back_from), fingerprints=(item.fingerprint,))]
    items = sorted(notice.items, key=lambda i: (-(i.finding.usd_per_day or Decimal(-1)), i.fingerprint))
    chunks = _digest_messages(items, now=now, interactive=notice.interactive, budget=budget)
    total = sum((i.finding.usd_per_day or Decimal(0) for i in items if not i.resolved), Decimal(0))
    resolved = sum(1 for i in items if i.resolved)
    owner = notice.route.team or notice.route.channel
    clusters = sorted({i.finding.subject.cluster for i in items})
    payloads: list[SlackPayload] = []
    offset = 0
    for n, (full, tail) in enumerate(chunks, start=1):
        part = f" (part {n}/{len(chunks)})" if len(chunks) > 1 else ""
        title = f"GPU waste: {len(items)} findings for {owner} — {usd(total)}/day{part}"
        blocks: list[dict[str, Any]] = [_header(title)]
        if n == 1:
            mention = f"<@{notice.mention}> " if notice.mention else ""
            intro = (
                f"{mention}*{len(items)}* findings in {escape(', '.join(clusters))}"
                + (f" ({resolved} resolved since)" if resolved else "")
                + f", costing *{usd(total)}/day* together. Sorted by USD/day; "
                "each line gives the cost formula, the main evidence and what to do."
            )
            blocks.append(_section(intro))
        blocks.extend(_digest_item(offset + k + 1, item, now, notice.interactive) for k, item in enumerate(full))
        if tail:
            blocks.extend(_tail_sections(offset + len(full) + 1, tail))
        footer = [_route_line(notice, fell_back_from)]
        if notice.scan_id:
            footer.append(f"scan `{escape(notice.scan_id)}`")
        blocks.append(_context(*footer))
        carried = full + tail
        offset += len(carried)
        payloads.append(SlackPayload(text=text + part, blocks=blocks, fingerprints=tuple(i.fingerprint for i in carried)))
    return payloads


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
            f"{n}. {escape(workload_text(f))} — {escape(kind_label(f))} · {per_day(f.usd_per_day)}{state}"
            f" · since {when(item.first_seen)} · cumulative {usd(item.cumulative_usd)} · {escape(f.subject.cluster)}"
            f" · finding {item.fingerprint[:16]}", MAX_TAIL_LINE))
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


def _update_payload(notice: Notice, now: datetime, fell_back_from: str | None) -> SlackPayload:
    item = notice.items[0]
    f = item.finding
    mention = f"<@{notice.mention}> " if notice.mention else ""
    reason = escape(notice.reason or "update")
    lines = [
        f"{mention}*{reason}* — {escape(workload_text(f))}: *{per_day(f.usd_per_day)}*, cumulative {usd(item.cumulative_usd)}"
        f", open since {when(item.first_seen)} ({age(item.first_seen, now)})",
        escape(formula_text(f)),
    ]
    if f.evidence:
        lines.append(escape(evidence_line(f.evidence[0])))
    blocks = [_section("\n".join(lines)), _context(_route_line(notice, fell_back_from))]
    if notice.interactive:
        blocks.append(_buttons(item.fingerprint))
    text = escape(truncate(f"{notice.reason or 'Update'}: {f.title} — {per_day(f.usd_per_day)}", 3000))
    return SlackPayload(text=text, blocks=blocks, fingerprints=(item.fingerprint,))


# -- daily summary -----------------------------------------------------------------------------------------
def _trend(current: Decimal, previous: Decimal) -> str:
    delta = current - previous
    if previous == 0:
        return "new" if current else "±0"
    share = delta / previous
    arrow = ":arrow_up:" if delta > 0 else (":arrow_down:" if delta < 0 else ":left_right_arrow:")
    return f"{arrow} {'+' if delta >= 0 else '-'}{usd(abs(delta))} ({share:+.0%})"


def _group_lines(groups: tuple[GroupTotal, ...], limit: int) -> str:
    lines = [
        f"• {escape(g.name)}: *{usd(g.wasted_usd)}* ({_trend(g.wasted_usd, g.previous_usd)}, {g.findings} open)"
        for g in groups[:limit]
    ]
    if len(groups) > limit:
        lines.append(f"… and {len(groups) - limit} more")
    return "\n".join(lines) or "none"


def render_summary(summary: DailySummary, *, chart_note: str | None = None) -> SlackPayload:
    """The daily summary as one message (at most 12 blocks; every text within limits)."""
    period = f"{when(summary.since)} → {when(summary.until)}"
    head = (
        f"*Wasted:* *{usd(summary.wasted_usd)}* ({_trend(summary.wasted_usd, summary.previous_usd)} vs the period before)\n"
        f"*Open now:* {summary.open_findings} findings at {usd(summary.open_usd_per_day)}/day\n"
        f"*Opened:* {summary.opened} · *Resolved:* {summary.resolved} · *Savings:* {usd(summary.saved_usd_per_day)}/day"
        f" from resolutions, {usd(summary.realised_savings_usd)} realised in the period"
    )
    if summary.unpriced:
        head += f"\n_{summary.unpriced} findings are unpriced and not in the totals._"
    top = [
        f"{n}. {escape(o.workload or '-')} ({escape(o.namespace or o.cluster)}, {escape(o.kind.replace('_', ' '))},"
        f" team {escape(o.team)}): *{usd(o.wasted_usd)}* · {per_day(o.usd_per_day)}"
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
    if chart_note:
        blocks.append(_context(escape(chart_note)))
    text = f"GPU waste summary: {usd(summary.wasted_usd)} wasted, {usd(summary.open_usd_per_day)}/day open"
    return SlackPayload(text=text, blocks=blocks)

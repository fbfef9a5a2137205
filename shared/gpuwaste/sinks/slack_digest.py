"""Adapter (pure): a Slack digest — per kind a heading, per finding its line, evidence and fix with a folded menu.

A digest is read in seconds: under its kind's heading each finding has one line (USD/day, workload, GPUs, how long
open, its ticket linked), its evidence in one line (the reading against the rule, as the alert states it) and its
exact fix (the advice table's action), with its actions folded into one overflow menu beside it (snooze 7 days,
expected, create ticket, details — the alert's button names; none on a $0 finding), so text outweighs controls;
the commands, formula and price source are behind Details (a reply in the thread) and `gpuwaste explain <ID>`.
What does not fit (50 blocks, Slack's cumulative text limit) becomes compact lines, continued in further messages.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from gpuwaste.advice import advise
from gpuwaste.headlines import evidence_headline
from gpuwaste.models.notices import NoticeItem
from gpuwaste.people import gpus, kind_heading, usd
from gpuwaste.sinks.slack_limits import (
    DIGEST_FULL_BLOCKS,
    DIGEST_ITEMS_PER_MESSAGE,
    DIGEST_TAIL_SECTIONS,
    MAX_FIX,
    MAX_SECTION_TEXT,
    MAX_TAIL_LINE,
    MESSAGE_TEXT_BUDGET,
    _section,
    _with_menu,
    blocks_text_chars,
    escape,
    truncate,
)
from gpuwaste.sinks.slack_text import (
    SIZING_NOTE,
    _links,
    _since,
    _subject_text,
    finding_per_day,
    kind_label_short,
    per_day,
    ticket_text,
)


def _line(item: NoticeItem, *, clusters: int, kind: bool, short_id: bool) -> str:
    """One finding in one line (mrkdwn): USD/day, workload, GPUs, how long open; the kind when not under a heading."""
    f = item.finding
    parts = [f"*{finding_per_day(f)}*"]
    if kind:
        parts.append(escape(kind_label_short(f)))
    share = f.wasted_gpu_share
    parts.append(escape(_subject_text(f)))
    if share:  # a sizing note wastes no GPU: no "0 GPU"
        parts.append(f"{gpus(share)} GPU{'s' if share > 1 else ''}")
    parts.append(_since(item))
    if clusters > 1:
        parts.append(escape(f.subject.cluster))
    if item.ticket_key:
        parts.append(ticket_text(item))
    if item.resolved:
        parts.append(":white_check_mark: resolved" + (f", saves {per_day(item.saved_usd_per_day)}"
                                                       if item.saved_usd_per_day is not None else ""))
    if short_id:
        parts.append(f"`{item.fingerprint[:6]}`")
    line = " · ".join(parts)
    # the configured Prometheus/Grafana links (delivery.links), whole or not at all: a cut link would not work
    if item.links and len(line) + 3 + len(links := _links(item)) <= MAX_TAIL_LINE:
        line += " · " + links
    return truncate(line, MAX_TAIL_LINE)


def _kind_heading(kind_items: list[NoticeItem], *, count: bool = True) -> str:
    """A kind's heading: its name, with the count and USD/day of several findings.

    Each finding says its own evidence and fix below it, so the kind's generic advice is not repeated.
    """
    f = kind_items[0].finding
    if not count:
        return f"*{escape(kind_heading(f.kind))}*"
    total = sum((i.finding.usd_per_day or Decimal(0) for i in kind_items if not i.resolved), Decimal(0))
    sizing = all(finding_per_day(i.finding) == SIZING_NOTE for i in kind_items)
    money = "no GPU cost" if sizing and not total else f"{usd(total)}/day"
    return f"*{escape(kind_heading(f.kind))}* · {len(kind_items)} findings · {money}"


def _by_kind(items: list[NoticeItem]) -> list[list[NoticeItem]]:
    """Items grouped by kind, costliest kind first, costliest finding first within a kind."""
    groups: dict[str, list[NoticeItem]] = {}
    for item in sorted(items, key=_cost_order):
        groups.setdefault(item.finding.kind.value, []).append(item)
    return sorted(groups.values(), key=lambda g: (-sum((i.finding.usd_per_day or Decimal(0) for i in g), Decimal(0)),
                                                  g[0].finding.kind.value))


def _cost_order(item: NoticeItem) -> tuple[Decimal, str]:
    return (-(item.finding.usd_per_day or Decimal(-1)), item.fingerprint)


def _why_and_fix(item: NoticeItem) -> str:
    """A digest finding's evidence in one line (`people.evidence_headline`.

    The reading against the rule, as the alert's Evidence says it) and its exact fix (`advice.advise`'s action, the
    alert's How to fix: a low-confidence finding's says "Check first", a busy node's "Do not drain"; its commands and
    caution are behind Details); no fix for a resolved finding. mrkdwn, escaped, each line within `MAX_FIX` characters.
    """
    f = item.finding
    lines = []
    if why := evidence_headline(f):
        lines.append(f"*Why:* {escape(truncate(why, MAX_FIX))}")
    if not item.resolved:
        lines.append(f"*Fix:* {escape(truncate(advise(f).action, MAX_FIX))}")
    return "\n".join(lines)


def _finding_text(item: NoticeItem, *, clusters: int) -> str:
    """A digest finding with its buttons: its line, then its Why and Fix lines."""
    line = _line(item, clusters=clusters, kind=False, short_id=False)
    extra = _why_and_fix(item)
    return f"{line}\n{extra}" if extra else line


def _full_blocks(full: list[NoticeItem], *, interactive: bool, clusters: int) -> list[dict[str, Any]]:
    """The findings shown with their menus.

    Per kind a heading, then per finding its line, its evidence and its fix (`_finding_text`) with its overflow menu; a
    kind with one finding has its heading and finding in one section.
    """
    blocks: list[dict[str, Any]] = []
    for group in _by_kind(full):
        first = _finding_text(group[0], clusters=clusters)
        if len(group) == 1:
            blocks.append(_with_menu(_section(f"{_kind_heading(group, count=False)}\n{first}"), group[0], interactive))
        else:
            blocks.append(_section(_kind_heading(group)))
            blocks.append(_with_menu(_section(first), group[0], interactive))
        for item in group[1:]:
            blocks.append(_with_menu(_section(_finding_text(item, clusters=clusters)), item, interactive))
    return blocks


#: Text reserved per message for the header, the intro, the owner hint and the footer.
_FRAME_CHARS = 1_200


def _digest_messages(items: list[NoticeItem], *, interactive: bool, clusters: int,
                     budget: int = MESSAGE_TEXT_BUDGET) -> list[tuple[list[NoticeItem], list[NoticeItem]]]:
    """(items with buttons, tail items) per message, within 50 blocks and `budget` characters of block text.

    The costliest findings get a line and buttons in the first message (when more follow than fit, within half its
    text budget); the rest are compact lines (with the kind and short ID, no buttons) in packed sections, continued
    in further messages. Kind headings are counted as they are added.
    """
    out: list[tuple[list[NoticeItem], list[NoticeItem]]] = []
    k = 0
    room = max(budget - _FRAME_CHARS, 500)
    while k < len(items):
        full: list[NoticeItem] = []
        used_text = 0
        remaining = len(items) - k
        full_room = room if remaining <= DIGEST_ITEMS_PER_MESSAGE else (room // 2 if not out else 0)
        while k < len(items) and len(full) < DIGEST_ITEMS_PER_MESSAGE:
            trial = _full_blocks([*full, items[k]], interactive=interactive, clusters=clusters)
            n = blocks_text_chars(trial)
            if len(trial) > DIGEST_FULL_BLOCKS or ((full or out) and n > full_room):
                break
            full.append(items[k])
            used_text = n
            k += 1
        tail: list[NoticeItem] = []
        sections, used = 1, MAX_TAIL_LINE + 1  # the tail's heading line
        used_text += MAX_TAIL_LINE + 1
        while k < len(items):
            n = len(_line(items[k], clusters=clusters, kind=True, short_id=True)) + 1
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


def _tail_sections(tail: list[NoticeItem], *, clusters: int) -> list[dict[str, Any]]:
    """The tail's sections: a heading line, then one line per finding, packed within `MAX_SECTION_TEXT`."""
    usd_tail = sum((i.finding.usd_per_day or Decimal(0) for i in tail if not i.resolved), Decimal(0))
    lines = [f"*…and {len(tail)} more, {usd(usd_tail)}/day together* (buttons are on the costliest; for any finding:"
             " `gpuwaste explain <ID>`):"]
    lines += [_line(item, clusters=clusters, kind=True, short_id=True) for item in tail]
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


"""Adapter (pure): notices and summaries → Slack Block Kit payloads, escaped and split within Slack's limits.

Limits (Slack docs, enforced by tests/servers/slack_api.py): 50 blocks per message, section text 3000
characters, section fields 10 × 2000, header 150 characters of plain_text, top-level text 40000, 25 elements per
actions block, button labels 75 characters of plain_text, button values 2000, action_id and block_id 255, an
overflow menu up to 5 options (text 75, value 150 characters).

A digest is read in seconds: one line per finding under its kind's heading (what to do said once per kind), each
with its actions folded into one overflow menu beside the line (snooze 7 days, expected, create ticket, details —
the alert's button names; none on a $0 finding), so text outweighs controls; the evidence, formula and price source are behind
Details (a reply in the thread) and `gpuwaste explain <ID>`. Ages count to the scan that saw the finding.
Names that come from the cluster are escaped for mrkdwn (`&`, `<`, `>`), so `<!channel>`, `<@U123>` or
`<http://x|y>` in a pod name can neither ping nor link.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from gpuwaste.advice import advise
from gpuwaste.models.findings import Evidence, Finding
from gpuwaste.models.notices import DailySummary, GroupTotal, Notice, NoticeItem, NoticeKind
from gpuwaste.people import (  # one money/date/age format on every surface
    age,
    details_lines,
    elide,
    evidence_text,
    gpus,
    idle_mode_label,
    kind_action,
    kind_heading,
    no_codes,
    offender_name,
    period_date,
    price_source,
    since_words,
    usd,
    waste_since,
    when,
)
from gpuwaste.people import kind_label as people_kind_label
from gpuwaste.sinks.summary_spend import slack_lines

MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_FIELD_TEXT = 2000
MAX_HEADER_TEXT = 150
MAX_TEXT = 40000
MAX_CONTEXT_TEXT = 2000
#: Findings of a digest shown with their buttons per message (a line, an actions block and their kind's heading);
#: the rest of the message's 50 blocks (header, intro, owner hint, footer and `DIGEST_TAIL_SECTIONS` sections)
#: carries the tail of compact lines.
DIGEST_ITEMS_PER_MESSAGE = 20
#: Sections per message for the digest's tail: one compact line per further finding, packed up to
#: `MAX_SECTION_TEXT` characters each (without buttons), so one owner's 50 findings are one message.
DIGEST_TAIL_SECTIONS = 6
#: Blocks of a digest message for the findings with buttons and their kind headings.
DIGEST_FULL_BLOCKS = MAX_BLOCKS - 4 - DIGEST_TAIL_SECTIONS
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
ACTION_DETAILS = "details"
ACTION_PREFIX = "gpuwaste_"
_ACTIONS = (
    (ACTION_SNOOZE_1D, "Snooze 1 day"),
    (ACTION_SNOOZE_7D, "Snooze 7 days"),
    (ACTION_EXPECTED, "Expected"),
    (ACTION_TICKET, "Create ticket"),
)
#: A digest line's actions, in its overflow menu (the alert's button names, one set of names on every surface).
_DIGEST_MENU = (
    (ACTION_SNOOZE_7D, "Snooze 7 days"),
    (ACTION_EXPECTED, "Expected"),
    (ACTION_TICKET, "Create ticket"),
    (ACTION_DETAILS, "Details"),
)
#: Options an overflow menu holds (Block Kit's overflow element: up to five).
MAX_OVERFLOW_OPTIONS = 5
#: Characters of a workload or node name in a digest line (elided in the middle beyond).
MAX_NAME = 40
#: Characters of a kind's recommendation in a digest (the rest is behind Details).
MAX_RECOMMENDATION = 72
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
    """One evidence signal for people (`people.evidence_text`: the rule and the reading in one unit), with its note
    (plain text)."""
    text = evidence_text(e)
    if e.note and not e.note.startswith("GPU_UTIL is percent"):
        text += f" — {no_codes(e.note)}"
    return text


def formula_text(finding: Finding, *, with_source: bool = True) -> str:
    """USD/day with its formula (and the price's source and date), or why it is unpriced (plain text)."""
    cost = finding.cost
    if cost is None:
        return "unpriced (no price yet)"
    if not cost.priced:
        formula = no_codes(cost.formula)
        return formula if formula.startswith("unpriced") else f"unpriced: {formula}"
    name, url = price_source(cost.source, cost.effective_date) if cost.source else ("", None)
    src = f"{name}, {url}" if url else name
    caveat = f" ⚠ {'; '.join(no_codes(w) for w in cost.warnings)}" if cost.warnings and with_source else ""
    return f"{no_codes(cost.formula)}" + (f" (price: {src})" if src and with_source else "") + caveat


def per_day(value: Decimal | None) -> str:
    """"$12.50/day", or "unpriced"."""
    return "unpriced" if value is None else f"{usd(value)}/day"


#: The money cell of a sizing note: a waste kind that holds no GPU share and so no money (KV-cache pressure on a
#: serving pod costs latency and recomputation, not idle GPUs: priced at 0), instead of "$0.00/day".
SIZING_NOTE = "sizing note, no GPU cost"


def finding_per_day(f: Finding) -> str:
    """A digest line's money: `per_day` of the finding, or `SIZING_NOTE` for a finding that wastes no GPU share
    and costs nothing (never "$0.00/day · 0 GPU")."""
    if f.kind.is_waste and not f.wasted_gpu_share and f.usd_per_day is not None and not f.usd_per_day:
        return SIZING_NOTE
    return per_day(f.usd_per_day)


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


def _route_line(notice: Notice, fell_back_from: str | None, *, team: bool = True) -> str:
    r = notice.route
    text = f"Routed to {escape(r.channel)} by {escape(r.source)}"
    if r.team and team:
        text += f" · team {escape(r.team)}"
    if fell_back_from:
        text += f" · :warning: {escape(fell_back_from)} was not found (channel_not_found), posted to the default channel"
    return text


def _button(action: str, label: str, fingerprint: str) -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "action_id": f"{ACTION_PREFIX}{action}",
        "text": {"type": "plain_text", "text": label},
        "value": f"{action}|{fingerprint}",
    }
    return button  # "Expected" and "Snooze" open the justification form (sinks/slack_forms.py): no confirm dialog


def _buttons(fingerprint: str) -> dict[str, Any]:
    elements = [_button(action, label, fingerprint) for action, label in _ACTIONS]
    return {"type": "actions", "block_id": f"gpuwaste_actions_{fingerprint[:16]}", "elements": elements}


def _digest_menu(item: NoticeItem) -> dict[str, Any] | None:
    """A digest finding's actions folded into one overflow menu beside its line (Block Kit: an overflow element holds
    up to `MAX_OVERFLOW_OPTIONS` options, each text ≤ 75 and value ≤ 150 characters), so the digest's text outweighs
    its controls: snooze 7 days, expected, create ticket (unless it has one), details. None for a $0 finding (a
    sizing note, nothing to act on by the money) and for a resolved one."""
    if item.resolved or item.finding.usd_per_day == 0:
        return None
    actions = [(a, label) for a, label in _DIGEST_MENU if not (a == ACTION_TICKET and item.ticket_key)]
    options = [{"text": {"type": "plain_text", "text": label}, "value": f"{a}|{item.fingerprint}"}
               for a, label in actions[:MAX_OVERFLOW_OPTIONS]]
    return {"type": "overflow", "action_id": f"{ACTION_PREFIX}menu_{item.fingerprint[:16]}", "options": options}


def _with_menu(block: dict[str, Any], item: NoticeItem, interactive: bool) -> dict[str, Any]:
    """The finding's section with its overflow menu as the section's accessory (when the notice is interactive)."""
    menu = _digest_menu(item) if interactive else None
    return {**block, "accessory": menu} if menu is not None else block


def _resolved_line(item: NoticeItem) -> str:
    at = f" {when(item.resolved_at)}" if item.resolved_at else ""
    saved = f"; saves {usd(item.saved_usd_per_day)}/day" if item.saved_usd_per_day is not None else ""
    return f":white_check_mark: *Resolved*{at}{saved} (wasted {usd(item.cumulative_usd)} while open)"


def scan_time(item: NoticeItem) -> datetime:
    """The time of the scan that saw the finding (ages are counted to it, never to the wall clock: a replayed
    recording reads as it happened)."""
    return item.finding.observed_at


def _alert_blocks(notice: Notice, item: NoticeItem, fell_back_from: str | None) -> list[dict[str, Any]]:
    f = item.finding
    prefix = "Resolved: " if item.resolved else "GPU waste: "
    blocks: list[dict[str, Any]] = [_header(prefix + no_codes(f.title))]
    if item.resolved:
        blocks.append(_section(_resolved_line(item)))
    mention = f"<@{notice.mention}> " if notice.mention else ""
    what = f"{mention}*What:* {escape(kind_heading(f.kind))} — confidence {f.confidence.value}"
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
    gpu_text = f"{gpus(f.wasted_gpu_share)} × {f.subject.gpu_model or 'GPU'}"
    blocks.append(
        _fields(
            [
                ("USD/day", usd(f.usd_per_day)),
                ("Cumulative so far", usd(item.cumulative_usd)),
                ("GPUs wasted", escape(gpu_text)),
                # no "Ticket: none": a ticket this run requests exists only after the message was posted
                *((("Ticket", escape(item.ticket_key)),) if item.ticket_key else ()),
            ]
        )
    )
    blocks.append(_section(f"*Cost:* {escape(formula_text(f))}"))
    if f.evidence:
        ev = "\n".join(f"• {escape(evidence_line(e))}" for e in f.evidence[:5])
        blocks.append(_section(f"*Evidence*\n{ev}"))
    advice = advise(f)
    fix = escape(advice.action) + (f"\n_{escape(advice.caution)}_" if advice.caution else "")
    if advice.commands:
        fix += "\n```" + "\n".join(escape(c.shell()) for c in advice.commands) + "```"
    blocks.append(_section(f"*How to fix*\n{fix}"))
    context = [_route_line(notice, fell_back_from), f"finding `{item.fingerprint[:6]}` (`gpuwaste explain {item.fingerprint[:6]}`)"]
    if item.links:
        context.insert(0, _links(item))
    blocks.append(_context(*context))
    if notice.interactive and not item.resolved:
        blocks.append(_buttons(item.fingerprint))
    return blocks


# -- digests: one line per finding, grouped by kind, the recommendation once per kind ---------------------------
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
    if all(_is_node_level(i.finding) for i in notice.items):
        return (f":warning: No owner: set `platform_owner` (team and channel) on cluster {escape(', '.join(clusters))}"
                " for node capacity nobody requested.")
    return (":warning: No owner: set the `gpuwaste.io/team` label or annotation on the namespace (or"
            f" `delivery.namespaces`), or `platform_owner` on cluster {escape(', '.join(clusters))}.")


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
    """How long the waste has gone on at the scan ("for 1h 10m", from when it began), and "new" when this scan first
    reported it ("new, for 1h 10m")."""
    span = age(began(item), scan_time(item))
    if not item.finding.episodes and item.first_seen >= scan_time(item):
        return "new"
    if item.first_seen >= scan_time(item):
        return f"new, for {span}"
    return f"for {span}"


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
        parts.append(escape(item.ticket_key))
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


def kind_label_short(finding: Finding) -> str:
    """The kind in people's words, short ("idle", "wrong hw")."""
    return people_kind_label(finding.kind)


def _kind_heading(kind_items: list[NoticeItem], *, count: bool = True) -> str:
    """A kind's heading: its name (with the count and USD/day of several findings) and what to do about the kind,
    once (`people.KIND_ACTIONS`; each finding's own recommendation is behind Details)."""
    f = kind_items[0].finding
    rec = kind_action(f.kind) or _short_recommendation(no_codes(f.recommendation))
    if not count:
        return f"*{escape(kind_heading(f.kind))}* · _{escape(rec)}_"
    total = sum((i.finding.usd_per_day or Decimal(0) for i in kind_items if not i.resolved), Decimal(0))
    sizing = all(finding_per_day(i.finding) == SIZING_NOTE for i in kind_items)
    money = "no GPU cost" if sizing and not total else f"{usd(total)}/day"
    return f"*{escape(kind_heading(f.kind))}* · {len(kind_items)} findings · {money}\n_{escape(rec)}_"


def _short_recommendation(text: str, limit: int = MAX_RECOMMENDATION) -> str:
    """The recommendation's action (after "…: ") cut at a clause within `limit` characters."""
    head, sep, action = text.partition(": ")
    text = action[:1].upper() + action[1:] if sep and len(action) >= 8 else text
    if len(text) <= limit:
        return text
    cut = max(text.rfind(", ", 0, limit), text.rfind("; ", 0, limit), text.rfind(". ", 0, limit))
    return text[:cut] + "…" if cut > limit // 2 else truncate(text, limit)


def _by_kind(items: list[NoticeItem]) -> list[list[NoticeItem]]:
    """Items grouped by kind, costliest kind first, costliest finding first within a kind."""
    groups: dict[str, list[NoticeItem]] = {}
    for item in sorted(items, key=_cost_order):
        groups.setdefault(item.finding.kind.value, []).append(item)
    return sorted(groups.values(), key=lambda g: (-sum((i.finding.usd_per_day or Decimal(0) for i in g), Decimal(0)),
                                                  g[0].finding.kind.value))


def _cost_order(item: NoticeItem) -> tuple[Decimal, str]:
    return (-(item.finding.usd_per_day or Decimal(-1)), item.fingerprint)


def _full_blocks(full: list[NoticeItem], *, interactive: bool, clusters: int) -> list[dict[str, Any]]:
    """The findings shown with buttons: per kind a heading (with the recommendation once), then per finding its
    line and its buttons; a kind with one finding has its heading and line in one section."""
    blocks: list[dict[str, Any]] = []
    for group in _by_kind(full):
        first = _line(group[0], clusters=clusters, kind=False, short_id=False)
        if len(group) == 1:
            blocks.append(_with_menu(_section(f"{_kind_heading(group, count=False)}\n{first}"), group[0], interactive))
        else:
            blocks.append(_section(_kind_heading(group)))
            blocks.append(_with_menu(_section(first), group[0], interactive))
        for item in group[1:]:
            blocks.append(_with_menu(_section(_line(item, clusters=clusters, kind=False, short_id=False)), item, interactive))
    return blocks


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


_LINK = re.compile(r"<([^<>|]*)\|([^<>]*)>")


def visible_chars(blocks: list[dict[str, Any]]) -> int:
    """Characters a reader sees in the blocks: header, section text and fields, context elements, button labels
    (a link shows its label, an emoji one glyph, emphasis markers nothing; confirmation dialogs, values and ids are
    not shown)."""
    total = 0
    for block in blocks:
        texts: list[str] = []
        if isinstance(block.get("text"), dict):
            texts.append(block["text"]["text"])
        texts += [f["text"] for f in block.get("fields", [])]
        if block["type"] in ("context", "actions"):
            for element in block.get("elements", []):
                text = element.get("text")
                texts.append(text["text"] if isinstance(text, dict) else str(text or ""))
        accessory = block.get("accessory")
        if isinstance(accessory, dict) and isinstance(accessory.get("text"), dict):
            texts.append(accessory["text"]["text"])
        total += sum(len(_shown(t)) for t in texts)
    return total


_EMPHASIS = re.compile(r"[*`~]|(?<!\w)_|_(?!\w)")
_EMOJI = re.compile(r":[a-z0-9_+-]+:")


def _shown(mrkdwn: str) -> str:
    """What Slack shows of mrkdwn text: a link's label, one glyph per emoji, no emphasis markers, entities decoded."""
    text = _EMOJI.sub("□", _LINK.sub(r"\2", mrkdwn))
    return _EMPHASIS.sub("", text).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


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


def _fallback_text(notice: Notice) -> str:
    items = notice.items
    total = sum((i.finding.usd_per_day or Decimal(0) for i in items), Decimal(0))
    if len(items) == 1:
        f = items[0].finding
        state = "Resolved" if items[0].resolved else "GPU waste"
        return escape(truncate(f"{state}: {no_codes(f.title)} — {per_day(f.usd_per_day)}", 3000))
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
        return [SlackPayload(text=text, blocks=_alert_blocks(notice, item, fell_back_from), fingerprints=(item.fingerprint,))]
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
        payloads.append(SlackPayload(text=text + part, blocks=blocks, fingerprints=tuple(i.fingerprint for i in carried)))
    return payloads


def details_text(item_finding: Finding, fingerprint: str) -> str:
    """The Details reply of a digest line (mrkdwn, escaped): evidence in people's units, the cost formula, the
    price's public source, caveats and what to do, and the `gpuwaste explain` ID."""
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
            f"{n}. {escape(workload_text(f))} — {escape(kind_label(f))} · {per_day(f.usd_per_day)}{state}"
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
        f"{mention}*{reason}* — {escape(workload_text(f))}: *{per_day(f.usd_per_day)}*, cumulative {usd(item.cumulative_usd)}"
        f", wasting since {since_text(item)}",
        escape(formula_text(f)),
    ]
    if f.evidence:
        lines.append(escape(evidence_line(f.evidence[0])))
    blocks = [_section("\n".join(lines)), _context(_route_line(notice, fell_back_from))]
    if notice.interactive:
        blocks.append(_buttons(item.fingerprint))
    text = escape(truncate(f"{notice.reason or 'Update'}: {no_codes(f.title)} — {per_day(f.usd_per_day)}", 3000))
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
        f"{n}. {escape(offender_name(o.workload, o.namespace))} ({escape(o.namespace or o.cluster)}, {escape(people_kind_label(o.kind))},"
        f" {escape(_whose_team(o.team))}): *{usd(o.wasted_usd)}* · {per_day(o.usd_per_day)}"
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

"""Adapter (pure): Slack Block Kit's limits and building blocks — the payload, escaping, sections, buttons, menus.

Limits (Slack docs, enforced by tests/servers/slack_api.py): 50 blocks per message, section text 3000
characters, section fields 10 × 2000, header 150 characters of plain_text, top-level text 40000, 25 elements per
actions block, button labels 75 characters of plain_text, button values 2000, action_id and block_id 255, an
overflow menu 2 to 5 options (text 75, value 150 characters). Every block built here is cut to them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gpuwaste.models.notices import NoticeItem

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


#: Characters of a digest finding's Why and Fix lines each (the whole advice, with its commands, is behind Details).
MAX_FIX = 320


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


def escape(text: str) -> str:
    """Escape mrkdwn control characters: `&` → `&amp;`, `<` → `&lt;`, `>` → `&gt;` (Slack's rule)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def truncate(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, ending with "…" when cut."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


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


def _button(action: str, label: str, fingerprint: str) -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "action_id": f"{ACTION_PREFIX}{action}",
        "text": {"type": "plain_text", "text": label},
        "value": f"{action}|{fingerprint}",
    }
    return button  # "Expected" and "Snooze" open the justification form (sinks/slack_forms.py): no confirm dialog


def _buttons(fingerprint: str, *, ticketed: bool = False) -> dict[str, Any]:
    """The alert's buttons (no "Create ticket" once the finding has a ticket: its key links it instead)."""
    elements = [_button(action, label, fingerprint) for action, label in _ACTIONS
                if not (ticketed and action == ACTION_TICKET)]
    return {"type": "actions", "block_id": f"gpuwaste_actions_{fingerprint[:16]}", "elements": elements}


def _digest_menu(item: NoticeItem) -> dict[str, Any] | None:
    """A digest finding's actions folded into one overflow menu beside its line (Block Kit.

    An overflow element holds up to `MAX_OVERFLOW_OPTIONS` options, each text ≤ 75 and value ≤ 150 characters), so the
    digest's text outweighs its controls: snooze 7 days, expected, create ticket (unless it has one), details. None for
    a $0 finding (a sizing note, nothing to act on by the money) and for a resolved one.
    """
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
    """Characters a reader sees in the blocks.

    Header, section text and fields, context elements, button labels (a link shows its label, an emoji one glyph,
    emphasis markers nothing; confirmation dialogs, values and ids are not shown).
    """
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


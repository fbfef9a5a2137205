"""Adapter: a Notifier that prints the Slack messages it would send (the local chain, `make demo`).

Its sink name is `terminal`: what it printed is recorded as told on the terminal, never as posted to Slack.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.panel import Panel

from gpuwaste.models.notices import DailySummary, MessageRef, Notice, PostedMessage
from gpuwaste.models.text import for_terminal
from gpuwaste.sinks.slack_blocks import render_notice, render_summary


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def blocks_to_text(blocks: list[dict[str, Any]]) -> str:
    """Block Kit blocks as readable plain text (headers, sections, fields, context, buttons)."""
    lines: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "header":
            lines.append(f"== {block['text']['text']} ==")
        elif kind == "section":
            if block.get("text"):
                lines.append(_unescape(block["text"]["text"]))
            for f in block.get("fields") or []:
                lines.append("  " + _unescape(f["text"]).replace("\n", ": "))
            if block.get("accessory", {}).get("type") == "overflow":  # the options the menu holds, as Slack lists them
                lines.append("  [… " + " | ".join(o["text"]["text"] for o in block["accessory"].get("options", [])) + "]")
        elif kind == "context":
            lines.append("  " + " | ".join(_unescape(e.get("text", "")) for e in block.get("elements", [])))
        elif kind == "actions":
            lines.append("  " + " ".join(f"[{e['text']['text']}]" for e in block.get("elements", [])))
        elif kind == "divider":
            lines.append("-" * 40)
    return "\n".join(lines)


class TerminalNotifier:
    """Prints each message as Slack would show it, with its channel; keeps what it printed in `sent`."""

    name = "terminal"
    threads = True
    edits = True

    def set_time_left(self, time_left: Callable[[], float] | None) -> None:
        """The terminal never waits: nothing to bound."""

    def __init__(self, console: Console | None = None, *, now: datetime | None = None) -> None:
        self.console = console or Console()
        self._now = now
        self._ts = itertools.count(1)
        self.sent: list[tuple[str, str, str]] = []  # (channel, ts, text)

    def _emit(self, channel: str, title: str, text: str, thread_ts: str | None = None) -> PostedMessage:
        ts = f"{next(self._ts)}.000000"
        where = f"{channel} (thread {thread_ts})" if thread_ts else channel
        self.console.print(Panel(for_terminal(text, keep_lines=True), title=for_terminal(f"{title} → {where}"), expand=False))
        self.sent.append((channel, ts, text))
        return PostedMessage(sink=self.name, destination=channel, message_id=ts, thread=thread_ts)

    def post(self, notice: Notice, *, reply_to: MessageRef | None = None,
             on_posted: Callable[[PostedMessage], None] | None = None) -> list[PostedMessage]:
        """Print the notice (each part of a long digest separately; `on_posted` after each)."""
        now = self._now or datetime.now(UTC)
        target = reply_to.destination if reply_to is not None else notice.route.channel
        thread_ts = (reply_to.thread or reply_to.message_id or None) if reply_to is not None else None
        out = []
        for payload in render_notice(notice, now=now):
            posted = self._emit(target, f"slack {notice.kind.value}", blocks_to_text(payload.blocks), thread_ts)
            out.append(posted.model_copy(update={"fingerprints": payload.fingerprints}))
            if on_posted is not None:
                on_posted(out[-1])
        return out

    def find_posted(self, notice: Notice, *, reply_to: MessageRef | None = None) -> list[PostedMessage]:
        """A terminal keeps nothing to look up: always empty."""
        return []

    def update(self, notice: Notice, *, message: MessageRef) -> PostedMessage:
        """Print the edited message."""
        now = self._now or datetime.now(UTC)
        payload = render_notice(notice, now=now)[0]
        self._emit(message.destination, f"slack edit of {message.message_id}", blocks_to_text(payload.blocks))
        return PostedMessage(sink=self.name, destination=message.destination, message_id=message.message_id,
                             thread=message.thread, fingerprints=payload.fingerprints)

    def reply(self, *, message: MessageRef, text: str) -> PostedMessage:
        """Print a thread reply."""
        return self._emit(message.destination, "slack reply", text, message.thread or message.message_id)

    def user_id(self, email: str) -> str | None:
        """No directory locally: nobody is mentioned."""
        return None

    def post_summary(
        self, summary: DailySummary, *, channel: str, chart_png: bytes | None, note: str | None = None
    ) -> PostedMessage:
        """Print the summary message (the chart is only mentioned)."""
        payload = render_summary(summary, chart_note=note)
        text = blocks_to_text(payload.blocks)
        if chart_png is not None:
            text += f"\n[chart: {len(chart_png)} bytes PNG]"
        return self._emit(channel, "slack summary", text)

"""Adapter: a TicketSink that prints the Jira tickets it would open (the local chain, `make demo`).

The ticket is the same ADF document the Jira sink sends, rendered as text. Keys are `LOCAL-<n>`; the
lifecycle store keeps the key, so a ticket is "created" once across runs on the same state file.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.panel import Panel

from gpuwaste.models.notices import TicketDraft
from gpuwaste.models.text import for_terminal
from gpuwaste.sinks.jira import adf_document

LOCAL_PROJECT = "LOCAL"


def adf_to_text(node: dict[str, Any]) -> str:
    """An Atlassian Document Format node as plain text: paragraphs as lines, list items as `• …`, links as `label <url>`."""
    kind = node.get("type")
    if kind == "text":
        text = str(node.get("text", ""))
        for mark in node.get("marks") or []:
            if mark.get("type") == "link":
                text = f"{text} <{mark.get('attrs', {}).get('href', '')}>"
        return text
    if kind == "hardBreak":
        return "\n"
    if kind == "heading":
        return "## " + "".join(adf_to_text(c) for c in node.get("content") or [])
    if kind == "codeBlock":
        return "\n".join("  $ " + line for line in "".join(adf_to_text(c) for c in node.get("content") or []).splitlines())
    children = [adf_to_text(c) for c in node.get("content") or []]
    if kind == "paragraph":
        return "".join(children)
    if kind == "listItem":
        return "• " + "\n  ".join(children)
    return "\n".join(children)


class TerminalTicketSink:
    """Prints each ticket action; keeps the tickets it "created" in `created` (key → draft).

    Args:
        console: where to print. first_number: the number of the first `LOCAL-<n>` key (continue after the
            keys a state file already holds). existing: label → key of tickets created by earlier runs.
    """

    def __init__(self, console: Console | None = None, *, first_number: int = 1,
                 existing: Callable[[str], str | None] | None = None) -> None:
        self.console = console or Console()
        self._numbers = itertools.count(first_number)
        self._existing = existing
        self.created: dict[str, TicketDraft] = {}
        self.comments: list[tuple[str, str]] = []
        self._keys: dict[str, set[str]] = {}

    def _emit(self, title: str, text: str) -> None:
        self.console.print(Panel(for_terminal(text, keep_lines=True), title=for_terminal(title), expand=False))

    def find_open(self, label: str) -> str | None:
        """A ticket this sink (or an earlier run, via `existing`) opened with `label`."""
        for key, draft in self.created.items():
            if draft.dedupe_label == label:
                return key
        return self._existing(label) if self._existing is not None else None

    def create(self, draft: TicketDraft) -> str:
        """Print the ticket (summary, project, labels, components, ADF description as text); return `LOCAL-<n>`."""
        key = f"{LOCAL_PROJECT}-{next(self._numbers)}"
        self.created[key] = draft
        self._keys[key] = set(draft.delivery_keys)
        head = [f"Summary: {draft.summary}",
                f"Project: {draft.project} · {draft.issue_type}" + (f" · priority {draft.priority}" if draft.priority else ""),
                f"Labels: {', '.join(draft.labels) or '-'}"]
        if draft.components:
            head.append(f"Components: {', '.join(draft.components)}")
        body = adf_to_text(adf_document(draft.paragraphs, draft.facts, draft.links, draft.sections))
        self._emit(f"jira ticket {key} (would be created in {draft.project})", "\n".join(head) + "\n" + "-" * 40 + "\n" + body)
        return key

    def comment(self, key: str, paragraphs: Sequence[str], *, delivery_keys: Sequence[str] = ()) -> None:
        """Print the comment."""
        text = adf_to_text(adf_document(paragraphs))
        self.comments.append((key, text))
        self._keys.setdefault(key, set()).update(delivery_keys)
        self._emit(f"jira comment on {key}", text)

    def delivered(self, key: str) -> set[str]:
        """The keys of the tickets and comments this sink printed (a terminal keeps nothing across runs)."""
        return set(self._keys.get(key, set()))

    def transition(self, key: str, transition: str) -> None:
        """Print the transition."""
        self.comments.append((key, f"transition {transition}"))
        self._emit(f"jira transition of {key}", f"→ {transition}")

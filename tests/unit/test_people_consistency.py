"""Every alert and ticket of the demo fleet and of generated fleets (the scorecard catalogue and a random fleet) says
things one way: a short title within 80 characters (never the detector's sentence cut with an ellipsis), one memory
unit (GiB), "10 %" (not "10%"), the activity signal that was measured and no other, a node finding as "Node: …" with
no namespace line, no config key in the no-owner hint, a Cost line that names its price source (its address behind a
link), and no "$0.00" in a sizing note's ticket. Rendered by the Slack, Teams and Jira renderers the sinks use."""

from __future__ import annotations

import json
import re
import tempfile
from datetime import timedelta
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from gpuwaste.headlines import TITLE_WIDTH, title_line
from gpuwaste.models.findings import Finding
from gpuwaste.models.notices import Notice, NoticeItem, NoticeKind, Route
from gpuwaste.models.settings import DeliverySettings, JiraSettings
from gpuwaste.models.signals import Signal
from gpuwaste.people import no_codes
from gpuwaste.services.tickets import TicketService
from gpuwaste.sinks.slack_blocks import escape, render_notice
from gpuwaste.sinks.teams_cards import render_notice as render_card
from tests.unit.test_advice import _generated, _scan_recording

ROUTE = Route(channel="#ml", source="team map", team="ml")
NO_OWNER = Route(channel="#gpu-waste", source="default channel")
SETTINGS = DeliverySettings(jira=JiraSettings(base_url="https://acme.atlassian.net", default_project="OPS"))
#: The activity fields and their one name each: a text names only those its finding measured.
ACTIVITY = {s.words: s for s in (Signal.SM_ACTIVE, Signal.GR_ENGINE_ACTIVE, Signal.GPU_UTIL)}
GLUED_PERCENT = re.compile(r"\d%(?![\w%])")
RAW_URL = re.compile(r"(?<![<|])https?://\S+$")


@cache
def fleets() -> dict[str, tuple[Finding, ...]]:
    """The demo's findings, a scorecard fleet's and a random fleet's (the generator's seeds fixed: repeatable)."""
    from gpuwaste.bootstrap import local

    out = {"demo": tuple(_scan_recording(local.demo_recording()))}
    with tempfile.TemporaryDirectory() as tmp:
        out["scorecard"] = tuple(_generated("scorecard", 3, 7, Path(tmp))[1])
        out["random"] = tuple(_generated("random", 12, 4242, Path(tmp))[1])
    return out


def _texts(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [t for v in node.values() for t in _texts(v)]
    if isinstance(node, list):
        return [t for v in node for t in _texts(v)]
    return []


def _ticket(f: Finding) -> tuple[dict[str, str], str]:
    service = TicketService(sink=None, store=None, settings=SETTINGS, now=lambda: f.observed_at)  # type: ignore[arg-type]
    draft = service.draft(f, f.fingerprint, first_seen=f.observed_at - timedelta(hours=1), cumulative_usd="3.20")
    lines = [draft.summary, *(f"{k}: {v}" for k, v in draft.facts)]
    for section in draft.sections:
        lines += [section.heading, *section.lines, *section.commands]
    return dict(draft.facts), "\n".join(lines)


def _measured(f: Finding) -> set[str]:
    return {e.signal for e in f.evidence}


@pytest.mark.parametrize("fleet", ["demo", "scorecard", "random"])
def test_every_alert_and_ticket_says_things_one_way(fleet: str) -> None:
    # GIVEN every finding of the fleet
    findings = fleets()[fleet]
    assert len(findings) >= 10, fleet  # the sweep is not vacuous
    problems: list[str] = []
    for f in findings:
        item = NoticeItem(fingerprint=f.fingerprint, finding=f, first_seen=f.observed_at - timedelta(hours=1),
                          cumulative_usd=Decimal("3.20"))
        route = NO_OWNER if f.subject.namespace is None else ROUTE
        # WHEN rendered as a Slack alert, a Teams card and a Jira ticket
        (alert,) = render_notice(Notice(kind=NoticeKind.ALERT, route=route, items=(item,)))
        card = render_card(Notice(kind=NoticeKind.ALERT, route=route, items=(item,)), now=f.observed_at,
                           destination="ml", source="team map")[0].body
        facts, ticket = _ticket(f)
        header = alert.blocks[0]["text"]["text"]
        slack = "\n".join(_texts(alert.blocks))
        teams = "\n".join(_texts(card))
        name = f"{fleet} {f.kind.value} {f.fingerprint[:6]}"
        # THEN the header is the finding's short title, whole: within 80 characters, no ellipsis
        if header != title_line(f) or len(header) > TITLE_WIDTH or "…" in header:
            problems.append(f"{name}: header {header!r}")
        if title_line(f) not in teams:
            problems.append(f"{name}: Teams heading")
        # AND the detector's sentence is still said, whole, in the body
        if f"*What:* {escape(no_codes(f.title))}" not in slack:
            problems.append(f"{name}: sentence missing")
        for where, text in (("slack", slack), ("teams", teams), ("ticket", ticket)):
            # AND one memory unit (GiB), one percent style, only the activity signal that was measured
            if re.search(r"\bMiB\b", text):
                problems.append(f"{name} {where}: MiB")
            if m := GLUED_PERCENT.search(text):
                problems.append(f"{name} {where}: {m.group(0)!r}")
            named = {words for words in ACTIVITY if words in text}
            if unmeasured := {w for w in named if ACTIVITY[w].value not in _measured(f)}:
                problems.append(f"{name} {where}: names {sorted(unmeasured)}, measured {sorted(_measured(f))}")
            # AND no config key in people's words, no raw URL closing a Cost line
            if "platform_owner" in text:
                problems.append(f"{name} {where}: platform_owner")
            for line in text.splitlines():
                if ("Cost" in line or "/GPU-h" in line) and RAW_URL.search(line):
                    problems.append(f"{name} {where}: raw URL in {line!r}")
        # AND a node finding is named as a node, without a namespace line; a workload has both
        if f.subject.namespace is None:
            if "Node" not in facts or "Namespace" in facts or "Workload" in facts:
                problems.append(f"{name}: node facts {sorted(facts)}")
        elif "Namespace" not in facts or "Workload" not in facts:
            problems.append(f"{name}: workload facts {sorted(facts)}")
        # AND a sizing note's ticket and alert print no zero money and the alert has no buttons
        if f.usd_per_day == 0 and "$0.00" in ticket + slack + teams:
            problems.append(f"{name}: $0.00 in a sizing note's ticket or alert")
        if f.usd_per_day == 0 and any(b["type"] == "actions" for b in alert.blocks):
            problems.append(f"{name}: buttons on a sizing note")
        if f.usd_per_day == 0 and "In Slack:" in ticket:  # nor does its ticket point to buttons it does not have
            problems.append(f"{name}: a sizing note's ticket names Slack buttons")
    assert problems == [], "\n".join(problems[:40])


def test_the_no_owner_hint_says_in_words_whom_to_configure_and_where() -> None:
    # GIVEN the demo's node findings (nobody owns them) and a workload without a team
    findings = fleets()["demo"]
    nodes = [f for f in findings if f.subject.namespace is None]
    pod = next(f for f in findings if f.subject.namespace is not None)
    for group in (nodes, [pod, *nodes]):
        items = tuple(NoticeItem(fingerprint=f.fingerprint, finding=f, first_seen=f.observed_at) for f in group)
        # WHEN rendered for the default channel
        text = json.dumps([b for p in render_notice(Notice(kind=NoticeKind.DIGEST, route=NO_OWNER, items=items))
                           for b in p.blocks], ensure_ascii=False)
        # THEN the hint says who to name and where to read how, never a config key
        assert "No owner:" in text and "platform team" in text and "docs/delivery.md" in text
        assert "platform_owner" not in text and "delivery.namespaces" not in text

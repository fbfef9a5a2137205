"""The Jira ticket as people read it: what to do and when it is done, the ticket caps with a quiet start, and one
overflow ticket per team carrying the money."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from rich.console import Console

from gpuwaste.bootstrap import local
from gpuwaste.config import GpuWasteConfig
from gpuwaste.models.findings import Cost, Finding, WasteKind
from gpuwaste.models.messages import AlertAction, AlertMessage
from gpuwaste.models.notices import MessageRef
from gpuwaste.models.settings import DeliverySettings, JiraSettings
from gpuwaste.services.tickets import TicketService, plan_tickets
from gpuwaste.sinks.jira import adf_document
from gpuwaste.sinks.slack import thread_link
from gpuwaste.sinks.terminal_tickets import TerminalTicketSink, adf_to_text

DEMO = local.demo_recording()


@pytest.fixture(scope="module")
def demo_report():  # type: ignore[no-untyped-def]
    """The demo scanned as `gpuwaste scan -r DEMO` does."""
    sources = local.recording_sources(DEMO, GpuWasteConfig())
    assert sources.recording is not None
    cfg, _ = local.recording_config(GpuWasteConfig(), sources, config_given=False)
    return local.scan_service(sources, cfg, window_s=sources.recording.meta.window_s).scan(at=sources.recording.end_time())


def _escalate(f: Finding, usd: str | None = None) -> AlertMessage:
    if usd is not None:
        f = f.with_cost(Cost(priced=True, usd_per_gpu_hour=Decimal(usd) / 24, wasted_gpu_share=Decimal(1),
                             usd_per_day=Decimal(usd), formula="x"))
    return AlertMessage(action=AlertAction.ESCALATE, fingerprint=f.fingerprint, finding=f,
                        first_seen=f.observed_at - timedelta(days=2), cumulative_usd="1234.5678")


def test_jira_ticket_says_what_to_do_and_when_it_is_done(demo_report) -> None:  # type: ignore[no-untyped-def]
    # GIVEN the demo's costliest finding (an idle Deployment) and the local ticket printer
    f = max((f for f in demo_report.findings if f.usd_per_day), key=lambda f: f.usd_per_day)
    sink = TerminalTicketSink(Console(file=io.StringIO(), width=100, color_system=None))
    settings = DeliverySettings(jira=JiraSettings(default_project="OPS"))
    settings = settings.model_copy(update={"slack": settings.slack.model_copy(update={"workspace_url": "https://acme.slack.com"})})
    service = TicketService(sink=sink, store=None, settings=settings, now=lambda: f.observed_at,
                            message_link=thread_link(settings.slack.workspace_url))
    # WHEN its ticket is drafted (Slack thread known)
    draft = service.draft(f, f.fingerprint, first_seen=f.observed_at - timedelta(days=2), cumulative_usd="1320.96",
                          messages=(MessageRef(sink="slack", destination="C0123", message_id="1704072000.000100"),))
    doc = adf_document(draft.paragraphs, draft.facts, draft.links, draft.sections)
    text = adf_to_text(doc)
    # THEN the summary carries the money, the priority comes from USD/day, and the body has every heading in order
    assert draft.summary.startswith("$660.48/day GPU waste: idle, inference/llama-70b-vllm") and len(draft.summary) <= 120
    assert draft.priority == "Highest"
    headings = [n["content"][0]["text"] for n in doc["content"] if n["type"] == "heading"]
    assert headings == ["What", "Evidence", "Cost", "How to fix", "Done when", "Snooze", "Slack thread"]
    # AND evidence is in people's units, the fix is a concrete command, the thread is linked
    assert "SM activity: p95 0.8 %, flagged below 5 %; avg 0.2 %" in text and "p95 None" not in text and "0.002" not in text
    assert "$ kubectl -n inference scale deployment/llama-70b-vllm --replicas=0" in text and "# stops every replica" in text
    assert "since 2023-12-30 01:20 UTC (2d 0h before the scan); $1,320.96 wasted so far" in text
    assert "https://acme.slack.com/archives/C0123/p1704072000000100" in text
    # AND the thread is a link in the ADF (Jira shows API-written text as it is: a bare URL is not clickable)
    hrefs = [m["attrs"]["href"] for n in doc["content"] if n["type"] == "paragraph" for t in n["content"]
             for m in t.get("marks", []) if m["type"] == "link"]
    assert "https://acme.slack.com/archives/C0123/p1704072000000100" in hrefs, hrefs
    # AND it stays readable: at most 40 lines and 2,500 characters, no line of prose over 200 characters
    assert len(text.splitlines()) <= 40 and len(text) <= 2500
    assert max(len(line) for line in text.splitlines()) <= 200


def test_ticket_caps_quiet_start_and_overflow_per_team(demo_report) -> None:  # type: ignore[no-untyped-def]
    # GIVEN 60 escalations over 6 teams (a large first run)
    base = next(f for f in demo_report.findings if f.kind is WasteKind.IDLE)
    alerts = []
    for n in range(60):
        team = f"team-{n % 6}"
        s = base.subject.model_copy(update={"workload_name": f"w{n}", "namespace": team})
        alerts.append(_escalate(base.model_copy(update={"subject": s}), usd=str(100 + n)))
    jira = JiraSettings(default_project="OPS")
    def team(f: Finding) -> str:
        return f.subject.namespace or "-"
    now = datetime(2024, 1, 10, tzinfo=UTC)
    # WHEN planned on the first run (quiet start), and after the quiet start
    first = plan_tickets(alerts, team_of=team, jira=jira, started_at=None, now=now)
    later = plan_tickets(alerts, team_of=team, jira=jira, started_at=now - timedelta(days=30), now=now)
    # THEN the first run opens 3 tickets in all (the costliest, one per team), the rest waits for later runs
    assert first.quiet and len(first.open) + len(first.folded) <= 3 and len(first.open) == 3
    assert len({team(a.finding) for a in first.open}) == 3 and len(first.deferred) == 57
    assert [a.finding.usd_per_day for a in first.open] == [Decimal(159), Decimal(158), Decimal(157)]
    # AND later runs open at most 10 tickets, at most 3 per team, the overflow folded into one ticket per team
    assert not later.quiet and len(later.open) + len(later.folded) <= 10
    per_team: dict[str, int] = {}
    for a in later.open:
        per_team[team(a.finding)] = per_team.get(team(a.finding), 0) + 1
    assert max(per_team.values()) <= 3 and all(len(v) >= 1 for v in later.folded.values())
    assert len(later.open) + sum(len(v) for v in later.folded.values()) + len(later.deferred) == 60


def test_overflow_ticket_is_one_per_team_with_the_money(demo_report) -> None:  # type: ignore[no-untyped-def]
    # GIVEN three findings of one team over its cap
    base = next(f for f in demo_report.findings if f.kind is WasteKind.IDLE)
    alerts = [_escalate(base.model_copy(update={"subject": base.subject.model_copy(update={"workload_name": f"w{n}"})}),
                        usd="50") for n in range(4)]
    sink = TerminalTicketSink(Console(file=io.StringIO(), width=100, color_system=None))
    service = TicketService(sink=sink, store=None, settings=DeliverySettings(jira=JiraSettings(default_project="OPS")),
                            now=lambda: base.observed_at)
    # WHEN the overflow ticket is opened by three runs: three findings, then one more, then one already listed
    first = service.open_overflow("ml-serving", alerts[:3])
    second = service.open_overflow("ml-serving", alerts[3:])
    third = service.open_overflow("ml-serving", alerts[:1])
    # THEN one ticket, "$150.00/day" in its summary; the second run comments on it with the new finding, and the
    # third adds nothing (the finding is on the ticket already: no repeated listing)
    assert first == second == third and len(sink.created) == 1
    draft = sink.created[first]
    assert draft.summary == "$150.00/day GPU waste: 3 more findings of team ml-serving" and draft.priority == "High"
    assert len(sink.comments) == 1 and sink.comments[0][0] == first


def test_snooze_names_actions_both_slack_surfaces_carry_and_times_keep_utc(demo_report) -> None:  # type: ignore[no-untyped-def]
    # GIVEN the Slack alert's buttons and a digest line's overflow menu (the demo delivers digests only)
    from gpuwaste.services.ticket_content import SLACK_SNOOZE_HINT, ticket_sections, ticket_summary
    from gpuwaste.sinks.slack_blocks import _ACTIONS, _DIGEST_MENU

    both = {label for _, label in _ACTIONS} & {label for _, label in _DIGEST_MENU}
    only_one = ({label for _, label in _ACTIONS} | {label for _, label in _DIGEST_MENU}) - both
    # THEN the ticket's snooze hint names only actions found on both, and at least one
    named = {label for label in both | only_one if label in SLACK_SNOOZE_HINT}
    assert named and named <= both, (named, both)
    # AND a sizing note's ticket (no waste episodes, $0) keeps "UTC" upper case and says it wastes nothing
    note = next(f for f in demo_report.findings if f.usd_per_day == 0 and not f.episodes)
    sections = ticket_sections(note, first_seen=note.observed_at, cumulative_usd=None, now=note.observed_at)
    cost = next(s for s in sections if s.heading == "Cost").lines
    assert any(line.startswith("First reported at this scan (") and "UTC)" in line for line in cost), cost
    assert not any("× 0 GPUs" in line for line in cost), cost
    assert ticket_summary(note).startswith("GPU sizing note: ") and "$0.00/day GPU waste" not in ticket_summary(note)
    # AND a node's snooze says to annotate the node, a workload's the workload; a sizing note (no Slack buttons or
    # menu) only the annotation
    node = next(f for f in demo_report.findings if f.kind is WasteKind.UNALLOCATED)
    for f, words in ((node, "Or annotate the node"), (note, "Annotate the workload")):
        lines = next(s for s in ticket_sections(f, first_seen=f.observed_at, cumulative_usd=None, now=f.observed_at)
                     if s.heading == "Snooze").lines
        assert f"{words} (until a date, or +7d):" in lines, lines
        assert (SLACK_SNOOZE_HINT in lines) is (f is node), lines

"""The local chain's delivery (`gpuwaste run` / `gpuwaste demo`): messages, tickets (terminal sink) and summary."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

from gpuwaste.bootstrap import local, local_delivery
from gpuwaste.cli import app
from gpuwaste.config import GpuWasteConfig
from gpuwaste.models.messages import AlertAction, AlertMessage
from gpuwaste.services.notify import finding_from_record
from gpuwaste.sinks.jira import adf_document
from gpuwaste.sinks.terminal_tickets import TerminalTicketSink, adf_to_text
from gpuwaste.store.sqlite import SqliteFindingStore

DEMO = local.demo_recording()


def test_run_command_twice_creates_each_ticket_once(tmp_path: Path) -> None:
    # GIVEN `gpuwaste run` on the demo recording with one state file
    state = tmp_path / "s.db"
    args = ["run", "--recording", str(DEMO), "--state", str(state), "--no-slack"]
    # WHEN it runs twice
    first = CliRunner().invoke(app, args)
    second = CliRunner().invoke(app, args)
    # THEN the first run alerts and creates LOCAL-1 and LOCAL-2 (the findings ≥ $100/day), the second neither
    assert first.exit_code == 0, first.output
    assert "alerts (21; 21 new), ticket requests 2" in first.stdout
    assert "ticket LOCAL-1: [ESCALATE] inference/llama-70b-vllm" in first.stdout
    assert "ticket LOCAL-2: [ESCALATE] research/eval-sweep" in first.stdout
    assert second.exit_code == 0, second.output
    assert "alerts (0; 0 new), ticket requests 0" in second.stdout and "LOCAL-" not in second.stdout
    # AND the keys are stored in the lifecycle
    store = SqliteFindingStore(state)
    try:
        keys = sorted(r.ticket_key for r in store.history(since=datetime(1970, 1, 1, tzinfo=UTC),
                                                          until=datetime(2100, 1, 1, tzinfo=UTC)) if r.ticket_key)
    finally:
        store.close()
    assert keys == ["LOCAL-1", "LOCAL-2"]


def test_demo_command_shows_messages_tickets_and_summary_in_order() -> None:
    # GIVEN the bundled demo fleet
    # WHEN `gpuwaste demo` runs
    result = CliRunner().invoke(app, ["demo"])
    out = result.stdout
    # THEN the scan table, then the Slack messages (a digest), the tickets, the summary and the ground truth
    assert result.exit_code == 0, result.output
    marks = ["GPU waste findings", "messages · scan at", "slack digest →", "tickets · scan at",
             "jira ticket LOCAL-1", "Summary: $660.48/day GPU waste: idle, inference/llama-70b-vllm (demo)",
             "summary · the day up to the last scan", "Top offenders", "ground truth: 23/23"]
    positions = [out.find(m) for m in marks]
    assert -1 not in positions, dict(zip(marks, positions, strict=True))
    assert positions == sorted(positions)


def test_local_ticket_service_continues_numbering_and_finds_earlier_tickets(tmp_path: Path) -> None:
    # GIVEN a state file where the demo run created LOCAL-1 and LOCAL-2
    state = tmp_path / "s.db"
    CliRunner().invoke(app, ["run", "--recording", str(DEMO), "--state", str(state), "--no-summary"])
    store = SqliteFindingStore(state)
    try:
        # WHEN the local ticket service is built over it (no Jira configured)
        service = local_delivery.local_ticket_service(GpuWasteConfig(), store, terminal=True, console=Console(quiet=True))
        assert service is not None and isinstance(service.sink, TerminalTicketSink)
        record = next(r for r in store.history(since=datetime(1970, 1, 1, tzinfo=UTC),
                                               until=datetime(2100, 1, 1, tzinfo=UTC)) if r.ticket_key == "LOCAL-1")
        # THEN a new ticket would be LOCAL-3, and an earlier one is found by its label, not re-created
        assert service.sink.find_open(f"gpuwaste-{record.fingerprint[:16]}") == "LOCAL-1"
        assert service.open_ticket_for(record.fingerprint) == "LOCAL-1"
        assert service.sink.created == {}
        assert next(service.sink._numbers) == 3
    finally:
        store.close()


def test_local_ticket_service_comments_when_a_ticketed_finding_resolves(tmp_path: Path) -> None:
    # GIVEN a ticketed demo finding (LOCAL-1) and its RESOLVED alert, as the lifecycle sends it
    state = tmp_path / "s.db"
    CliRunner().invoke(app, ["run", "--recording", str(DEMO), "--state", str(state), "--no-summary"])
    store = SqliteFindingStore(state)
    try:
        service = local_delivery.local_ticket_service(GpuWasteConfig(), store, terminal=True, console=Console(quiet=True))
        assert service is not None
        record = next(r for r in store.history(since=datetime(1970, 1, 1, tzinfo=UTC),
                                               until=datetime(2100, 1, 1, tzinfo=UTC)) if r.ticket_key == "LOCAL-1")
        finding = finding_from_record(record)
        assert finding is not None
        resolved = AlertMessage(action=AlertAction.RESOLVED, fingerprint=record.fingerprint, finding=finding,
                                first_seen=record.first_seen, cumulative_usd="12.50", saved_usd_per_day="660.48",
                                scan_id="s9", ticket_key="LOCAL-1")
        # WHEN create_tickets' local twin handles it twice (a redelivery)
        service.handle(resolved)
        service.handle(resolved)
        # THEN one comment on LOCAL-1 says what it saves
        assert isinstance(service.sink, TerminalTicketSink)
        assert len(service.sink.comments) == 1
        key, text = service.sink.comments[0]
        assert key == "LOCAL-1" and "Saves $660.48/day" in text
    finally:
        store.close()


def test_adf_to_text_renders_paragraphs_facts_and_links() -> None:
    # GIVEN an ADF document as the Jira sink sends it
    doc = adf_document(["Idle GPUs", "Recommendation: scale down"], [("USD/day", "$10.00")], [("Grafana", "https://g/x")])
    # WHEN rendered as text
    text = adf_to_text(doc)
    # THEN each paragraph is a line, facts are bullets, links keep their URL
    assert text.splitlines() == ["Idle GPUs", "Recommendation: scale down", "• USD/day: $10.00", "Grafana <https://g/x>"]

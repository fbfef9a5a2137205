"""Justifications: "Expected" / "Snooze" ask why (Slack modal via views.open at the fake Slack), are stored with who,
when and until when in both stores (SQLite file reopened = a restart; DynamoDB over moto), end with a re-alert and the
ticket rules, and are listed in the daily summary by team with the USD/day they cover; the CLI gives the same."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlencode

import boto3
import pytest
from typer.testing import CliRunner

from gpuwaste.models.findings import Cost, Finding, Subject, WasteKind
from gpuwaste.models.messages import AlertAction, AlertMessage, FindingMessage
from gpuwaste.models.settings import DeliverySettings, LifecycleSettings, SlackSettings
from gpuwaste.ports import FindingStore
from gpuwaste.queue.memory import MemoryQueue
from gpuwaste.services.interactions import InteractionService
from gpuwaste.services.justifications import active_by_team, justify
from gpuwaste.services.lifecycle import LifecycleService
from gpuwaste.services.summary import SummaryService
from gpuwaste.sinks.slack import SlackNotifier
from gpuwaste.sinks.slack_blocks import render_summary
from gpuwaste.sinks.slack_forms import CALLBACK_ID, reason_view
from gpuwaste.sinks.slack_interactions import read_request
from gpuwaste.store.dynamodb import DynamoDbFindingStore
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.aws_resources import create_stack
from tests.servers.slack_api import FakeSlack

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SCAN = timedelta(hours=1)


class Clock:
    def now(self) -> datetime:
        return T0


def finding(at: datetime, *, workload: str = "trainer", team: str = "ml", usd: str = "50.00") -> Finding:
    cost = Cost(priced=True, usd_per_day=Decimal(usd), wasted_gpu_share=Decimal(1), usd_per_gpu_hour=Decimal(usd) / 24,
                formula="test")
    return Finding(kind=WasteKind.IDLE, detector="idle_allocation", title=f"{workload} idle", recommendation="scale down",
                   subject=Subject(cluster="c1", namespace=team, workload_kind="Deployment", workload_name=workload,
                                   labels={"gpuwaste.io/team": team}),
                   observed_at=at, window_s=3600, wasted_gpu_share=Decimal(1), cost=cost)


@pytest.fixture(params=["sqlite", "dynamodb"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    """A function giving the store, opened afresh on each call (a restart: nothing kept in memory)."""
    if request.param == "sqlite":
        path = tmp_path / "state.db"
        yield lambda: SqliteFindingStore(path)
        return
    request.getfixturevalue("aws")
    ddb = boto3.client("dynamodb")
    stack = create_stack(boto3.client("sqs"), ddb)
    yield lambda: DynamoDbFindingStore(client=boto3.client("dynamodb"), table_name=stack.table_name)


def lifecycle(store: FindingStore) -> tuple[LifecycleService, MemoryQueue, MemoryQueue]:
    alerts, tickets = MemoryQueue("alerts"), MemoryQueue("tickets")
    settings = LifecycleSettings(ticket_after=timedelta(days=3), ticket_usd_per_day=Decimal(1000),
                                 reminder_after=timedelta(days=30))
    return LifecycleService(store=store, alerts=alerts, tickets=tickets, settings=settings, clock=Clock()), alerts, tickets


def drained(q: MemoryQueue) -> list[AlertMessage]:
    return [AlertMessage.model_validate_json(b) for b in q.drain()]


def _click(action: str, fp: str, *, trigger: str | None = "13345224609.738474920.8088930838d88f008e0") -> bytes:
    payload = {"type": "block_actions", "user": {"id": "U0ANA"}, "channel": {"id": "C0000000001"},
               "message": {"ts": "1700000000.000100"},
               "actions": [{"action_id": f"gpuwaste_{action}", "type": "button", "value": f"{action}|{fp}"}]}
    if trigger:
        payload["trigger_id"] = trigger
    return urlencode({"payload": json.dumps(payload)}).encode()


def _submit(view: dict, reason: str, days: str | None = None) -> bytes:  # type: ignore[type-arg]
    """What Slack posts when the modal is saved: the view as opened plus its `state.values`."""
    values: dict = {"reason": {"reason_input": {"type": "plain_text_input", "value": reason}}}  # type: ignore[type-arg]
    if days is not None:
        values["days"] = {"days_select": {"type": "static_select", "selected_option": {"value": days}}}
    payload = {"type": "view_submission", "user": {"id": "U0ANA"},
               "view": {**view, "id": "V00000001", "state": {"values": values}}}
    return urlencode({"payload": json.dumps(payload)}).encode()


def _service(store: FindingStore, slack_api: FakeSlack, now: datetime) -> InteractionService:
    notifier = SlackNotifier.from_settings(SlackSettings(base_url=slack_api.url), token=slack_api.token,
                                           default_channel="#gpu-waste")
    return InteractionService(verifier=None, reader=read_request, store=store, now=lambda: now, notifier=notifier,
                              ask_reason=lambda a: notifier.open_form(trigger_id=str(a.trigger_id), view=reason_view(a)))


def test_expected_click_opens_the_modal_and_its_submission_stores_the_justification_across_restarts(
        store_factory, slack_api: FakeSlack) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a finding told to its owner (first sighting through the lifecycle)
    store = store_factory()
    service, alerts, _ = lifecycle(store)
    f = finding(T0)
    service.handle_finding(FindingMessage(scan_id="s0", finding=f))
    assert [a.action for a in drained(alerts)] == [AlertAction.NEW]
    chat = _service(store, slack_api, T0 + timedelta(minutes=5))
    # WHEN the owner clicks "Expected": a modal is opened (views.open), nothing is stored yet
    reply = chat.handle(headers={}, body=_click("expected", f.fingerprint))
    (view,) = slack_api.views()
    assert reply.status == 200 and reply.body == {}
    assert view["callback_id"] == CALLBACK_ID and store.get(f.fingerprint).justification is None  # type: ignore[union-attr]
    # AND saves it with a reason and 7 days; the submission is delivered twice (Slack retries on a slow answer)
    for _ in range(2):
        assert chat.handle(headers={}, body=_submit(view, "  benchmark rerun on Friday ", "7")).body == {}
    # THEN after a restart (a fresh store object) the justification is there: who, when, until when, why
    rec = store_factory().get(f.fingerprint)
    j = rec.justification
    assert j is not None and (j.kind, j.reason, j.by) == ("expected", "benchmark rerun on Friday", "<@U0ANA>")
    assert j.at == T0 + timedelta(minutes=5) and j.until == T0 + timedelta(minutes=5, days=7)
    assert rec.acknowledged == "expected:U0ANA"
    # AND the thread was told who, until when and why (once per submission)
    texts = [c["text"] for c in slack_api.calls_to("chat.postMessage")]
    assert texts and all("benchmark rerun on Friday" in t and "2026-01-12" in t and c["thread_ts"] == "1700000000.000100"
                         for t, c in zip(texts, slack_api.calls_to("chat.postMessage"), strict=True))


def test_snooze_without_a_trigger_still_stores_a_bounded_justification(store_factory, slack_api: FakeSlack) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a stored finding and a click without a trigger_id (no modal can be opened)
    store = store_factory()
    service, _, _ = lifecycle(store)
    f = finding(T0)
    service.handle_finding(FindingMessage(scan_id="s0", finding=f))
    # WHEN "Snooze 1 day" is handled
    _service(store, slack_api, T0).handle(headers={}, body=_click("snooze_1d", f.fingerprint, trigger=None))
    # THEN it is a snooze justification of one day, "no reason given", and no modal was asked for
    rec = store.get(f.fingerprint)
    assert rec is not None and rec.justification is not None and slack_api.views() == []
    assert (rec.justification.kind, rec.justification.reason) == ("snooze", "(no reason given)")
    assert rec.snoozed_until == rec.justification.until == T0 + timedelta(days=1)


@pytest.mark.parametrize("kind", ["expected", "snooze"])
def test_justification_silences_until_it_ends_then_re_alerts_and_escalates(store_factory, kind: str) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a finding told at T0 and justified for 2 days from T0+1h
    store = store_factory()
    service, alerts, tickets = lifecycle(store)
    f0 = finding(T0)
    service.handle_finding(FindingMessage(scan_id="s0", finding=f0))
    drained(alerts)
    justify(store, f0.fingerprint, kind=kind, reason="holding for the demo", by="<@U1>",  # type: ignore[arg-type]
            at=T0 + SCAN, until=T0 + timedelta(days=2), source="slack")
    # WHEN it is seen hourly for 4 days (the ticket rule, open 3 days, would fire at day 3); each scan delivered twice
    told: list[tuple[int, AlertAction, str]] = []
    escalated: list[int] = []
    for n in range(1, 97):
        msg = FindingMessage(scan_id=f"s{n}", finding=finding(T0 + n * SCAN))
        for _ in range(2):
            service.handle_finding(msg)
        told += [(n, a.action, a.reason) for a in drained(alerts)]
        escalated += [n for a in drained(tickets) if a.action is AlertAction.ESCALATE]
    # THEN nothing was told while it ran; the first sighting at its end re-alerts once, naming it
    assert [(n, a) for n, a, _ in told] == [(48, AlertAction.REMINDER)]
    assert "justification ended" in told[0][2] and "holding for the demo" in told[0][2]
    # AND the ticket rule applies again afterwards (open ≥ 3 days at n=72), once
    assert escalated == [72]
    rec = store_factory().get(f0.fingerprint)
    assert rec is not None and rec.justification is None and rec.acknowledged is None


def test_summary_lists_active_justifications_by_team_with_their_usd_per_day(store_factory) -> None:  # type: ignore[no-untyped-def]
    # GIVEN three findings of two teams, two justified (one already ended), one not
    store = store_factory()
    service, _, _ = lifecycle(store)
    a, b, c = finding(T0, workload="a", usd="30"), finding(T0, workload="b", team="vision", usd="12.5"), finding(T0, workload="c")
    for f in (a, b, c):
        service.handle_finding(FindingMessage(scan_id="s0", finding=f))
    justify(store, a.fingerprint, kind="expected", reason="r", by="u", at=T0, until=T0 + timedelta(days=5))
    justify(store, b.fingerprint, kind="snooze", reason="r", by="u", at=T0, until=T0 + timedelta(hours=2))
    summary = SummaryService(store=store, settings=DeliverySettings(), now=lambda: T0).build(
        since=T0, until=T0 + timedelta(days=1))
    # THEN only the active one is listed, under its team, with the USD/day it covers
    assert [(j.team, j.findings, j.usd_per_day) for j in summary.justified] == [("ml", 1, Decimal("30.00"))]
    assert summary.justified[0].next_end == T0 + timedelta(days=5)
    text = json.dumps(render_summary(summary).blocks)
    assert "Justified" in text and "$30.00/day" in text
    # AND the HTML page and the JSON document list it too
    from gpuwaste.sinks.summary_report import render_html

    page = render_html(summary)
    assert "<h2>Justified" in page and "$30.00" in page.split("<h2>Justified", 1)[1].split("</table>", 1)[0]
    assert "vision" not in page.split("<h2>Justified", 1)[1].split("</table>", 1)[0]
    assert json.loads(summary.model_dump_json())["justified"][0]["team"] == "ml"


def test_active_by_team_adds_up_per_team() -> None:
    store = SqliteFindingStore(":memory:")
    service, _, _ = lifecycle(store)
    fs = [finding(T0, workload=f"w{i}", usd=str(10 + i)) for i in range(3)]
    for f in fs:
        service.handle_finding(FindingMessage(scan_id="s0", finding=f))
        justify(store, f.fingerprint, kind="expected", reason="r", by="u", at=T0, until=T0 + timedelta(days=1 + fs.index(f)))
    records = store.history(since=T0 - timedelta(days=1), until=T0 + timedelta(days=1))
    (total,) = active_by_team(records, at=T0 + timedelta(hours=30), team_of=lambda r: r.team or "?")
    assert (total.findings, total.usd_per_day, total.next_end) == (2, Decimal(23), T0 + timedelta(days=2))


def test_cli_justify_writes_the_same_justification(tmp_path: Path) -> None:
    from gpuwaste.cli import app

    state = tmp_path / "state.db"
    store = SqliteFindingStore(state)
    service, _, _ = lifecycle(store)
    f = finding(T0)
    service.handle_finding(FindingMessage(scan_id="s0", finding=f))
    store.close()
    result = CliRunner().invoke(app, ["justify", f.fingerprint[:12], "--reason", "quarter-end batch", "--kind", "snooze",
                                      "--for", "3d", "--by", "ana", "--state", str(state)])
    assert result.exit_code == 0, result.output
    j = SqliteFindingStore(state).get(f.fingerprint).justification  # type: ignore[union-attr]
    assert j is not None and (j.kind, j.reason, j.by, j.source) == ("snooze", "quarter-end batch", "ana", "cli")
    assert j.until - j.at == timedelta(days=3)
    bad = CliRunner().invoke(app, ["justify", "nope-nope-nope", "--reason", "x", "--state", str(state)])
    assert bad.exit_code == 2 and "no such finding" in bad.output

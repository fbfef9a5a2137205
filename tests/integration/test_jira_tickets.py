"""Jira Cloud tickets against the fake Jira REST v3: ADF, owner's project, created once, comment, transition, errors."""

from __future__ import annotations

import json

import pytest

from gpuwaste.errors import DeliveryError, PermanentDeliveryError
from gpuwaste.models.messages import AlertAction
from gpuwaste.models.settings import DeliverySettings, JiraSettings, RouteTarget
from gpuwaste.services.tickets import TicketService, dedupe_label
from gpuwaste.sinks.jira import JiraTicketSink
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.delivery_helpers import NOW, LambdaContext, alert, finding, load_app, record_for
from tests.servers.jira_api import FakeJira

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(jira_api: FakeJira) -> DeliverySettings:
    return DeliverySettings(
        teams={"ml": RouteTarget(jira_project="MLOPS", jira_labels=("ml-team",), jira_components=("Training",))},
        jira=JiraSettings(base_url=jira_api.url, email=jira_api.email, resolve_transition="Done"),
    )


@pytest.fixture
def store() -> SqliteFindingStore:
    return SqliteFindingStore(":memory:")


@pytest.fixture
def service(jira_api: FakeJira, settings: DeliverySettings, store: SqliteFindingStore) -> TicketService:
    sink = JiraTicketSink.from_settings(settings.jira, api_token=str(jira_api.api_token))
    return TicketService(sink=sink, store=store, settings=settings, now=lambda: NOW)


def _ml(name: str = "trainer", usd: str = "150.00"):
    return finding(name, usd_per_day=usd, ns_annotations={"gpuwaste.io/team": "ml"})


def test_ticket_created_in_owner_project_with_adf_and_labels(service: TicketService, jira_api: FakeJira,
                                                             store: SqliteFindingStore) -> None:
    # GIVEN a finding the lifecycle escalated
    f = _ml()
    store.put_new(record_for(f))
    # WHEN handled
    key = service.handle(alert(f, AlertAction.ESCALATE))
    # THEN one ticket exists in MLOPS, with ADF description, routing labels/components and the dedupe label
    assert key == "MLOPS-1"
    issue = jira_api.issues["MLOPS-1"]
    assert issue.fields["description"]["type"] == "doc"
    assert set(issue.labels) == {"gpuwaste", "ml-team", dedupe_label(f.fingerprint)}
    assert issue.fields["components"] == [{"name": "Training"}]
    assert "$150.00" in json.dumps(issue.fields["description"])
    assert store.get(f.fingerprint).ticket_key == "MLOPS-1"  # type: ignore[union-attr]


def test_ticket_created_once(service: TicketService, jira_api: FakeJira, store: SqliteFindingStore) -> None:
    # GIVEN a ticket already opened for the finding
    f = _ml()
    store.put_new(record_for(f))
    service.handle(alert(f, AlertAction.ESCALATE))
    # WHEN the escalation is redelivered, and again after the stored key was lost
    again = service.handle(alert(f, AlertAction.ESCALATE))
    rec = store.get(f.fingerprint)
    assert rec is not None
    store.update(rec.model_copy(update={"ticket_key": None, "version": rec.version + 1}), expected_version=rec.version)
    found = service.handle(alert(f, AlertAction.ESCALATE, scan_id="scan-2"))
    # THEN no second ticket is created: the stored key, then the label search, find the first
    assert again == found == "MLOPS-1"
    assert list(jira_api.issues) == ["MLOPS-1"]
    assert store.get(f.fingerprint).ticket_key == "MLOPS-1"  # type: ignore[union-attr]


def test_ticket_comment_when_worse_and_transition_on_resolve(service: TicketService, jira_api: FakeJira,
                                                              store: SqliteFindingStore) -> None:
    # GIVEN an open ticket
    f = _ml()
    store.put_new(record_for(f))
    service.handle(alert(f, AlertAction.ESCALATE))
    # WHEN the finding gets worse, then resolves (the resolve delivered twice)
    service.handle(alert(_ml(usd="300.00"), AlertAction.WORSE, scan_id="scan-2", reason="cost up 100 %"))
    service.handle(alert(f, AlertAction.RESOLVED, scan_id="scan-3", saved_usd_per_day="300.00"))
    service.handle(alert(f, AlertAction.RESOLVED, scan_id="scan-3", saved_usd_per_day="300.00"))
    # THEN two comments (worse, resolved — not three) and the ticket is Done
    issue = jira_api.issues["MLOPS-1"]
    assert len(issue.comments) == 2
    assert "cost up 100 %" in json.dumps(issue.comments[0])
    assert "Saves $300.00/day" in json.dumps(issue.comments[1])
    assert issue.status == "Done"


def test_ticket_without_project_is_a_clear_permanent_error(service: TicketService) -> None:
    # GIVEN a finding no rule routes to a Jira project
    f = finding("orphan", namespace="scratch")
    # WHEN escalated
    # THEN the error says how to route it
    with pytest.raises(PermanentDeliveryError, match="gpuwaste.io/jira-project"):
        service.handle(alert(f, AlertAction.ESCALATE))


def test_jira_410_is_permanent_with_the_migration_hint(service: TicketService, jira_api: FakeJira) -> None:
    # GIVEN Jira answers 410 Gone on the search endpoint (as a retired endpoint does)
    jira_api.fail_next("/rest/api/3/search/jql", 410, body={"errorMessages": ["The requested API has been removed."],
                                                             "errors": {}})
    # WHEN a ticket is requested
    # THEN a permanent error carries Jira's message
    with pytest.raises(PermanentDeliveryError, match="HTTP 410: The requested API has been removed"):
        service.handle(alert(_ml(), AlertAction.ESCALATE))


def test_jira_400_names_the_field(jira_api: FakeJira, service: TicketService) -> None:
    # GIVEN a project Jira does not know
    jira_api.projects = {"OTHER"}
    # WHEN a ticket is requested
    # THEN the 400 error names the field
    with pytest.raises(PermanentDeliveryError, match="project: Specify a valid project ID or key"):
        service.handle(alert(_ml(), AlertAction.ESCALATE))


def test_jira_5xx_and_429_are_retryable(jira_api: FakeJira, service: TicketService) -> None:
    # GIVEN Jira answering 503, then 429
    jira_api.fail_next("/rest/api/3/search/jql", 503)
    # WHEN a ticket is requested
    # THEN the error is retryable (the queue redelivers) and nothing was created
    with pytest.raises(DeliveryError, match="HTTP 503"):
        service.handle(alert(_ml(), AlertAction.ESCALATE))
    jira_api.fail_next("/rest/api/3/issue", 429, retry_after=30)
    with pytest.raises(DeliveryError, match="Retry-After 30s"):
        service.handle(alert(_ml(), AlertAction.ESCALATE))
    assert jira_api.issues == {}


def test_jira_wrong_token_is_permanent(jira_api: FakeJira, settings: DeliverySettings) -> None:
    # GIVEN a wrong API token
    sink = JiraTicketSink.from_settings(settings.jira, api_token="wrong")
    # WHEN searching
    # THEN 401 is a permanent error
    with pytest.raises(PermanentDeliveryError, match="HTTP 401"):
        sink.find_open("gpuwaste-0000")


def test_create_tickets_handler_uses_the_sample_event(service: TicketService, jira_api: FakeJira,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the sample tickets event and a service routing everything to MLOPS
    from pathlib import Path

    event = json.loads((Path(__file__).resolve().parents[2] / "events" / "sqs_tickets.json").read_text())
    service.settings = service.settings.model_copy(
        update={"jira": service.settings.jira.model_copy(update={"default_project": "MLOPS"})})
    app = load_app("create_tickets")
    monkeypatch.setattr(app.bootstrap, "ticket_service", lambda: service)
    # WHEN handled twice (a redelivery)
    first = app.lambda_handler(event, LambdaContext())
    second = app.lambda_handler(event, LambdaContext())
    # THEN every record succeeded and each escalated finding has exactly one ticket
    assert first["batchItemFailures"] == [] and second["batchItemFailures"] == []
    escalations = {json.loads(r["body"])["fingerprint"] for r in event["Records"]
                   if json.loads(r["body"])["action"] == "escalate"}
    assert len(jira_api.issues) == len(escalations) >= 1


def _sqs(alerts: list) -> dict:  # type: ignore[type-arg]
    return {"Records": [{"messageId": f"m-{n}", "receiptHandle": "r", "body": a.model_dump_json(), "attributes": {
        "ApproximateReceiveCount": "1", "SentTimestamp": "1", "SenderId": "s", "ApproximateFirstReceiveTimestamp": "1"},
        "messageAttributes": {}, "md5OfBody": "0", "eventSource": "aws:sqs", "eventSourceARN":
        "arn:aws:sqs:us-east-1:123456789012:tickets", "awsRegion": "us-east-1"} for n, a in enumerate(alerts)]}


@pytest.mark.parametrize(("quiet_days", "expected"), [(7, 3), (0, 10)])
def test_create_tickets_handler_applies_the_caps_and_quiet_start_over_batches(
        service: TicketService, jira_api: FakeJira, store: SqliteFindingStore, monkeypatch: pytest.MonkeyPatch,
        quiet_days: int, expected: int) -> None:
    # GIVEN a first run escalating 24 findings of 6 teams (4 each), arriving as 3 SQS batches of 8
    teams = [f"team{t}" for t in range(6)]
    service.settings = service.settings.model_copy(update={"jira": service.settings.jira.model_copy(
        update={"default_project": "OPS", "quiet_start_days": quiet_days})})
    requests = []
    for n in range(24):
        f = finding(f"w{n:02d}", usd_per_day=f"{100 + n}.00", ns_annotations={"gpuwaste.io/team": teams[n % 6]},
                    namespace=f"ns{n % 6}")
        assert store.put_new(record_for(f, ticket_requested_at=NOW))
        requests.append(alert(f, AlertAction.ESCALATE))
    app = load_app("create_tickets")
    monkeypatch.setattr(app.bootstrap, "ticket_service", lambda: service)
    # WHEN the handler takes the batches one after the other
    for start in range(0, 24, 8):
        response = app.lambda_handler(_sqs(requests[start:start + 8]), LambdaContext())
        assert response["batchItemFailures"] == []
    # THEN the fake Jira holds what the caps allow over the whole run: the quiet start opens 3 (1 per team);
    # after it, 10 per run (3 per team's own tickets, overflow tickets included) — never 24
    assert len(jira_api.issues) == expected
    own = [i for i in jira_api.issues.values() if not any(label.startswith("gpuwaste-team-") for label in i.labels)]
    per_team: dict[str, int] = {}
    for issue in own:
        fp = next(label for label in issue.labels if label.startswith("gpuwaste-") and label != "gpuwaste")[9:]
        rec = next(r for r in (store.get(a.fingerprint) for a in requests) if r and r.fingerprint.startswith(fp))
        team = json.loads(rec.finding_json)["subject"]["namespace_annotations"]["gpuwaste.io/team"]
        per_team[team] = per_team.get(team, 0) + 1
    assert max(per_team.values()) <= (1 if quiet_days else 3)
    # AND the requests not filed were released, so a later scan requests them again
    released = [a for a in requests if (r := store.get(a.fingerprint)) and r.ticket_requested_at is None]
    assert released and all(not store.get(a.fingerprint).ticket_key for a in released)  # type: ignore[union-attr]

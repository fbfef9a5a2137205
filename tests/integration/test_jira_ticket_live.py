"""Jira (the local Jira Cloud server) receives the ticket with its headings, priority and money."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from gpuwaste.models.messages import AlertAction
from gpuwaste.models.settings import DeliverySettings, JiraSettings, RouteTarget
from gpuwaste.services.tickets import TicketService
from gpuwaste.sinks.jira import JiraTicketSink
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.delivery_helpers import NOW, alert, finding, record_for

if TYPE_CHECKING:
    from tests.servers.jira_api import FakeJira


pytestmark = pytest.mark.integration


def test_jira_receives_headings_priority_and_money(jira_api: FakeJira) -> None:
    # GIVEN a $150/day finding of team ml escalated, with Jira configured
    settings = DeliverySettings(teams={"ml": RouteTarget(jira_project="MLOPS")},
                                jira=JiraSettings(base_url=jira_api.url, email=jira_api.email))
    store = SqliteFindingStore(":memory:")
    f = finding("trainer", usd_per_day="150.00", ns_annotations={"gpuwaste.io/team": "ml"})
    store.put_new(record_for(f))
    sink = JiraTicketSink.from_settings(settings.jira, api_token=str(jira_api.api_token))
    service = TicketService(sink=sink, store=store, settings=settings, now=lambda: NOW + timedelta(hours=1))
    # WHEN handled
    key = service.handle(alert(f, AlertAction.ESCALATE))
    # THEN the fake Jira holds the ticket: money in the summary, priority High, ADF headings and a code block
    issue = jira_api.issues[key]  # type: ignore[index]
    assert issue.fields["summary"].startswith("$150.00/day GPU waste:")
    assert issue.fields["priority"] == {"name": "High"}
    nodes = issue.fields["description"]["content"]
    assert [n["content"][0]["text"] for n in nodes if n["type"] == "heading"][:5] == [
        "What", "Evidence", "Cost", "How to fix", "Done when"]
    assert any(n["type"] == "codeBlock" and "kubectl" in n["content"][0]["text"] for n in nodes)

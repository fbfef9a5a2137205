"""Owner routing: workload → namespace → config maps → default, with the route stated; snooze-until parsing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuwaste.models.settings import DeliverySettings, LinkTemplates, RouteTarget
from gpuwaste.services.routing import links_for, parse_snooze_until, route_for, snoozed_until
from tests.delivery_helpers import NOW, finding

SETTINGS = DeliverySettings(
    default_channel="#gpu-waste",
    teams={"ml-serving": RouteTarget(slack_channel="#ml-serving", jira_project="MLS", jira_labels=("serving",))},
    namespaces={"batch": RouteTarget(team="batch-team", slack_channel="#batch-jobs", jira_components=("Batch",))},
)


def test_route_for_workload_annotation_wins_over_namespace() -> None:
    # GIVEN a pod annotated with a channel in a namespace annotated with another
    f = finding(annotations={"gpuwaste.io/slack-channel": "#pod-owner"},
                ns_annotations={"gpuwaste.io/slack-channel": "#ns-owner", "gpuwaste.io/team": "ml-serving"})
    # WHEN routed
    route = route_for(f, SETTINGS)
    # THEN the workload's channel is used and the message can say why
    assert route.channel == "#pod-owner"
    assert route.source == "workload annotation gpuwaste.io/slack-channel"
    assert route.team == "ml-serving"


def test_route_for_namespace_annotation_then_team_map() -> None:
    # GIVEN a namespace annotated with a team only (the team map knows its channel and Jira project)
    f = finding(ns_annotations={"gpuwaste.io/team": "ml-serving"})
    # WHEN routed
    route = route_for(f, SETTINGS)
    # THEN the team map supplies channel, project and labels
    assert (route.channel, route.source) == ("#ml-serving", "team map 'ml-serving'")
    assert route.jira_project == "MLS"
    assert route.jira_labels == ("serving",)


def test_route_for_namespace_map_and_default() -> None:
    # GIVEN one finding in a mapped namespace and one in an unknown namespace
    mapped = finding(namespace="batch")
    unknown = finding(namespace="scratch")
    # WHEN routed
    r1, r2 = route_for(mapped, SETTINGS), route_for(unknown, SETTINGS)
    # THEN the namespace map, then the default channel, are used and named
    assert (r1.channel, r1.source, r1.team, r1.jira_components) == ("#batch-jobs", "namespace map 'batch'", "batch-team", ("Batch",))
    assert (r2.channel, r2.source, r2.team) == ("#gpu-waste", "default channel", None)


def test_route_for_user_and_project_from_labels() -> None:
    # GIVEN a workload label naming the Slack user and a namespace label naming the Jira project
    f = finding(labels={"gpuwaste.io/slack-user": "ana@example.com"}, ns_labels={"gpuwaste.io/jira-project": "OPS"})
    # WHEN routed
    route = route_for(f, SETTINGS)
    # THEN both are picked up
    assert route.user_email == "ana@example.com"
    assert route.jira_project == "OPS"


def test_links_for_quotes_values_into_templates() -> None:
    # GIVEN a Grafana template and a workload name with characters that need quoting
    settings = DeliverySettings(links=LinkTemplates(grafana="https://g.example/d/gpu?var-ns={namespace}&var-wl={workload}"))
    f = finding("a b&c")
    # WHEN links are built
    links = links_for(f, settings)
    # THEN the values are URL-quoted
    assert links == (("Grafana", "https://g.example/d/gpu?var-ns=ml&var-wl=a%20b%26c"),)


def test_parse_snooze_until_accepts_time_date_and_duration() -> None:
    # GIVEN the accepted spellings
    # WHEN parsed
    # THEN each yields a UTC time; a date snoozes through the whole day
    assert parse_snooze_until("2026-12-01T09:30:00Z", now=NOW) == datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    assert parse_snooze_until("2026-12-01T09:30:00+02:00", now=NOW) == datetime(2026, 12, 1, 7, 30, tzinfo=UTC)
    assert parse_snooze_until("2026-12-01", now=NOW) == datetime(2026, 12, 2, tzinfo=UTC)
    assert parse_snooze_until("7d", now=NOW) == NOW + timedelta(days=7)
    assert parse_snooze_until("12h", now=NOW) == NOW + timedelta(hours=12)


def test_parse_snooze_until_ignores_garbage() -> None:
    # GIVEN unreadable values
    # WHEN parsed
    # THEN nothing is snoozed
    assert parse_snooze_until("forever", now=NOW) is None
    assert parse_snooze_until("", now=NOW) is None
    assert parse_snooze_until(None, now=NOW) is None


def test_snoozed_until_reads_the_annotation_and_ignores_the_past() -> None:
    # GIVEN one workload snoozed for the future and one whose snooze has passed
    future = finding(annotations={"gpuwaste.io/snooze-until": "2026-12-24"})
    past = finding(annotations={"gpuwaste.io/snooze-until": "2026-01-01"})
    # WHEN checked
    # THEN only the future snooze counts
    assert snoozed_until(future, SETTINGS, now=NOW) == datetime(2026, 12, 25, tzinfo=UTC)
    assert snoozed_until(past, SETTINGS, now=NOW) is None

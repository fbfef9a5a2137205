"""Microsoft Teams delivery against fake Workflows webhooks: card shape, size limit, digest split, retries, routing
per owner, hostile names, and a Teams failure that never re-posts to Slack. Counted at the fakes."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest

from gpuwaste.errors import DeliveryError, PermanentDeliveryError
from gpuwaste.headlines import title_line
from gpuwaste.models.lifecycle import FindingState
from gpuwaste.models.messages import AlertAction
from gpuwaste.models.notices import message_for
from gpuwaste.models.settings import DeliverySettings, RouteTarget, SlackSettings, TeamsSettings
from gpuwaste.services.notify import NotifyService
from gpuwaste.sinks.slack import SlackNotifier
from gpuwaste.sinks.teams import TeamsNotifier
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.delivery_helpers import NOW, alert, finding, record_for
from tests.servers.slack_api import FakeSlack
from tests.servers.teams_webhook import LIMIT_BYTES, FakeTeams

pytestmark = pytest.mark.integration


class Sleeps(list[float]):
    """Records the waits asked for, instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def urls(teams: FakeTeams) -> dict[str, str]:
    """Three flows: the default channel, team ml's channel, namespace batch's channel."""
    return {"general": teams.add_flow("general"), "ml": teams.add_flow("ml"), "batch": teams.add_flow("batch")}


@pytest.fixture
def settings() -> DeliverySettings:
    return DeliverySettings(
        teams={"ml": RouteTarget(teams_webhook="ml", slack_channel="#ml-alerts")},
        namespaces={"batch": RouteTarget(teams_webhook="batch")},
        msteams=TeamsSettings(default_webhook="general", rate_limit_retries=2, server_error_retries=1),
    )


@pytest.fixture
def store() -> SqliteFindingStore:
    return SqliteFindingStore(":memory:")


@pytest.fixture
def notifier(settings: DeliverySettings, urls: dict[str, str], sleeps: Sleeps) -> TeamsNotifier:
    return TeamsNotifier(settings, urls, now=lambda: NOW, sleep=sleeps)


@pytest.fixture
def service(notifier: TeamsNotifier, settings: DeliverySettings, store: SqliteFindingStore) -> NotifyService:
    return NotifyService(notifier=notifier, store=store, settings=settings, now=lambda: NOW)


def shown_ids(teams: FakeTeams) -> list[str]:
    """The short finding ids the accepted cards show (a full finding's "Finding" fact, a tail line's "finding …")."""
    return [m[1] for p in teams.posts for t in p.texts() if (m := re.fullmatch(r"(?:.* · finding )?([0-9a-f]{6})", t))]


def _ml(name: str, usd: str = "98.30"):
    return finding(name, usd_per_day=usd, ns_annotations={"gpuwaste.io/team": "ml"})


def test_teams_alert_is_an_adaptive_card_in_the_owners_channel(service: NotifyService, teams: FakeTeams,
                                                               store: SqliteFindingStore) -> None:
    # GIVEN one new finding of team ml (the team map names Teams webhook "ml")
    f = _ml("trainer")
    store.put_new(record_for(f))
    # WHEN delivered
    service.deliver([alert(f)])
    # THEN the ml flow accepted one Adaptive Card (the fake checks the message shape) with the money and the workload
    (post,) = teams.posts
    assert post.flow == "ml" and post.card["type"] == "AdaptiveCard" and post.card["version"] == "1.4"
    texts = post.texts()
    assert texts[0] == "GPU waste: $98.30/day"
    assert "Deployment/ml/trainer" in " ".join(texts) and "$20.48" in " ".join(texts)
    # AND the record keeps a reference naming the webhook, never its URL, and the Teams delivery key
    rec = store.get(f.fingerprint)
    assert rec is not None
    ref = message_for(rec.messages, "teams")
    assert ref is not None and ref.destination == "ml" and "sig=" not in rec.model_dump_json()
    assert rec.delivery_keys == (f"{f.fingerprint}:new:scan-1:teams",)


def test_teams_routes_per_owner_team_namespace_and_default(service: NotifyService, teams: FakeTeams,
                                                           store: SqliteFindingStore) -> None:
    # GIVEN one finding of team ml, one in namespace batch (namespace map), one with no route
    fs = [_ml("trainer"), finding("nightly", namespace="batch"), finding("solo", namespace="scratch")]
    for f in fs:
        store.put_new(record_for(f))
    # WHEN delivered
    service.deliver([alert(f) for f in fs])
    # THEN each went to its own flow, once
    assert sorted(p.flow for p in teams.posts) == ["batch", "general", "ml"]
    by_flow = {p.flow: " ".join(p.texts()) for p in teams.posts}
    assert "team map 'ml'" in by_flow["ml"] and "namespace map 'batch'" in by_flow["batch"]
    assert "default webhook" in by_flow["general"]


def test_teams_unknown_webhook_falls_back_to_the_default_and_says_so(settings: DeliverySettings, teams: FakeTeams,
                                                                     urls: dict[str, str], store: SqliteFindingStore) -> None:
    # GIVEN team ml routed to a webhook name that has no URL
    routed = settings.model_copy(update={"teams": {"ml": RouteTarget(teams_webhook="ml-gone")}})
    service = NotifyService(notifier=TeamsNotifier(routed, urls, now=lambda: NOW), store=store, settings=routed,
                            now=lambda: NOW)
    f = _ml("trainer")
    store.put_new(record_for(f))
    # WHEN delivered
    service.deliver([alert(f)])
    # THEN the default flow got it, and the card says the routed webhook is not configured
    (post,) = teams.posts
    assert post.flow == "general" and "ml-gone is not configured" in " ".join(post.texts())


def test_teams_digest_splits_under_the_28_kb_limit_and_every_finding_arrives_once(
        service: NotifyService, teams: FakeTeams, store: SqliteFindingStore) -> None:
    # GIVEN 120 new findings of team ml with long names (≈ 120 × 900 bytes of card: several times Teams' limit)
    fs = [_ml(f"w{n:03d}-" + "n" * 200, usd=f"{n + 1}.00") for n in range(120)]
    for f in fs:
        store.put_new(record_for(f))
    # WHEN delivered
    report = service.deliver([alert(f) for f in fs])
    # THEN the fake accepted several cards, each under its 28 KB limit, none refused, costliest first
    assert not report.failed and not teams.refused
    assert 2 <= len(teams.posts) <= 4
    assert all(p.size <= LIMIT_BYTES for p in teams.posts)
    assert teams.posts[0].texts()[0] == f"GPU waste: 120 findings for team ml — $7,260.00/day (part 1 of {len(teams.posts)})"
    assert sorted(shown_ids(teams)) == sorted(f.fingerprint[:6] for f in fs)
    # AND the costliest are in full (short title, the detector's sentence, facts) at the top of the first card, the
    # rest one line each
    first = teams.posts[0].texts()
    assert first[2] == title_line(fs[-1]) and fs[-1].title in first and "$120.00/day" in first
    # AND every finding is recorded as delivered to Teams exactly once
    keys = [k for f in fs for k in store.get(f.fingerprint).delivery_keys]  # type: ignore[union-attr]
    assert sorted(keys) == sorted(f"{f.fingerprint}:new:scan-1:teams" for f in fs)


def test_teams_card_refused_for_its_size_is_resent_smaller(service: NotifyService, teams: FakeTeams,
                                                           store: SqliteFindingStore) -> None:
    # GIVEN a receiver stricter than our budget (15 KB instead of 28 KB) and a 40-finding digest
    teams.limit_bytes = 15_000
    fs = [_ml(f"job-{n:02d}-" + "x" * 150) for n in range(40)]
    for f in fs:
        store.put_new(record_for(f))
    # WHEN delivered
    report = service.deliver([alert(f) for f in fs])
    # THEN the refused cards were sent again in smaller ones: every finding arrived, nothing failed
    assert not report.failed and any(code == 413 for code, _ in teams.refused)
    assert sorted(shown_ids(teams)) == sorted(f.fingerprint[:6] for f in fs)


def test_teams_429_waits_retry_after_then_posts_once(service: NotifyService, teams: FakeTeams, sleeps: Sleeps,
                                                     store: SqliteFindingStore) -> None:
    # GIVEN Teams throttles the next two requests (Retry-After 7 s)
    teams.fail_next(429, times=2, retry_after=7)
    f = _ml("trainer")
    store.put_new(record_for(f))
    # WHEN delivered
    report = service.deliver([alert(f)])
    # THEN it waited exactly Retry-After twice and the flow accepted the card once
    assert not report.failed
    assert sleeps == [7.0, 7.0] and teams.faults_served["teams 429"] == 2
    assert len(teams.posts) == 1


def test_teams_persistent_5xx_is_left_for_the_queue_not_dropped(service: NotifyService, teams: FakeTeams,
                                                                store: SqliteFindingStore) -> None:
    # GIVEN Teams answers 503 to everything for a while (more than the in-process retry)
    teams.fail_next(503, times=5)
    f = _ml("trainer")
    store.put_new(record_for(f))
    # WHEN delivered
    report = service.deliver([alert(f)])
    # THEN the alert failed with a retryable error (the queue brings it back), nothing was recorded as delivered
    ((failed_alert, error),) = report.failed
    assert isinstance(error, DeliveryError) and not isinstance(error, PermanentDeliveryError)
    assert "sig=" not in str(error) and "http" not in str(error)  # the webhook URL is a secret
    assert store.get(f.fingerprint).delivery_keys == ()  # type: ignore[union-attr]
    assert teams.posts == [] and teams.faults_served["teams 503"] == 2
    # AND once Teams is back, the retry posts it once
    teams.heal()
    service.deliver([failed_alert])
    assert len(teams.posts) == 1


def test_teams_wrong_secret_is_permanent(settings: DeliverySettings, teams: FakeTeams, urls: dict[str, str],
                                         store: SqliteFindingStore) -> None:
    # GIVEN the default webhook's URL with a wrong sig
    bad = {**urls, "general": urls["general"].rsplit("sig=", 1)[0] + "sig=wrong"}
    service = NotifyService(notifier=TeamsNotifier(settings, bad, now=lambda: NOW), store=store, settings=settings,
                            now=lambda: NOW)
    f = finding("solo", namespace="scratch")
    store.put_new(record_for(f))
    # WHEN delivered
    report = service.deliver([alert(f)])
    # THEN a permanent error that names the webhook but not its URL; nothing accepted
    ((_, error),) = report.failed
    assert isinstance(error, PermanentDeliveryError) and "general" in str(error) and "wrong" not in str(error)
    assert teams.posts == []


def test_teams_worse_and_resolved_are_new_cards_in_the_same_channel(service: NotifyService, teams: FakeTeams,
                                                                    store: SqliteFindingStore) -> None:
    # GIVEN a finding of team ml already alerted in Teams
    f = _ml("trainer")
    store.put_new(record_for(f))
    service.deliver([alert(f)])
    # WHEN it gets worse, then resolves (its record resolved by the lifecycle)
    service.deliver([alert(_ml("trainer", usd="150.00"), AlertAction.WORSE, scan_id="scan-2", reason="cost up 53 %")])
    rec = store.get(f.fingerprint)
    assert rec is not None
    store.update(rec.model_copy(update={"state": FindingState.RESOLVED, "resolved_at": NOW,
                                        "saved_usd_per_day": Decimal("150.00"), "version": rec.version + 1}),
                 expected_version=rec.version)
    service.deliver([alert(f, AlertAction.RESOLVED, scan_id="scan-9", saved_usd_per_day="150.00")])
    # THEN (a Workflows webhook can neither thread nor edit) three cards reached the same flow: alert, update, resolution
    assert [p.flow for p in teams.posts] == ["ml", "ml", "ml"]
    heads = [p.texts()[0] for p in teams.posts]
    assert heads[1].startswith("cost up 53 %: GPU waste still open")
    assert heads[2] == "Resolved: GPU waste no longer seen — saves $150.00/day"
    assert store.get(f.fingerprint).delivery_keys[-1] == f"{f.fingerprint}:resolved:scan-9:teams"  # type: ignore[union-attr]


HOSTILE = [
    "[click me](https://evil.example/phish)",
    "**URGENT** _all clear_",
    "<at>everyone</at>",
    "# heading\n- list",
    "![img](https://evil.example/x.png)",
]


@pytest.mark.parametrize("name", HOSTILE, ids=["link", "emphasis", "mention", "heading+list", "image"])
def test_teams_hostile_names_never_render_as_markdown(service: NotifyService, teams: FakeTeams,
                                                      store: SqliteFindingStore, name: str) -> None:
    # GIVEN a finding whose workload name and team (anyone who can create a pod sets both) carry Teams markdown
    f = finding(name, namespace="scratch", ns_annotations={"gpuwaste.io/team": name},
                title=f"1 GPU held by scratch/{name} idle")
    store.put_new(record_for(f))
    # WHEN delivered as an alert and as part of a digest
    g = finding("other", namespace="scratch", ns_annotations={"gpuwaste.io/team": name})
    store.put_new(record_for(g))
    service.deliver([alert(f), alert(g, scan_id="scan-1")])
    # THEN the text reached Teams (the name is shown) but only in plain runs or escaped: no link, emphasis or mention
    assert teams.posts
    for post in teams.posts:
        assert post.rendered_markup() == [], post.rendered_markup()
        assert "evil.example" not in json.dumps(post.card.get("actions", []))
    assert any(name in t for p in teams.posts for t in p.texts())


def test_teams_failure_never_re_posts_to_slack(slack_api: FakeSlack, teams: FakeTeams, urls: dict[str, str],
                                                settings: DeliverySettings, store: SqliteFindingStore) -> None:
    # GIVEN Slack and Teams both configured, and Teams down (503) for the first delivery
    both = settings.model_copy(update={"slack": SlackSettings(base_url=slack_api.url, server_error_retries=0)})
    slack = SlackNotifier.from_settings(both.slack, token=slack_api.token, default_channel="#gpu-waste")
    service = NotifyService(notifiers=[slack, TeamsNotifier(both, urls, now=lambda: NOW, sleep=lambda _s: None)],
                            store=store, settings=both, now=lambda: NOW)
    f = _ml("trainer")
    store.put_new(record_for(f))
    teams.fail_next(503, times=2)
    # WHEN delivered, and (the queue brings the failed message back) delivered again
    first = service.deliver([alert(f)])
    second = service.deliver([alert(f)])
    # THEN the first attempt failed for Teams only, Slack got exactly one post and Teams exactly one card
    assert len(first.failed) == 1 and not second.failed
    assert len(slack_api.calls_to("chat.postMessage")) == 1
    assert len(teams.posts) == 1
    rec = store.get(f.fingerprint)
    assert rec is not None and {r.sink for r in rec.messages} == {"slack", "teams"}
    assert sorted(rec.delivery_keys) == sorted([f"{f.fingerprint}:new:scan-1:slack", f"{f.fingerprint}:new:scan-1:teams"])


def test_teams_summary_card_fits_and_notes_the_chart(notifier: TeamsNotifier, teams: FakeTeams) -> None:
    # GIVEN a daily summary with many teams
    from datetime import timedelta

    from gpuwaste.models.notices import DailySummary, GroupTotal
    from tests.delivery_helpers import NOW as until
    groups = tuple(GroupTotal(name=f"team-{n:02d}-" + "x" * 80, wasted_usd=Decimal(n), findings=n) for n in range(200))
    s = DailySummary(since=until - timedelta(days=1), until=until, wasted_usd=Decimal("1234.56"), previous_usd=Decimal(1000),
                     open_usd_per_day=Decimal("900"), open_findings=12, opened=3, resolved=1,
                     saved_usd_per_day=Decimal("50"), realised_savings_usd=Decimal("20"), by_team=groups, by_kind=groups)
    # WHEN posted with a chart
    notifier.post_summary(s, channel="#gpu-waste", chart_png=b"\x89PNG")
    # THEN the default flow accepted one card under the limit, with the total and a note that the chart is elsewhere
    (post,) = teams.posts
    text = " ".join(post.texts())
    assert post.flow == "general" and post.size <= LIMIT_BYTES
    assert "$1,234.56" in text and "cannot attach images" in text

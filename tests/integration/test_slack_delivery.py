"""Slack delivery against the fake Slack Web API: routing, digest, thread, edit, limits, retries, no double post."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal

import pytest

from gpuwaste.errors import DeliveryError, PermanentDeliveryError
from gpuwaste.models.lifecycle import FindingState
from gpuwaste.models.messages import AlertAction, AlertMessage
from gpuwaste.models.notices import message_for
from gpuwaste.models.settings import DeliverySettings, RouteTarget, SlackSettings
from gpuwaste.services.notify import NotifyService
from gpuwaste.sinks.slack import SlackNotifier
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.delivery_helpers import NOW, ROOT, LambdaContext, alert, finding, load_app, record_for
from tests.servers.slack_api import FakeSlack

pytestmark = pytest.mark.integration


class Sleeps(list[float]):
    """Records the waits the retry handlers ask for, instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def settings(slack_api: FakeSlack) -> DeliverySettings:
    return DeliverySettings(
        default_channel="#gpu-waste",
        teams={"ml": RouteTarget(slack_channel="#ml-alerts", slack_user_email="ana@example.com")},
        slack=SlackSettings(base_url=slack_api.url, rate_limit_retries=2, server_error_retries=1),
    )


@pytest.fixture
def store() -> SqliteFindingStore:
    return SqliteFindingStore(":memory:")


@pytest.fixture
def service(slack_api: FakeSlack, settings: DeliverySettings, store: SqliteFindingStore, sleeps: Sleeps) -> NotifyService:
    notifier = SlackNotifier.from_settings(settings.slack, token=slack_api.token, default_channel="#gpu-waste", sleep=sleeps)
    notifier._now = lambda: NOW
    return NotifyService(notifier=notifier, store=store, settings=settings, now=lambda: NOW)


def _ml(name: str, usd: str = "98.30"):
    return finding(name, usd_per_day=usd, ns_annotations={"gpuwaste.io/team": "ml"})


def test_notify_new_alert_routes_posts_and_records_ts(service: NotifyService, slack_api: FakeSlack,
                                                      store: SqliteFindingStore) -> None:
    # GIVEN one new finding of team ml (the team map routes it to #ml-alerts and mentions Ana)
    slack_api.users["ana@example.com"] = "U0ANA"
    f = _ml("trainer")
    store.put_new(record_for(f))
    # WHEN delivered
    report = service.deliver([alert(f)])
    # THEN one message goes to #ml-alerts, says why, mentions Ana, and its ts is in the lifecycle record
    (body,) = slack_api.calls_to("chat.postMessage")
    assert body["channel"] == "#ml-alerts"
    blocks = json.dumps(body["blocks"])
    assert "team map 'ml'" in blocks and "<@U0ANA>" in blocks
    rec = store.get(f.fingerprint)
    ref = message_for(rec.messages, "slack") if rec is not None else None
    assert ref is not None and (ref.destination, ref.message_id) == (slack_api.channel_id("ml-alerts"), report.posted[0].message_id)
    assert rec is not None and rec.delivery_keys == (f"{f.fingerprint}:new:scan-1:slack",)


def test_notify_many_findings_for_one_owner_become_one_digest(service: NotifyService, slack_api: FakeSlack,
                                                              store: SqliteFindingStore) -> None:
    # GIVEN three new findings of one owner from one scan and one of another owner
    mine = [_ml(f"job-{n}", usd=f"{10 * (n + 1)}.00") for n in range(3)]
    other = finding("solo", namespace="scratch")
    for f in (*mine, other):
        store.put_new(record_for(f))
    # WHEN delivered as one batch
    service.deliver([alert(f) for f in (*mine, other)])
    # THEN ml gets one digest carrying the three, the other owner a single alert
    posts = slack_api.calls_to("chat.postMessage")
    assert sorted(p["channel"] for p in posts) == ["#gpu-waste", "#ml-alerts"]
    digest = next(p for p in posts if p["channel"] == "#ml-alerts")
    assert digest["blocks"][0]["text"]["text"] == "GPU waste: 3 findings for team ml — $60.00/day"
    ts = {store.get(f.fingerprint).messages[0].message_id for f in mine}  # type: ignore[union-attr]
    assert len(ts) == 1


def test_notify_large_digest_splits_and_slack_accepts_every_part(service: NotifyService, slack_api: FakeSlack,
                                                                 store: SqliteFindingStore) -> None:
    # GIVEN 250 new findings for one owner, with long names (≈45,000 characters of text: Slack takes ~11,300 per
    # message, field guide B33)
    fs = [_ml(f"w{n:03d}-" + "n" * 120) for n in range(250)]
    for f in fs:
        store.put_new(record_for(f))
    # WHEN delivered
    report = service.deliver([alert(f) for f in fs])
    # THEN the fake Slack (which enforces the per-block and the cumulative limits) accepted every part on the first
    # try, few parts (the costliest in full, the rest as compact lines), and nothing failed
    posts = slack_api.calls_to("chat.postMessage")
    assert not report.failed
    assert len(slack_api.messages) == len(posts) <= 6
    carried = [fp for p in posts for fp in p["metadata"]["event_payload"]["fps"]]
    assert sorted(carried) == sorted(f.fingerprint[:16] for f in fs)


def test_notify_worse_goes_in_the_thread(service: NotifyService, slack_api: FakeSlack, store: SqliteFindingStore) -> None:
    # GIVEN a finding already alerted
    f = _ml("trainer")
    store.put_new(record_for(f))
    first = service.deliver([alert(f)]).posted[0]
    # WHEN it gets worse in a later scan
    worse = _ml("trainer", usd="150.00")
    service.deliver([alert(worse, AlertAction.WORSE, scan_id="scan-2", reason="cost up 53 %")])
    # THEN the update is a reply in the original's thread
    reply = slack_api.calls_to("chat.postMessage")[-1]
    assert reply["thread_ts"] == first.message_id and reply["channel"] == first.destination
    assert "cost up 53 %" in json.dumps(reply["blocks"])


def test_notify_resolved_edits_the_original(service: NotifyService, slack_api: FakeSlack, store: SqliteFindingStore) -> None:
    # GIVEN an alerted finding that the lifecycle then resolved
    f = _ml("trainer")
    store.put_new(record_for(f))
    first = service.deliver([alert(f)]).posted[0]
    rec = store.get(f.fingerprint)
    assert rec is not None
    store.update(rec.model_copy(update={"state": FindingState.RESOLVED, "resolved_at": NOW,
                                        "saved_usd_per_day": Decimal("98.30"), "version": rec.version + 1}),
                 expected_version=rec.version)
    # WHEN the RESOLVED alert is delivered
    service.deliver([alert(f, AlertAction.RESOLVED, scan_id="scan-9", saved_usd_per_day="98.30")])
    # THEN the original message is edited (not a new post) to say it is resolved and what it saved
    (edit,) = slack_api.calls_to("chat.update")
    assert edit["ts"] == first.message_id
    stored = slack_api.messages[(first.destination, first.message_id)]
    assert stored["blocks"][0]["text"]["text"].startswith("Resolved: ")
    assert "saves $98.30/day" in json.dumps(stored["blocks"])
    assert len(slack_api.calls_to("chat.postMessage")) == 1


def test_notify_resolved_in_a_digest_re_renders_the_digest(service: NotifyService, slack_api: FakeSlack,
                                                           store: SqliteFindingStore) -> None:
    # GIVEN a digest of two findings, one of which resolves
    a, b = _ml("a"), _ml("b")
    for f in (a, b):
        store.put_new(record_for(f))
    posted = service.deliver([alert(a), alert(b)]).posted[0]
    # WHEN the resolution of `a` is delivered
    service.deliver([alert(a, AlertAction.RESOLVED, scan_id="scan-5", saved_usd_per_day="98.30")])
    # THEN the digest is edited in place: both findings remain, `a` marked resolved, `b` still actionable
    blocks = slack_api.messages[(posted.destination, posted.message_id)]["blocks"]
    text = json.dumps(blocks)
    assert text.count(":white_check_mark: resolved") == 1 and "ml/b" in text
    menus = [blk["accessory"] for blk in blocks if blk.get("accessory", {}).get("type") == "overflow"]
    assert len(menus) == 1 and all(o["value"].endswith(b.fingerprint) for o in menus[0]["options"])


def test_notify_missing_channel_falls_back_to_default_and_says_so(service: NotifyService, slack_api: FakeSlack,
                                                                  store: SqliteFindingStore) -> None:
    # GIVEN a routed channel that does not exist
    slack_api.missing_channels.add("ml-alerts")
    f = _ml("trainer")
    store.put_new(record_for(f))
    # WHEN delivered
    report = service.deliver([alert(f)])
    # THEN it lands in the default channel with the reason on the message
    ok = slack_api.calls_to("chat.postMessage")[-1]
    assert ok["channel"] == "#gpu-waste"
    assert "#ml-alerts was not found (channel_not_found)" in json.dumps(ok["blocks"])
    assert report.posted[0].fell_back_from == "#ml-alerts"


def test_notify_honours_retry_after_on_429(service: NotifyService, slack_api: FakeSlack, sleeps: Sleeps,
                                           store: SqliteFindingStore) -> None:
    # GIVEN Slack rate-limits the first post with Retry-After: 7
    slack_api.fail_next("chat.postMessage", 429, retry_after=7)
    f = _ml("trainer")
    store.put_new(record_for(f))
    # WHEN delivered
    report = service.deliver([alert(f)])
    # THEN the handler waited exactly 7 s and the message was posted once
    assert sleeps == [7.0]
    assert not report.failed
    assert len(slack_api.messages) == 1


def test_notify_persistent_429_raises_delivery_error(service: NotifyService, slack_api: FakeSlack,
                                                     store: SqliteFindingStore) -> None:
    # GIVEN Slack keeps rate-limiting beyond the retries
    slack_api.fail_next("chat.postMessage", 429, retry_after=1, times=5)
    f = _ml("trainer")
    store.put_new(record_for(f))
    # WHEN one group is delivered
    plan = service.plan([alert(f)])
    # THEN a retryable DeliveryError comes out (the queue message is not acknowledged) and nothing is recorded
    with pytest.raises(DeliveryError):
        plan.deliver(alert(f))
    assert store.get(f.fingerprint).delivery_keys == ()  # type: ignore[union-attr]


def test_notify_invalid_auth_is_permanent(service: NotifyService, slack_api: FakeSlack) -> None:
    # GIVEN a revoked token
    slack_api.fail_next("chat.postMessage", error="invalid_auth")
    f = _ml("trainer")
    # WHEN delivered
    # THEN a permanent error names the cause
    with pytest.raises(PermanentDeliveryError, match="invalid_auth"):
        service.plan([alert(f)]).deliver(alert(f))


def test_notify_redelivered_alert_is_not_posted_twice(service: NotifyService, slack_api: FakeSlack,
                                                      store: SqliteFindingStore) -> None:
    # GIVEN an alert already delivered (its key is in the lifecycle record)
    f = _ml("trainer")
    store.put_new(record_for(f))
    service.deliver([alert(f)])
    # WHEN SQS redelivers the same message
    report = service.deliver([alert(f)])
    # THEN Slack is not called again
    assert len(slack_api.calls_to("chat.postMessage")) == 1
    assert [a.fingerprint for a in report.skipped] == [f.fingerprint]


def test_notify_snoozed_finding_is_silent(service: NotifyService, slack_api: FakeSlack, store: SqliteFindingStore) -> None:
    # GIVEN a finding snoozed by annotation and one snoozed in the store
    by_annotation = finding("a", annotations={"gpuwaste.io/snooze-until": "7d"})
    by_button = finding("b")
    store.put_new(record_for(by_button, snoozed_until=NOW + timedelta(days=1)))
    # WHEN a reminder is delivered for both
    service.deliver([alert(by_annotation, AlertAction.REMINDER), alert(by_button, AlertAction.REMINDER)])
    # THEN nothing is posted
    assert slack_api.calls_to("chat.postMessage") == []


def test_notify_slack_handler_retries_5xx_via_the_queue_then_posts_once(
    service: NotifyService, slack_api: FakeSlack, store: SqliteFindingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the sample alerts event (events/sqs_alerts.json) and a Slack that answers 503 beyond in-process retries
    app = load_app("notify_slack")
    monkeypatch.setattr(app.bootstrap, "notify_service", lambda: service)
    monkeypatch.delenv("DEAD_LETTER_QUEUE_URL", raising=False)
    event = json.loads((ROOT / "events" / "sqs_alerts.json").read_text())
    new_ids = [r["messageId"] for r in event["Records"] if json.loads(r["body"])["action"] == "new"]
    for r in event["Records"]:  # the lifecycle wrote each record before it sent the alert
        msg = AlertMessage.model_validate_json(r["body"])
        store.put_new(record_for(msg.finding, messages=msg.messages))
    slack_api.fail_next("*", 503, times=2)
    # WHEN the batch is handled
    first = app.lambda_handler(event, LambdaContext())
    # THEN the new alert's record is reported failed (SQS will redeliver it), not dropped
    failed = {f["itemIdentifier"] for f in first["batchItemFailures"]}
    assert set(new_ids) <= failed
    # WHEN SQS redelivers the batch and Slack is healthy again
    second = app.lambda_handler(event, LambdaContext())
    third = app.lambda_handler(event, LambdaContext())
    # THEN everything succeeds and the new alert is posted exactly once even though the batch came three times
    assert second["batchItemFailures"] == [] and third["batchItemFailures"] == []
    new_posts = [p for p in slack_api.calls_to("chat.postMessage") if "llama-70b-vllm" in json.dumps(p.get("blocks"))]
    assert len(new_posts) == 3  # two refused with 503 (first try + its in-process retry), then one accepted
    assert len([m for m in slack_api.messages.values() if "llama-70b-vllm" in json.dumps(m.get("blocks"))]) == 1


def test_notify_summary_uploads_the_chart(slack_api: FakeSlack, settings: DeliverySettings, sleeps: Sleeps) -> None:
    # GIVEN a summary and a PNG
    from gpuwaste.services.summary import summarize

    notifier = SlackNotifier.from_settings(settings.slack, token=slack_api.token, default_channel="#gpu-waste", sleep=sleeps)
    s = summarize([record_for(_ml("a"))], since=NOW - timedelta(days=1), until=NOW, team_of=lambda r: "ml")
    # WHEN posted
    posted = notifier.post_summary(s, channel="#gpu-waste", chart_png=b"\x89PNG-bytes")
    # THEN the message is posted and the chart uploaded into its thread with files_upload_v2
    assert slack_api.calls_to("chat.postMessage")[0]["channel"] == "#gpu-waste"
    (upload,) = slack_api.files.values()
    assert upload.completed and upload.content == b"\x89PNG-bytes" and upload.channel_id == posted.destination


def test_notify_resolved_in_a_digest_finds_its_siblings_by_key_not_in_the_history(
        service: NotifyService, slack_api: FakeSlack, store: SqliteFindingStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a digest of three findings posted (each record keeps the digest's reference with what it carries)
    a, b, c = _ml("a"), _ml("b"), _ml("c")
    for f in (a, b, c):
        store.put_new(record_for(f))
    posted = service.deliver([alert(a), alert(b), alert(c)]).posted[0]
    stored = store.get(a.fingerprint)
    assert stored is not None and set(stored.messages[0].carries) == {a.fingerprint, b.fingerprint, c.fingerprint}

    # WHEN `a` resolves, with the store's history read made to fail (it would read the whole fleet's records)
    def no_history(**_: object) -> list[object]:
        raise AssertionError("a resolution read the fleet's history")

    monkeypatch.setattr(store, "history", no_history)
    service.deliver([alert(a, AlertAction.RESOLVED, scan_id="scan-5", saved_usd_per_day="98.30")])
    # THEN the digest is still re-rendered whole (b and c remain), read by key only
    text = json.dumps(slack_api.messages[(posted.destination, posted.message_id)]["blocks"])
    assert text.count(":white_check_mark: resolved") == 1 and "ml/b" in text and "ml/c" in text

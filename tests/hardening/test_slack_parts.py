"""Slack delivery per part (field guide B33, B34), against the fake Slack.

* A digest is split on Slack's cumulative text limit as well as its per-block limits; a part Slack still refuses
  for its size (`msg_blocks_too_long`, `invalid_blocks`) is retried smaller, then as text only — never failed for
  its size.
* Each part is recorded as delivered as soon as Slack accepts it: a 429 on part 2 never re-posts part 1.
* In-process waits are capped by the invocation's remaining time; the rest is deferred to the queue.

Counted at the fake: what it accepted (keyed by the finding and scan the message metadata names) and refused.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuwaste.errors import DeliveryError
from gpuwaste.models.messages import AlertMessage
from gpuwaste.models.settings import DeliverySettings, SlackSettings
from gpuwaste.services.notify import NotifyService, delivery_key
from gpuwaste.sinks.slack import SlackNotifier
from gpuwaste.sinks.slack_blocks import MESSAGE_TEXT_BUDGET, blocks_text_chars
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.delivery_helpers import NOW, alert, finding, record_for
from tests.hardening.conftest import Figures
from tests.hardening.harness import AuditedSlack

pytestmark = pytest.mark.integration


@pytest.fixture
def store() -> Iterator[SqliteFindingStore]:
    s = SqliteFindingStore(":memory:")
    yield s
    s.close()


def _digest(store: SqliteFindingStore, n: int, *, name_chars: int = 120) -> list[AlertMessage]:
    """`n` NEW alerts of one owner and one scan (long workload names, as real clusters have), stored."""
    alerts = []
    for k in range(n):
        f = finding(f"job-{k:03d}-" + "x" * name_chars, usd_per_day=f"{100 + k}.00")
        assert store.put_new(record_for(f, version=1))
        alerts.append(alert(f))
    return alerts


def _service(slack: AuditedSlack, store: SqliteFindingStore, *, sleeps: list[float], retries: int = 0,
             time_left: float | None = None) -> NotifyService:
    settings = DeliverySettings(slack=SlackSettings(base_url=slack.url, rate_limit_retries=retries,
                                                    server_error_retries=0, timeout_s=5), digest_threshold=2)
    notifier = SlackNotifier.from_settings(settings.slack, token=slack.token, default_channel=settings.default_channel,
                                           sleep=sleeps.append)
    service = NotifyService(notifier=notifier, store=store, settings=settings, now=lambda: NOW)
    if time_left is not None:
        service.time_left = lambda: time_left
        notifier.set_time_left(lambda: time_left)
    return service


def test_slack_parts_a_200_finding_digest_stays_under_the_cumulative_text_limit(
        audited_slack: AuditedSlack, store: SqliteFindingStore, figures: Figures) -> None:
    # GIVEN 200 new findings of one owner (≈20,000 characters of text as one message: Slack refuses that, B33)
    alerts = _digest(store, 200)
    # WHEN delivered
    report = _service(audited_slack, store, sleeps=[]).deliver(alerts)
    # THEN Slack refused nothing, every message stayed within the budget, and each finding was posted once
    posts = [a for a in audited_slack.accepted if a.method == "chat.postMessage"]
    assert report.failed == [] and len(posts) >= 2
    assert len(audited_slack.calls) == len(audited_slack.accepted), "no call was refused"
    assert all(blocks_text_chars(p.params["blocks"]) <= MESSAGE_TEXT_BUDGET for p in posts)
    assert set(audited_slack.accepted_keys().values()) == {1}
    assert len(audited_slack.accepted_keys()) == 200
    figures.notes["slack parts: 200-finding digest"] = f"{len(posts)} messages, none refused"


@pytest.mark.parametrize(("limit", "shape"), [(6_000, "smaller"), (300, "text only")])
def test_slack_parts_refused_for_size_is_retried_smaller_then_text_only_never_dropped(
        audited_slack: AuditedSlack, store: SqliteFindingStore, figures: Figures, limit: int, shape: str) -> None:
    # GIVEN a Slack whose (undocumented) cumulative limit is lower than our budget
    audited_slack.blocks_text_limit = limit
    alerts = _digest(store, 90)
    # WHEN the digest is delivered
    report = _service(audited_slack, store, sleeps=[]).deliver(alerts)
    # THEN Slack refused some messages for their size, yet every finding was posted exactly once and recorded
    refused = [c for c in audited_slack.calls if c.method == "chat.postMessage"]
    assert len(refused) > len([a for a in audited_slack.accepted if a.method == "chat.postMessage"])
    assert report.failed == []
    keys = audited_slack.accepted_keys()
    assert len(keys) == 90 and set(keys.values()) == {1}
    for a in alerts:
        record = store.get(a.fingerprint)
        assert record is not None and delivery_key(a, "slack") in record.delivery_keys
    text_only = [p for p in audited_slack.accepted if p.method == "chat.postMessage" and not p.params.get("blocks")]
    assert bool(text_only) == (shape == "text only")
    figures.fault(f"slack msg_blocks_too_long ({shape})",
                  len(refused) - len([a for a in audited_slack.accepted if a.method == "chat.postMessage"]))


def test_slack_parts_429_on_part_two_never_reposts_part_one_and_waits_no_longer_than_the_time_left(
        audited_slack: AuditedSlack, store: SqliteFindingStore, figures: Figures) -> None:
    # GIVEN a 3-part digest, and Slack answering part 2 with 429 Retry-After 30 four times; 20 s left in the Lambda
    alerts = _digest(store, 250, name_chars=200)
    sleeps: list[float] = []
    service = _service(audited_slack, store, sleeps=sleeps, retries=3, time_left=20.0)
    calls = {"n": 0}
    original = audited_slack.handle

    def handle(request):  # type: ignore[no-untyped-def]
        if request.path.endswith("chat.postMessage"):
            calls["n"] += 1
            if calls["n"] == 2:
                audited_slack.fail_next("chat.postMessage", 429, times=4, retry_after=30)
        return original(request)

    audited_slack.handle = handle  # type: ignore[method-assign]
    # WHEN delivered: the first attempt fails on part 2 (a 30 s wait does not fit in 20 s: deferred to the queue)
    plan = service.plan(alerts)
    with pytest.raises(DeliveryError):
        plan.deliver(alerts[0])
    accepted_first = dict(audited_slack.accepted_keys())
    # THEN part 1 was recorded at once, and no in-process wait reached the Retry-After
    assert accepted_first and all(s < 20 for s in sleeps)
    recorded = [a for a in alerts if delivery_key(a, "slack") in (store.get(a.fingerprint) or record_for(
        a.finding)).delivery_keys]
    assert {a.fingerprint[:16] for a in recorded} == {fp for fp, _ in accepted_first}
    # WHEN the queue redelivers after Slack recovered
    with audited_slack._lock:
        audited_slack._state.faults.clear()
    service.time_left = None
    service.plan(alerts, redelivered=alerts).deliver(alerts[0])
    # THEN every finding was posted exactly once over both attempts
    keys = audited_slack.accepted_keys()
    assert len(keys) == 250 and set(keys.values()) == {1}
    figures.fault("slack 429 on part 2 (deferred)", audited_slack.faults_served["429"])


def test_slack_parts_too_little_time_left_defers_the_group_to_the_queue(
        audited_slack: AuditedSlack, store: SqliteFindingStore) -> None:
    # GIVEN a Lambda with 5 s left
    alerts = _digest(store, 3)
    service = _service(audited_slack, store, sleeps=[], time_left=5.0)
    # WHEN a group is delivered
    # THEN it is not started (DeliveryError: the queue brings it back) and nothing reached Slack
    with pytest.raises(DeliveryError, match="deferred"):
        service.plan(alerts).deliver(alerts[0])
    assert audited_slack.calls == []
    assert all(not (store.get(a.fingerprint) or record_for(a.finding)).delivery_keys for a in alerts)

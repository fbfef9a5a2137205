"""Generic JSON webhook delivery against a local receiver: the documented envelope, the HMAC signature checked by the
receiver, one event per finding, retries on 429/5xx, and the URL kept secret. Counted at the receiver."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pydantic import SecretStr

from gpuwaste.bootstrap import delivery
from gpuwaste.errors import DeliveryError
from gpuwaste.models.lifecycle import FindingState
from gpuwaste.models.messages import AlertAction
from gpuwaste.models.settings import DeliverySettings, WebhookSettings
from gpuwaste.services.notify import NotifyService
from gpuwaste.sinks.webhook import verify_signature
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.delivery_helpers import NOW, alert, finding, record_for
from tests.servers.json_webhook import FakeJsonWebhook

pytestmark = pytest.mark.integration


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def settings(json_webhook: FakeJsonWebhook) -> DeliverySettings:
    return DeliverySettings(webhook=WebhookSettings(url=json_webhook.url + "?token=s3cr3t-in-url",  # type: ignore[arg-type]
                                                    signing_secret=json_webhook.secret,  # type: ignore[arg-type]
                                                    rate_limit_retries=2, server_error_retries=1))


@pytest.fixture
def store() -> SqliteFindingStore:
    return SqliteFindingStore(":memory:")


@pytest.fixture
def service(settings: DeliverySettings, store: SqliteFindingStore, sleeps: Sleeps) -> NotifyService:
    (notifier,) = delivery.extra_notifiers(settings, sleep=sleeps)
    return NotifyService(notifier=notifier, store=store, settings=settings, now=lambda: NOW)


def test_webhook_event_follows_the_documented_envelope_and_is_signed(service: NotifyService, json_webhook: FakeJsonWebhook,
                                                                     store: SqliteFindingStore) -> None:
    # GIVEN one new finding
    f = finding("trainer", ns_annotations={"gpuwaste.io/team": "ml"})
    store.put_new(record_for(f))
    # WHEN delivered
    service.deliver([alert(f)])
    # THEN the receiver verified the signature itself and kept one event with the documented fields, money as strings
    assert json_webhook.bad_signatures == 0
    (event,) = json_webhook.events
    assert event["schema_version"] == 1 and event["source"] == "gpuwaste"
    assert event["id"] == f"{f.fingerprint}:new:scan-1" and event["dedup_key"] == f.fingerprint
    assert (event["action"], event["event_action"]) == ("new", "trigger")
    assert event["finding"]["workload_name"] == "trainer" and event["finding"]["team"] == "ml"
    assert event["money"] == {"currency": "USD", "usd_per_day": "98.30", "cumulative_usd": "20.48",
                              "saved_usd_per_day": None, "formula": "$4.0958/GPU-h × 1 GPU × 24 h = $98.30/day"}
    assert json_webhook.headers[0]["idempotency-key"] == event["id"]
    # AND the record keeps the event id as its message reference
    rec = store.get(f.fingerprint)
    assert rec is not None and rec.messages[0].sink == "webhook" and rec.messages[0].message_id == event["id"]


def test_webhook_signature_is_refused_with_the_wrong_secret(settings: DeliverySettings, json_webhook: FakeJsonWebhook,
                                                            store: SqliteFindingStore) -> None:
    # GIVEN the product signs with a secret the receiver does not have
    wrong = settings.model_copy(update={"webhook": settings.webhook.model_copy(update={"signing_secret": SecretStr("nope")})})
    (notifier,) = delivery.extra_notifiers(wrong)
    service = NotifyService(notifier=notifier, store=store, settings=wrong, now=lambda: NOW)
    f = finding("trainer")
    store.put_new(record_for(f))
    # WHEN delivered
    report = service.deliver([alert(f)])
    # THEN the receiver refused it (401, permanent), nothing recorded, and the error does not show the URL's token
    assert json_webhook.bad_signatures == 1 and json_webhook.events == []
    ((_, error),) = report.failed
    assert "s3cr3t" not in str(error)


def test_webhook_reference_verifier_accepts_what_the_receiver_accepts(json_webhook: FakeJsonWebhook,
                                                                      service: NotifyService, store: SqliteFindingStore) -> None:
    # GIVEN an event the receiver accepted (its own HMAC check)
    f = finding("trainer")
    store.put_new(record_for(f))
    service.deliver([alert(f)])
    headers = json_webhook.headers[0]
    import json as _json
    body = _json.dumps(json_webhook.events[0], separators=(",", ":"), ensure_ascii=False).encode()
    # WHEN the documented reference check runs on the same bytes, and on a tampered body
    # THEN it agrees with the receiver, and refuses the tampered body and a stale timestamp
    assert verify_signature(json_webhook.secret, headers, body)
    assert not verify_signature(json_webhook.secret, headers, body.replace(b"98.30", b"0.01"))
    assert not verify_signature(json_webhook.secret, headers, body, now=int(headers["x-gpuwaste-timestamp"]) + 301)


def test_webhook_digest_is_one_event_per_finding(service: NotifyService, json_webhook: FakeJsonWebhook,
                                                 store: SqliteFindingStore) -> None:
    # GIVEN five new findings of one owner (a digest in chat)
    fs = [finding(f"job-{n}", ns_annotations={"gpuwaste.io/team": "ml"}) for n in range(5)]
    for f in fs:
        store.put_new(record_for(f))
    # WHEN delivered
    service.deliver([alert(f) for f in fs])
    # THEN the receiver got five events, one per finding
    assert sorted(e["dedup_key"] for e in json_webhook.events) == sorted(f.fingerprint for f in fs)


def test_webhook_retries_429_and_5xx_then_leaves_it_for_the_queue(service: NotifyService, json_webhook: FakeJsonWebhook,
                                                                  store: SqliteFindingStore, sleeps: Sleeps) -> None:
    # GIVEN a receiver that throttles once (Retry-After 3 s), then fails with 502 three times
    json_webhook.fail_next(429, retry_after=3)
    json_webhook.fail_next(502, times=3)
    f = finding("trainer")
    store.put_new(record_for(f))
    # WHEN delivered
    report = service.deliver([alert(f)])
    # THEN it waited Retry-After, retried the 5xx once, and gave the alert back for the queue (nothing recorded)
    ((failed, error),) = report.failed
    assert isinstance(error, DeliveryError) and sleeps[0] == 3.0
    assert json_webhook.faults_served == {"webhook 429": 1, "webhook 502": 2}
    assert json_webhook.events == [] and store.get(f.fingerprint).delivery_keys == ()  # type: ignore[union-attr]
    # AND the queue's retry (receiver back) delivers it once
    json_webhook.heal()
    service.deliver([failed])
    assert len(json_webhook.events) == 1 and json_webhook.duplicates == 0


def test_webhook_resolution_is_a_resolve_event_with_the_same_dedup_key(service: NotifyService, json_webhook: FakeJsonWebhook,
                                                                       store: SqliteFindingStore) -> None:
    # GIVEN an alerted finding that then resolves
    f = finding("trainer")
    store.put_new(record_for(f))
    service.deliver([alert(f)])
    rec = store.get(f.fingerprint)
    assert rec is not None
    store.update(rec.model_copy(update={"state": FindingState.RESOLVED, "resolved_at": NOW,
                                        "saved_usd_per_day": Decimal("98.30"), "version": rec.version + 1}),
                 expected_version=rec.version)
    # WHEN the RESOLVED alert is delivered
    service.deliver([alert(f, AlertAction.RESOLVED, scan_id="scan-9", saved_usd_per_day="98.30")])
    # THEN a resolve event for the same dedup key, with the saving
    new, resolved = json_webhook.events
    assert resolved["dedup_key"] == new["dedup_key"] and resolved["event_action"] == "resolve"
    assert resolved["money"]["saved_usd_per_day"] == "98.30"

"""Every kind of post has an idempotency key and is looked up before a re-post (issue 28 item 3).

A post the sink accepted whose record was never written (the process died, the Lambda timed out, the answer was
lost) comes back as a redelivery. Counted at the fakes: Slack thread replies, edits (resolutions) and Jira comments,
overflow tickets and overflow comments are each accepted once. The crash is played by removing the delivery key
from the lifecycle record after the sink accepted the post: exactly the state such a crash leaves.
"""

from __future__ import annotations

import json
import time
from decimal import Decimal

import pytest

from gpuwaste.errors import PermanentDeliveryError, StoreError
from gpuwaste.models.lifecycle import FindingState
from gpuwaste.models.messages import AlertAction, AlertMessage
from gpuwaste.models.settings import DeliverySettings, JiraSettings, RouteTarget, SlackSettings
from gpuwaste.services.notify import NotifyService, delivery_key
from gpuwaste.services.tickets import TicketService, overflow_label
from gpuwaste.sinks.jira import DELIVERY_PROPERTY, JiraTicketSink
from gpuwaste.sinks.slack import SlackNotifier
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.delivery_helpers import NOW, ROOT, LambdaContext, alert, finding, load_app, record_for
from tests.servers import HttpRequest, HttpResponse
from tests.servers.jira_api import FakeJira
from tests.servers.slack_api import FakeSlack

pytestmark = pytest.mark.integration


@pytest.fixture
def store() -> SqliteFindingStore:
    return SqliteFindingStore(":memory:")


@pytest.fixture
def settings(slack_api: FakeSlack, jira_api: FakeJira) -> DeliverySettings:
    return DeliverySettings(
        default_channel="#gpu-waste",
        teams={"ml": RouteTarget(slack_channel="#ml-alerts", jira_project="MLOPS")},
        slack=SlackSettings(base_url=slack_api.url, rate_limit_retries=0, server_error_retries=0),
        jira=JiraSettings(base_url=jira_api.url, email=jira_api.email, resolve_transition="Done"),
    )


@pytest.fixture
def notify(slack_api: FakeSlack, settings: DeliverySettings, store: SqliteFindingStore) -> NotifyService:
    notifier = SlackNotifier.from_settings(settings.slack, token=slack_api.token, default_channel="#gpu-waste",
                                           sleep=lambda s: None)
    notifier._now = lambda: NOW
    return NotifyService(notifier=notifier, store=store, settings=settings, now=lambda: NOW)


@pytest.fixture
def tickets(jira_api: FakeJira, settings: DeliverySettings, store: SqliteFindingStore) -> TicketService:
    sink = JiraTicketSink.from_settings(settings.jira, api_token=str(jira_api.api_token))
    return TicketService(sink=sink, store=store, settings=settings, now=lambda: NOW)


def _ml(name: str, usd: str = "150.00"):
    return finding(name, usd_per_day=usd, ns_annotations={"gpuwaste.io/team": "ml"})


def _forget(store: SqliteFindingStore, a: AlertMessage, sink: str) -> None:
    """The record as a crash between the sink's acceptance and the write leaves it: the delivery key absent."""
    rec = store.get(a.fingerprint)
    assert rec is not None
    key = delivery_key(a, sink)
    assert key in rec.delivery_keys, "the first delivery must have been recorded"
    store.update(rec.model_copy(update={"delivery_keys": tuple(k for k in rec.delivery_keys if k != key),
                                        "version": rec.version + 1}), expected_version=rec.version)


def _redeliver(notify: NotifyService, alerts: list[AlertMessage]) -> None:
    report = notify.plan(alerts, redelivered=alerts).deliver_all()
    assert not report.failed, report.failed


def _replies(slack: FakeSlack) -> list[dict]:
    return [c for c in slack.calls_to("chat.postMessage") if c.get("thread_ts")]


def _resolve(store: SqliteFindingStore, fp: str) -> None:
    rec = store.get(fp)
    assert rec is not None
    store.update(rec.model_copy(update={"state": FindingState.RESOLVED, "resolved_at": NOW,
                                        "saved_usd_per_day": Decimal("150.00"), "version": rec.version + 1}),
                 expected_version=rec.version)


@pytest.mark.parametrize("action", [AlertAction.WORSE, AlertAction.REMINDER])
def test_a_thread_reply_accepted_before_a_crash_is_found_in_the_thread_not_posted_again(
        notify: NotifyService, slack_api: FakeSlack, store: SqliteFindingStore, action: AlertAction) -> None:
    # GIVEN an alerted finding whose update reply Slack accepted, but whose delivery was never recorded
    f = _ml("trainer")
    store.put_new(record_for(f))
    notify.deliver([alert(f)])
    update = alert(_ml("trainer", "200.00"), action, scan_id="scan-2", reason="cost up")
    notify.deliver([update])
    assert len(_replies(slack_api)) == 1
    meta = _replies(slack_api)[0]["metadata"]["event_payload"]
    assert meta["key"] == delivery_key(update, "slack")  # the idempotency key travels with the reply
    _forget(store, update, "slack")
    # WHEN the update comes back (a redelivery: the queue or the outbox retries it)
    _redeliver(notify, [update])
    # THEN Slack holds one reply, found by its key in the thread, and the delivery is recorded again
    assert len(_replies(slack_api)) == 1
    assert slack_api.calls_to("conversations.replies"), "the thread must have been looked up"
    rec = store.get(f.fingerprint)
    assert rec is not None and delivery_key(update, "slack") in rec.delivery_keys


def test_a_reply_not_accepted_is_posted_on_the_redelivery(notify: NotifyService, slack_api: FakeSlack,
                                                          store: SqliteFindingStore) -> None:
    # GIVEN an update whose reply Slack refused (5xx)
    f = _ml("trainer")
    store.put_new(record_for(f))
    notify.deliver([alert(f)])
    update = alert(_ml("trainer", "200.00"), AlertAction.WORSE, scan_id="scan-2", reason="cost up")
    slack_api.fail_next("chat.postMessage", 503)
    assert notify.deliver([update]).failed
    # WHEN it is redelivered
    _redeliver(notify, [update])
    # THEN the look-up finds nothing and the reply is posted, once
    assert len(_replies(slack_api)) == 2  # the refused call and the accepted one
    assert len([m for m in slack_api.messages.values() if m.get("thread_ts")]) == 1


def test_an_edit_accepted_before_a_crash_is_not_applied_again(notify: NotifyService, slack_api: FakeSlack,
                                                              store: SqliteFindingStore) -> None:
    # GIVEN a resolution Slack accepted as an edit of the original, never recorded
    f = _ml("trainer")
    store.put_new(record_for(f))
    notify.deliver([alert(f)])
    _resolve(store, f.fingerprint)
    resolved = alert(f, AlertAction.RESOLVED, scan_id="scan-9", saved_usd_per_day="150.00")
    notify.deliver([resolved])
    assert len(slack_api.calls_to("chat.update")) == 1
    _forget(store, resolved, "slack")
    # WHEN the resolution is redelivered
    _redeliver(notify, [resolved])
    # THEN the message is not edited again (its metadata carries the resolution) and the delivery is recorded
    assert len(slack_api.calls_to("chat.update")) == 1
    rec = store.get(f.fingerprint)
    assert rec is not None and delivery_key(resolved, "slack") in rec.delivery_keys


def test_two_resolutions_of_one_digest_both_unrecorded_are_each_edited_once(
        notify: NotifyService, slack_api: FakeSlack, store: SqliteFindingStore) -> None:
    # GIVEN a digest of three findings, two resolved in one scan, both edits accepted and neither recorded
    fs = [_ml(n) for n in ("a", "b", "c")]
    for f in fs:
        store.put_new(record_for(f))
    notify.deliver([alert(f) for f in fs])
    resolutions = [alert(f, AlertAction.RESOLVED, scan_id="scan-5", saved_usd_per_day="150.00") for f in fs[:2]]
    for r in resolutions:
        _resolve(store, r.fingerprint)
        notify.deliver([r])
    assert len(slack_api.calls_to("chat.update")) == 2
    for r in resolutions:
        _forget(store, r, "slack")
    # WHEN both come back
    _redeliver(notify, resolutions)
    # THEN neither is edited again: the last edit shows both resolved
    assert len(slack_api.calls_to("chat.update")) == 2
    (digest,) = [m for m in slack_api.messages.values() if not m.get("thread_ts")]
    assert json.dumps(digest["blocks"]).count(":white_check_mark: resolved") == 2


def test_a_jira_comment_accepted_before_a_crash_is_not_posted_again(tickets: TicketService, jira_api: FakeJira,
                                                                    store: SqliteFindingStore) -> None:
    # GIVEN a ticketed finding whose WORSE comment Jira accepted, never recorded
    f = _ml("trainer")
    store.put_new(record_for(f))
    key = tickets.handle(alert(f, AlertAction.ESCALATE))
    worse = alert(_ml("trainer", "300.00"), AlertAction.WORSE, scan_id="scan-3", reason="cost doubled")
    tickets.handle(worse)
    issue = jira_api.issues[str(key)]
    assert len(issue.comments) == 1
    assert issue.comment_meta[0]["properties"][DELIVERY_PROPERTY] == {"keys": [delivery_key(worse, "jira")]}
    _forget(store, worse, "jira")
    # WHEN it is handled again
    tickets.handle(worse)
    # THEN Jira holds one comment and the delivery is recorded
    assert len(issue.comments) == 1
    rec = store.get(f.fingerprint)
    assert rec is not None and delivery_key(worse, "jira") in rec.delivery_keys


def test_a_resolution_comment_and_transition_retried_after_a_crash_are_neither_repeated_nor_refused(
        tickets: TicketService, jira_api: FakeJira, store: SqliteFindingStore) -> None:
    # GIVEN a resolution whose comment and transition to Done Jira applied, never recorded (a Done issue is not
    # offered the transition to Done again)
    f = _ml("trainer")
    store.put_new(record_for(f))
    key = str(tickets.handle(alert(f, AlertAction.ESCALATE)))
    resolved = alert(f, AlertAction.RESOLVED, scan_id="scan-4", saved_usd_per_day="150.00")
    tickets.handle(resolved)
    assert jira_api.issues[key].status == "Done" and len(jira_api.issues[key].comments) == 1
    _forget(store, resolved, "jira")
    transitions_before = sum(1 for m, p in jira_api.requests if m == "POST" and p.endswith("/transitions"))
    # WHEN it is handled again
    tickets.handle(resolved)
    # THEN one comment, no second transition, still Done, recorded
    assert len(jira_api.issues[key].comments) == 1 and jira_api.issues[key].status == "Done"
    assert sum(1 for m, p in jira_api.requests if m == "POST" and p.endswith("/transitions")) == transitions_before
    rec = store.get(f.fingerprint)
    assert rec is not None and delivery_key(resolved, "jira") in rec.delivery_keys
    # AND a transition that truly is not there is still refused
    with pytest.raises(PermanentDeliveryError, match="no transition"):
        tickets.sink.transition(key, "Closed")


def test_an_overflow_ticket_retried_lists_each_finding_once(tickets: TicketService, jira_api: FakeJira) -> None:
    # GIVEN an overflow ticket Jira created for three findings (its answer lost: nothing recorded)
    a, b, c, d = (alert(_ml(n), AlertAction.ESCALATE) for n in ("a", "b", "c", "d"))
    key = tickets.open_overflow("ml", [a, b, c])
    issue = jira_api.issues[key]
    assert overflow_label("ml") in issue.labels and len(issue.properties[DELIVERY_PROPERTY]["keys"]) == 3
    # WHEN the same requests are retried
    assert tickets.open_overflow("ml", [a, b, c]) == key
    # THEN no comment repeats them
    assert issue.comments == [] and len(jira_api.issues) == 1
    # WHEN a retry regroups them with a new one, and that retry is itself repeated
    tickets.open_overflow("ml", [b, c, d])
    tickets.open_overflow("ml", [b, c, d])
    # THEN one comment lists only the new finding
    assert len(issue.comments) == 1
    text = json.dumps(issue.comments[0])
    assert "1 more findings" in text and d.fingerprint[:6] in text and a.fingerprint[:6] not in text


class _FailingWrites(SqliteFindingStore):
    """A store whose next `failures` conditional writes raise StoreError (throttled), as DynamoDB's may."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.failures = 0

    def update(self, record, *, expected_version):  # type: ignore[no-untyped-def]
        if self.failures > 0:
            self.failures -= 1
            raise StoreError("throttled")
        return super().update(record, expected_version=expected_version)


def test_lambda_notify_a_reply_accepted_whose_record_failed_is_found_on_the_sqs_redelivery(
        slack_api: FakeSlack, settings: DeliverySettings, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the notify_slack function over a store that fails every write after Slack accepts a reply
    app = load_app("notify_slack")
    store = _FailingWrites()
    notifier = SlackNotifier.from_settings(settings.slack, token=slack_api.token, default_channel="#gpu-waste",
                                           sleep=lambda s: None)
    service = NotifyService(notifier=notifier, store=store, settings=settings, now=lambda: NOW)
    monkeypatch.setattr(app.bootstrap, "notify_service", lambda: service)
    monkeypatch.setattr("gpuwaste.services.delivery_records.time.sleep", lambda s: None)
    monkeypatch.delenv("DEAD_LETTER_QUEUE_URL", raising=False)
    f = _ml("trainer")
    store.put_new(record_for(f))
    service.deliver([alert(f)])
    worse = alert(_ml("trainer", "200.00"), AlertAction.WORSE, scan_id="scan-2", reason="cost up")
    record = json.loads((ROOT / "events" / "sqs_alerts.json").read_text())["Records"][0]
    event = {"Records": [{**record, "body": worse.model_dump_json()}]}
    store.failures = 100
    # WHEN the record is handled: the reply is accepted, recording it fails (the record is reported failed)
    first = app.lambda_handler(event, LambdaContext())
    assert [f["itemIdentifier"] for f in first["batchItemFailures"]] == [record["messageId"]]
    assert len(_replies(slack_api)) == 1
    # WHEN SQS redelivers it (receive count 2) and the store is healthy
    store.failures = 0
    again = {"Records": [{**event["Records"][0], "attributes": {**record["attributes"], "ApproximateReceiveCount": "2"}}]}
    second = app.lambda_handler(again, LambdaContext())
    # THEN it succeeds without a second reply (found in the thread by its key) and is recorded
    assert second["batchItemFailures"] == []
    assert len(_replies(slack_api)) == 1
    rec = store.get(f.fingerprint)
    assert rec is not None and delivery_key(worse, "slack") in rec.delivery_keys


class _LateAnswers(FakeSlack):
    """The fake Slack accepting a call, then answering after the client gave up (a lost answer)."""

    def __init__(self) -> None:
        super().__init__()
        self.late: set[str] = set()

    def handle(self, request: HttpRequest) -> HttpResponse:
        response = super().handle(request)
        method = request.path.removeprefix("/api/").strip("/")
        if method in self.late:
            self.late.discard(method)
            time.sleep(2.5)  # past the client's 1 s timeout: Slack has the message, the product has no answer
        return response


def test_a_reply_whose_answer_came_after_the_timeout_is_not_posted_again() -> None:
    with _LateAnswers() as slack:
        # GIVEN an alerted finding and a Slack that accepts its update reply but answers too late
        settings = DeliverySettings(default_channel="#gpu-waste", teams={"ml": RouteTarget(slack_channel="#ml-alerts")},
                                    slack=SlackSettings(base_url=slack.url, timeout_s=1, rate_limit_retries=0,
                                                        server_error_retries=0))
        store = SqliteFindingStore(":memory:")
        notifier = SlackNotifier.from_settings(settings.slack, token=slack.token, default_channel="#gpu-waste",
                                               sleep=lambda s: None)
        notify = NotifyService(notifier=notifier, store=store, settings=settings, now=lambda: NOW)
        f = _ml("trainer")
        store.put_new(record_for(f))
        notify.deliver([alert(f)])
        update = alert(_ml("trainer", "200.00"), AlertAction.REMINDER, scan_id="scan-2")
        slack.late.add("chat.postMessage")
        # WHEN it is delivered: the answer is lost (the delivery fails and stays pending)
        assert notify.deliver([update]).failed
        # AND delivered again (the outbox's next run, or SQS's redelivery)
        _redeliver(notify, [update])
        # THEN Slack holds one reply
        assert len([m for m in slack.messages.values() if m.get("thread_ts")]) == 1
        rec = store.get(f.fingerprint)
        assert rec is not None and delivery_key(update, "slack") in rec.delivery_keys

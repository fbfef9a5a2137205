"""Slack interactivity behind the Function URL: signature (valid, invalid, replayed) and the lifecycle writes."""

from __future__ import annotations

import base64
import json
import time
from datetime import timedelta
from urllib.parse import urlencode

import pytest

from gpuwaste.models.notices import Notice, NoticeItem, NoticeKind, Route
from gpuwaste.models.settings import DeliverySettings, JiraSettings, SlackSettings
from gpuwaste.services.interactions import InteractionService, SignatureError
from gpuwaste.services.notify import NotifyService
from gpuwaste.services.tickets import TicketService
from gpuwaste.sinks.jira import JiraTicketSink
from gpuwaste.sinks.slack import SlackNotifier
from gpuwaste.sinks.slack_blocks import details_text, render_notice
from gpuwaste.sinks.slack_interactions import read_request
from gpuwaste.sinks.slack_signature import SlackSignatureVerifier, sign
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.delivery_helpers import NOW, LambdaContext, alert, finding, load_app, record_for
from tests.servers.jira_api import FakeJira
from tests.servers.slack_api import FakeSlack

pytestmark = pytest.mark.integration

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


class MemoryLedger:
    """`ports.OnceLedger` in memory: the handler's replay claims, without a table."""

    def __init__(self) -> None:
        self.claimed: list[str] = []

    def claim(self, key: str, **_: object) -> str:
        if key in self.claimed:
            return "held"
        self.claimed.append(key)
        return "claimed"

    def confirm(self, key: str, **_: object) -> None:
        pass

    def release(self, key: str) -> None:
        self.claimed.remove(key)


def _body(action_id: str, value: str, *, overflow: bool = False) -> bytes:
    action = {"action_id": action_id, "type": "overflow" if overflow else "button"}
    if overflow:
        action["selected_option"] = {"value": value}
    else:
        action["value"] = value
    payload = {"type": "block_actions", "user": {"id": "U0ANA"}, "channel": {"id": "C0000000001"},
               "message": {"ts": "1700000000.000100"}, "actions": [action]}
    return urlencode({"payload": json.dumps(payload)}).encode()


def _headers(body: bytes, *, at: int | None = None, secret: str = SECRET) -> dict[str, str]:
    ts = str(at if at is not None else int(NOW.timestamp()))
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sign(secret, ts, body)}


@pytest.fixture
def store() -> SqliteFindingStore:
    return SqliteFindingStore(":memory:")


@pytest.fixture
def service(store: SqliteFindingStore, slack_api: FakeSlack, jira_api: FakeJira) -> InteractionService:
    settings = DeliverySettings(jira=JiraSettings(base_url=jira_api.url, email=jira_api.email, default_project="OPS"),
                                slack=SlackSettings(base_url=slack_api.url))
    notifier = SlackNotifier.from_settings(settings.slack, token=slack_api.token, default_channel="#gpu-waste")
    tickets = TicketService(sink=JiraTicketSink.from_settings(settings.jira, api_token=str(jira_api.api_token)),
                            store=store, settings=settings, now=lambda: NOW)
    return InteractionService(verifier=SlackSignatureVerifier(SECRET, now=lambda: NOW), reader=read_request, store=store,
                              now=lambda: NOW, notifier=notifier, tickets=tickets, details_text=details_text)


def test_verify_signature_matches_slacks_documented_example() -> None:
    # GIVEN Slack's documented example request (api.slack.com/authentication/verifying-requests-from-slack)
    body = (b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
            b"&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
            b"&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN"
            b"&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c")
    # WHEN signed with the example secret and timestamp
    signature = sign(SECRET, "1531420618", body)
    # THEN it is Slack's documented signature
    assert signature == "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"


def test_interaction_valid_signature_snoozes_in_the_store(service: InteractionService, store: SqliteFindingStore,
                                                          slack_api: FakeSlack) -> None:
    # GIVEN an open finding and a signed "snooze 7 days" click
    f = finding("trainer")
    store.put_new(record_for(f))
    body = _body("gpuwaste_snooze_7d", f"snooze_7d|{f.fingerprint}")
    # WHEN handled
    reply = service.handle(headers=_headers(body), body=body)
    # THEN the lifecycle record is snoozed for 7 days and the thread is told who did it
    assert reply.status == 200
    rec = store.get(f.fingerprint)
    assert rec is not None and rec.snoozed_until == NOW + timedelta(days=7) and rec.version == 1
    (confirm,) = slack_api.calls_to("chat.postMessage")
    assert confirm["thread_ts"] == "1700000000.000100" and "<@U0ANA> snoozed" in confirm["text"]


def test_interaction_overflow_expected_acknowledges(service: InteractionService, store: SqliteFindingStore) -> None:
    # GIVEN a digest's overflow menu choice "expected"
    f = finding("trainer")
    store.put_new(record_for(f))
    body = _body(f"gpuwaste_menu_{f.fingerprint[:16]}", f"expected|{f.fingerprint}", overflow=True)
    # WHEN handled
    service.handle(headers=_headers(body), body=body)
    # THEN the finding is acknowledged as expected by that user
    assert store.get(f.fingerprint).acknowledged == "expected:U0ANA"  # type: ignore[union-attr]


def test_interaction_digest_menus_act_on_their_finding_and_details_reply_in_the_thread(
        service: InteractionService, store: SqliteFindingStore, slack_api: FakeSlack, jira_api: FakeJira) -> None:
    # GIVEN a digest of two stored findings, as rendered for Slack
    a, b = finding("trainer"), finding("server", usd_per_day="40.00")
    for f in (a, b):
        store.put_new(record_for(f))
    items = tuple(NoticeItem(fingerprint=f.fingerprint, finding=f, first_seen=NOW) for f in (a, b))
    (payload,) = render_notice(Notice(kind=NoticeKind.DIGEST, route=Route(channel="#ml", source="t", team="ml"),
                                      items=items))
    options = {(o["value"].split("|")[0], o["value"].split("|")[1]): (blk["accessory"], o) for blk in payload.blocks
               if blk.get("accessory", {}).get("type") == "overflow" for o in blk["accessory"]["options"]}
    # WHEN the owner picks a's Details, b's Snooze 7 days, a's Expected and b's Create ticket in their lines' menus
    # (signed, as Slack posts an overflow choice)
    for action, f in (("details", a), ("snooze_7d", b), ("expected", a), ("ticket", b)):
        menu, option = options[(action, f.fingerprint)]
        body = _body(menu["action_id"], option["value"], overflow=True)
        assert service.handle(headers=_headers(body), body=body).status == 200
    # THEN each acted on its own finding: the store and the fake Jira say so
    ra, rb = store.get(a.fingerprint), store.get(b.fingerprint)
    assert ra is not None and rb is not None
    assert ra.acknowledged == "expected:U0ANA" and ra.snoozed_until is None and ra.ticket_key is None
    assert rb.snoozed_until == NOW + timedelta(days=7) and rb.ticket_key == "OPS-1" and list(jira_api.issues) == ["OPS-1"]
    # AND Details replied in the message's thread with the evidence, the formula, the price source and what to do
    details = slack_api.calls_to("chat.postMessage")[0]
    assert details["thread_ts"] == "1700000000.000100"
    for needle in ("SM activity: p95 0.5 %, flagged below 5 %", "$4.0958/GPU-h × 1 GPU × 24 h = $98.30/day", "Price: test price book, 2026-07-20",
                   "What to do: The GPUs are held but unused. Scale deployment/trainer to zero", f"gpuwaste explain {a.fingerprint[:6]}"):
        assert needle in details["text"], needle
    assert store.get(a.fingerprint).version == 1  # type: ignore[union-attr]  # Details writes nothing


def test_interaction_create_ticket_opens_one(service: InteractionService, store: SqliteFindingStore,
                                             jira_api: FakeJira) -> None:
    # GIVEN a "create ticket" click, clicked twice
    f = finding("trainer")
    store.put_new(record_for(f))
    body = _body("gpuwaste_ticket", f"ticket|{f.fingerprint}")
    # WHEN handled twice
    service.handle(headers=_headers(body), body=body)
    service.handle(headers=_headers(body), body=body)
    # THEN one ticket exists and its key is stored
    assert list(jira_api.issues) == ["OPS-1"]
    assert store.get(f.fingerprint).ticket_key == "OPS-1"  # type: ignore[union-attr]


def test_interaction_ticket_from_the_button_edits_the_alert_to_link_it(store: SqliteFindingStore, slack_api: FakeSlack,
                                                                       jira_api: FakeJira) -> None:
    # GIVEN an alert delivered to Slack by the notify service (its message recorded on the finding), and the
    # interaction service wired to edit a clicked ticket's message, as the Function URL's root wires it
    settings = DeliverySettings(jira=JiraSettings(base_url=jira_api.url, email=jira_api.email, default_project="OPS"),
                                slack=SlackSettings(base_url=slack_api.url))
    notifier = SlackNotifier.from_settings(settings.slack, token=slack_api.token, default_channel="#gpu-waste")
    f = finding("trainer")
    store.put_new(record_for(f))
    edits = NotifyService(notifier=notifier, store=store, settings=settings, now=lambda: NOW)
    edits.deliver([alert(f)])
    (posted,) = slack_api.calls_to("chat.postMessage")
    tickets = TicketService(sink=JiraTicketSink.from_settings(settings.jira, api_token=str(jira_api.api_token)),
                            store=store, settings=settings, now=lambda: NOW)
    service = InteractionService(verifier=None, reader=read_request, store=store, now=lambda: NOW, notifier=notifier,
                                 tickets=tickets, ticket_edits=edits)
    ((channel, ts),) = slack_api.messages  # the alert, the first message the fake stored (ts 1700000000.000100)
    body = _body("gpuwaste_ticket", f"ticket|{f.fingerprint}")
    # WHEN the owner clicks "Create ticket" on the alert, twice
    service.handle(headers={}, body=body)
    service.handle(headers={}, body=body)
    # THEN one ticket exists, and the alert was edited in place once: its Ticket field links the ticket's page and
    # its "Create ticket" button is gone (counted at the fake Slack)
    assert list(jira_api.issues) == ["OPS-1"]
    (update,) = slack_api.calls_to("chat.update")
    blocks = update["blocks"] if isinstance(update["blocks"], list) else json.loads(update["blocks"])
    text = json.dumps(blocks)
    assert (update["channel"], update["ts"]) == (channel, ts) == (channel, "1700000000.000100") and posted["blocks"]
    assert f"<{jira_api.url.rstrip('/')}/browse/OPS-1|OPS-1>" in text
    assert "gpuwaste_ticket" not in text and "gpuwaste_snooze_7d" in text


def test_interaction_invalid_signature_is_refused(service: InteractionService, store: SqliteFindingStore) -> None:
    # GIVEN a click signed with the wrong secret, and one whose body was altered after signing
    f = finding("trainer")
    store.put_new(record_for(f))
    body = _body("gpuwaste_expected", f"expected|{f.fingerprint}")
    tampered = _body("gpuwaste_expected", f"expected|{'0' * 64}")
    # WHEN handled
    wrong = service.handle(headers=_headers(body, secret="not-the-secret"), body=body)
    altered = service.handle(headers=_headers(body), body=tampered)
    missing = service.handle(headers={}, body=body)
    # THEN all are refused with 401 and nothing changes
    assert (wrong.status, altered.status, missing.status) == (401, 401, 401)
    assert store.get(f.fingerprint).acknowledged is None  # type: ignore[union-attr]


def test_interaction_replayed_request_is_refused(service: InteractionService, store: SqliteFindingStore) -> None:
    # GIVEN a correctly signed request captured 6 minutes ago
    f = finding("trainer")
    store.put_new(record_for(f))
    body = _body("gpuwaste_snooze_1d", f"snooze_1d|{f.fingerprint}")
    old = int(NOW.timestamp()) - 360
    # WHEN replayed now
    reply = service.handle(headers=_headers(body, at=old), body=body)
    # THEN it is refused, while the same request 4 minutes old is accepted
    assert reply.status == 401
    assert store.get(f.fingerprint).snoozed_until is None  # type: ignore[union-attr]
    with pytest.raises(SignatureError, match="replay"):
        SlackSignatureVerifier(SECRET, now=lambda: NOW).verify(_headers(body, at=old), body)
    assert service.handle(headers=_headers(body, at=int(NOW.timestamp()) - 240), body=body).status == 200


def test_slack_interactions_handler_reads_a_function_url_event(service: InteractionService, store: SqliteFindingStore,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a Function URL event with a base64 body (as Lambda delivers form posts)
    f = finding("trainer")
    store.put_new(record_for(f))
    body = _body("gpuwaste_snooze_1d", f"snooze_1d|{f.fingerprint}")
    headers = {k.lower(): v for k, v in _headers(body).items()}
    event = {"version": "2.0", "rawPath": "/", "headers": headers, "isBase64Encoded": True,
             "body": base64.b64encode(body).decode(), "requestContext": {"http": {"method": "POST"}}}
    app = load_app("slack_interactions")
    monkeypatch.setattr(app.bootstrap, "interaction_service", lambda: service)
    monkeypatch.setattr(app.bootstrap, "request_verifier", lambda: SlackSignatureVerifier(SECRET, now=lambda: NOW))
    monkeypatch.setattr(app.bootstrap, "replay_ledger", MemoryLedger)
    # WHEN invoked
    result = app.lambda_handler(event, LambdaContext())
    # THEN it answers 200 and the snooze is stored
    assert result["statusCode"] == 200
    assert store.get(f.fingerprint).snoozed_until == NOW + timedelta(days=1)  # type: ignore[union-attr]


def test_slack_interactions_handler_refuses_a_forged_request_before_loading_the_configuration(
        service: InteractionService, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the Function URL with only SLACK_SECRET_ARN set, and a configuration that must not be read for a forgery
    from gpuwaste.bootstrap import delivery, pipeline

    app = load_app("slack_interactions")
    read: list[str] = []
    monkeypatch.setenv(delivery.SLACK_SECRET_ENV, "arn:aws:secretsmanager:us-east-1:123456789012:secret:gpuwaste/slack")
    monkeypatch.setattr(delivery, "_secret_field", lambda arn, name: read.append(name) or SECRET)

    def config() -> None:
        read.append("config")
        raise AssertionError("configuration loaded")

    monkeypatch.setattr(pipeline, "config", config)
    monkeypatch.setattr(app.bootstrap, "interaction_service", lambda: read.append("service") or service)
    ledger = MemoryLedger()
    monkeypatch.setattr(app.bootstrap, "replay_ledger", lambda: read.append("ledger") or ledger)
    app.bootstrap.request_verifier.cache_clear()
    body = _body("gpuwaste_snooze_1d", "snooze_1d|" + "0" * 64)
    fresh = str(int(time.time()))
    forged = {"x-slack-request-timestamp": fresh, "x-slack-signature": "v0=" + "0" * 64}
    event = {"version": "2.0", "headers": forged, "isBase64Encoded": False, "body": body.decode()}
    # WHEN a forged request arrives (its timestamp fresh, so only the signature can refuse it)
    result = app.lambda_handler(event, LambdaContext())
    # THEN it is refused with 401 having read the signing secret and nothing else
    assert result["statusCode"] == 401
    assert read == ["signing_secret"]
    # WHEN a correctly signed one arrives
    signed = {"x-slack-request-timestamp": fresh, "x-slack-signature": sign(SECRET, fresh, body)}
    result = app.lambda_handler({**event, "headers": signed}, LambdaContext())
    # THEN only then is the request claimed (replays refused) and the service (configuration, store, tokens) built
    assert read == ["signing_secret", "ledger", "service"]
    app.bootstrap.request_verifier.cache_clear()

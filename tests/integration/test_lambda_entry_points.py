"""Every function of template.yaml through its real entry point, as Lambda invokes it.

`functions/<fn>/app.py`'s `lambda_handler(event, context)` on the event shapes of `events/`, in the environment the
template gives the function, over moto's server (queues, table, SSM config, Secrets Manager) and the fake Slack and
Jira servers; every AWS call each function makes is checked against its IAM policy in the template
(`tests.lambda_stack`; the `stack` fixture checks every call of every test at teardown). Counted at the fakes: what
Slack and Jira accepted, never what the code says it did.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlencode

import pytest

from gpuwaste.bootstrap import local
from gpuwaste.models.lifecycle import FindingState
from gpuwaste.sinks.slack_signature import sign
from tests.lambda_events import load_event
from tests.lambda_stack import DeployedStack, _reset_composition_roots, deploy
from tests.servers import HttpRequest, HttpResponse
from tests.servers.jira_api import FakeJira
from tests.servers.slack_api import FakeSlack

pytestmark = pytest.mark.integration

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
SCAN_TIME = "2024-01-01T01:20:00Z"  # the end of the demo recording
POISON = "[" * 5000 + "]" * 5000  # deeper than Python's json module's recursion limit


def config_document(slack: FakeSlack, jira: FakeJira, **slack_extra: Any) -> str:
    return json.dumps({
        "clusters": [{"name": "demo", "recording": str(local.demo_recording())}],
        "delivery": {"default_channel": "#gpu-waste",
                     "slack": {"base_url": slack.url, "rate_limit_retries": 0, "server_error_retries": 0, **slack_extra},
                     "jira": {"base_url": jira.url, "default_project": "OPS"}}})


def stack_secrets(slack: FakeSlack, jira: FakeJira) -> dict[str, str]:
    """Stack parameter → secret string: the Slack bot token and signing secret, the Jira credentials."""
    return {"SlackSecretArn": json.dumps({"bot_token": slack.token, "signing_secret": SIGNING_SECRET}),
            "JiraSecretArn": json.dumps({"email": jira.email, "api_token": jira.api_token})}


@pytest.fixture
def stack(aws: Any, slack_api: FakeSlack, jira_api: FakeJira, monkeypatch: pytest.MonkeyPatch) -> Iterator[DeployedStack]:
    deployed = deploy(monkeypatch, config=config_document(slack_api, jira_api), secrets=stack_secrets(slack_api, jira_api))
    yield deployed
    _reset_composition_roots()
    # every AWS call the test's functions made is allowed by their policies in template.yaml
    assert deployed.denied() == []


def scan_and_deliver(stack: DeployedStack) -> dict[str, Any]:
    """The schedule fires and every queue is delivered to its function; each function's responses."""
    tick = {**load_event("scheduled_scan"), "time": SCAN_TIME}
    out: dict[str, Any] = {"DispatchScansFunction": stack.invoke("DispatchScansFunction", tick)}
    for queue in ("ScanRequestsQueue", "FindingsQueue", "PricedQueue", "AlertsQueue", "TicketsQueue"):
        function, _ = stack.consumer(queue)
        out[function] = stack.pump(queue)
    return out


def posts(slack: FakeSlack) -> list[dict[str, Any]]:
    return slack.calls_to("chat.postMessage")


# -- the whole pipeline -----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_every_function_runs_through_its_entry_point_within_its_iam_policy(stack: DeployedStack, slack_api: FakeSlack,
                                                                           jira_api: FakeJira) -> None:
    # GIVEN the stack with the demo cluster configured in SSM, Slack and Jira secrets in Secrets Manager
    # WHEN the scan schedule fires, every queue is delivered, the daily summary fires and a Slack button is pressed
    responses = scan_and_deliver(stack)
    summary = stack.invoke("SendDailySummaryFunction", load_event("scheduled_summary"))
    click = interaction_event(finding_fingerprints(stack)[0], "snooze_7d")
    clicked = stack.invoke("SlackInteractionsFunction", click)
    # THEN every batch succeeded, Slack and Jira accepted what the pipeline sent, and every AWS call every function
    # made is allowed by its policy in template.yaml (action and resource)
    assert responses["DispatchScansFunction"]["scan_requests"] == 1
    for function in ("ScanGpuWasteFunction", "PriceFindingsFunction", "DedupeFindingsFunction", "NotifySlackFunction",
                     "CreateTicketsFunction"):
        assert responses[function] and all(r == {"batchItemFailures": []} for r in responses[function]), function
    assert len(jira_api.issues) >= 1
    assert summary["posted"] and summary["posted"][0]["sink"] == "slack"
    assert clicked["statusCode"] == 200
    assert stack.denied() == []
    # AND every function was exercised (its calls recorded)
    assert all(stack.recorder.of(f) for f in stack.functions()), [f for f in stack.functions() if not stack.recorder.of(f)]


def finding_fingerprints(stack: DeployedStack, state: FindingState = FindingState.OPEN) -> list[str]:
    """The fingerprints of the table's finding records in `state` (once-records left out)."""
    items = stack.client("dynamodb").scan(TableName=stack.stack.table_name)["Items"]
    return sorted(i["fingerprint"]["S"] for i in items if i.get("state", {}).get("S") == state.value
                  and "#" not in i["fingerprint"]["S"])


@pytest.mark.slow
def test_a_retried_scan_tick_posts_nothing_again(stack: DeployedStack, slack_api: FakeSlack, jira_api: FakeJira) -> None:
    # GIVEN one scan tick delivered through the whole pipeline: its alerts posted, its tickets filed
    scan_and_deliver(stack)
    posted, filed = len(posts(slack_api)), len(jira_api.issues)
    # WHEN EventBridge Scheduler delivers the same tick again (a retry after a failure it saw) and every queue is
    # delivered again
    again = scan_and_deliver(stack)
    # THEN every invocation succeeds and neither Slack nor Jira received anything new
    assert again["DispatchScansFunction"]["scan_requests"] == 1
    assert all(r == {"batchItemFailures": []} for f, rs in again.items() if f != "DispatchScansFunction" for r in rs)
    assert posted > 0 and filed > 0
    assert (len(posts(slack_api)), len(jira_api.issues)) == (posted, filed)
    assert stack.denied() == []


def interaction_event(fingerprint: str, action: str, *, at: int | None = None, secret: str = SIGNING_SECRET) -> dict[str, Any]:
    """A Function URL request of a Slack button click (events/function_url_interaction.json), signed."""
    event = load_event("function_url_interaction")
    payload = json.loads(parse_qs(base64.b64decode(event["body"]).decode())["payload"][0])
    payload["actions"][0].update(action_id=f"gpuwaste_{action}", value=f"{action}|{fingerprint}")
    body = urlencode({"payload": json.dumps(payload)}).encode()
    ts = str(at if at is not None else int(time.time()))
    event["headers"] = {**event["headers"], "x-slack-request-timestamp": ts, "x-slack-signature": sign(secret, ts, body)}
    event["body"], event["isBase64Encoded"] = base64.b64encode(body).decode(), True
    return event


# -- create_tickets ---------------------------------------------------------------------------------------------------
def test_create_tickets_policy_allows_what_each_batch_reads(stack: DeployedStack, jira_api: FakeJira) -> None:
    # GIVEN ticket requests from a scan on the tickets queue
    scan_and_deliver_until(stack, "PricedQueue")
    # WHEN create_tickets consumes them
    responses = stack.pump("TicketsQueue")
    # THEN Jira got the tickets, and the batch's reads (the run's tickets: a Query on the activity index) are granted
    assert responses and all(r == {"batchItemFailures": []} for r in responses)
    assert jira_api.issues
    assert any(a == "dynamodb:Query" and r.endswith("/index/ByActivityDayShard") for a, r in stack.exercised("CreateTicketsFunction"))
    assert stack.denied("CreateTicketsFunction") == []


class LosingJira(FakeJira):
    """The fake Jira that can create an issue and then lose its answer (the caller sees a 503), as a timeout does."""

    def __init__(self) -> None:
        super().__init__()
        self.lose_answers = 0
        self.answers_lost = 0  # counted where the fault is injected

    def handle(self, request: HttpRequest) -> HttpResponse:
        response = super().handle(request)
        if self.lose_answers and request.method == "POST" and request.path.rstrip("/") == "/rest/api/3/issue" \
                and response.status == 201:
            self.lose_answers -= 1
            self.answers_lost += 1
            return HttpResponse.json_body(503, {"errorMessages": ["Service Unavailable"]})
        return response


def test_create_tickets_lost_answer_then_redelivery_files_each_ticket_once(aws: Any, slack_api: FakeSlack,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the stack over a Jira that creates the first issue and loses its answer
    with LosingJira() as jira:
        stack = deploy(monkeypatch, config=config_document(slack_api, jira), secrets=stack_secrets(slack_api, jira))
        scan_and_deliver_until(stack, "PricedQueue")
        requested = {json.loads(m["Body"])["fingerprint"] for m in peek(stack, "TicketsQueue")}
        jira.lose_answers = 1
        # WHEN create_tickets consumes the queue: the record whose answer was lost fails and SQS redelivers it
        responses = stack.pump("TicketsQueue")
        # THEN the failure was reported for that record only, and every requested ticket exists exactly once in Jira
        assert jira.answers_lost == 1
        assert sum(len(r["batchItemFailures"]) for r in responses) == 1
        assert responses[-1] == {"batchItemFailures": []}
        filed = list(jira.issues.values())
        assert len(filed) == len(requested) >= 1
        assert stack.denied() == []


def peek(stack: DeployedStack, queue: str) -> list[dict[str, Any]]:
    """The messages on `queue`, left there (received, then made visible again)."""
    sqs = stack.client("sqs")
    got = sqs.receive_message(QueueUrl=stack.url(queue), MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
    for m in got:
        sqs.change_message_visibility(QueueUrl=stack.url(queue), ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    return got


def scan_and_deliver_until(stack: DeployedStack, last: str) -> None:
    tick = {**load_event("scheduled_scan"), "time": SCAN_TIME}
    stack.invoke("DispatchScansFunction", tick)
    for queue in ("ScanRequestsQueue", "FindingsQueue", "PricedQueue", "AlertsQueue"):
        stack.pump(queue)
        if queue == last:
            return


# -- send_daily_summary -----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_daily_summary_is_posted_once_when_the_scheduler_retries(stack: DeployedStack, slack_api: FakeSlack) -> None:
    # GIVEN a day of findings in the table
    scan_and_deliver_until(stack, "AlertsQueue")
    before = len(posts(slack_api))
    event = load_event("scheduled_summary")
    # WHEN the summary schedule fires, and EventBridge Scheduler delivers the same tick twice more (its retries)
    first = stack.invoke("SendDailySummaryFunction", event)
    second = stack.invoke("SendDailySummaryFunction", event)
    third = stack.invoke("SendDailySummaryFunction", event)
    # THEN the invocation succeeds, Slack received one summary, and the retries post nothing and succeed
    summaries = posts(slack_api)[before:]
    assert len(summaries) == 1
    assert first["day"] == "2024-01-02" and first["already_posted"] == [] and len(first["posted"]) == 1
    posted = first["posted"][0]
    assert posted["sink"] == "slack" and (posted["destination"], posted["message_id"]) in slack_api.messages
    assert second == third == {"day": "2024-01-02", "posted": [], "already_posted": ["slack"]}
    assert stack.denied("SendDailySummaryFunction") == []


def test_daily_summary_that_slack_refused_is_posted_by_the_retry(stack: DeployedStack, slack_api: FakeSlack) -> None:
    # GIVEN Slack failing the next post (500) — nothing was posted
    event = load_event("scheduled_summary")
    slack_api.fail_next("chat.postMessage", status=500)
    # WHEN the summary fires (the invocation fails: Scheduler retries it) and then the retry comes
    with pytest.raises(Exception):  # noqa: B017, PT011 - whichever delivery error the sink raises
        stack.invoke("SendDailySummaryFunction", event)
    retry = stack.invoke("SendDailySummaryFunction", event)
    # THEN the retry posts the summary: exactly one accepted at Slack
    accepted = posts(slack_api)
    assert len(retry["posted"]) == 1
    assert len(accepted) == 2  # the refused attempt and the accepted retry, as Slack saw them
    assert len(slack_api.messages) == 1


def test_daily_summary_of_another_day_is_posted(stack: DeployedStack, slack_api: FakeSlack) -> None:
    # GIVEN yesterday's summary posted
    stack.invoke("SendDailySummaryFunction", load_event("scheduled_summary"))
    # WHEN the next day's tick comes
    next_day = stack.invoke("SendDailySummaryFunction", {**load_event("scheduled_summary"), "time": "2024-01-03T08:00:00Z"})
    # THEN it is posted too (the record is per day and destination)
    assert next_day["day"] == "2024-01-03" and len(next_day["posted"]) == 1
    assert len(slack_api.messages) == 2


# -- poison messages, per record --------------------------------------------------------------------------------------
def _good_alert() -> str:
    return str(load_event("sqs_alerts")["Records"][0]["body"])


@pytest.mark.parametrize("poison", [POISON, '{"a":' * 3000 + "1" + "}" * 3000, "{not json", '{"schema_version": 1}'],
                         ids=["deep-array", "deep-object", "not-json", "schema"])
def test_notify_slack_poison_record_fails_alone(stack: DeployedStack, slack_api: FakeSlack, poison: str) -> None:
    # GIVEN one poison body and one good alert in the same batch
    stack.send("AlertsQueue", poison, _good_alert())
    # WHEN notify_slack consumes the queue
    responses = stack.pump("AlertsQueue")
    # THEN the good alert was posted (counted at Slack), the poison body is in the DLQ with its reason, no retry
    assert responses == [{"batchItemFailures": []}]
    assert len(posts(slack_api)) == 1
    assert_dead_lettered(stack, "AlertsDlq", poison)


def _good_ticket_request() -> str:
    return str(load_event("sqs_tickets")["Records"][0]["body"])


@pytest.mark.parametrize("poison", [POISON, "{not json", '{"schema_version": 1}'], ids=["deep", "not-json", "schema"])
def test_create_tickets_poison_record_fails_alone(stack: DeployedStack, jira_api: FakeJira, poison: str) -> None:
    # GIVEN one poison body and one good ticket request in the same batch
    stack.send("TicketsQueue", poison, _good_ticket_request())
    # WHEN create_tickets consumes the queue
    responses = stack.pump("TicketsQueue")
    # THEN the good request became a Jira issue (counted at Jira), the poison body is in the DLQ with its reason
    assert responses == [{"batchItemFailures": []}]
    assert len(jira_api.issues) == 1
    assert_dead_lettered(stack, "TicketsDlq", poison)
    assert stack.denied("CreateTicketsFunction") == []


@pytest.mark.parametrize(("queue", "dlq", "event", "out"), [
    ("PricedQueue", "PricedDlq", "sqs_priced", "AlertsQueue"),
    ("FindingsQueue", "FindingsDlq", "sqs_findings", "PricedQueue"),
    ("ScanRequestsQueue", "ScanRequestsDlq", "sqs_scan_request", "FindingsQueue"),
], ids=["dedupe_findings", "price_findings", "scan_gpu_waste"])
def test_pipeline_stage_poison_record_fails_alone(stack: DeployedStack, queue: str, dlq: str, event: str, out: str) -> None:
    # GIVEN one deeply nested body and one good message in the same batch
    stack.send(queue, POISON, str(load_event(event)["Records"][0]["body"]))
    # WHEN the stage's function consumes the queue
    responses = stack.pump(queue)
    # THEN the good message went on to the next queue, the poison one is in the DLQ with its reason
    assert all(r == {"batchItemFailures": []} for r in responses)
    assert stack.drain(out)
    assert_dead_lettered(stack, dlq, POISON)


def assert_dead_lettered(stack: DeployedStack, dlq: str, body: str) -> None:
    dead = stack.drain(dlq)
    assert [m["Body"] for m in dead] == [body]
    reason = dead[0]["MessageAttributes"]["error_reason"]["StringValue"]
    assert reason and reason != "-"


# -- slack_interactions -----------------------------------------------------------------------------------------------
@pytest.fixture
def open_finding(stack: DeployedStack) -> str:
    scan_and_deliver_until(stack, "PricedQueue")
    return finding_fingerprints(stack)[0]


def _snoozed(stack: DeployedStack, fingerprint: str) -> bool:
    item = stack.client("dynamodb").get_item(TableName=stack.stack.table_name, Key={"fingerprint": {"S": fingerprint}})["Item"]
    return "snoozed_until" in item and item["snoozed_until"].get("S") not in (None, "")


def test_slack_interaction_replayed_within_the_age_window_is_refused(stack: DeployedStack, open_finding: str) -> None:
    # GIVEN a correctly signed "snooze" click, accepted once
    click = interaction_event(open_finding, "snooze_1d")
    first = stack.invoke("SlackInteractionsFunction", click)
    # WHEN the very same request (same signature and timestamp) is sent again 1 s later, within Slack's 300 s window
    replay = stack.invoke("SlackInteractionsFunction", click)
    # THEN the first is applied; the replay is refused with 401 and changes nothing
    assert first["statusCode"] == 200 and _snoozed(stack, open_finding)
    assert replay["statusCode"] == 401
    assert stack.denied("SlackInteractionsFunction") == []


def test_slack_interaction_age_limit_comes_from_the_stack_parameter(aws: Any, slack_api: FakeSlack, jira_api: FakeJira,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the stack deployed with SlackRequestMaxAgeSeconds=60
    secrets = stack_secrets(slack_api, jira_api)
    stack = deploy(monkeypatch, config=config_document(slack_api, jira_api), secrets=secrets,
                   params={"SlackRequestMaxAgeSeconds": "60"})
    # WHEN signed clicks arrive 120 s and 10 s after they were signed
    stale = stack.invoke("SlackInteractionsFunction", interaction_event("f" * 64, "snooze_1d", at=int(time.time()) - 120))
    fresh = stack.invoke("SlackInteractionsFunction", interaction_event("f" * 64, "snooze_1d", at=int(time.time()) - 10))
    # THEN the older one is refused (within the library's 300 s, beyond the stack's 60 s); the fresh one is read
    assert stale["statusCode"] == 401
    assert fresh["statusCode"] != 401
    assert stack.denied() == []


def test_slack_interaction_age_limit_of_the_config_document_is_honoured(aws: Any, slack_api: FakeSlack,
                                                                        jira_api: FakeJira,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the default stack, and delivery.slack.request_max_age_s: 60 in the config document
    secrets = stack_secrets(slack_api, jira_api)
    stack = deploy(monkeypatch, config=config_document(slack_api, jira_api, request_max_age_s=60), secrets=secrets)
    # WHEN a signed click arrives 120 s after it was signed
    stale = stack.invoke("SlackInteractionsFunction", interaction_event("f" * 64, "snooze_1d", at=int(time.time()) - 120))
    # THEN it is refused
    assert stale["statusCode"] == 401


def test_slack_interaction_with_a_bad_signature_is_refused(stack: DeployedStack, open_finding: str) -> None:
    # GIVEN a click signed with another secret
    forged = interaction_event(open_finding, "snooze_7d", secret="not-the-signing-secret")
    # WHEN it arrives / THEN 401, and the finding is not snoozed
    assert stack.invoke("SlackInteractionsFunction", forged)["statusCode"] == 401
    assert not _snoozed(stack, open_finding)



def test_create_tickets_edits_the_slack_message_to_show_each_new_ticket_once(stack: DeployedStack, slack_api: FakeSlack,
                                                                             jira_api: FakeJira) -> None:
    # GIVEN a scan's alerts posted to Slack by notify_owners, and its ticket requests on the tickets queue
    scan_and_deliver_until(stack, "AlertsQueue")
    posted = posts(slack_api)
    # WHEN create_tickets consumes them
    responses = stack.pump("TicketsQueue")
    assert responses and all(r == {"batchItemFailures": []} for r in responses)
    # THEN each message carrying a ticketed finding was edited in place (chat.update of its ts) to name the ticket
    updates = slack_api.calls_to("chat.update")
    assert jira_api.issues and updates
    shown = "\n".join(json.dumps(slack_api.messages[(u["channel"], u["ts"])]["blocks"]) for u in updates)
    assert all(key in shown for key in jira_api.issues), (list(jira_api.issues), shown[:400])
    assert len({(u["channel"], u["ts"]) for u in updates}) == len(updates) <= len(posted)  # each message once
    # AND no new message was posted for it, and the function's policy allowed what it did (the Slack secret read)
    assert len(posts(slack_api)) == len(posted)
    assert stack.denied("CreateTicketsFunction") == []


@pytest.mark.slow
def test_allocation_ledger_goes_from_the_scan_through_dedupe_to_the_summary_within_the_policies(
        stack: DeployedStack, slack_api: FakeSlack, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the demo cluster scanned and its completion handled by the dedupe function
    scan_and_deliver_until(stack, "PricedQueue")
    items = stack.client("dynamodb").scan(TableName=stack.stack.table_name)["Items"]
    ledger = sorted(i["fingerprint"]["S"] for i in items if i["fingerprint"]["S"].startswith("ledger#"))
    assert ledger == ["ledger#2024-01-01", "ledger#2024-01-01T01#demo"]  # the day's index and the scan's hour
    # WHEN the daily summary runs an hour after the scan
    from gpuwaste.bootstrap import pipeline

    monkeypatch.setattr(pipeline.SystemClock, "now", lambda _self: datetime(2024, 1, 1, 2, tzinfo=UTC))
    sent = stack.invoke("SendDailySummaryFunction", {**load_event("scheduled_summary"), "time": "2024-01-01T02:00:00Z"})
    # THEN the Slack summary carries the fleet funnel and the spend per team from the stored ledger
    assert len(sent["posted"]) == 1
    body = posts(slack_api)[-1]
    blocks = json.loads(body["blocks"]) if isinstance(body["blocks"], str) else body["blocks"]
    texts = [b.get("text", {}).get("text", "") for b in blocks]
    spend = next(t for t in texts if t.startswith("*Spend"))
    assert "GPU-h total →" in spend and "• ml-serving: $" in spend
    # AND every call was allowed, and each DynamoDB grant of both functions was used (none is granted for nothing)
    assert stack.denied() == []
    used = {f: {a for a, _ in stack.exercised(f) if a.startswith("dynamodb:")}
            for f in ("DedupeFindingsFunction", "SendDailySummaryFunction")}
    assert used == {"DedupeFindingsFunction": {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:BatchGetItem",
                                               "dynamodb:Query"},
                    "SendDailySummaryFunction": {"dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:PutItem"}}

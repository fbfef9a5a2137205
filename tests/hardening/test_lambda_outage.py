"""The real Lambda handlers over moto's SQS and DynamoDB, with a Slack outage, a lost answer and redeliveries.

price_findings → dedupe_findings → notify_slack run as Lambda runs them (`functions/*/app.py`, their composition
roots, Powertools' batch processing, partial batch responses), fed from moto's queues with each message's real
`ApproximateReceiveCount`. Slack first answers 503 to everything (an outage: every alert record fails and stays
on the queue), then comes back but *loses the answer* of the first post it accepts (as a Lambda timeout does: the
post is in the channel, the function never learns its ts), then behaves. Finally SQS delivers every alert once
more (at least once). Counted at the fake Slack: each alert's post was accepted exactly once; nothing is left on a
queue or in a dead-letter queue.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from gpuwaste.bootstrap import local, pipeline
from gpuwaste.config import GpuWasteConfig
from gpuwaste.fleet.generator import generate_fleet
from gpuwaste.fleet.recording import write_recording
from gpuwaste.fleet.spec import FleetSpec
from gpuwaste.models.messages import AlertMessage
from tests.aws_resources import create_stack
from tests.hardening.conftest import Figures
from tests.hardening.harness import AuditedSlack
from tests.lambda_events import FakeLambdaContext, load_handler, sqs_record
from tests.servers import HttpRequest, HttpResponse

pytestmark = pytest.mark.integration

SPEC = FleetSpec()
STAGES = [("price_findings", "FindingsQueue", "FindingsDlq"), ("dedupe_findings", "PricedQueue", "PricedDlq"),
          ("notify_slack", "AlertsQueue", "AlertsDlq")]


class LosingSlack(AuditedSlack):
    """The audited fake Slack that can accept a post and then lose its answer (the caller sees a 503)."""

    def __init__(self) -> None:
        super().__init__()
        self.lose_answers = 0
        self.answers_lost = 0  # counted where the fault is injected

    def handle(self, request: HttpRequest) -> HttpResponse:
        response = super().handle(request)
        if self.lose_answers and request.path.endswith("chat.postMessage") and response.status == 200 \
                and isinstance(response.body, dict) and response.body.get("ok"):
            self.lose_answers -= 1
            self.answers_lost += 1
            return HttpResponse.json_body(503, {"ok": False, "error": "service_unavailable"})
        return response


@pytest.fixture
def world(aws: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, Any]]:
    sqs, ddb = boto3.client("sqs"), boto3.client("dynamodb")
    stack = create_stack(sqs, ddb)
    slack = LosingSlack().start()
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"delivery": {"default_channel": "#gpu-waste", "slack": {
        "bot_token": slack.token, "base_url": slack.url, "rate_limit_retries": 0, "server_error_retries": 0}}}))
    env = {"CONFIG_FILE": str(config), "FINDINGS_TABLE_NAME": stack.table_name,
           "FINDINGS_QUEUE_URL": stack.queue_urls["FindingsQueue"], "PRICED_QUEUE_URL": stack.queue_urls["PricedQueue"],
           "ALERTS_QUEUE_URL": stack.queue_urls["AlertsQueue"], "TICKETS_QUEUE_URL": stack.queue_urls["TicketsQueue"]}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    _reset_roots()
    yield {"sqs": sqs, "stack": stack, "slack": slack, "monkeypatch": monkeypatch}
    _reset_roots()
    slack.stop()


def _reset_roots() -> None:
    from gpuwaste.bootstrap import dedupe, notify, price

    pipeline.reset()
    for fn in (price.pricing_service, dedupe.lifecycle_service, notify.notify_service):
        fn.cache_clear()


def _pump(world: dict[str, Any], *, rounds: int = 1) -> dict[str, int]:
    """Deliver each queue's messages to its function (failed records stay, their receive count rising)."""
    sqs, urls = world["sqs"], world["stack"].queue_urls
    failures = {name: 0 for name, _, _ in STAGES}
    for _ in range(rounds):
        for function, queue, dlq in STAGES:
            world["monkeypatch"].setenv("DEAD_LETTER_QUEUE_URL", urls[dlq])
            retry: list[str] = []
            while True:
                got = sqs.receive_message(QueueUrl=urls[queue], MaxNumberOfMessages=10, VisibilityTimeout=60,
                                          AttributeNames=["All"]).get("Messages", [])
                if not got:
                    break
                records = [sqs_record(m["Body"], message_id=m["MessageId"],
                                      receive_count=int(m["Attributes"]["ApproximateReceiveCount"])) for m in got]
                result = load_handler(function).lambda_handler({"Records": records}, FakeLambdaContext())
                failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
                failures[function] += len(failed)
                for m in got:
                    if m["MessageId"] in failed:
                        retry.append(m["ReceiptHandle"])
                    else:
                        sqs.delete_message(QueueUrl=urls[queue], ReceiptHandle=m["ReceiptHandle"])
            for handle in retry:  # the visibility timeout runs out: SQS delivers them again
                sqs.change_message_visibility(QueueUrl=urls[queue], ReceiptHandle=handle, VisibilityTimeout=0)
    return failures


def _depth(world: dict[str, Any], queue: str) -> int:
    attrs = world["sqs"].get_queue_attributes(QueueUrl=world["stack"].queue_urls[queue],
                                              AttributeNames=["ApproximateNumberOfMessages",
                                                              "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


def test_lambda_chain_slack_outage_lost_answer_and_redelivery_post_each_alert_once(
        world: dict[str, Any], tmp_path: Path, figures: Figures) -> None:
    # GIVEN the demo fleet's findings on the findings queue, and Slack down (503 to every call)
    recording = write_recording(generate_fleet(SPEC), tmp_path / "demo", compress=False)
    cfg = GpuWasteConfig()
    sources = local.recording_sources(recording, cfg)
    findings = _scan_messages(sources, cfg)
    sqs, urls, slack = world["sqs"], world["stack"].queue_urls, world["slack"]
    for body in findings:
        sqs.send_message(QueueUrl=urls["FindingsQueue"], MessageBody=body)
    slack.fail_next("*", 503, times=10_000)
    # WHEN the handlers run through the outage
    outage = _pump(world)
    # THEN every alert record failed and stays on the alerts queue; nothing was accepted or dead-lettered
    alerts_waiting = _depth(world, "AlertsQueue")
    assert outage["notify_slack"] == alerts_waiting > 0
    assert slack.accepted_keys() == {} and _depth(world, "AlertsDlq") == 0
    outage_faults = sum(slack.faults_served.values())
    # WHEN Slack comes back but loses the answer to the first post it accepts, and the queue redelivers
    with slack._lock:
        slack._state.faults.clear()
    slack.lose_answers = 1
    _pump(world, rounds=3)
    # ... and SQS delivers every alert once more (at least once)
    alerts = _alerts_from_slack_and_store(world)
    for alert in alerts:
        sqs.send_message(QueueUrl=urls["AlertsQueue"], MessageBody=alert.model_dump_json())
    _pump(world)
    # THEN (counted at the fake) each alert's post was accepted exactly once, the lost answer included
    posts = slack.accepted_keys()
    expected = {(a.fingerprint[:16], a.scan_id) for a in alerts}
    assert slack.answers_lost == 1
    assert set(posts) == expected and set(posts.values()) == {1}, posts
    # ... and nothing is left on a queue or in a dead-letter queue
    for queue in ("FindingsQueue", "PricedQueue", "AlertsQueue", "FindingsDlq", "PricedDlq", "AlertsDlq"):
        assert _depth(world, queue) == 0, queue
    figures.fault("lambda chain: slack 503 (outage)", outage_faults)
    figures.fault("lambda chain: slack answer lost after accepting", slack.answers_lost)
    figures.notes["lambda chain over moto"] = (f"{len(expected)} alerts, {alerts_waiting} alert records failed in the "
                                               f"outage, each posted once after it (counted at the fake Slack)")


def _scan_messages(sources: local.Sources, cfg: GpuWasteConfig) -> list[str]:
    from gpuwaste.queue.memory import MemoryQueue
    from gpuwaste.services.scan import ScanService

    queue = MemoryQueue("findings")
    assert sources.recording is not None
    ScanService(cluster_source=sources.cluster, telemetry_source=sources.telemetry, settings=cfg.detectors,
                window=timedelta(seconds=SPEC.history_s - 600), queue=queue).scan(
        at=sources.recording.end_time(), scan_id="lambda-outage-1")
    return queue.drain()


def _alerts_from_slack_and_store(world: dict[str, Any]) -> list[AlertMessage]:
    """The alerts dedupe_findings decided (rebuilt from the table: one NEW per finding of the scan)."""
    from gpuwaste.bootstrap.delivery import lambda_store
    from gpuwaste.services.notify import finding_from_record

    store = lambda_store()
    out = []
    for record in store.open_for_cluster("demo"):
        finding = finding_from_record(record)
        if finding is None or record.last_alert_at is None:
            continue
        out.append(AlertMessage(action="new", fingerprint=record.fingerprint, finding=finding,
                                first_seen=record.first_seen, scan_id=record.last_scan_id))
    assert out, "the scan produced alerts"
    return out

"""Integration: a paced scan request's `start_after_s` reaches SQS as DelaySeconds (moto's SQS holds it back)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from gpuwaste.models.messages import ScanRequest
from gpuwaste.queue.sqs import SqsQueue
from gpuwaste.services.dispatch import scan_id_for

pytestmark = pytest.mark.integration

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _requests(clusters: list[str]) -> list[ScanRequest]:
    return [ScanRequest(cluster=c, scheduled_time=T0, scan_id=scan_id_for(c, T0)) for c in clusters]


def test_a_delayed_scan_request_is_held_back_by_sqs(aws: Any) -> None:
    # GIVEN a queue in moto's SQS and two requests, one to start 60 s late
    sqs = boto3.client("sqs")
    url = sqs.create_queue(QueueName="paced-scan-requests")["QueueUrl"]
    now, later = _requests(["a", "b"])
    # WHEN sent through the adapter
    SqsQueue(client=sqs, queue_url=url).send_scan_requests([now, later.model_copy(update={"start_after_s": 60})])
    # THEN only the undelayed one can be received now, and SQS counts the other as delayed
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
    assert [ScanRequest.model_validate_json(m["Body"]).cluster for m in got] == ["a"]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])["Attributes"]
    assert attrs["ApproximateNumberOfMessagesDelayed"] == "1"



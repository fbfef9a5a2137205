"""Tests against a deployed stack (`make test-aws`): needs AWS_SAM_STACK_NAME and AWS credentials.

They resolve every resource from the stack's Outputs, send only what they clean up, and skip with a
visible reason when no stack is named (CI has none).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

pytestmark = pytest.mark.aws

STACK = os.environ.get("AWS_SAM_STACK_NAME")


@pytest.fixture(scope="module")
def outputs() -> dict[str, str]:
    """The stack's Outputs (OutputKey → OutputValue)."""
    if not STACK:
        pytest.skip("AWS_SAM_STACK_NAME is not set: these tests run against a deployed stack (make test-aws)")
    import boto3

    stack = boto3.client("cloudformation").describe_stacks(StackName=STACK)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def test_deployed_stack_exposes_every_queue_table_and_function(outputs: dict[str, str]) -> None:
    # GIVEN the deployed stack's outputs
    # WHEN they are listed
    # THEN every queue (and its DLQ), the table and the eight functions are there
    for name in ("ScanRequests", "Findings", "Priced", "Alerts", "Tickets"):
        assert f"{name}QueueUrl" in outputs and f"{name}DlqUrl" in outputs
    assert "FindingsTableName" in outputs
    for fn in ("DispatchScans", "ScanGpuWaste", "PriceFindings", "DedupeFindings", "NotifySlack", "CreateTickets",
               "SendDailySummary", "SlackInteractions"):
        assert f"{fn}FunctionName" in outputs


def test_deployed_stack_malformed_scan_request_lands_in_the_dlq_with_its_reason(outputs: dict[str, str]) -> None:
    # GIVEN the scan-requests queue and its dead-letter queue
    import boto3

    sqs = boto3.client("sqs")
    marker = f"gpuwaste-aws-test-{uuid.uuid4().hex[:8]}"
    body = json.dumps({"schema_version": 99, "cluster": marker, "scheduled_time": datetime.now(tz=UTC).isoformat()})
    # WHEN a schema-invalid request is sent
    sqs.send_message(QueueUrl=outputs["ScanRequestsQueueUrl"], MessageBody=body)
    # THEN it reaches the DLQ with an error reason attribute (and is deleted by the test)
    found: dict[str, Any] | None = None
    deadline = time.monotonic() + 120
    while found is None and time.monotonic() < deadline:
        got = sqs.receive_message(QueueUrl=outputs["ScanRequestsDlqUrl"], MaxNumberOfMessages=10, WaitTimeSeconds=10,
                                  MessageAttributeNames=["All"])
        for m in got.get("Messages", []):
            if marker in m["Body"]:
                found = m
                sqs.delete_message(QueueUrl=outputs["ScanRequestsDlqUrl"], ReceiptHandle=m["ReceiptHandle"])
    assert found is not None, "the malformed request did not reach the DLQ within 120 s"
    attrs = found.get("MessageAttributes", {})
    assert "error_reason" in attrs and attrs["error_reason"]["StringValue"]

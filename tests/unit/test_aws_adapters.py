"""Unit tests: error translation and batching of the DynamoDB store and the SQS queue (botocore Stubber, no network)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import boto3
import pytest
from botocore.stub import Stubber

from gpuwaste.errors import PermanentError, RetryableError, StoreError
from gpuwaste.models.lifecycle import FindingRecord, FindingState
from gpuwaste.models.messages import ScanRequest
from gpuwaste.queue.sqs import SqsQueue
from gpuwaste.store.dynamodb import DynamoDbFindingStore, from_item, key_bucket, to_item

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
URL = "https://sqs.us-east-1.amazonaws.com/123456789012/FindingsQueue"


def client(service: str):  # type: ignore[no-untyped-def]
    return boto3.client(service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


def record() -> FindingRecord:
    return FindingRecord(fingerprint="fp", cluster="c1", kind="idle_allocation", detector="idle_allocation",
                         first_seen=T0, last_seen=T0, usd_per_day=Decimal("1.10"), version=1)


def requests(n: int) -> list[ScanRequest]:
    return [ScanRequest(cluster=f"c{i}", scheduled_time=T0, scan_id=f"s{i}") for i in range(n)]


def test_dynamodb_item_keeps_money_as_decimal_numbers() -> None:
    # GIVEN a record with USD amounts
    # WHEN it becomes a DynamoDB item and back
    item = to_item(record())
    # THEN money is a DynamoDB number (never float), index keys are set, and the round trip is exact
    assert item["usd_per_day"] == {"N": "1.10"}
    bucket = key_bucket(item["fingerprint"]["S"])
    assert item["open_key"] == {"S": f"c1#{bucket}"} and item["activity_key"] == {"S": f"2026-01-05#{bucket}"}
    assert "open_key" not in to_item(record().model_copy(update={"state": FindingState.RESOLVED}))  # a sparse index
    assert from_item(item) == record()


@pytest.mark.parametrize("code", ["ProvisionedThroughputExceededException", "ThrottlingException",
                                  "TransactionConflictException", "InternalServerError"])
def test_dynamodb_store_throttling_raises_retryable_store_error(code: str) -> None:
    # GIVEN DynamoDB answering a put with a transient error
    ddb = client("dynamodb")
    with Stubber(ddb) as stub:
        stub.add_client_error("put_item", service_error_code=code, http_status_code=400)
        # WHEN a record is written
        # THEN StoreError (retryable), never a raw botocore error
        with pytest.raises(StoreError):
            DynamoDbFindingStore(client=ddb, table_name="t").put_new(record())


def test_dynamodb_store_conditional_failure_returns_false() -> None:
    # GIVEN DynamoDB rejecting the version condition
    ddb = client("dynamodb")
    with Stubber(ddb) as stub:
        stub.add_client_error("put_item", service_error_code="ConditionalCheckFailedException", http_status_code=400)
        # WHEN an update is attempted
        ok = DynamoDbFindingStore(client=ddb, table_name="t").update(record(), expected_version=1)
    # THEN it is a normal "conflict" answer
    assert ok is False


def test_dynamodb_store_missing_table_is_permanent() -> None:
    # GIVEN a table that does not exist
    ddb = client("dynamodb")
    with Stubber(ddb) as stub:
        stub.add_client_error("get_item", service_error_code="ResourceNotFoundException", http_status_code=400)
        # WHEN a record is read
        # THEN a PermanentError (a bad configuration, retrying cannot help) and not a StoreError
        with pytest.raises(PermanentError):
            DynamoDbFindingStore(client=ddb, table_name="missing").get("fp")


def test_sqs_queue_sends_in_batches_of_ten() -> None:
    # GIVEN 23 messages
    sqs = client("sqs")
    with Stubber(sqs) as stub:
        for n in (10, 10, 3):
            stub.add_response("send_message_batch", {"Successful": [
                {"Id": str(i), "MessageId": f"m{i}", "MD5OfMessageBody": "x"} for i in range(n)], "Failed": []})
        # WHEN they are sent
        SqsQueue(client=sqs, queue_url=URL).send_scan_requests(requests(23))
        # THEN three calls of 10, 10 and 3 entries were made (the stubber checks each was consumed)
        stub.assert_no_pending_responses()


def test_sqs_queue_retries_only_failed_entries() -> None:
    # GIVEN SQS failing entry 1 of 3 once (throttled), then accepting it
    sqs = client("sqs")
    bodies = [m.model_dump_json() for m in requests(3)]
    with Stubber(sqs) as stub:
        stub.add_response("send_message_batch", {
            "Successful": [{"Id": "0", "MessageId": "a", "MD5OfMessageBody": "x"}, {"Id": "2", "MessageId": "c", "MD5OfMessageBody": "x"}],
            "Failed": [{"Id": "1", "SenderFault": False, "Code": "ThrottlingException", "Message": "slow down"}]},
            expected_params={"QueueUrl": URL, "Entries": [{"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies)]})
        stub.add_response("send_message_batch", {"Successful": [{"Id": "1", "MessageId": "b", "MD5OfMessageBody": "x"}], "Failed": []},
                          expected_params={"QueueUrl": URL, "Entries": [{"Id": "1", "MessageBody": bodies[1]}]})
        # WHEN the three are sent
        SqsQueue(client=sqs, queue_url=URL, sleep=lambda s: None).send_scan_requests(requests(3))
        # THEN the second call carried only the failed entry
        stub.assert_no_pending_responses()


def test_sqs_queue_raises_retryable_when_entries_keep_failing() -> None:
    # GIVEN SQS failing one entry on every attempt
    sqs = client("sqs")
    failed = {"Successful": [], "Failed": [{"Id": "0", "SenderFault": False, "Code": "InternalError", "Message": "boom"}]}
    with Stubber(sqs) as stub:
        for _ in range(3):
            stub.add_response("send_message_batch", failed)
        # WHEN a message is sent
        sleeps: list[float] = []
        # THEN RetryableError after the bounded attempts (the calling record fails and SQS redelivers it), backing
        # off exponentially between them
        with pytest.raises(RetryableError, match="1 of 1 messages not sent"):
            SqsQueue(client=sqs, queue_url=URL, max_attempts=3, sleep=sleeps.append).send_scan_requests(requests(1))
        assert sleeps == [0.1, 0.2]


def test_sqs_queue_sender_fault_is_permanent() -> None:
    # GIVEN SQS rejecting an entry as the sender's fault
    sqs = client("sqs")
    with Stubber(sqs) as stub:
        stub.add_response("send_message_batch", {"Successful": [], "Failed": [
            {"Id": "0", "SenderFault": True, "Code": "InvalidMessageContents", "Message": "bad char"}]})
        # WHEN it is sent
        # THEN PermanentError at once (no retry can fix it)
        with pytest.raises(PermanentError, match="InvalidMessageContents"):
            SqsQueue(client=sqs, queue_url=URL).send_scan_requests(requests(1))

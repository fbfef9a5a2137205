"""Unit tests: several findings / alerts per queue message (queue/packing.py, the batch envelopes of models/messages.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import boto3
from botocore.stub import ANY, Stubber

from gpuwaste.errors import RetryableError
from gpuwaste.models.findings import Finding, Subject, WasteKind
from gpuwaste.models.messages import (
    AlertAction,
    AlertMessage,
    FindingMessage,
    ScanCompleted,
    read_alert_body,
    read_stage_body,
    salvage,
)
from gpuwaste.queue.memory import MemoryQueue
from gpuwaste.queue.packing import ENVELOPE_BYTES, pack
from gpuwaste.queue.sqs import SqsQueue

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
URL = "https://sqs.us-east-1.amazonaws.com/123456789012/PricedQueue"


def finding(i: int, *, title: str = "idle") -> Finding:
    return Finding(kind=WasteKind.IDLE, detector="idle", title=title, recommendation="scale down",
                   subject=Subject(cluster="c1", namespace="ml", workload_kind="Deployment", workload_name=f"w-{i}"),
                   observed_at=T0, window_s=3600, wasted_gpu_share=Decimal(1))


def messages(n: int) -> list[FindingMessage]:
    return [FindingMessage(scan_id="s1", scan_seq=i, scan_total=n, finding=finding(i)) for i in range(n)]


def test_packing_keeps_every_finding_once_in_order_under_the_envelope_size() -> None:
    # GIVEN 200 findings of one scan and its completion
    sent = [*messages(200), ScanCompleted(scan_id="s1", cluster="c1", scheduled_time=T0)]
    # WHEN they are packed into queue bodies
    bodies = pack(sent)
    # THEN every body is at most one envelope, the completion travels alone, and reading the bodies back gives the
    # same messages in the same order, each once
    assert all(len(b.text.encode()) <= ENVELOPE_BYTES for b in bodies)
    assert len(bodies) < len(sent) / 5
    assert [i for b in bodies for i in b.carries] == list(range(len(sent)))
    assert [m for b in bodies for m in read_stage_body(b.text)] == sent
    assert read_stage_body(bodies[-1].text) == [sent[-1]]


def test_a_message_larger_than_an_envelope_goes_alone() -> None:
    # GIVEN a finding whose own JSON is larger than an envelope, between two ordinary ones
    big = FindingMessage(scan_id="s1", finding=finding(1, title="x" * ENVELOPE_BYTES))
    sent = [messages(1)[0], big, messages(3)[2]]
    # WHEN packed
    bodies = pack(sent)
    # THEN it is a single-finding body of its own (SQS takes or refuses it alone), the others are not held back
    assert [b.carries for b in bodies] == [[0], [1], [2]]
    assert json.loads(bodies[1].text)["finding"]["title"] == big.finding.title


def test_old_single_messages_and_alert_batches_read_back() -> None:
    # GIVEN a single finding message (sent before batching) and packed alerts
    single = messages(1)[0]
    alerts = [AlertMessage(action=AlertAction.NEW, fingerprint=f.fingerprint, finding=f, first_seen=T0, scan_id="s1")
              for f in (finding(1), finding(2))]
    # WHEN read as queue bodies
    # THEN both shapes give their messages
    assert read_stage_body(single.model_dump_json()) == [single]
    assert read_alert_body(pack(alerts)[0].text) == alerts


def test_salvage_splits_a_batch_into_its_good_and_bad_findings() -> None:
    # GIVEN a packed body whose second finding lost its subject
    body = json.loads(pack(messages(3))[0].text)
    del body["findings"][1]["finding"]["subject"]
    # WHEN it is salvaged
    rebuilt, bad = salvage(json.dumps(body))
    # THEN the good two are a valid batch, the bad one is a single message with the validation error naming the field
    assert rebuilt is not None
    assert [m.finding.subject.workload_name for m in read_stage_body(rebuilt)] == ["w-0", "w-2"]
    assert len(bad) == 1 and json.loads(bad[0][0])["scan_seq"] == 1
    assert "subject" in str(bad[0][1])
    # AND a body that is no envelope is not salvaged
    assert salvage("{oops") == (None, [])


def test_memory_queue_packs_like_sqs_when_asked() -> None:
    # GIVEN an in-process queue packing as SQS does, and one that does not (the tests' default)
    packed, plain = MemoryQueue(pack=True), MemoryQueue()
    # WHEN 50 findings are sent to each
    packed.send_findings(messages(50))
    plain.send_findings(messages(50))
    # THEN the packed queue holds few bodies carrying all 50, the plain one 50 single messages
    bodies = packed.drain()
    assert 1 < len(bodies) < 10
    assert [m for b in bodies for m in read_stage_body(b)] == messages(50)
    assert len(plain.drain()) == 50


def test_sqs_failed_packed_entry_fails_every_finding_it_carries() -> None:
    # GIVEN 30 findings (packed into a few entries of one SendMessageBatch) and SQS failing the first entry each time
    sent = messages(30)
    bodies = pack(sent)
    sqs = boto3.client("sqs", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(sqs) as stub:
        for attempt in range(2):
            entries = len(bodies) if attempt == 0 else 1
            ok = [{"Id": str(i), "MessageId": f"m{i}", "MD5OfMessageBody": "x"} for i in range(1, entries)] if attempt == 0 else []
            stub.add_response("send_message_batch", {
                "Successful": ok, "Failed": [{"Id": "0", "SenderFault": False, "Code": "InternalError", "Message": "try later"}]},
                {"QueueUrl": URL, "Entries": ANY})
        # WHEN they are sent with two attempts
        outcomes = SqsQueue(client=sqs, queue_url=URL, max_attempts=2, sleep=lambda _s: None).send_each(sent)
    # THEN exactly the findings of the first entry failed (retryable), the others went out
    failed = [i for i, e in enumerate(outcomes) if e is not None]
    assert failed == bodies[0].carries and len(failed) > 1
    assert all(isinstance(outcomes[i], RetryableError) for i in failed)


def test_a_completion_is_split_into_parts_under_the_limit_that_merge_back_to_it() -> None:
    from datetime import UTC, datetime

    from gpuwaste.models.messages import ScanCompleted, merge_completion, split_completion

    # GIVEN a completion of 40,000 fingerprints and 300 unjudged subjects (≈ 2.7 MB as one message)
    whole = ScanCompleted(scan_id="s", cluster="c", scheduled_time=datetime(2026, 1, 5, tzinfo=UTC),
                          fingerprints=tuple(f"{i:064x}" for i in range(40_000)),
                          unjudged=tuple(f"ns/pod-{i}" for i in range(300)))
    # WHEN it is split with a 200 KiB budget
    parts = split_completion(whole, max_bytes=200 * 1024)
    # THEN every part's JSON is within the budget, the parts are numbered 0..n-1 of n, and they merge back exactly
    assert len(parts) == 14 and all(len(p.model_dump_json().encode()) <= 200 * 1024 for p in parts)
    assert [(p.part, p.parts) for p in parts] == [(i, 14) for i in range(14)]
    merged = merge_completion(list(reversed(parts)))
    assert set(merged.fingerprints) == set(whole.fingerprints) and set(merged.unjudged) == set(whole.unjudged)
    assert merged.whole and merged.judged

"""Paced fan-out (issue 23 item 4): a tick's scans spread by a stable jitter, waves per Prometheus endpoint (the
query budget), SQS DelaySeconds carrying it (tests/integration/test_dispatch_delay_sqs.py: moto holds it back), and
the scan queue's MaximumConcurrency in the template."""

from __future__ import annotations

import logging
from collections import Counter
from datetime import UTC, datetime

import boto3
import pytest
from botocore.stub import Stubber

from gpuwaste.models.messages import ScanRequest
from gpuwaste.queue.memory import MemoryQueue
from gpuwaste.queue.sqs import SqsQueue
from gpuwaste.services.dispatch import MAX_DELAY_S, DispatchService, Pacing, pace, scan_id_for
from tests.aws_resources import load_template

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _requests(clusters: list[str], shards: int = 1) -> list[ScanRequest]:
    return [ScanRequest(cluster=c, scheduled_time=T0, scan_id=scan_id_for(c, T0), shard=k, shard_count=shards)
            for c in clusters for k in range(shards)]


def test_fifty_clusters_on_one_prometheus_start_in_waves_within_the_budget() -> None:
    # GIVEN 50 clusters, 40 of them on one shared Prometheus and 10 on their own, a budget of 5 scans per endpoint
    clusters = [f"c{i:02d}" for i in range(50)]
    endpoints = {c: "https://shared.example" if i < 40 else f"https://own-{c}.example" for i, c in enumerate(clusters)}
    pacing = Pacing(spread_s=30, per_endpoint=5, wave_s=60)
    # WHEN the tick's requests are paced
    paced = pace(_requests(clusters), endpoints, pacing)
    # THEN the shared endpoint's 40 scans start in 8 waves of 5, each inside its wave's first 30 s; the others at once
    shared = [r for r in paced if endpoints[r.cluster] == "https://shared.example"]
    waves = Counter(r.start_after_s // 60 for r in shared)
    assert waves == dict.fromkeys(range(8), 5)
    assert all(r.start_after_s % 60 <= 30 for r in shared)
    assert all(r.start_after_s <= 30 for r in paced if endpoints[r.cluster] != "https://shared.example")
    # and the jitter spreads (not one instant), is stable from one dispatch to the next, and keeps the request order
    assert len({r.start_after_s for r in shared}) > 20
    assert pace(_requests(clusters), endpoints, pacing) == paced
    assert [r.cluster for r in paced] == clusters
    assert all(r.scheduled_time == T0 for r in paced)  # the scans still evaluate at the tick's time


def test_shards_of_one_cluster_count_against_its_endpoints_budget() -> None:
    # GIVEN one cluster of 6 shards and a budget of 2 scans per endpoint, no jitter
    paced = pace(_requests(["big"], shards=6), {"big": "https://p"}, Pacing(per_endpoint=2, wave_s=120))
    # THEN shards start two at a time, 120 s apart
    assert [(r.shard, r.start_after_s) for r in paced] == [(0, 0), (1, 0), (2, 120), (3, 120), (4, 240), (5, 240)]


def test_waves_past_sqs_900_second_delay_are_capped_and_said(caplog: pytest.LogCaptureFixture) -> None:
    # GIVEN 12 clusters on one endpoint, 1 per wave, 100 s apart (waves at 0 … 1,100 s)
    clusters = [f"c{i}" for i in range(12)]
    with caplog.at_level(logging.WARNING):
        paced = pace(_requests(clusters), dict.fromkeys(clusters, "https://p"), Pacing(per_endpoint=1, wave_s=100))
    # THEN no delay exceeds SQS's 900 s: the 2 waves past it start with the one at 900 s, and a warning counts them
    assert max(r.start_after_s for r in paced) == MAX_DELAY_S
    assert sum(1 for r in paced if r.start_after_s == MAX_DELAY_S) == 3
    assert any(getattr(rec, "capped", None) == 2 for rec in caplog.records)


def test_no_pacing_configured_changes_nothing() -> None:
    reqs = _requests(["a", "b"], shards=2)
    assert pace(reqs, {}, Pacing()) == reqs and all(r.start_after_s == 0 for r in reqs)


def test_dispatch_sends_the_paced_requests() -> None:
    # GIVEN the dispatch service with a budget of 1 scan per endpoint for two clusters on one Prometheus
    queue = MemoryQueue("scan-requests", objects=True)
    service = DispatchService(clusters=["a", "b"], queue=queue, endpoints={"a": "https://p", "b": "https://p"},
                              pacing=Pacing(per_endpoint=1, wave_s=300))
    # WHEN a tick fires
    service.dispatch(T0)
    # THEN the second cluster's scan starts one wave later
    sent = [m for m in queue.drain_messages() if isinstance(m, ScanRequest)]
    assert [(m.cluster, m.start_after_s) for m in sent] == [("a", 0), ("b", 300)]


def test_sqs_adapter_sends_start_after_as_delay_seconds() -> None:
    # GIVEN two scan requests, one to start 120 s late
    sqs = boto3.client("sqs", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    url = "https://sqs.us-east-1.amazonaws.com/123456789012/ScanRequestsQueue"
    now, later = _requests(["a", "b"])
    later = later.model_copy(update={"start_after_s": 120})
    expected = {"QueueUrl": url, "Entries": [{"Id": "0", "MessageBody": now.model_dump_json()},
                                             {"Id": "1", "MessageBody": later.model_dump_json(), "DelaySeconds": 120}]}
    with Stubber(sqs) as stub:
        stub.add_response("send_message_batch", {"Successful": [
            {"Id": str(i), "MessageId": f"m{i}", "MD5OfMessageBody": "x"} for i in range(2)], "Failed": []}, expected_params=expected)
        # WHEN sent
        SqsQueue(client=sqs, queue_url=url).send_scan_requests([now, later])
        # THEN SendMessageBatch carried DelaySeconds on the late one only (the stubber compares the parameters)
        stub.assert_no_pending_responses()


def test_template_caps_scans_in_flight_with_a_parameter_of_at_least_two() -> None:
    # GIVEN the template
    template = load_template()
    # WHEN the scan function's queue event is read
    event = template["Resources"]["ScanGpuWasteFunction"]["Properties"]["Events"]["ScanRequests"]["Properties"]
    param = template["Parameters"]["ScanMaxConcurrency"]
    # THEN its MaximumConcurrency is the parameter, which SQS's floor of 2 bounds
    assert event["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "ScanMaxConcurrency"}}
    assert param["Type"] == "Number" and int(param["MinValue"]) >= 2 and int(param["Default"]) >= 2

"""Handler tests: the pipeline functions (dispatch, scan, price, dedupe) on the `events/*.json` samples, with
their composition roots replaced by in-memory adapters (an attribute patch on the bootstrap module)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from gpuwaste.bootstrap import dedupe as dedupe_root
from gpuwaste.bootstrap import dispatch as dispatch_root
from gpuwaste.bootstrap import local, pipeline
from gpuwaste.bootstrap import price as price_root
from gpuwaste.bootstrap import scan as scan_root
from gpuwaste.config import GpuWasteConfig
from gpuwaste.models.messages import AlertAction, AlertMessage, FindingMessage, ScanCompleted, ScanRequest
from gpuwaste.models.settings import LifecycleSettings
from gpuwaste.queue.memory import MemoryQueue
from gpuwaste.services.dispatch import DispatchService
from gpuwaste.services.lifecycle import LifecycleService
from gpuwaste.services.price import PriceService
from gpuwaste.services.scan import ScanService
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.lambda_events import FakeLambdaContext, load_event, load_handler, sqs_event

DEMO_TIME = datetime(2024, 1, 1, 1, 20, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _no_dead_letter_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEAD_LETTER_QUEUE_URL", raising=False)


def parse_bodies(queue: MemoryQueue) -> list[FindingMessage | ScanCompleted]:
    from pydantic import TypeAdapter

    adapter = TypeAdapter(FindingMessage | ScanCompleted)
    return [adapter.validate_json(b) for b in queue.drain()]


@pytest.mark.parametrize("event", ["scheduled_scan", "eventbridge_scheduled"])
def test_dispatch_handler_sends_one_request_per_cluster_at_the_event_time(monkeypatch: pytest.MonkeyPatch, event: str) -> None:
    # GIVEN two configured clusters and a schedule tick (Scheduler input or classic aws.events shape)
    queue = MemoryQueue()
    monkeypatch.setattr(dispatch_root, "dispatch_service", lambda: DispatchService(clusters=["demo", "other"], queue=queue))
    handler = load_handler("dispatch_scans")
    # WHEN the handler runs
    result = handler.lambda_handler(load_event(event), FakeLambdaContext())
    # THEN one ScanRequest per cluster carries the tick's time, never the wall clock
    requests = [ScanRequest.model_validate_json(b) for b in queue.drain()]
    assert result["scan_requests"] == 2
    assert [(r.cluster, r.scheduled_time) for r in requests] == [("demo", DEMO_TIME), ("other", DEMO_TIME)]


def _demo_scan_service(queue: MemoryQueue) -> ScanService:
    cfg = GpuWasteConfig()
    sources = local.recording_sources(local.demo_recording(), cfg)
    assert sources.recording is not None
    from datetime import timedelta

    return ScanService(cluster_source=sources.cluster, telemetry_source=sources.telemetry, settings=cfg.detectors,
                       window=timedelta(seconds=sources.recording.meta.window_s or 3600), queue=queue)


def test_scan_handler_scans_at_the_requested_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a ScanRequest for the demo cluster and a scan service over the demo recording
    queue = MemoryQueue()
    monkeypatch.setattr(scan_root, "scan_service", lambda cluster: _demo_scan_service(queue))
    handler = load_handler("scan_gpu_waste")
    # WHEN the scan handler receives the SQS event
    result = handler.lambda_handler(load_event("sqs_scan_request"), FakeLambdaContext())
    # THEN the batch succeeds, findings are evaluated at the request's time, and a ScanCompleted closes the scan
    messages = parse_bodies(queue)
    findings = [m for m in messages if isinstance(m, FindingMessage)]
    assert result == {"batchItemFailures": []}
    assert len(findings) == 23 and {m.finding.observed_at for m in findings} == {DEMO_TIME}
    assert isinstance(messages[-1], ScanCompleted) and len(messages[-1].fingerprints) == 23


def test_scan_handler_on_a_schedule_scans_every_configured_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # GIVEN a config with the demo cluster as a recording, and the scan invoked straight by a schedule
    config = tmp_path / "config.yaml"
    config.write_text(f"clusters:\n  - name: demo\n    recording: {local.demo_recording()}\n")
    monkeypatch.setenv("CONFIG_FILE", str(config))
    pipeline.reset()
    queue = MemoryQueue()
    monkeypatch.setattr(scan_root, "scan_service", lambda cluster: _demo_scan_service(queue))
    handler = load_handler("scan_gpu_waste")
    # WHEN it runs on the scheduled event
    result = handler.lambda_handler(load_event("scheduled_scan"), FakeLambdaContext())
    pipeline.reset()
    # THEN the demo cluster was scanned at the event's time
    assert result["scans"][0]["cluster"] == "demo" and result["scans"][0]["findings"] == 23


def test_price_handler_prices_findings_and_forwards_completion(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN unpriced findings and a scan completion on the findings queue
    out = MemoryQueue()
    monkeypatch.setattr(price_root, "pricing_service", lambda: PriceService(price_book=local.price_book(GpuWasteConfig()), queue=out))
    handler = load_handler("price_findings")
    # WHEN the price handler runs on events/sqs_findings.json
    result = handler.lambda_handler(load_event("sqs_findings"), FakeLambdaContext())
    # THEN each finding is forwarded with USD/day and its formula, and the completion passes through
    messages = parse_bodies(out)
    assert result == {"batchItemFailures": []}
    priced = [m for m in messages if isinstance(m, FindingMessage)]
    assert len(priced) == 3 and all(m.finding.usd_per_day is not None for m in priced)
    assert priced[0].finding.usd_per_day == Decimal("660.48")
    assert sum(isinstance(m, ScanCompleted) for m in messages) == 1


def test_price_handler_fails_only_the_malformed_record(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a batch with a non-JSON body, a wrong schema_version, and one good finding (no DLQ configured)
    out = MemoryQueue()
    monkeypatch.setattr(price_root, "pricing_service", lambda: PriceService(price_book=local.price_book(GpuWasteConfig()), queue=out))
    good = load_event("sqs_findings")["Records"][0]["body"]
    wrong_version = json.dumps({**json.loads(good), "schema_version": 2})
    event = sqs_event("{not json", wrong_version, good)
    handler = load_handler("price_findings")
    # WHEN the handler runs
    result = handler.lambda_handler(event, FakeLambdaContext())
    # THEN exactly the two bad records are reported for redelivery (→ DLQ by redrive) and the good one went on
    failed = {f["itemIdentifier"] for f in result["batchItemFailures"]}
    assert failed == {event["Records"][0]["messageId"], event["Records"][1]["messageId"]}
    assert len(out.drain()) == 1


def _lifecycle(store: SqliteFindingStore, alerts: MemoryQueue, tickets: MemoryQueue) -> LifecycleService:
    return LifecycleService(store=store, alerts=alerts, tickets=tickets, settings=LifecycleSettings(), clock=pipeline.SystemClock())


def test_dedupe_handler_alerts_once_for_a_redelivered_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the lifecycle over an empty store
    store, alerts, tickets = SqliteFindingStore(":memory:"), MemoryQueue(), MemoryQueue()
    monkeypatch.setattr(dedupe_root, "lifecycle_service", lambda: _lifecycle(store, alerts, tickets))
    handler = load_handler("dedupe_findings")
    event = load_event("sqs_priced")
    # WHEN the priced batch is delivered twice
    first = handler.lambda_handler(event, FakeLambdaContext())
    sent_first = [AlertMessage.model_validate_json(b) for b in alerts.drain()]
    second = handler.lambda_handler(event, FakeLambdaContext())
    # THEN the first delivery alerts NEW for each of the 3 findings (one ticket: $660/day), the second nothing
    assert first == second == {"batchItemFailures": []}
    assert [a.action for a in sent_first] == [AlertAction.NEW] * 3
    assert alerts.drain() == []
    assert len(tickets.drain()) == 1


class _EndingContext(FakeLambdaContext):
    """A Lambda context with 4 s left (less than the lifecycle batch keeps in hand)."""

    def get_remaining_time_in_millis(self) -> int:
        return 4_000


def test_dedupe_handler_starts_no_record_at_its_deadline_and_the_redelivery_decides_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the lifecycle over an empty store, and an invocation with 4 s left
    store, alerts, tickets = SqliteFindingStore(":memory:"), MemoryQueue(), MemoryQueue()
    monkeypatch.setattr(dedupe_root, "lifecycle_service", lambda: _lifecycle(store, alerts, tickets))
    handler = load_handler("dedupe_findings")
    event = load_event("sqs_priced")
    # WHEN the priced batch is delivered to it
    late = handler.lambda_handler(event, _EndingContext())
    # THEN no record was started: every one is handed back to SQS, nothing written or told
    assert {f["itemIdentifier"] for f in late["batchItemFailures"]} == {r["messageId"] for r in event["Records"]}
    fingerprints = dedupe_root.fingerprints_of(event)
    assert len(fingerprints) == 3 and store.get_many(fingerprints) == {} and alerts.drain() == []
    # AND the redelivery, with time in hand, decides each finding once
    assert handler.lambda_handler(event, FakeLambdaContext()) == {"batchItemFailures": []}
    assert [AlertMessage.model_validate_json(b).action for b in alerts.drain()] == [AlertAction.NEW] * 3

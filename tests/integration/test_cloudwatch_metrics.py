"""Handler tests: the CloudWatch metric documents (Powertools Metrics, embedded metric format) of the scan, dedupe and
notify functions, read back from the handlers' stdout (what Lambda ships to CloudWatch Logs, which extracts them).

Expected values are counted at the other end: the messages the scan put on its queue, the alerts the lifecycle
put on its queue, the priced input, the fake Slack's failures and the batch response.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from pydantic import TypeAdapter

from gpuwaste.bootstrap import dedupe as dedupe_root
from gpuwaste.bootstrap import local, pipeline
from gpuwaste.bootstrap import scan as scan_root
from gpuwaste.config import GpuWasteConfig
from gpuwaste.models.findings import WasteKind
from gpuwaste.models.messages import AlertAction, AlertMessage, FindingMessage, ScanCompleted
from gpuwaste.models.settings import DeliverySettings, LifecycleSettings, SlackSettings
from gpuwaste.queue.memory import MemoryQueue
from gpuwaste.services.lifecycle import LifecycleService
from gpuwaste.services.notify import NotifyService
from gpuwaste.services.scan import ScanService
from gpuwaste.sinks.slack import SlackNotifier
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.delivery_helpers import NOW, ROOT, LambdaContext, load_app, record_for
from tests.lambda_events import FakeLambdaContext, load_event, load_handler, sqs_event
from tests.servers.slack_api import FakeSlack

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEAD_LETTER_QUEUE_URL", raising=False)
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "gpuwaste")
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)


def emf(stdout: str) -> list[dict[str, Any]]:
    """The EMF documents among the stdout lines (JSON objects with an `_aws.CloudWatchMetrics` directive)."""
    docs = []
    for line in stdout.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            doc = json.loads(line)
            if doc["_aws"].get("CloudWatchMetrics"):
                docs.append(doc)
    return docs


def values(docs: list[dict[str, Any]], name: str, **dims: str) -> list[float]:
    """Every value of metric `name` in documents whose dimension set is exactly `dims` (+ service)."""
    out: list[float] = []
    for doc in docs:
        (directive,) = doc["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == "GpuWaste"
        names = {m["Name"]: m.get("Unit") for m in directive["Metrics"]}
        if name not in names:
            continue
        (keys,) = directive["Dimensions"]
        if set(keys) - {"service"} != set(dims) or any(doc[k] != v for k, v in dims.items()):
            continue
        v = doc[name]
        out += v if isinstance(v, list) else [v]
    return out


def units(docs: list[dict[str, Any]]) -> dict[str, str]:
    return {m["Name"]: m["Unit"] for d in docs for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]}


def _demo_scan_service(queue: MemoryQueue) -> ScanService:
    cfg = GpuWasteConfig()
    sources = local.recording_sources(local.demo_recording(), cfg)
    assert sources.recording is not None
    return ScanService(cluster_source=sources.cluster, telemetry_source=sources.telemetry, settings=cfg.detectors,
                       window=timedelta(seconds=sources.recording.meta.window_s or 3600), queue=queue)


def test_scan_handler_emits_duration_gpus_and_findings_by_kind(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a scan request for the demo cluster and a scan service over the demo recording
    queue = MemoryQueue()
    monkeypatch.setattr(scan_root, "scan_service", lambda cluster: _demo_scan_service(queue))
    handler = load_handler("scan_gpu_waste")
    capsys.readouterr()
    # WHEN the handler runs
    assert handler.lambda_handler(load_event("sqs_scan_request"), FakeLambdaContext()) == {"batchItemFailures": []}
    docs = emf(capsys.readouterr().out)
    # THEN the findings per kind equal the findings the scan put on its queue, and the scan's duration, GPUs and
    # data-quality problems are there with their units
    sent = [m.finding for m in TypeAdapter(list[FindingMessage | ScanCompleted]).validate_python(
        [json.loads(b) for b in queue.drain()]) if isinstance(m, FindingMessage)]
    by_kind = Counter(f.kind.value for f in sent)
    assert {k: values(docs, "Findings", cluster="demo", kind=k) for k in by_kind} == {k: [n] for k, n in by_kind.items()}
    assert values(docs, "GpusSeen", cluster="demo") == [36]  # the demo fleet: 36 physical GPUs
    assert values(docs, "DataQualityProblems", cluster="demo") == [by_kind[WasteKind.DATA_QUALITY.value]]
    (duration,) = values(docs, "ScanDuration", cluster="demo")
    assert 0 < duration < 60
    assert values(docs, "Scans") == [1]
    assert units(docs)["ScanDuration"] == "Seconds" and units(docs)["Findings"] == "Count"


def test_dedupe_handler_emits_opened_resolved_and_open_waste_by_team_and_kind(monkeypatch: pytest.MonkeyPatch,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN the lifecycle over an empty store, and a priced batch ending with its scan's completion
    store, alerts = SqliteFindingStore(":memory:"), MemoryQueue()
    service = LifecycleService(store=store, alerts=alerts, tickets=MemoryQueue(), settings=LifecycleSettings(),
                               clock=pipeline.SystemClock())
    monkeypatch.setattr(dedupe_root, "lifecycle_service", lambda: service)
    handler = load_handler("dedupe_findings")
    event = load_event("sqs_priced")
    bodies = TypeAdapter(list[FindingMessage | ScanCompleted]).validate_python(
        [json.loads(r["body"]) for r in event["Records"]])
    priced = [m for m in bodies if isinstance(m, FindingMessage)]
    assert isinstance(bodies[-1], ScanCompleted)
    cluster = bodies[-1].cluster
    capsys.readouterr()
    # WHEN the batch is handled
    assert handler.lambda_handler(event, FakeLambdaContext()) == {"batchItemFailures": []}
    docs = emf(capsys.readouterr().out)
    # THEN FindingsOpened counts the NEW alerts the lifecycle queued, none resolved
    new = [a for a in (AlertMessage.model_validate_json(b) for b in alerts.drain()) if a.action is AlertAction.NEW]
    assert sum(values(docs, "FindingsOpened")) == len(new) == 3
    assert sum(values(docs, "FindingsResolved")) == 0
    # AND the open waste per cluster is the sum of the priced input, and per (team, kind) documents add up to it
    expected = sum((m.finding.usd_per_day or Decimal(0) for m in priced if m.finding.kind.is_waste), Decimal(0))
    assert values(docs, "WasteUsdPerDay", cluster=cluster) == [pytest.approx(float(expected))]
    groups = [d for d in docs
              if set(d["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]) - {"service"} == {"cluster", "team", "kind"}]
    usd = {(d["team"], d["kind"]): values([d], "WasteUsdPerDay", cluster=cluster, team=d["team"], kind=d["kind"])
           for d in groups if "WasteUsdPerDay" in d}
    assert sum(sum(v) for v in usd.values()) == pytest.approx(float(expected))
    assert {kind for _, kind in usd} == {m.finding.kind.value for m in priced if m.finding.kind.is_waste}
    gpus = sum(float(m.finding.wasted_gpu_share) for m in priced if m.finding.kind.is_waste)
    assert sum(sum(values([d], "WastedGpus", cluster=cluster, team=d["team"], kind=d["kind"]))
               for d in groups if "WastedGpus" in d) == pytest.approx(gpus)


def test_dedupe_handler_counts_a_resolution(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN one finding known to the store, and a completion of a later scan that no longer sees it
    store, alerts = SqliteFindingStore(":memory:"), MemoryQueue()
    service = LifecycleService(store=store, alerts=alerts, tickets=MemoryQueue(),
                               settings=LifecycleSettings(resolve_after_missed_scans=1), clock=pipeline.SystemClock())
    monkeypatch.setattr(dedupe_root, "lifecycle_service", lambda: service)
    handler = load_handler("dedupe_findings")
    message = next(m for m in (TypeAdapter(FindingMessage | ScanCompleted).validate_json(r["body"])
                                for r in load_event("sqs_priced")["Records"]) if isinstance(m, FindingMessage))
    f = message.finding
    handler.lambda_handler(sqs_event(message.model_dump_json()), FakeLambdaContext())
    later = ScanCompleted(scan_id="later", cluster=f.subject.cluster, scheduled_time=f.observed_at + timedelta(minutes=10),
                          fingerprints=())
    capsys.readouterr()
    # WHEN the completion is handled
    handler.lambda_handler(sqs_event(later.model_dump_json()), FakeLambdaContext())
    docs = emf(capsys.readouterr().out)
    # THEN one resolution is counted (the lifecycle queued one RESOLVED alert) and no waste is left open
    resolved = [a for a in (AlertMessage.model_validate_json(b) for b in alerts.drain()) if a.action is AlertAction.RESOLVED]
    assert sum(values(docs, "FindingsResolved")) == len(resolved) == 1
    assert values(docs, "WasteUsdPerDay", cluster=f.subject.cluster) == [0.0]


def test_notify_handler_emits_delivery_failures_as_reported_to_sqs(slack_api: FakeSlack, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN the sample alerts, their lifecycle records, and a Slack that answers 503 beyond the in-process retry
    settings = DeliverySettings(default_channel="#gpu-waste",
                                slack=SlackSettings(base_url=slack_api.url, rate_limit_retries=0, server_error_retries=1))
    store = SqliteFindingStore(":memory:")
    notifier = SlackNotifier.from_settings(settings.slack, token=slack_api.token, default_channel="#gpu-waste",
                                           sleep=lambda s: None)
    service = NotifyService(notifier=notifier, store=store, settings=settings, now=lambda: NOW)
    app = load_app("notify_slack")
    monkeypatch.setattr(app.bootstrap, "notify_service", lambda: service)
    event = json.loads((ROOT / "events" / "sqs_alerts.json").read_text())
    for r in event["Records"]:
        msg = AlertMessage.model_validate_json(r["body"])
        store.put_new(record_for(msg.finding, messages=msg.messages))
    slack_api.fail_next("*", 503, times=100)
    capsys.readouterr()
    # WHEN the batch fails, then is redelivered to a healthy Slack
    first = app.lambda_handler(event, LambdaContext())
    docs_first = emf(capsys.readouterr().out)
    slack_api.reset()
    second = app.lambda_handler(event, LambdaContext())
    docs_second = emf(capsys.readouterr().out)
    # THEN DeliveryFailures is the number of records reported failed to SQS, AlertsDelivered the rest
    failed = len(first["batchItemFailures"])
    assert failed > 0
    assert values(docs_first, "DeliveryFailures") == [failed]
    assert values(docs_first, "AlertsDelivered") == [len(event["Records"]) - failed]
    assert second["batchItemFailures"] == []
    assert values(docs_second, "DeliveryFailures") == [0]
    assert values(docs_second, "AlertsDelivered") == [len(event["Records"])]


def test_a_metrics_failure_never_fails_the_record(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # GIVEN a scan whose report cannot be turned into metrics (the findings were already sent)
    monkeypatch.setattr(scan_root, "scan", lambda request: object())
    handler = load_handler("scan_gpu_waste")
    # WHEN the handler runs
    result = handler.lambda_handler(load_event("sqs_scan_request"), FakeLambdaContext())
    # THEN the record succeeds (a redelivery would scan and send again) and the skipped metrics are logged
    assert result == {"batchItemFailures": []}
    assert any(r.getMessage() == "metrics not emitted" for r in caplog.records)

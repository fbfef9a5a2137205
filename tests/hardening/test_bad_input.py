"""Bad-input corpus: each item yields a clear error (with where) or a data-quality finding — never a crash,
never a crash loop (a poison message is dead-lettered at once with its reason), never an idle finding.

Items: malformed exposition lines (line number in the error), NaN / ±Inf / DCGM sentinels, non-numeric
values, escaped and non-UTF-8 label values, out-of-order and duplicate samples, empty and truncated files;
malformed or partial Kubernetes objects; invalid configuration (field path + what is allowed);
schema-invalid queue messages of every type through the real Lambda handlers; and the CLI.
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import dedupe as dedupe_root
from gpuwaste.bootstrap import local, pipeline
from gpuwaste.bootstrap import notify as notify_root
from gpuwaste.bootstrap import price as price_root
from gpuwaste.bootstrap import scan as scan_root
from gpuwaste.bootstrap import tickets as tickets_root
from gpuwaste.cli import app
from gpuwaste.config import GpuWasteConfig, parse_config
from gpuwaste.errors import ConfigError, InputFormatError
from gpuwaste.fleet.generator import generate_fleet
from gpuwaste.fleet.recording import write_recording
from gpuwaste.fleet.spec import FleetSpec
from gpuwaste.models.findings import WasteKind
from gpuwaste.models.settings import DeliverySettings, JiraSettings, LifecycleSettings, SlackSettings
from gpuwaste.queue.memory import MemoryQueue
from gpuwaste.services.lifecycle import LifecycleService
from gpuwaste.services.notify import NotifyService
from gpuwaste.services.price import PriceService
from gpuwaste.services.tickets import TicketService
from gpuwaste.sinks.jira import JiraTicketSink
from gpuwaste.sinks.slack import SlackNotifier
from gpuwaste.sources.exposition import parse_exposition, write_openmetrics
from gpuwaste.sources.k8s_objects import cluster_state_from_objects
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.hardening.conftest import Figures
from tests.hardening.harness import AuditedSlack, DayClock
from tests.lambda_events import FakeLambdaContext, load_event, load_handler, sqs_record
from tests.servers.jira_api import FakeJira

SPEC = FleetSpec()
AT = SPEC.eval_time
GOOD = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1"} 5 1700000000000\n'
NEXT = "1700000060000"

# -- exposition ------------------------------------------------------------------------------------------
# (id, text, line of the error) — each must fail with "<source>:<line>:" in the message
MALFORMED: list[tuple[str, str | bytes, int]] = [
    ("brace-without-close", GOOD + 'DCGM_FI_DEV_GPU_UTIL{gpu="0" 5 1700000000000\n', 2),
    ("missing-value", GOOD + 'DCGM_FI_DEV_GPU_UTIL{gpu="0"}\n', 2),
    ("bad-metric-name", GOOD + '1bad{gpu="0"} 5 1700000000000\n', 2),
    ("unterminated-label-value", GOOD + 'DCGM_FI_DEV_GPU_UTIL{gpu="0} 5 1700000000000\n', 2),
    ("duplicate-label-name", GOOD + 'DCGM_FI_DEV_GPU_UTIL{gpu="0",gpu="1"} 5 1700000000000\n', 2),
    ("bad-timestamp", GOOD + 'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 5 abc\n', 2),
    ("no-timestamp", 'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 5\n', 1),
    ("truncated-mid-line", GOOD + GOOD + 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UU', 3),
    ("openmetrics-without-eof", '# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu="0"} 5 1700000000\n# UNIT x\n', 3),
    ("data-after-eof", 'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 5 1700000000\n# EOF\nx 1 1\n', 3),
    ("ms-in-openmetrics", 'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 5 1700000000000\n# EOF\n', 1),
    ("seconds-in-text", 'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 5 1700000000\n', 1),
    ("non-utf8-in-name", GOOD.encode() + b'DCGM_FI_\xffUTIL{gpu="0"} 5 1700000060000\n', 2),
]


@pytest.mark.parametrize(("text", "line"), [pytest.param(t, n, id=i) for i, t, n in MALFORMED])
def test_bad_input_malformed_exposition_names_file_and_line(text: str | bytes, line: int, figures: Figures) -> None:
    # GIVEN a recording with one structurally broken line
    figures.bad_input("exposition malformed")
    # WHEN it is parsed / THEN InputFormatError points at file:line
    with pytest.raises(InputFormatError) as err:
        parse_exposition(text, source="bad.prom")
    assert err.value.line == line
    assert str(err.value).startswith(f"bad.prom:{line}: ")


def test_bad_input_unknown_escape_in_a_label_value_is_kept_as_written_as_prometheus_keeps_it() -> None:
    # GIVEN a label value with an escape the format does not define (`\q`), next to the defined ones
    text = GOOD + 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-2",path="C:\\q\\\\x\\"y"} 6 1700000000000\n'
    # WHEN it is parsed / THEN the sample is read, the unknown escape kept literally (Prometheus' text parser does the same)
    parsed = parse_exposition(text, source="odd.prom")
    (series,) = [s for s in parsed.series.values() if s.labels.get("UUID") == "GPU-2"]
    assert series.labels["path"] == 'C:\\q\\x"y' and series.values == [6.0]


# (id, text, warning kind, kept values of GPU-1) — skipped or repaired, warned at line 2, never a crash
REPAIRED: list[tuple[str, str | bytes, str, list[float]]] = [
    ("nan", GOOD + f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1"}} NaN {NEXT}\n', "non_finite", [5.0]),
    ("plus-inf", GOOD + f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1"}} +Inf {NEXT}\n', "non_finite", [5.0]),
    ("minus-inf", GOOD + f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1"}} -Inf {NEXT}\n', "non_finite", [5.0]),
    ("dcgm-int64-blank", GOOD + f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1"}} 9223372036854775794 {NEXT}\n',
     "skipped_sentinel", [5.0]),
    ("dcgm-int32-blank", GOOD + f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1"}} 2147483632 {NEXT}\n',
     "skipped_sentinel", [5.0]),
    ("dcgm-fp64-blank", GOOD + f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1"}} 140737488355328.000000 {NEXT}\n',
     "skipped_sentinel", [5.0]),
    ("non-numeric", GOOD + f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1"}} abc {NEXT}\n', "skipped_non_numeric", [5.0]),
    ("out-of-order", GOOD + 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1"} 7 1699999990000\n', "out_of_order", [5.0]),
    ("duplicate-sample", GOOD + GOOD, "duplicate_sample", [5.0]),
    ("non-utf8-label-value", GOOD.encode() + f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1",pod="\xff"}} 6 {NEXT}\n'
     .encode("latin-1"), "invalid_utf8", [5.0]),
]


@pytest.mark.parametrize(("text", "kind", "kept"), [pytest.param(t, k, v, id=i) for i, t, k, v in REPAIRED])
def test_bad_input_bad_samples_are_skipped_with_a_warning(text: str | bytes, kind: str, kept: list[float],
                                                          figures: Figures) -> None:
    # GIVEN a recording whose second sample is not a usable number, or out of order, or duplicated
    figures.bad_input("exposition bad sample")
    # WHEN parsed
    parsed = parse_exposition(text, source="bad.prom")
    # THEN the parse succeeds, warns at line 2 with the kind, keeps only finite in-order samples
    assert [(w.line, w.kind) for w in parsed.warnings] == [(2, kind)]
    gpu1 = [s for s in parsed.series.values() if s.labels == {"gpu": "0", "UUID": "GPU-1"}]
    assert [v for s in gpu1 for v in s.values] == kept
    assert all(math.isfinite(v) for s in parsed.series.values() for v in s.values)
    if kind == "invalid_utf8":
        assert any("\ufffd" in s.labels.get("pod", "") for s in parsed.series.values())


def test_bad_input_escaped_label_values_round_trip(figures: Figures) -> None:
    # GIVEN a label value with an escaped quote, backslash and newline
    figures.bad_input("exposition escapes")
    text = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",pod="a\\"b\\\\c\\nd"} 5 1700000000000\n'
    # WHEN parsed and written back
    parsed = parse_exposition(text, source="x.prom")
    (series,) = parsed.series.values()
    buf = io.StringIO()
    write_openmetrics(parsed.series.values(), buf)
    again = parse_exposition(buf.getvalue(), source="x.om")
    # THEN the value is decoded exactly and survives the round trip
    assert series.labels["pod"] == 'a"b\\c\nd'
    assert [s.labels for s in again.series.values()] == [series.labels]


def test_bad_input_empty_file_parses_to_nothing(figures: Figures) -> None:
    # GIVEN an empty recording
    figures.bad_input("exposition empty")
    # WHEN parsed / THEN no series, no crash
    assert parse_exposition(b"", source="empty.prom").series == {}


# -- the same values inside a whole scan: never an idle finding ------------------------------------------
IDLE_POD = "eval-sweep-6f8b-q8m2z"  # an idle pod of the demo fleet


@pytest.mark.parametrize("poison", [math.nan, math.inf, -math.inf, 2.0**47, "sentinel-int"])
def test_bad_input_unusable_telemetry_for_an_idle_gpu_is_never_an_idle_finding(
        tmp_path: Path, poison: Any, figures: Figures) -> None:
    # GIVEN the demo fleet where every sample of the idle pod's GPU series is NaN, ±Inf or a DCGM blank
    figures.bad_input("telemetry poisoned in a scan")
    fleet = generate_fleet(SPEC)
    path = write_recording(fleet, tmp_path / "rec", compress=False)
    lines, poisoned = [], 0
    for line in (path / "telemetry.om").read_text().splitlines():
        if f'"{IDLE_POD}"' in line and not line.startswith("#"):
            poisoned += 1
            head, value, ts = line.rsplit(" ", 2)
            text = "9223372036854775794" if poison == "sentinel-int" else (
                "NaN" if isinstance(poison, float) and math.isnan(poison) else
                "+Inf" if poison == math.inf else "-Inf" if poison == -math.inf else f"{poison:f}")
            line = f"{head} {text} {ts}"
        lines.append(line)
    (path / "telemetry.om").write_text("\n".join(lines) + "\n")
    assert poisoned > 100, "the idle pod's samples were rewritten"
    cfg = GpuWasteConfig()
    sources = local.recording_sources(path, cfg)
    # WHEN scanned
    report = local.scan_service(sources, cfg, window_s=SPEC.history_s - 600).scan(at=AT)
    kinds = {f.kind for f in report.findings if f.subject.pod == IDLE_POD}
    # THEN the pod is not accused of idling; the scan says its data is unusable instead
    assert not kinds & {WasteKind.IDLE, WasteKind.UNDERUSED, WasteKind.INFERENCE_IDLE}
    assert WasteKind.DATA_QUALITY in {f.kind for f in report.findings}


# -- Kubernetes objects ----------------------------------------------------------------------------------
POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml", "uid": "u"},
    "spec": {"nodeName": "n", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    "status": {"phase": "Running"},
}
NODE: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
                        "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}}


def _set(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    *parents, last = path.split(".")
    cur: Any = out
    for p in parents:
        cur = cur[int(p)] if isinstance(cur, list) else cur[p]
    if value is KeyError:
        del cur[last]
    else:
        cur[last] = value
    return out


# (id, objects, text the error must contain)
MALFORMED_OBJECTS: list[tuple[str, list[Any], str]] = [
    ("pod-without-metadata", [_set(POD, "metadata", KeyError)], "without metadata.name"),
    ("pod-metadata-is-a-list", [_set(POD, "metadata", [])], "without metadata.name"),
    ("gpu-quantity-not-a-number", [_set(POD, "spec.containers.0.resources.limits", {"nvidia.com/gpu": "abc"})],
     "Pod ml/p.spec.containers[0].resources['nvidia.com/gpu']"),
    ("bad-creation-timestamp", [_set(POD, "metadata.creationTimestamp", "yesterday")], "creationTimestamp"),
    ("unknown-phase", [_set(POD, "status.phase", "Exploded")], "status.phase"),
    ("containers-is-a-string", [_set(POD, "spec.containers", "main")], "items[0] (Pod p)"),
    ("labels-is-a-list", [_set(POD, "metadata.labels", ["team=ml"])], "items[0] (Pod p)"),
    ("node-capacity-not-a-number", [_set(NODE, "status.capacity", {"nvidia.com/gpu": "x"})], "Node n.status.capacity"),
    ("node-status-is-a-string", [_set(NODE, "status", "Ready")], "items[0] (Node n)"),
    ("item-without-kind", [{"metadata": {"name": "x"}}], "has no kind"),
    ("item-not-an-object", ["pod"], "is not an object"),
]


@pytest.mark.parametrize(("objects", "expect"), [pytest.param(o, e, id=i) for i, o, e in MALFORMED_OBJECTS])
def test_bad_input_malformed_kubernetes_object_is_a_clear_error(objects: list[Any], expect: str,
                                                                figures: Figures) -> None:
    # GIVEN a kubectl JSON list with one malformed object
    figures.bad_input("kubernetes object malformed")
    # WHEN the cluster state is built / THEN InputFormatError names the object and field
    with pytest.raises(InputFormatError, match=None) as err:
        cluster_state_from_objects(objects, cluster="c", observed_at=AT)
    assert expect in str(err.value)


@pytest.mark.parametrize("partial", [
    pytest.param(_set(POD, "status", KeyError), id="pod-without-status"),
    pytest.param(_set(POD, "spec.nodeName", KeyError), id="pod-not-scheduled"),
    pytest.param(_set(POD, "spec.containers.0.resources", KeyError), id="container-without-resources"),
    pytest.param(_set(NODE, "status", KeyError), id="node-without-status"),
    pytest.param(_set(POD, "metadata.ownerReferences", [{"kind": 1}]), id="garbage-owner-reference"),
])
def test_bad_input_partial_kubernetes_object_is_tolerated(partial: dict[str, Any], figures: Figures) -> None:
    # GIVEN a partial but well-typed object (a pod not yet scheduled, a node without status, ...)
    figures.bad_input("kubernetes object partial")
    # WHEN the cluster state is built
    state = cluster_state_from_objects([partial, NODE if partial["kind"] == "Pod" else POD], cluster="c", observed_at=AT)
    # THEN it is read without error (missing parts are simply unknown)
    assert state.cluster == "c"


# -- configuration ---------------------------------------------------------------------------------------
# (id, document, field path, what is allowed)
BAD_CONFIGS: list[tuple[str, str, str, str]] = [
    ("below-minimum", "lifecycle: {resolve_after_missed_scans: 0}", "lifecycle.resolve_after_missed_scans", "greater than or equal to 1"),
    ("bad-url-scheme", "delivery: {slack: {base_url: 'ftp://x'}}", "delivery.slack.base_url", "^https?://"),
    ("unknown-key", "lifecycl: {}", "lifecycl", "Extra inputs are not permitted"),
    ("empty-name", "clusters: [{name: ''}]", "clusters.0.name", "at least 1 character"),
    ("window-too-short", "scan: {window_s: -5}", "scan.window_s", "greater than or equal to 600"),
    ("bad-jira-key", "delivery: {jira: {default_project: lower}}", "delivery.jira.default_project", "[A-Z]"),
    ("unknown-auth-kind", "clusters: [{name: a, prometheus: {url: 'http://x', auth: {kind: magic}}}]",
     "clusters.0.prometheus.auth.kind", "'bearer'"),
    ("not-a-decimal", "lifecycle: {worse_share: abc}", "lifecycle.worse_share", "valid decimal"),
    ("not-yaml", "a: [", "cfg.yaml", "not valid YAML"),
    ("not-a-mapping", "- 1", "cfg.yaml", "must be a mapping"),
    ("huge-number-means-never", "lifecycle: {ticket_usd_per_day: 1e999999999}", "lifecycle.ticket_usd_per_day",
     "out of range"),
    ("threshold-beyond-bound", "lifecycle: {ticket_usd_per_day: 2000000}", "lifecycle.ticket_usd_per_day",
     "less than or equal to 1000000"),
    ("infinite-float", "lifecycle: {worse_share: .inf}", "lifecycle.worse_share", "out of range"),
    ("nesting-bomb", "a: " + "[" * 50_000 + "]" * 50_000, "cfg.yaml", "nested more than"),
    ("deep-mapping", "a: " + "{b: " * 40 + "1" + "}" * 40, "cfg.yaml", "nested more than"),
    ("billion-laughs", "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)),
     "cfg.yaml", "more than 100,000 values"),
    ("size-bomb", "a: '" + "x" * (1 << 20) + "'", "cfg.yaml", "a configuration document is at most"),
]


@pytest.mark.parametrize(("doc", "path", "allowed"), [pytest.param(d, p, a, id=i) for i, d, p, a in BAD_CONFIGS])
def test_bad_input_invalid_config_names_field_path_and_what_is_allowed(doc: str, path: str, allowed: str,
                                                                       figures: Figures) -> None:
    # GIVEN an invalid configuration document
    figures.bad_input("configuration invalid")
    # WHEN parsed / THEN ConfigError names the field path and what is allowed
    with pytest.raises(ConfigError) as err:
        parse_config(doc, source="cfg.yaml")
    message = str(err.value)
    assert message.startswith("cfg.yaml: ")
    assert path in message and allowed in message


# -- queue messages through the real handlers ------------------------------------------------------------
def _bad_bodies(good: str) -> list[tuple[str, str]]:
    data = json.loads(good)
    required = next(k for k in data if k != "schema_version")
    wrong_type = dict(data)
    key = next(k for k in ("scheduled_time", "finding", "action") if k in data)
    wrong_type[key] = "yesterday" if key != "finding" else "not a finding"
    return [
        ("empty-body", ""),
        ("not-json", "{not json"),
        ("json-array", "[]"),
        ("json-null", "null"),
        ("future-schema-version", json.dumps({**data, "schema_version": 2})),
        (f"missing-{required}", json.dumps({k: v for k, v in data.items() if k != required})),
        (f"wrong-type-{key}", json.dumps(wrong_type)),
    ]


@pytest.fixture
def dead_letter_queue(aws: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, str]]:
    """A moto DLQ named by DEAD_LETTER_QUEUE_URL, and fresh pipeline clients pointed at moto."""
    pipeline.reset()
    sqs = boto3.client("sqs")
    url = sqs.create_queue(QueueName="hardening-dlq")["QueueUrl"]
    monkeypatch.setenv("DEAD_LETTER_QUEUE_URL", url)
    yield sqs, url
    pipeline.reset()


def _dead_letters(sqs: Any, url: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]).get("Messages", [])
        if not got:
            return out
        out += got
        for m in got:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


def _roots(monkeypatch: pytest.MonkeyPatch, slack: AuditedSlack, jira: FakeJira) -> dict[str, MemoryQueue]:
    out = {"scan": MemoryQueue(), "price": MemoryQueue(), "alerts": MemoryQueue(), "tickets": MemoryQueue()}
    store = SqliteFindingStore(":memory:")
    cfg = GpuWasteConfig()
    monkeypatch.setattr(scan_root, "scan", lambda request: out["scan"].send([request]))
    monkeypatch.setattr(price_root, "pricing_service", lambda: PriceService(price_book=local.price_book(cfg), queue=out["price"]))
    monkeypatch.setattr(dedupe_root, "lifecycle_service", lambda: LifecycleService(
        store=store, alerts=out["alerts"], tickets=out["tickets"], settings=LifecycleSettings(), clock=DayClock(AT)))
    delivery = DeliverySettings(slack=SlackSettings(base_url=slack.url, rate_limit_retries=0, server_error_retries=0),
                                jira=JiraSettings(base_url=jira.url, email=jira.email, default_project="OPS"))
    notifier = SlackNotifier.from_settings(delivery.slack, token=slack.token, default_channel="#gpu-waste", sleep=lambda s: None)
    monkeypatch.setattr(notify_root, "notify_service", lambda: NotifyService(notifier=notifier, store=None, settings=delivery,
                                                                            now=lambda: AT))
    sink = JiraTicketSink.from_settings(delivery.jira, api_token=str(jira.api_token))
    monkeypatch.setattr(tickets_root, "ticket_service", lambda: TicketService(sink=sink, store=None, settings=delivery,
                                                                             now=lambda: AT))
    return out


HANDLER_CASES = [  # (function, sample event with good bodies, queue the good record lands in)
    ("scan_gpu_waste", "sqs_scan_request", "scan"),
    ("price_findings", "sqs_findings", "price"),
    ("dedupe_findings", "sqs_priced", "alerts"),
    ("notify_slack", "sqs_alerts", None),
    ("create_tickets", "sqs_tickets", None),
]


@pytest.mark.integration
@pytest.mark.parametrize(("function", "event_name", "lands"), HANDLER_CASES)
def test_bad_input_schema_invalid_messages_are_dead_lettered_at_once_with_the_reason(
        function: str, event_name: str, lands: str | None, dead_letter_queue: tuple[Any, str],
        monkeypatch: pytest.MonkeyPatch, audited_slack: AuditedSlack, jira_api: FakeJira, figures: Figures) -> None:
    # GIVEN a batch of seven malformed bodies of this function's message type, then its good sample record
    sqs, url = dead_letter_queue
    outs = _roots(monkeypatch, audited_slack, jira_api)
    good = load_event(event_name)["Records"][0]["body"]
    bad = _bad_bodies(good)
    event = {"Records": [sqs_record(body, message_id=f"bad-{i}") for i, (_, body) in enumerate(bad)]
             + [sqs_record(good, message_id="good")]}
    figures.bad_input("queue message invalid", len(bad))
    # WHEN the real handler runs
    result = load_handler(function).lambda_handler(event, FakeLambdaContext())
    # THEN no record is left for redelivery (no crash loop), each bad body is in the DLQ with a reason,
    # and the good record was processed
    assert result["batchItemFailures"] == []
    letters = _dead_letters(sqs, url)
    assert sorted(m["MessageAttributes"]["source_message_id"]["StringValue"] for m in letters) == \
        sorted(f"bad-{i}" for i in range(len(bad)))
    for m in letters:
        reason = m["MessageAttributes"]["error_reason"]["StringValue"]
        assert reason.strip() not in ("", "-") and m["MessageAttributes"]["error_type"]["StringValue"]
    if lands is not None:
        assert len(outs[lands]) >= 1
    elif function == "notify_slack":
        assert audited_slack.accepted
    else:
        assert jira_api.issues


# -- the CLI ---------------------------------------------------------------------------------------------
def _truncated_gzip(tmp_path: Path) -> Path:
    path = write_recording(generate_fleet(SPEC), tmp_path / "gz")
    data = (path / "telemetry.om.gz").read_bytes()
    (path / "telemetry.om.gz").write_bytes(data[: len(data) // 2])
    return path


CLI_INPUTS = [
    ("malformed-line", lambda p: _write(p / "bad.prom", GOOD + 'DCGM_FI_DEV_GPU_UTIL{gpu="0" 5 1700000000000\n'), "bad.prom:2:"),
    ("non-utf8-name", lambda p: _write(p / "bad.prom", GOOD.encode() + b"DCGM_\xff 1 1700000060000\n"), "bad.prom:2:"),
    ("openmetrics-no-eof", lambda p: _write(p / "bad.om", "# TYPE x gauge\n# UNIT x s\nx 1 1700000000\n"), "bad.om:"),
    ("truncated-gzip", _truncated_gzip, "corrupt gzip file"),
    ("gzip-of-nul-bytes", lambda p: _gzip(p, b"\x00" * (8 << 20)), "NUL byte at offset 0"),
    ("gzip-bomb", lambda p: _gzip(p, (GOOD * 260_000).encode()), "GPUWASTE_RECORDING_MAX_MB",
     {"GPUWASTE_RECORDING_MAX_MB": "8"}),
    ("endless-line", lambda p: _gzip(p, GOOD.encode() + b"# " + b"x" * (3 << 20) + b"\n"), "GPUWASTE_RECORDING_MAX_LINE_KB"),
    ("non-utf8-cluster-json", lambda p: _with_cluster(p, b"\xff\xfe{\"items\": []}"), "not UTF-8 text"),
    ("deep-cluster-json", lambda p: _with_cluster(p, b"[" * 100_000 + b"]" * 100_000), "nested too deeply"),
]


def _gzip(path: Path, data: bytes) -> Path:
    (path / "telemetry.om.gz").write_bytes(gzip.compress(data, compresslevel=1))
    return path


def _with_cluster(path: Path, data: bytes) -> Path:
    import shutil

    from gpuwaste.bootstrap.local import demo_recording

    shutil.copytree(demo_recording(), path / "rec")
    (path / "rec" / "cluster.json").write_bytes(data)
    return path / "rec"


def _write(path: Path, data: str | bytes) -> Path:
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return path


@pytest.mark.parametrize("command", ["scan", "run"])
@pytest.mark.parametrize(("make", "expect", "env"), [pytest.param(m, e, x[0] if x else {}, id=i)
                                                    for i, m, e, *x in CLI_INPUTS])
def test_bad_input_cli_exits_non_zero_with_file_and_line(tmp_path: Path, command: str, make: Any, expect: str,
                                                         env: dict[str, str], figures: Figures) -> None:
    # GIVEN a broken recording
    figures.bad_input("cli recording")
    path = make(tmp_path)
    args = [command, "--recording", str(path)] + (["--state", str(tmp_path / "s.db")] if command == "run" else [])
    # WHEN `gpuwaste scan|run --recording` reads it
    result = CliRunner().invoke(app, args, env={"COLUMNS": "300", **env})
    # THEN it exits 2 with where and what (for a limit: which, and how to raise it), and no traceback
    assert result.exit_code == 2, result.output
    assert expect in result.output
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)


def test_bad_input_gzip_helper_is_really_truncated(tmp_path: Path) -> None:
    # GIVEN the truncated-gzip corpus item
    path = _truncated_gzip(tmp_path)
    # WHEN decompressed directly / THEN it fails, so the CLI test above tests a corrupt file
    with pytest.raises(EOFError):
        gzip.decompress((path / "telemetry.om.gz").read_bytes())

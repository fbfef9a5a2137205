"""Benchmark helper: the pipeline after the scan — price → dedupe → notify — locally and against moto.

* **local chain**: N findings (10,000 by default) go through the same services the Lambda functions run
  (`PriceService`, `LifecycleService`, `NotifyService`) with the embedded pieces of the local command: the
  in-process queues between scan, price and dedupe handing over the messages themselves, as `gpuwaste run` does
  (`queue.memory.MemoryQueue(objects=True)`; the JSON hops are the moto run's), the SQLite store (`store.sqlite.SqliteFindingStore`, a file) with its durable
  alerts outbox table (`DeliveryQueue`), one transaction per scan as `gpuwaste run`, and the outbox delivered as
  `gpuwaste run` delivers it (`bootstrap.local.deliver_outbox`) by the Slack notifier posting to the local Slack fake.
  The alerts cross the durable outbox as JSON (read back from this run without parsing it again). Price records are handled
  in batches of 10, as the SQS event source mappings deliver them, and each batch's outputs are sent together
  (`queue.batching.SendBatch`, what `bootstrap.batch.process_batch` does). Wall time per stage (`timings_s`) and the
  process's CPU time (`cpu_s`: the wall time on a loaded machine is mostly waiting for a core).
* **AWS calls per finding**: the same chain with `queue.sqs.SqsQueue` and `store.dynamodb.DynamoDbFindingStore`
  against moto's server, with the Lambda event source mappings played by a loop that receives 10 messages
  per call and deletes them in one batch. Every request is counted at moto's server (`server_side_counts`), and
  every botocore call with a `before-call` event hook as a cross-check.
* **Slack messages per scan**: 1,000 findings over 20 owners (namespaces, each with its own channel) in one
  scan, counted at the Slack fake.

The findings are the bundled demo fleet's findings, cloned with distinct workloads, namespaces and channels.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from gpuwaste.models.findings import Finding
from gpuwaste.models.messages import FindingMessage, ScanCompleted, read_stage_body

SCAN_ID = "bench-scan-0001"
RECORD_BATCH = 10  # SQS event source mapping batch size of price_findings and dedupe_findings (template.yaml)
OWNERS = 20
SLACK_FINDINGS = 1000


class FixedClock:
    """`ports.Clock` returning a fixed instant."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        """The fixed instant."""
        return self.at


def template_findings() -> tuple[list[Finding], datetime]:
    """The waste findings of the bundled demo fleet (unpriced) and its evaluation time."""
    from gpuwaste.bootstrap.local import demo_recording, recording_sources, scan_service
    from gpuwaste.config import GpuWasteConfig

    config = GpuWasteConfig()
    sources = recording_sources(demo_recording(), config)
    assert sources.recording is not None
    at = sources.recording.end_time()
    report = scan_service(sources, config, priced=False).scan(at=at, scan_id="template")
    waste = [f for f in report.findings if f.kind.is_waste]
    return waste or list(report.findings), at


def synth_messages(n: int, *, owners: int = OWNERS, cluster: str = "bench") -> tuple[list[FindingMessage], datetime]:
    """`n` distinct findings of one scan, spread round-robin over `owners` namespaces with their own channels."""
    templates, at = template_findings()
    out = []
    for i in range(n):
        t = templates[i % len(templates)]
        team = f"team-{i % owners:02d}"
        subject = t.subject.model_copy(update={
            "cluster": cluster, "namespace": team, "workload_name": f"{t.subject.workload_name or 'w'}-{i:05d}",
            "pod": f"{t.subject.pod or 'p'}-{i:05d}", "labels": {}, "annotations": {}, "namespace_labels": {"team": team},
            "namespace_annotations": {"gpuwaste.io/team": team, "gpuwaste.io/slack-channel": f"#{team}-gpu"},
        })
        finding = t.model_copy(update={"subject": subject, "cost": None, "scope_key": t.scope_key and f"{t.scope_key}-{i}"})
        out.append(FindingMessage(scan_id=SCAN_ID, scan_seq=i, scan_total=n, finding=finding))
    return out, at


@contextlib.contextmanager
def fake_slack() -> Iterator[Any]:
    """The local Slack fake, with TCP_NODELAY so small responses are not held back by delayed ACKs."""
    from tests.servers.slack_api import FakeSlack

    slack = FakeSlack().start()
    slack._httpd.RequestHandlerClass.disable_nagle_algorithm = True  # type: ignore[union-attr]
    try:
        yield slack
    finally:
        slack.stop()


def slack_notifier(slack: Any) -> Any:
    """The product's Slack notifier pointed at the fake."""
    from gpuwaste.models.settings import SlackSettings
    from gpuwaste.sinks.slack import SlackNotifier
    from tests.servers.slack_api import DEFAULT_TOKEN

    return SlackNotifier.from_settings(SlackSettings(base_url=slack.url), token=DEFAULT_TOKEN,
                                       default_channel="#gpu-waste")


@dataclass
class Ports:
    """The queues and the store of one chain run (memory + SQLite, or SQS + DynamoDB)."""

    findings: Any
    priced: Any
    alerts: Any
    store: Any
    receive: Callable[[Any], list[str]]


def next_scan(messages: list[FindingMessage], at: datetime, seq: int) -> tuple[list[FindingMessage], datetime]:
    """The same findings seen again by the scan `seq` periods (10 min) later."""
    later = at + timedelta(minutes=10 * seq)
    scan_id = f"{SCAN_ID[:-4]}{seq + 1:04d}"
    return [m.model_copy(update={"scan_id": scan_id, "finding": m.finding.model_copy(update={"observed_at": later})}) for m in messages], later


def _read(body: Any) -> list[Any]:
    """The messages of one received item: a JSON body (SQS, packed or single) or a message the in-process queue kept."""
    return read_stage_body(body) if isinstance(body, str | bytes) else [body]


def run_chain(messages: list[FindingMessage], at: datetime, ports: Ports, notifier: Any, *,
              dedupe_batch: int = RECORD_BATCH, outbox: bool = True) -> dict[str, Any]:
    """Send the findings and the scan completion through price → dedupe → notify; return timings and counts.

    `dedupe_batch`: records per dedupe batch — 10 as the SQS event source mapping delivers them, or the whole scan
    as `gpuwaste run` handles it (one SQLite transaction per scan). `outbox`: False as in `gpuwaste run`, whose alerts
    queue is a table of the same SQLite state (decisions and queued alerts commit together)."""
    from gpuwaste.models.settings import DeliverySettings, LifecycleSettings
    from gpuwaste.pricing.catalog import PriceBook
    from gpuwaste.queue.batching import DeferredQueue, SendBatch
    from gpuwaste.services.lifecycle import LifecycleService
    from gpuwaste.services.notify import NotifyService
    from gpuwaste.services.price import PriceService

    timings: dict[str, float] = {}
    cpu: dict[str, float] = {}  # CPU seconds of this process (the Slack fake's thread included): less load-dependent
    t, c = time.perf_counter(), time.process_time()
    ports.findings.send_findings(messages)
    ports.findings.send_scan_completed(ScanCompleted(scan_id=messages[0].scan_id if messages else SCAN_ID, cluster=messages[0].finding.subject.cluster if messages else "bench",
                                                     scheduled_time=at, fingerprints=tuple(m.finding.fingerprint for m in messages)))
    timings["enqueue"] = time.perf_counter() - t
    cpu["enqueue"] = time.process_time() - c

    # the Lambda functions' batch processing sends a whole record batch's outputs together
    # (`bootstrap.batch.process_batch` + `queue.batching`); played here batch by batch
    sends = SendBatch()
    failed_records = 0

    def batches(bodies: list[str], size: int = RECORD_BATCH) -> Iterator[list[str]]:
        for i in range(0, len(bodies), size):
            yield bodies[i:i + size]

    t, c = time.perf_counter(), time.process_time()
    price = PriceService(price_book=PriceBook.bundled(), queue=DeferredQueue(ports.priced, sends))
    for group in batches(ports.receive(ports.findings)):
        sends.begin()
        for i, body in enumerate(group):
            sends.set_record(str(i))
            for message in _read(body):  # a packed batch or a single message, as the Lambda reads it
                if isinstance(message, ScanCompleted):
                    price.forward_completed(message)
                else:
                    price.price_and_forward(message)
        failed_records += len(sends.flush())
    timings["price"] = time.perf_counter() - t
    cpu["price"] = time.process_time() - c

    t, c = time.perf_counter(), time.process_time()
    lifecycle = LifecycleService(store=ports.store, alerts=DeferredQueue(ports.alerts, sends), tickets=None, settings=LifecycleSettings(),
                                 clock=FixedClock(at), outbox=outbox)
    actions: Counter[str] = Counter()
    unit = getattr(ports.store, "transaction", None)  # SQLite: one commit per record batch
    for group in batches(ports.receive(ports.priced), dedupe_batch):
        records = [_read(body) for body in group]
        with unit() if unit is not None else contextlib.nullcontext():
            # as dedupe_findings' bootstrap: one LifecycleBatch per record batch (one batch read, outboxes cleared
            # in one write once the batch's sends are out)
            batch = lifecycle.begin([m.finding.fingerprint for ms in records for m in ms if isinstance(m, FindingMessage)])
            sends.begin()
            for i, ms in enumerate(records):
                sends.set_record(str(i))
                for m in ms:
                    out = lifecycle.handle(m, batch)
                    for a in out.alerts:
                        actions[a.action.value] += 1
            failed_records += len(sends.flush())
            batch.close()
    timings["dedupe"] = time.perf_counter() - t
    cpu["dedupe"] = time.process_time() - c

    t, c = time.perf_counter(), time.process_time()
    notify = NotifyService(notifier=notifier, store=ports.store, settings=DeliverySettings(), now=lambda: at)
    if hasattr(ports.alerts, "pending"):
        # the state's durable outbox, delivered as `gpuwaste run` delivers it (`bootstrap.local.deliver_outbox`)
        from gpuwaste.bootstrap.local import deliver_outbox

        reports = []

        def stage(alerts: Any, store: Any, now: datetime, again: Any) -> Any:
            reports.append(notify.plan(alerts, redelivered=again).deliver_all())
            return reports[-1].failed

        deliver_outbox(ports.alerts, stage, ports.store, at)
        report = reports[0]
    else:
        report = notify.plan_bodies(ports.receive(ports.alerts)).deliver_all()
    timings["notify"] = time.perf_counter() - t
    cpu["notify"] = time.process_time() - c
    timings["total"] = sum(timings.values())
    cpu["total"] = sum(cpu.values())
    return {"findings": len(messages), "alerts": dict(actions), "records_failed": failed_records, "posted": len(report.posted), "failed": len(report.failed),
            "skipped": len(report.skipped), "timings_s": timings, "cpu_s": cpu,
            "findings_per_s": len(messages) / timings["total"] if timings["total"] else None}


def local_chain(n: int, workdir: Path) -> dict[str, Any]:
    """N findings through the embedded chain (memory queues, SQLite file store, Slack fake)."""
    from gpuwaste.queue.memory import MemoryQueue
    from gpuwaste.store.sqlite import SqliteFindingStore

    messages, at = synth_messages(n)
    db = workdir / "chain.sqlite"
    db.unlink(missing_ok=True)
    store = SqliteFindingStore(db)
    with fake_slack() as slack:
        alerts = store.delivery_queue("alerts")  # as `gpuwaste run`: the durable outbox table of the state

        def receive(q: Any) -> list[Any]:
            return list(q.drain_messages())

        # as `gpuwaste run` (`bootstrap.local.run_chain`): the stages of one process hand each other the messages
        ports = Ports(MemoryQueue("findings", objects=True), MemoryQueue("priced", objects=True), alerts, store, receive=receive)
        # as `gpuwaste run`: the scan's priced findings handled together, one SQLite transaction, no record outbox
        result = run_chain(messages, at, ports, slack_notifier(slack), dedupe_batch=n + 1, outbox=False)
        result["slack_posts"] = len(slack.calls_to("chat.postMessage"))
    store.close()
    db.unlink(missing_ok=True)
    return result


def slack_per_scan(n: int = SLACK_FINDINGS, owners: int = OWNERS) -> dict[str, Any]:
    """Slack messages for one scan of `n` new findings spread over `owners` owners (embedded chain)."""
    from gpuwaste.queue.memory import MemoryQueue
    from gpuwaste.store.sqlite import SqliteFindingStore

    messages, at = synth_messages(n, owners=owners)
    store = SqliteFindingStore(":memory:")
    with fake_slack() as slack:
        ports = Ports(MemoryQueue("findings", pack=True), MemoryQueue("priced", pack=True), MemoryQueue("alerts", pack=True), store,
                      receive=lambda q: q.drain())
        run_chain(messages, at, ports, slack_notifier(slack))
        posts = slack.calls_to("chat.postMessage")
    channels = Counter(str(p.get("channel")) for p in posts)
    return {"findings": n, "owners": owners, "messages": len(posts), "channels": len(channels),
            "max_messages_per_channel": max(channels.values()) if channels else 0, "target_max": owners + 1}


# -- moto ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def server_side_counts(counts: Counter[str]) -> Iterator[None]:
    """Count every request moto's server receives, by service and operation, at the server (its WSGI application):
    what reached AWS, not what our code or its SDK says it sent. SQS and DynamoDB speak the JSON protocol: the
    operation is the `X-Amz-Target` header (`AmazonSQS.SendMessageBatch`, `DynamoDB_20120810.PutItem`)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    original = DomainDispatcherApplication.__call__
    services = {"AmazonSQS": "sqs", "DynamoDB_20120810": "dynamodb"}

    def counting(self: Any, environ: dict[str, Any], start_response: Any) -> Any:
        target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
        prefix, _, op = target.partition(".")
        counts[f"{services.get(prefix, prefix or 'other')}.{op or environ.get('PATH_INFO', '')}"] += 1
        return original(self, environ, start_response)

    DomainDispatcherApplication.__call__ = counting  # type: ignore[method-assign]
    try:
        yield
    finally:
        DomainDispatcherApplication.__call__ = original  # type: ignore[method-assign]


def aws_calls(n: int) -> dict[str, Any]:
    """SQS and DynamoDB calls per finding for one scan of `n` new findings, against moto's server.

    Calls made by our code (SendMessageBatch, GetItem, PutItem, Query) are counted apart from the ones
    the Lambda service makes for an SQS event source mapping (ReceiveMessage, DeleteMessageBatch), which
    are played here by a receive-10 / delete-batch loop.
    """
    import boto3

    from gpuwaste.queue.sqs import SqsQueue
    from gpuwaste.store.dynamodb import DynamoDbFindingStore
    from tests.servers.moto_server import MotoServer

    messages, at = synth_messages(n)
    counts: Counter[str] = Counter()  # at the SDK (botocore before-call): the cross-check
    at_server: Counter[str] = Counter()  # at moto's server: the figures reported
    invocations: Counter[str] = Counter()  # Lambda invocations (non-empty receives) per queue, both scans
    esm_calls = {"ReceiveMessage", "DeleteMessageBatch", "DeleteMessage"}

    def count(event_name: str, **_: Any) -> None:
        # event_name: before-call.<service>.<Operation>
        _, service, op = event_name.split(".", 2)
        counts[f"{service}.{op}"] += 1

    with MotoServer() as moto:
        env = moto.env()
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            session = boto3.session.Session()
            sqs, ddb = session.client("sqs"), session.client("dynamodb")
            urls = {q: sqs.create_queue(QueueName=f"bench-{q}")["QueueUrl"] for q in ("findings", "priced", "alerts")}
            from bench.pipeline_scale import Capacity, create_table, projects_all

            capacity = Capacity(create_table(ddb, "bench-findings"), projects_all())  # template.yaml's table and indexes
            ddb.meta.events.register("before-parameter-build.dynamodb.*", capacity.before_call)
            ddb.meta.events.register("after-call.dynamodb.*", capacity.after_call)
            for client in (sqs, ddb):
                client.meta.events.register("before-call.*.*", count)

            names = {url: name for name, url in urls.items()}

            def receive(queue: SqsQueue) -> list[str]:
                bodies: list[str] = []
                while True:
                    got = sqs.receive_message(QueueUrl=queue.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
                    if not got:
                        return bodies
                    bodies.extend(m["Body"] for m in got)
                    invocations[names[queue.queue_url]] += 1  # the event source mapping invokes the function per batch
                    sqs.delete_message_batch(QueueUrl=queue.queue_url,
                                             Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)])

            ports = Ports(SqsQueue(client=sqs, queue_url=urls["findings"]), SqsQueue(client=sqs, queue_url=urls["priced"]),
                          SqsQueue(client=sqs, queue_url=urls["alerts"]), DynamoDbFindingStore(client=ddb, table_name="bench-findings"),
                          receive=receive)
            with fake_slack() as slack, server_side_counts(at_server):
                result = run_chain(messages, at, ports, slack_notifier(slack))
                first_counts, first_server = Counter(counts), Counter(at_server)
                first_units = Counter(capacity.units)
                counts.clear()
                at_server.clear()
                again, later = next_scan(messages, at, 1)
                steady = run_chain(again, later, ports, slack_notifier(slack))
                steady_counts, steady_server = Counter(counts), Counter(at_server)
                steady_units = capacity.units - first_units
            for client in (sqs, ddb):
                client.meta.events.unregister("before-call.*.*", count)
            items = ddb.scan(TableName="bench-findings").get("Items", [])
            # DynamoDB item size ≈ attribute names + values; the JSON text of the item is a close upper bound
            item_kb = sum(len(json.dumps(i)) for i in items) / len(items) / 1024 if items else 0.0
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    def units(u: Counter[str]) -> dict[str, float]:
        # DynamoDB capacity units per finding, table and indexes apart (bench/pipeline_scale.Capacity)
        return {f"{k}_units_per_finding": u.get(k, 0) / n for k in ("table_write", "index_write", "table_read", "index_read")}

    def per_finding(c: Counter[str], client: Counter[str]) -> dict[str, Any]:
        c = Counter({k: v for k, v in c.items() if k.startswith(("sqs.", "dynamodb."))})
        ours_sqs = sum(v for k, v in c.items() if k.startswith("sqs.") and k.split(".", 1)[1] not in esm_calls)
        esm_sqs = sum(v for k, v in c.items() if k.startswith("sqs.") and k.split(".", 1)[1] in esm_calls)
        return {"calls": dict(sorted(c.items())), "calls_counted_by_the_sdk": dict(sorted(client.items())),
                "counted_at": "moto's server (X-Amz-Target of every request it received)", "sqs_calls_per_finding": ours_sqs / n, "sqs_esm_calls_per_finding": esm_sqs / n,
                "dynamodb_calls_per_finding": sum(v for k, v in c.items() if k.startswith("dynamodb.")) / n,
                "dynamodb_writes_per_finding": (c.get("dynamodb.PutItem", 0) + c.get("dynamodb.UpdateItem", 0)) / n,
                "dynamodb_reads_per_finding": (c.get("dynamodb.GetItem", 0) + c.get("dynamodb.Query", 0)) / n}

    # first scan: every finding is new and alerted; steady: the same findings seen again by the next scan
    return {"findings": n, "chain": result, "item_kb": item_kb,
            # findings per price/dedupe invocation (packed messages: many per record), for the projection
            "findings_per_invocation": {q: 2 * n / k for q, k in invocations.items() if k},
            **per_finding(first_server, first_counts), **units(first_units),
            "steady": {**per_finding(steady_server, steady_counts), **units(steady_units), "chain": steady}}


def run_all(*, findings: int, quick: bool, workdir: Path) -> dict[str, Any]:
    """Local chain throughput, AWS calls per finding and Slack messages per scan."""
    out: dict[str, Any] = {}
    for name, fn in (("local", lambda: local_chain(findings, workdir)),
                     ("aws", lambda: aws_calls(20 if quick else 500)),
                     ("slack", lambda: slack_per_scan(60 if quick else SLACK_FINDINGS))):
        try:
            out[name] = fn()
        except Exception as exc:  # a missing or broken stage is reported, not fatal to the benchmark
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def summary_lines(chain: dict[str, Any]) -> str:
    """Human-readable lines for the terminal."""
    lines = []
    loc = chain.get("local", {})
    if "error" in loc:
        lines.append(f"local chain: not measured ({loc['error']})")
    else:
        t = loc["timings_s"]
        lines.append(f"local chain: {loc['findings']:,} findings in {t['total']:.1f} s ({loc['findings_per_s']:,.0f}/s): "
                     f"price {t['price']:.1f} s, dedupe {t['dedupe']:.1f} s, notify {t['notify']:.1f} s; "
                     f"{loc['slack_posts']} Slack posts")
    aws = chain.get("aws", {})
    if "error" in aws:
        lines.append(f"AWS calls: not measured ({aws['error']})")
    else:
        lines.append(f"AWS calls per finding ({aws['findings']} findings, moto): SQS {aws['sqs_calls_per_finding']:.2f} by us "
                     f"+ {aws['sqs_esm_calls_per_finding']:.2f} by the event source mappings; DynamoDB {aws['dynamodb_calls_per_finding']:.2f}")
    sl = chain.get("slack", {})
    if "error" in sl:
        lines.append(f"Slack: not measured ({sl['error']})")
    else:
        lines.append(f"Slack: {sl['messages']} messages for {sl['findings']:,} findings over {sl['owners']} owners (target ≤ {sl['target_max']})")
    return "\n".join(lines)


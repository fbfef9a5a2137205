"""The serverless pipeline against moto's server: the template's queues (with their redrive policies) and
table, the config in SSM, a secret in Secrets Manager, and the real handlers. Lambda's SQS event source
mapping is played by `pump`: receive up to 10, invoke, delete what succeeded, make failures visible again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from gpuwaste.bootstrap import dedupe as dedupe_root
from gpuwaste.bootstrap import dispatch as dispatch_root
from gpuwaste.bootstrap import local, pipeline
from gpuwaste.bootstrap import price as price_root
from gpuwaste.bootstrap import scan as scan_root
from gpuwaste.errors import PermanentError
from gpuwaste.models.lifecycle import FindingState
from gpuwaste.models.messages import (
    COMPLETION_PART_BYTES,
    AlertAction,
    AlertMessage,
    ScanCompleted,
    ScanRequest,
    read_alert_body,
    read_stage_body,
)
from gpuwaste.models.settings import ClusterConfig
from gpuwaste.store.dynamodb import DynamoDbFindingStore
from tests.aws_resources import Stack, create_stack
from tests.lambda_events import FakeLambdaContext, load_event, load_handler
from tests.sqs_limit import SqsLimit, enforce_sqs_limit

pytestmark = pytest.mark.integration
CONFIG_PARAMETER = "/gpuwaste/config"
DEMO_END = datetime(2024, 1, 1, 1, 20, tzinfo=UTC)
CONSUMERS = {  # queue → (function folder, its DLQ), as wired in template.yaml
    "ScanRequestsQueue": ("scan_gpu_waste", "ScanRequestsDlq"),
    "FindingsQueue": ("price_findings", "FindingsDlq"),
    "PricedQueue": ("dedupe_findings", "PricedDlq"),
}


def reset_roots() -> None:
    pipeline.reset()
    for cached in (dispatch_root.dispatch_service, scan_root.scan_service, price_root.pricing_service,
                   dedupe_root.lifecycle_service):
        cached.cache_clear()


@dataclass
class Pipeline:
    stack: Stack
    sqs: Any
    ddb: Any
    ssm: Any
    monkeypatch: pytest.MonkeyPatch
    limit: SqsLimit

    def url(self, queue: str) -> str:
        return self.stack.queue_urls[queue]

    def configure(self, recording: Path) -> None:
        """Put the config document in SSM: one cluster "demo" scanned from `recording`."""
        self.ssm.put_parameter(Name=CONFIG_PARAMETER, Type="String", Overwrite=True,
                               Value=f"clusters:\n  - name: demo\n    recording: {recording}\n")
        reset_roots()

    def tick(self, at: datetime) -> dict[str, Any]:
        """The schedule fires: dispatch_scans on events/scheduled_scan.json with its time set to `at`."""
        event = {**load_event("scheduled_scan"), "time": at.strftime("%Y-%m-%dT%H:%M:%SZ")}
        return load_handler("dispatch_scans").lambda_handler(event, FakeLambdaContext())

    def pump(self, queue: str, *, dead_letter_env: bool = True, max_rounds: int = 20) -> list[dict[str, Any]]:
        """Deliver `queue` to its consumer until empty; returns each invocation's batch response."""
        function, dlq = CONSUMERS[queue]
        if dead_letter_env:
            self.monkeypatch.setenv("DEAD_LETTER_QUEUE_URL", self.url(dlq))
        else:
            self.monkeypatch.delenv("DEAD_LETTER_QUEUE_URL", raising=False)
        handler = load_handler(function)
        responses = []
        for _ in range(max_rounds):
            got = self.sqs.receive_message(QueueUrl=self.url(queue), MaxNumberOfMessages=10, WaitTimeSeconds=0,
                                           AttributeNames=["All"]).get("Messages", [])
            if not got:
                break
            event = {"Records": [self.record(queue, m) for m in got]}
            response = handler.lambda_handler(event, FakeLambdaContext())
            responses.append(response)
            failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
            done = [m for m in got if m["MessageId"] not in failed]
            if done:
                self.sqs.delete_message_batch(QueueUrl=self.url(queue), Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)])
            for m in got:
                if m["MessageId"] in failed:  # the visibility timeout "expires" now, as it would later
                    self.sqs.change_message_visibility(QueueUrl=self.url(queue), ReceiptHandle=m["ReceiptHandle"],
                                                       VisibilityTimeout=0)
        return responses

    def record(self, queue: str, m: dict[str, Any]) -> dict[str, Any]:
        return {"messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"], "body": m["Body"],
                "attributes": m.get("Attributes", {}), "messageAttributes": {}, "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs", "eventSourceARN": self.stack.queue_arns[queue], "awsRegion": "us-east-1"}

    def drain(self, queue: str) -> list[dict[str, Any]]:
        """Every message on `queue` (received and deleted), with message attributes."""
        out: list[dict[str, Any]] = []
        while True:
            got = self.sqs.receive_message(QueueUrl=self.url(queue), MaxNumberOfMessages=10, WaitTimeSeconds=0,
                                           MessageAttributeNames=["All"]).get("Messages", [])
            if not got:
                return out
            out += got
            self.sqs.delete_message_batch(QueueUrl=self.url(queue), Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)])

    def alerts(self) -> list[AlertMessage]:
        return [a for m in self.drain("AlertsQueue") for a in read_alert_body(m["Body"])]

    def run_chain(self, at: datetime) -> None:
        self.tick(at)
        for queue in ("ScanRequestsQueue", "FindingsQueue", "PricedQueue"):
            self.pump(queue)


@pytest.fixture
def chain(aws: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Pipeline]:
    # every SQS client of the test and of the handlers refuses messages over 256 KiB, as SQS does (moto does not)
    boto3.setup_default_session()
    limit = enforce_sqs_limit(boto3.DEFAULT_SESSION)
    sqs, ddb, ssm = boto3.client("sqs"), boto3.client("dynamodb"), boto3.client("ssm")
    stack = create_stack(sqs, ddb)
    env = {"CONFIG_PARAMETER_NAME": CONFIG_PARAMETER, "FINDINGS_TABLE_NAME": stack.table_name,
           "SCAN_REQUESTS_QUEUE_URL": stack.queue_urls["ScanRequestsQueue"],
           "FINDINGS_QUEUE_URL": stack.queue_urls["FindingsQueue"], "PRICED_QUEUE_URL": stack.queue_urls["PricedQueue"],
           "ALERTS_QUEUE_URL": stack.queue_urls["AlertsQueue"], "TICKETS_QUEUE_URL": stack.queue_urls["TicketsQueue"],
           "POWERTOOLS_SERVICE_NAME": "gpuwaste", "POWERTOOLS_TRACE_DISABLED": "true"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CONFIG_FILE", raising=False)
    p = Pipeline(stack=stack, sqs=sqs, ddb=ddb, ssm=ssm, monkeypatch=monkeypatch, limit=limit)
    p.configure(local.demo_recording())
    yield p
    reset_roots()
    boto3.setup_default_session()  # a session without the hooks for whatever runs next


def test_pipeline_scheduled_event_reaches_the_alerts_queue(chain: Pipeline) -> None:
    # GIVEN the stack in moto and the demo cluster configured in SSM
    # WHEN the schedule fires and every queue is delivered to its function
    dispatched = chain.tick(DEMO_END)
    scan_responses = chain.pump("ScanRequestsQueue")
    chain.pump("FindingsQueue")
    chain.pump("PricedQueue")
    # THEN one scan ran; each of the 21 waste findings is alerted NEW once, priced; 2 tickets are requested
    assert dispatched["scan_requests"] == 1 and scan_responses == [{"batchItemFailures": []}]
    alerts = chain.alerts()
    assert len(alerts) == 21 and {a.action for a in alerts} == {AlertAction.NEW}
    top = max(alerts, key=lambda a: a.finding.usd_per_day or 0)
    assert top.finding.subject.workload_name == "llama-70b-vllm" and str(top.finding.usd_per_day) == "660.48"
    assert all(a.finding.observed_at == DEMO_END for a in alerts)  # the schedule's time, not the wall clock
    tickets = [AlertMessage.model_validate_json(m["Body"]) for m in chain.drain("TicketsQueue")]
    assert sorted(t.finding.subject.workload_name or "" for t in tickets) == ["eval-sweep", "llama-70b-vllm"]
    every = chain.ddb.scan(TableName=chain.stack.table_name)["Items"]
    items = [i for i in every if not i["fingerprint"]["S"].startswith(("coverage#", "ledger#"))]
    assert len(items) == 23 and all("expires_at" in i for i in items)  # 21 waste + 2 data quality
    # AND the scan's attribution coverage is kept for the daily summary: the day's index and the hour's tally (issue 21 §12)
    coverage = sorted(i["fingerprint"]["S"] for i in every if i["fingerprint"]["S"].startswith("coverage#"))
    assert coverage == [f"coverage#{DEMO_END:%Y-%m-%d}", f"coverage#{DEMO_END:%Y-%m-%dT%H}#demo"]
    # AND its allocation ledger likewise: the day's index and the hour's item (issue 24)
    ledger = sorted(i["fingerprint"]["S"] for i in every if i["fingerprint"]["S"].startswith("ledger#"))
    assert ledger == [f"ledger#{DEMO_END:%Y-%m-%d}", f"ledger#{DEMO_END:%Y-%m-%dT%H}#demo"]
    assert all("expires_at" in i for i in every)


def test_pipeline_same_waste_seen_by_two_scans_alerts_once(chain: Pipeline) -> None:
    # GIVEN two schedule ticks 10 minutes apart over the recording, and the second tick fired twice
    # WHEN each goes through the whole chain
    chain.run_chain(DEMO_END - timedelta(minutes=10))
    first = chain.alerts()
    chain.run_chain(DEMO_END)
    chain.run_chain(DEMO_END)
    later = chain.alerts()
    # THEN the waste already alerted by the first scan is not alerted again
    assert len(first) >= 12
    assert not {a.fingerprint for a in later} & {a.fingerprint for a in first}
    assert all(a.action is AlertAction.NEW for a in later)


def test_pipeline_redelivered_record_is_harmless(chain: Pipeline) -> None:
    # GIVEN one priced finding delivered to dedupe_findings
    record = load_event("sqs_priced")["Records"][0]
    handler = load_handler("dedupe_findings")
    # WHEN SQS delivers the same record again (the first ack was lost)
    first = handler.lambda_handler({"Records": [record]}, FakeLambdaContext())
    second = handler.lambda_handler({"Records": [record]}, FakeLambdaContext())
    # THEN both invocations succeed and exactly one alert was sent
    assert first == second == {"batchItemFailures": []}
    assert [a.action for a in chain.alerts()] == [AlertAction.NEW]


def test_pipeline_malformed_messages_go_to_the_dlq_with_their_reason(chain: Pipeline) -> None:
    # GIVEN a batch on the priced queue: not JSON, schema-invalid, an unknown schema_version, and one good finding
    good = load_event("sqs_priced")["Records"][0]["body"]
    bad = {"not-json": "{oops", "schema": json.dumps({"schema_version": 1, "scan_id": "s"}),
           "version": json.dumps({**json.loads(good), "schema_version": 2})}
    chain.sqs.send_message_batch(QueueUrl=chain.url("PricedQueue"), Entries=[
        {"Id": k, "MessageBody": v} for k, v in [*bad.items(), ("good", good)]])
    # WHEN dedupe_findings consumes the batch
    responses = chain.pump("PricedQueue")
    # THEN the batch reports no failure to retry, the three bad bodies are in the DLQ with the reason,
    # and the good finding was alerted
    assert responses == [{"batchItemFailures": []}]
    dead = chain.drain("PricedDlq")
    assert sorted(m["Body"] for m in dead) == sorted(bad.values())
    reasons = {m["Body"]: m["MessageAttributes"]["error_reason"]["StringValue"] for m in dead}
    assert "json" in reasons[bad["not-json"]].lower()
    assert "finding" in reasons[bad["schema"]] or "Field required" in reasons[bad["schema"]]
    assert "schema_version" in reasons[bad["version"]]
    assert all(m["MessageAttributes"]["error_type"]["StringValue"] == "ValidationError" for m in dead)
    assert [a.action for a in chain.alerts()] == [AlertAction.NEW]


def test_pipeline_failing_record_reaches_the_dlq_by_redrive(chain: Pipeline) -> None:
    # GIVEN no explicit dead-letter URL (the handler only reports the failure), a poison body and a good one
    good = load_event("sqs_findings")["Records"][0]["body"]
    chain.sqs.send_message_batch(QueueUrl=chain.url("FindingsQueue"), Entries=[
        {"Id": "bad", "MessageBody": "{oops"}, {"Id": "good", "MessageBody": good}])
    # WHEN price_findings consumes the queue until it is empty
    responses = chain.pump("FindingsQueue", dead_letter_env=False)
    # THEN the poison record failed in each batch response until SQS moved it to the DLQ after maxReceiveCount (3)
    assert sum(len(r["batchItemFailures"]) for r in responses) == 3
    assert [m["Body"] for m in chain.drain("FindingsDlq")] == ["{oops"]
    assert len(chain.drain("PricedQueue")) == 1  # the good record was priced exactly once


def _findings(n: int) -> list[dict[str, Any]]:
    """`n` distinct findings (other workloads) shaped as the scan sends them, from events/sqs_findings.json."""
    one = json.loads(load_event("sqs_findings")["Records"][0]["body"])
    out = []
    for i in range(n):
        finding = {**one["finding"], "subject": {**one["finding"]["subject"], "workload_name": f"w-{i}"}}
        finding.pop("fingerprint", None)
        out.append({**one, "scan_seq": i, "scan_total": n, "finding": finding})
    return out


def test_pipeline_a_bad_finding_in_a_packed_message_is_dead_lettered_alone(chain: Pipeline) -> None:
    # GIVEN one findings-queue message carrying four findings, the third without its subject, next to an old-style
    # single-finding message (sent before batching, still in flight)
    items = _findings(5)
    bad = {k: v for k, v in items[2]["finding"].items() if k != "subject"}
    batch = [items[0], items[1], {**items[2], "finding": bad}, items[3]]
    chain.sqs.send_message_batch(QueueUrl=chain.url("FindingsQueue"), Entries=[
        {"Id": "batch", "MessageBody": json.dumps({"schema_version": 1, "findings": batch})},
        {"Id": "single", "MessageBody": json.dumps(items[4])}])
    # WHEN price_findings consumes the queue
    responses = chain.pump("FindingsQueue")
    # THEN nothing is retried, the bad finding alone is in the DLQ with its reason, and its siblings and the single
    # message were priced once each (five findings in, four priced out, in fewer messages than findings)
    assert responses == [{"batchItemFailures": []}]
    dead = chain.drain("FindingsDlq")
    assert len(dead) == 1
    assert json.loads(dead[0]["Body"]) == batch[2]
    assert "subject" in dead[0]["MessageAttributes"]["error_reason"]["StringValue"]
    priced_bodies = chain.drain("PricedQueue")
    priced = [m for body in priced_bodies for m in read_stage_body(body["Body"])]
    assert sorted(m.finding.subject.workload_name for m in priced) == ["w-0", "w-1", "w-3", "w-4"]
    assert all(m.finding.cost is not None and m.finding.cost.priced for m in priced)
    assert len(priced_bodies) == 1  # packed: one message carries the four


def test_pipeline_packed_findings_are_applied_once_under_redelivery(chain: Pipeline) -> None:
    # GIVEN eight findings of one scan, priced into packed priced-queue messages
    items = _findings(8)
    chain.sqs.send_message(QueueUrl=chain.url("FindingsQueue"), MessageBody=json.dumps({"schema_version": 1, "findings": items}))
    chain.pump("FindingsQueue")
    packed = chain.drain("PricedQueue")
    assert 1 <= len(packed) < 8
    # WHEN dedupe_findings receives each of those messages twice (SQS at-least-once)
    for _ in range(2):
        for m in packed:
            chain.sqs.send_message(QueueUrl=chain.url("PricedQueue"), MessageBody=m["Body"])
    responses = chain.pump("PricedQueue")
    # THEN every finding was told once, the alerts themselves packed several to a message
    assert all(r == {"batchItemFailures": []} for r in responses)
    bodies = chain.drain("AlertsQueue")
    alerts = [a for m in bodies for a in read_alert_body(m["Body"])]
    assert sorted(a.finding.subject.workload_name for a in alerts) == [f"w-{i}" for i in range(8)]
    assert all(a.action is AlertAction.NEW for a in alerts)
    assert len(bodies) < len(alerts)


def test_packed_record_with_a_retryable_and_a_permanent_failure(chain: Pipeline) -> None:
    # GIVEN one packed findings-queue message of four findings, handled by a record handler that fails the second
    # for good (PermanentError) and the third for now (RetryableError)
    from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
    from aws_lambda_powertools.utilities.parser.types import Json

    from gpuwaste.bootstrap.batch import each_message, process_batch
    from gpuwaste.errors import PermanentError, RetryableError
    from gpuwaste.models.messages import StageBody

    class FindingRecord(SqsRecordModel):  # as price_findings declares it
        body: Json[StageBody]

    items = _findings(4)
    chain.sqs.send_message(QueueUrl=chain.url("FindingsQueue"), MessageBody=json.dumps({"schema_version": 1, "findings": items}))
    got = chain.sqs.receive_message(QueueUrl=chain.url("FindingsQueue"), MaxNumberOfMessages=10, AttributeNames=["All"])["Messages"]
    event = {"Records": [chain.record("FindingsQueue", m) for m in got]}
    chain.monkeypatch.setenv("DEAD_LETTER_QUEUE_URL", chain.url("FindingsDlq"))
    handled: list[str] = []

    def handle(message: Any) -> None:
        name = message.finding.subject.workload_name
        if name == "w-1":
            raise PermanentError("unknown cluster")
        if name == "w-2" and "w-2 failed" not in handled:
            handled.append("w-2 failed")
            raise RetryableError("throttled")
        handled.append(name)

    def invoke() -> dict[str, Any]:
        return process_batch(event, FakeLambdaContext(), model=FindingRecord,
                             record_handler=lambda record: each_message(record.body.findings, handle))

    # WHEN the record is processed, then redelivered (SQS, after the failure it reported)
    first = invoke()
    second = invoke()
    # THEN the first attempt handled the siblings and failed the record for the retryable one only; the permanent
    # one went to the DLQ alone with its reason — on each delivery of its record (a copy per attempt: the record
    # keeps no memory of it; a redrive of both is harmless) —; the redelivery succeeds
    assert first == {"batchItemFailures": [{"itemIdentifier": got[0]["MessageId"]}]}
    assert second == {"batchItemFailures": []}
    assert handled == ["w-0", "w-2 failed", "w-3", "w-0", "w-2", "w-3"]
    dead = chain.drain("FindingsDlq")
    assert [json.loads(m["Body"])["finding"]["subject"]["workload_name"] for m in dead] == ["w-1", "w-1"]
    assert all(m["MessageAttributes"]["error_reason"]["StringValue"] == "unknown cluster" for m in dead)


def test_pipeline_waste_that_disappears_is_resolved_after_three_scans(chain: Pipeline, tmp_path: Path) -> None:
    # GIVEN the demo waste alerted, then the cluster emptied (a recording with no GPU pods or telemetry)
    chain.run_chain(DEMO_END)
    alerted = {a.fingerprint: a for a in chain.alerts()}
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "cluster.json").write_text('{"kind": "List", "apiVersion": "v1", "items": []}')
    (empty / "telemetry.om").write_text("# EOF\n")
    (empty / "recording.json").write_text('{"cluster": "demo", "format": "openmetrics", "window_s": 4200}')
    chain.configure(empty)
    # WHEN two, then three later scans no longer see it
    for n in (1, 2):
        chain.run_chain(DEMO_END + n * timedelta(minutes=10))
    after_two = chain.alerts()
    chain.run_chain(DEMO_END + 3 * timedelta(minutes=10))
    resolved = chain.alerts()
    # THEN nothing is said after two misses; the third resolves every alerted finding, with its saving
    assert after_two == []
    assert {a.fingerprint for a in resolved} == set(alerted) and {a.action for a in resolved} == {AlertAction.RESOLVED}
    llama = next(a for a in resolved if a.finding.subject.workload_name == "llama-70b-vllm")
    assert llama.saved_usd_per_day == "660.48"
    states = {i["state"]["S"] for i in chain.ddb.scan(TableName=chain.stack.table_name)["Items"] if "state" in i}
    assert states == {FindingState.RESOLVED.value}


def test_scan_bootstrap_reads_prometheus_token_from_secrets_manager(chain: Pipeline) -> None:
    # GIVEN a bearer token stored in Secrets Manager and a cluster config that references it by ARN
    arn = boto3.client("secretsmanager").create_secret(Name="gpuwaste/prometheus", SecretString="s3cr3t-token")["ARN"]
    cluster = ClusterConfig.model_validate({"name": "prod", "prometheus": {
        "url": "https://prometheus.example/", "auth": {"kind": "bearer", "bearer_token_secret_arn": arn}}})
    # WHEN the scan's composition root resolves the secrets
    resolved = scan_root._with_secrets(cluster)
    # THEN the token is held as a SecretStr (never printed) and the ARN is kept
    token = resolved.prometheus.auth.bearer_token  # type: ignore[union-attr]
    assert token is not None and token.get_secret_value() == "s3cr3t-token" and "s3cr3t" not in repr(resolved)


def test_pipeline_a_completion_of_5000_fingerprints_crosses_sqs_in_parts_and_resolves_only_the_absent(
        chain: Pipeline) -> None:
    # GIVEN the demo scanned once (23 open records), and SQS's 256 KiB limit enforced at the client
    chain.run_chain(DEMO_END)
    chain.alerts()
    store = DynamoDbFindingStore(client=chain.ddb, table_name=chain.stack.table_name)
    open_before = store.open_fingerprints("demo")
    kept, missing = open_before[:-1], open_before[-1]
    # WHEN a later scan's completion names 5,000 fingerprints (≈ 335 KB as one message: over the limit) — every open
    # one but `missing` — and goes through the product's queue adapter, price_findings and dedupe_findings
    others = tuple(f"{i:064x}" for i in range(5000 - len(kept)))
    completion = ScanCompleted(scan_id="scan-big", cluster="demo", scheduled_time=DEMO_END + timedelta(minutes=10),
                               fingerprints=(*kept, *others))
    assert len(completion.model_dump_json().encode()) > 262_144
    pipeline.queue("findings_queue_url", pipeline.environment(pipeline.ScanEnvironment).findings_queue_url).send_scan_completed(completion)
    chain.pump("FindingsQueue")
    responses = chain.pump("PricedQueue")
    # THEN no message was refused (none over 262,144 bytes), it crossed as 2 parts, the dedupe batches all succeeded,
    # and exactly the one open record absent from every part counted a missed scan
    assert chain.limit.refused == 0 and 150_000 < chain.limit.largest <= COMPLETION_PART_BYTES < 262_144
    assert all(r == {"batchItemFailures": []} for r in responses)
    after = store.get_many(open_before)
    assert {fp for fp, r in after.items() if r.missed_scans == 1} == {missing}
    assert all(after[fp].missed_scans == 0 for fp in kept)


def test_pipeline_the_sqs_boundary_refuses_an_oversized_message_as_sqs_does(chain: Pipeline) -> None:
    # GIVEN the limit enforced at the client (the fake of real SQS the pipeline tests send through)
    body = "x" * 262_145
    # WHEN a message one byte over the limit is sent directly, and through the product's adapter
    with pytest.raises(ClientError) as refused:
        chain.sqs.send_message(QueueUrl=chain.url("PricedQueue"), MessageBody=body)
    adapter = pipeline.queue("priced_queue_url", pipeline.environment(pipeline.PriceEnvironment).priced_queue_url)
    outcome = adapter.send_each([ScanCompleted(scan_id="s", cluster="demo", scheduled_time=DEMO_END,
                                               unjudged=("n" * 262_200,))])
    # THEN SQS's own error shape comes back; the adapter refuses it itself (PermanentError), never reaching SQS
    assert refused.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert "Message must be shorter than 262144 bytes" in refused.value.response["Error"]["Message"]
    assert isinstance(outcome[0], PermanentError) and chain.limit.refused == 1


def _open_money(chain: Pipeline) -> dict[str, str]:
    """fingerprint → usd_per_day of every lifecycle record in the table (records only: they carry a state)."""
    return {i["fingerprint"]["S"]: i.get("usd_per_day", {}).get("N", "") for i in chain.ddb.scan(TableName=chain.stack.table_name)["Items"]
            if "state" in i and "fingerprint" in i}


def _empty_table(chain: Pipeline) -> None:
    table = chain.stack.table_name
    keys = [{"fingerprint": i["fingerprint"]} for i in chain.ddb.scan(TableName=table)["Items"]]
    for key in keys:
        chain.ddb.delete_item(TableName=table, Key=key)


def test_pipeline_a_cluster_scanned_as_four_shards_alerts_and_records_what_the_whole_scan_does(chain: Pipeline, tmp_path: Path) -> None:
    # GIVEN the demo cluster scanned whole through the pipeline
    chain.run_chain(DEMO_END)
    whole_alerts = sorted((a.fingerprint, a.action, str(a.finding.usd_per_day), a.finding.wasted_gpu_hours) for a in chain.alerts())
    whole_records = _open_money(chain)
    chain.drain("TicketsQueue")
    _empty_table(chain)
    # WHEN the same cluster is configured with 4 shards and the same tick runs again
    chain.ssm.put_parameter(Name=CONFIG_PARAMETER, Type="String", Overwrite=True,
                            Value=f"clusters:\n  - name: demo\n    recording: {local.demo_recording()}\n    scan_shards: 4\n")
    reset_roots()
    dispatched = chain.tick(DEMO_END)
    requests = [ScanRequest.model_validate_json(m["Body"]) for m in chain.sqs.receive_message(
        QueueUrl=chain.url("ScanRequestsQueue"), MaxNumberOfMessages=10, VisibilityTimeout=0).get("Messages", [])]
    chain.pump("ScanRequestsQueue")
    chain.pump("FindingsQueue")
    chain.pump("PricedQueue")
    # THEN four scan requests ran, and the alerts, their money and the records are the whole scan's
    assert dispatched["scan_requests"] == 4
    assert sorted((r.shard, r.shard_count) for r in requests) == [(k, 4) for k in range(4)] and len({r.scan_id for r in requests}) == 1
    sharded_alerts = sorted((a.fingerprint, a.action, str(a.finding.usd_per_day), a.finding.wasted_gpu_hours) for a in chain.alerts())
    assert whole_alerts and sharded_alerts == whole_alerts
    assert _open_money(chain) == whole_records
    # and when the waste is gone, all four shards' completions resolve it after three scans, as whole
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "cluster.json").write_text('{"kind": "List", "apiVersion": "v1", "items": []}')
    (empty / "telemetry.om").write_text("# EOF\n")
    (empty / "recording.json").write_text('{"cluster": "demo", "format": "openmetrics", "window_s": 4200}')
    chain.ssm.put_parameter(Name=CONFIG_PARAMETER, Type="String", Overwrite=True,
                            Value=f"clusters:\n  - name: demo\n    recording: {empty}\n    scan_shards: 4\n")
    reset_roots()
    for n in (1, 2, 3):
        chain.run_chain(DEMO_END + n * timedelta(minutes=10))
    resolved = chain.alerts()
    assert {a.fingerprint for a in resolved} == {fp for fp, action, _, _ in whole_alerts} and {a.action for a in resolved} == {AlertAction.RESOLVED}

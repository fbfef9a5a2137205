"""Fault injection for every external dependency, each followed by the one invariant.

Each test injects one kind of fault into one dependency (Prometheus, the Kubernetes API, the queues,
DynamoDB, Slack, Jira), runs scan → price → dedupe → notify/tickets through the harness's at-least-once
queues, and checks the behaviour the fault must get (retried, surfaced with a clear message,
dead-lettered with its reason, or routed to a fallback), then :func:`check_invariant`: every alert the
lifecycle produced was delivered exactly once or sits in a dead-letter queue with its reason.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from gpuwaste.bootstrap import local
from gpuwaste.config import GpuWasteConfig
from gpuwaste.fleet.generator import FleetSpec, generate_fleet, write_recording
from gpuwaste.models.findings import WasteKind
from gpuwaste.models.messages import FindingMessage
from gpuwaste.models.settings import KubernetesSettings, PrometheusSettings
from gpuwaste.sources.kubernetes import KubernetesClusterSource
from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource
from gpuwaste.store.dynamodb import DynamoDbFindingStore
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.aws_resources import create_stack
from tests.hardening.conftest import Figures
from tests.hardening.harness import (
    STAGE_ADAPTER,
    AuditedSlack,
    Chain,
    DayClock,
    PromProxy,
    attach_scanner,
    build_chain,
    check_invariant,
    findings_accounted,
)
from tests.servers.jira_api import FakeJira
from tests.servers.kube_api import KubeApiFactory, kube_status, write_kubeconfig
from tests.servers.ports import free_port
from tests.servers.prometheus import PrometheusFactory

pytestmark = pytest.mark.integration

SPEC = FleetSpec()
AT = SPEC.eval_time
CONFIG = GpuWasteConfig()
WINDOW = timedelta(seconds=SPEC.history_s - 600)
PLURALS = {"Pod": "pods", "Node": "nodes", "Namespace": "namespaces", "ReplicaSet": "replicasets",
           "Deployment": "deployments", "StatefulSet": "statefulsets", "DaemonSet": "daemonsets", "Job": "jobs",
           "CronJob": "cronjobs"}


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo fleet as an uncompressed recording (Prometheus backfills the .om file)."""
    return write_recording(generate_fleet(SPEC), tmp_path_factory.mktemp("hardening-demo") / "demo", compress=False)


@pytest.fixture
def store() -> Iterator[SqliteFindingStore]:
    s = SqliteFindingStore(":memory:")
    yield s
    s.close()


def chain_for(store: Any, slack: AuditedSlack, jira: FakeJira | None = None, **kw: Any) -> Chain:
    return build_chain(store=store, slack=slack, jira=jira, config=CONFIG, clock=DayClock(AT), now=lambda: AT, **kw)


def recorded(chain: Chain, demo_dir: Path) -> Chain:
    sources = local.recording_sources(demo_dir, CONFIG)
    attach_scanner(chain, cluster_source=sources.cluster, telemetry_source=sources.telemetry, config=CONFIG, window=WINDOW)
    return chain


def assert_invariant(chain: Chain, slack: AuditedSlack, figures: Figures, jira: FakeJira | None = None) -> None:
    report = check_invariant(chain, slack, jira)
    figures.add(report)
    assert report.ok, str(report)
    assert findings_accounted(chain) == []


# -- Prometheus -------------------------------------------------------------------------------------------
def prom_chain(store: Any, slack: AuditedSlack, demo_dir: Path, url: str, **prom: Any) -> Chain:
    chain = chain_for(store, slack)
    cluster = local.recording_sources(demo_dir, CONFIG).cluster
    source = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=url, **prom), cluster="demo",
                                                      scrape_interval_s=SPEC.step_s, backoff_s=0.0)
    attach_scanner(chain, cluster_source=cluster, telemetry_source=source, config=CONFIG, window=WINDOW)
    return chain


@pytest.fixture
def proxy(demo_dir: Path, prometheus_factory: PrometheusFactory) -> Iterator[PromProxy]:
    server = PromProxy(prometheus_factory(demo_dir / "telemetry.om").url).start()
    yield server
    server.stop()


def test_faults_prometheus_down_dead_letters_the_scan_with_the_reason(
        store: SqliteFindingStore, audited_slack: AuditedSlack, demo_dir: Path, figures: Figures) -> None:
    # GIVEN a Prometheus URL where nothing listens
    chain = prom_chain(store, audited_slack, demo_dir, f"http://127.0.0.1:{free_port()}", max_retries=0)
    chain.request_scan(AT, "scan-down")
    # WHEN the scan request is delivered until the redrive policy gives up
    chain.drain()
    figures.fault("prometheus down (connection refused)", sum(d.receives for d in chain.dlq))
    # THEN it was retried max_receive times, then dead-lettered saying it cannot connect; nothing was alerted
    (letter,) = chain.dlq
    assert letter.queue == "scan-requests" and letter.receives == 5
    assert "cannot connect to Prometheus" in letter.reason and letter.error_type == "SourceUnavailableError"
    assert audited_slack.accepted == []
    assert_invariant(chain, audited_slack, figures)


def test_faults_prometheus_slower_than_its_timeout_is_retried_then_delivered_once(
        store: SqliteFindingStore, audited_slack: AuditedSlack, demo_dir: Path, proxy: PromProxy,
        figures: Figures) -> None:
    # GIVEN a Prometheus that holds every answer past the 0.2 s client timeout
    proxy.mode = "slow"
    chain = prom_chain(store, audited_slack, demo_dir, proxy.base_url, timeout_s=0.2, max_retries=0, concurrency=1)
    chain.request_scan(AT, "scan-slow")
    # WHEN the first delivery times out
    assert chain.requests_q is not None
    outcome = _try(chain._scan, chain.requests_q.sent[0])
    figures.fault("prometheus slow", proxy.faults_served["slow"])
    # THEN the error is retryable and says what timed out
    assert outcome is not None and "did not answer" in str(outcome) and "0.2 s" in str(outcome)
    # WHEN Prometheus recovers and SQS redelivers
    proxy.mode = "pass"
    chain.drain()
    # THEN the findings are alerted exactly once
    assert chain.dlq == [] and audited_slack.accepted
    assert_invariant(chain, audited_slack, figures)


def _try(fn: Any, body: str) -> Exception | None:
    try:
        fn(body)
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return exc
    return None


def test_faults_prometheus_5xx_is_retried_through_the_queue(
        store: SqliteFindingStore, audited_slack: AuditedSlack, demo_dir: Path, proxy: PromProxy,
        figures: Figures) -> None:
    # GIVEN Prometheus answers 503 to the next 3 requests (more than the source's 1 in-process retry)
    proxy.mode, proxy.times = "5xx", 3
    chain = prom_chain(store, audited_slack, demo_dir, proxy.base_url, max_retries=1, concurrency=1)
    chain.request_scan(AT, "scan-5xx")
    # WHEN the chain runs
    chain.drain()
    figures.fault("prometheus 5xx", proxy.faults_served["5xx"])
    # THEN the scan was redelivered and succeeded; nothing was dead-lettered; every alert went out once
    assert chain.dlq == []
    assert any(FindingMessage.model_validate_json(b).finding.kind is WasteKind.IDLE
               for b in chain.findings_q.sent if '"finding"' in b)
    assert_invariant(chain, audited_slack, figures)


def test_faults_prometheus_empty_result_gives_data_quality_never_idle(
        store: SqliteFindingStore, audited_slack: AuditedSlack, demo_dir: Path, proxy: PromProxy,
        figures: Figures) -> None:
    # GIVEN a healthy Prometheus that holds no series at all (wrong cluster matcher, retention gap)
    proxy.mode = "empty"
    chain = prom_chain(store, audited_slack, demo_dir, proxy.base_url)
    chain.request_scan(AT, "scan-empty")
    # WHEN the chain runs
    chain.drain()
    figures.fault("prometheus empty result", proxy.faults_served["empty"])
    kinds = [STAGE_ADAPTER.validate_json(b) for b in chain.findings_q.sent]
    found = [m.finding.kind for m in kinds if isinstance(m, FindingMessage)]
    # THEN the scan reports missing data and accuses no workload of idling
    assert WasteKind.DATA_QUALITY in found
    assert not {WasteKind.IDLE, WasteKind.UNDERUSED, WasteKind.INFERENCE_IDLE} & set(found)
    assert_invariant(chain, audited_slack, figures)


def test_faults_prometheus_partial_result_never_accuses_the_gpus_it_lost(
        store: SqliteFindingStore, audited_slack: AuditedSlack, demo_dir: Path, proxy: PromProxy,
        figures: Figures) -> None:
    # GIVEN a Prometheus that lost every series of half the GPUs (a dead exporter on some nodes)
    fleet = generate_fleet(SPEC)
    uuids = sorted(g.uuid for g in fleet.gpus)
    proxy.mode, proxy.drop = "partial", set(uuids[::2])
    chain = prom_chain(store, audited_slack, demo_dir, proxy.base_url)
    chain.request_scan(AT, "scan-partial")
    # WHEN the chain runs
    chain.drain()
    figures.fault("prometheus partial result", proxy.faults_served["partial"])
    messages = [m for m in (STAGE_ADAPTER.validate_json(b) for b in chain.findings_q.sent) if isinstance(m, FindingMessage)]
    # THEN no waste finding rests on a GPU whose telemetry was lost, and the chain still delivered the rest once
    accused = {g.uuid for m in messages if m.finding.kind in (WasteKind.IDLE, WasteKind.UNDERUSED)
               for g in m.finding.subject.gpus}
    assert not accused & proxy.drop
    assert_invariant(chain, audited_slack, figures)


def test_faults_prometheus_result_far_larger_than_expected_is_refused_clearly(
        store: SqliteFindingStore, audited_slack: AuditedSlack, demo_dir: Path, proxy: PromProxy,
        figures: Figures) -> None:
    # GIVEN a Prometheus returning every series 50 times (a mis-set matcher across many clusters)
    proxy.mode, proxy.copies = "huge", 50
    chain = prom_chain(store, audited_slack, demo_dir, proxy.base_url, max_series=200)
    chain.request_scan(AT, "scan-huge")
    # WHEN the chain runs
    chain.drain()
    figures.fault("prometheus oversized result", proxy.faults_served["huge"])
    # THEN the scan is dead-lettered at once (permanent), naming the max_series guard; nothing was alerted
    (letter,) = chain.dlq
    assert letter.receives == 1 and "max_series=200" in letter.reason
    assert audited_slack.accepted == []
    assert_invariant(chain, audited_slack, figures)


# -- Kubernetes -------------------------------------------------------------------------------------------
def kube_chain(store: Any, slack: AuditedSlack, demo_dir: Path, kube_api: KubeApiFactory, tmp_path: Path,
               *, token: str | None = None, client_token: str | None = None, progress: Any = None) -> tuple[Chain, Any]:
    fleet = generate_fleet(SPEC)
    by: dict[str, list[dict[str, Any]]] = {}
    for obj in fleet.objects:
        by.setdefault(PLURALS[obj["kind"]], []).append(obj)
    server = kube_api(by.pop("pods", []), by.pop("nodes", []), by, token=token)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url, client_token)
    source = KubernetesClusterSource.from_settings(
        KubernetesSettings(mode="kubeconfig", kubeconfig=str(kubeconfig), page_size=3, timeout_s=5),
        cluster="demo", progress=progress)
    chain = chain_for(store, slack)
    telemetry = local.recording_sources(demo_dir, CONFIG).telemetry
    attach_scanner(chain, cluster_source=source, telemetry_source=telemetry, config=CONFIG, window=WINDOW)
    return chain, server


@pytest.mark.parametrize(("status", "expect"), [(401, "401"), (403, "deploy/rbac.yaml")])
def test_faults_kubernetes_auth_failure_dead_letters_at_once_with_the_reason(
        store: SqliteFindingStore, audited_slack: AuditedSlack, demo_dir: Path, kube_api: KubeApiFactory,
        tmp_path: Path, figures: Figures, status: int, expect: str) -> None:
    # GIVEN an apiserver that rejects the credentials (401) or denies the list (403)
    chain, server = kube_chain(store, audited_slack, demo_dir, kube_api, tmp_path)
    server.fail_next(status, body=kube_status(status))
    chain.request_scan(AT, f"scan-{status}")
    # WHEN the chain runs
    chain.drain()
    figures.fault(f"kubernetes {status}", server.faults_served[status])
    # THEN retrying cannot help: dead-lettered on the first receive, the reason says what to fix
    (letter,) = chain.dlq
    assert letter.receives == 1 and letter.error_type == "SourceAuthError" and expect in letter.reason
    assert_invariant(chain, audited_slack, figures)


def test_faults_kubernetes_5xx_is_retried_through_the_queue(
        store: SqliteFindingStore, audited_slack: AuditedSlack, demo_dir: Path, kube_api: KubeApiFactory,
        tmp_path: Path, figures: Figures) -> None:
    # GIVEN an apiserver answering 503 to the next two requests
    chain, server = kube_chain(store, audited_slack, demo_dir, kube_api, tmp_path)
    server.fail_next(503, times=2)
    chain.request_scan(AT, "scan-k503")
    # WHEN the chain runs
    chain.drain()
    figures.fault("kubernetes 5xx", server.faults_served[503])
    # THEN the scan came back until the apiserver recovered; the alerts went out once
    assert chain.dlq == [] and audited_slack.accepted
    assert_invariant(chain, audited_slack, figures)


def test_faults_kubernetes_410_on_an_expired_continue_restarts_the_list(
        store: SqliteFindingStore, audited_slack: AuditedSlack, demo_dir: Path, kube_api: KubeApiFactory,
        tmp_path: Path, figures: Figures) -> None:
    # GIVEN etcd compacts while the pods are being paged (the next continue gets 410 Expired)
    armed: list[Any] = []

    def compact(line: str) -> None:
        if line.startswith("pods:") and len(armed) == 1:
            armed.append(True)
            armed[0].fail_next(410, body=kube_status(410))

    chain, server = kube_chain(store, audited_slack, demo_dir, kube_api, tmp_path, progress=compact)
    armed.append(server)
    chain.request_scan(AT, "scan-410")
    # WHEN the chain runs
    chain.drain()
    figures.fault("kubernetes 410 expired continue", server.faults_served[410])
    # THEN the list restarted in-process: no dead letter, every pod seen, alerts delivered once
    assert len(armed) == 2, "the fault was injected"
    assert chain.dlq == [] and audited_slack.accepted
    assert_invariant(chain, audited_slack, figures)


# -- SQS --------------------------------------------------------------------------------------------------
def test_faults_sqs_duplicates_and_redelivered_batches_alert_once(
        store: SqliteFindingStore, audited_slack: AuditedSlack, demo_dir: Path, figures: Figures) -> None:
    # GIVEN queues that deliver 40 % of messages twice (seeded) and a batch SQS redelivers whole
    chain = recorded(chain_for(store, audited_slack, duplicate=0.4, rng=random.Random(6)), demo_dir)
    chain.request_scan(AT, "scan-dup")
    chain.drain()
    resent = 0
    for body in list(chain.alerts_q.sent) + list(chain.priced_q.sent):
        (chain.alerts_q if '"action"' in body else chain.priced_q).send_raw(body)
        resent += 1
    # WHEN everything is delivered again
    chain.drain()
    injected = sum(q.duplicates_injected for q in (chain.findings_q, chain.priced_q, chain.alerts_q))
    figures.fault("sqs duplicate delivery", injected + resent)
    # THEN duplicates were injected, and still each finding was posted once
    assert injected > 0
    new = {m.finding.fingerprint for m in (STAGE_ADAPTER.validate_json(b) for b in chain.priced_q.sent)
           if isinstance(m, FindingMessage) and m.finding.kind.is_waste}
    assert new and all(audited_slack.top_level_posts(fp) <= 1 for fp in new)
    assert_invariant(chain, audited_slack, figures)


# -- DynamoDB ---------------------------------------------------------------------------------------------
class DynamoFaults:
    """A botocore `before-call` hook raising ClientError with `code` for the next `times` calls of `operation`."""

    def __init__(self, client: Any, operation: str, code: str, times: int) -> None:
        self.operation, self.code, self.times, self.raised = operation, code, times, 0
        client.meta.events.register(f"before-call.dynamodb.{operation}", self)

    def __call__(self, **_: Any) -> None:
        if self.times > 0:
            self.times -= 1
            self.raised += 1
            raise ClientError({"Error": {"Code": self.code, "Message": f"injected {self.code}"},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, self.operation)


@pytest.fixture
def dynamo_store(aws: Any) -> DynamoDbFindingStore:
    sqs, ddb = boto3.client("sqs"), boto3.client("dynamodb")
    stack = create_stack(sqs, ddb)
    return DynamoDbFindingStore(client=ddb, table_name=stack.table_name)


@pytest.mark.parametrize(("operation", "code", "times"), [
    ("PutItem", "ConditionalCheckFailedException", 1),
    ("PutItem", "ProvisionedThroughputExceededException", 12),
    ("PutItem", "ThrottlingException", 7),
    ("PutItem", "TransactionConflictException", 9),
    ("GetItem", "ProvisionedThroughputExceededException", 6),
])
def test_faults_dynamodb_conflicts_and_throttling_lose_and_repeat_nothing(
        dynamo_store: DynamoDbFindingStore, audited_slack: AuditedSlack, demo_dir: Path, figures: Figures,
        operation: str, code: str, times: int) -> None:
    # GIVEN the DynamoDB lifecycle table (moto) failing the next writes/reads with `code`
    faults = DynamoFaults(dynamo_store.client, operation, code, times)
    chain = recorded(chain_for(dynamo_store, audited_slack), demo_dir)
    chain.request_scan(AT, "scan-ddb")
    # WHEN the chain runs (a conditional-check failure is a lost race: re-read and decide again;
    # throttling and conflicts are StoreError: the message comes back)
    chain.drain()
    figures.fault(f"dynamodb {code}", faults.raised)
    # THEN every fault fired, nothing was dead-lettered, and every alert went out exactly once
    assert faults.raised == times
    assert chain.dlq == [] and audited_slack.accepted
    assert_invariant(chain, audited_slack, figures)


def test_faults_dynamodb_throttled_beyond_the_redrive_limit_dead_letters_with_the_reason(
        dynamo_store: DynamoDbFindingStore, audited_slack: AuditedSlack, demo_dir: Path, figures: Figures) -> None:
    # GIVEN a table that throttles every write for a long time
    faults = DynamoFaults(dynamo_store.client, "PutItem", "ProvisionedThroughputExceededException", 10_000)
    chain = recorded(chain_for(dynamo_store, audited_slack), demo_dir)
    chain.request_scan(AT, "scan-ddb-long")
    # WHEN the chain runs
    chain.drain()
    figures.fault("dynamodb ProvisionedThroughputExceededException", faults.raised)
    # THEN each finding is dead-lettered after max_receive tries, naming the throttling; nothing was posted
    assert chain.dlq and all(d.queue == "priced" and "ProvisionedThroughputExceeded" in d.reason for d in chain.dlq)
    assert audited_slack.accepted == []
    assert_invariant(chain, audited_slack, figures)


# -- Slack ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("status", "times", "label"), [(429, 1, "slack 429"), (429, 3, "slack 429"),
                                                        (503, 3, "slack 5xx"), (500, 1, "slack 5xx")])
def test_faults_slack_rate_limit_and_5xx_are_retried_and_post_once(
        store: SqliteFindingStore, audited_slack: AuditedSlack, demo_dir: Path, figures: Figures,
        status: int, times: int, label: str) -> None:
    # GIVEN Slack refuses the next `times` posts (1 in-process retry, then the queue redelivers)
    audited_slack.fail_next("chat.postMessage", status, times=times)
    chain = recorded(chain_for(store, audited_slack), demo_dir)
    chain.request_scan(AT, "scan-slack")
    # WHEN the chain runs
    chain.drain()
    figures.fault(label, sum(audited_slack.faults_served.values()))
    assert sum(audited_slack.faults_served.values()) == times
    # THEN nothing is dead-lettered and every alert was posted exactly once
    assert chain.dlq == []
    assert_invariant(chain, audited_slack, figures)


def test_faults_slack_invalid_auth_dead_letters_the_group_with_the_reason(
        store: SqliteFindingStore, audited_slack: AuditedSlack, demo_dir: Path, figures: Figures) -> None:
    # GIVEN Slack answers invalid_auth to the next post (a token revoked mid-batch)
    audited_slack.fail_next("chat.postMessage", error="invalid_auth")
    chain = recorded(chain_for(store, audited_slack), demo_dir)
    chain.request_scan(AT, "scan-auth")
    # WHEN the chain runs
    chain.drain()
    figures.fault("slack invalid_auth", audited_slack.faults_served["invalid_auth"])
    # THEN the refused group is dead-lettered at once saying to check the token; the rest went out once
    assert chain.dlq and all(d.queue == "alerts" and d.receives == 1 and "invalid_auth" in d.reason
                             and "token" in d.reason for d in chain.dlq)
    assert audited_slack.accepted
    assert_invariant(chain, audited_slack, figures)


def test_faults_slack_channel_not_found_falls_back_to_the_default_route(
        store: SqliteFindingStore, audited_slack: AuditedSlack, demo_dir: Path, figures: Figures) -> None:
    # GIVEN every routed channel is missing; only the default #gpu-waste exists
    audited_slack.missing_all_but = CONFIG.delivery.default_channel
    chain = recorded(chain_for(store, audited_slack), demo_dir)
    chain.request_scan(AT, "scan-missing")
    # WHEN the chain runs
    chain.drain()
    refused = [c for c in audited_slack.calls if c.method == "chat.postMessage"
               and c.body.get("channel") != CONFIG.delivery.default_channel]
    figures.fault("slack channel_not_found", len(refused))
    # THEN each refused post landed in the default channel, saying which channel was not found
    posts = [a for a in audited_slack.accepted if a.method == "chat.postMessage"]
    assert refused and posts
    assert {p.params["channel"] for p in posts} == {CONFIG.delivery.default_channel}
    fell_back = [p for p in posts if "was not found (channel_not_found)" in str(p.params.get("blocks"))]
    assert len(fell_back) == len(refused)
    assert chain.dlq == []
    assert_invariant(chain, audited_slack, figures)


# -- Jira -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("status", "permanent"), [(401, True), (410, True), (500, False), (503, False)])
def test_faults_jira_errors_are_dead_lettered_or_retried_and_tickets_created_once(
        store: SqliteFindingStore, audited_slack: AuditedSlack, jira_api: FakeJira, demo_dir: Path,
        figures: Figures, status: int, permanent: bool) -> None:
    # GIVEN Jira answers `status` to the next two requests
    jira_api.fail_next("/rest/api/3", status, times=2)
    chain = recorded(chain_for(store, audited_slack, jira_api), demo_dir)
    chain.request_scan(AT, "scan-jira")
    # WHEN the chain runs (the demo fleet has two findings costing ≥ $100/day: two ticket requests)
    chain.drain()
    figures.fault(f"jira {status}", jira_api.faults_served[status])
    # THEN a 401/410 dead-letters the ticket request with Jira's reason; a 5xx is redelivered and the
    # ticket is created once
    tickets = [d for d in chain.dlq if d.queue == "tickets"]
    if permanent:
        assert tickets and all(str(status) in d.reason and d.receives == 1 for d in tickets)
    else:
        assert tickets == [] and len(jira_api.issues) == 2
    assert_invariant(chain, audited_slack, figures, jira_api)


class ThrottledAfterPost:
    """A store that fails (StoreError, as DynamoDB throttling) the first write recording a Slack delivery key."""

    def __init__(self, inner: SqliteFindingStore) -> None:
        self.inner, self.armed = inner, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def update(self, record: Any, *, expected_version: int) -> bool:
        current = self.inner.get(record.fingerprint)
        if self.armed and current is not None and record.delivery_keys != current.delivery_keys:
            self.armed = False
            from gpuwaste.errors import StoreError

            raise StoreError("injected: ProvisionedThroughputExceededException")
        return self.inner.update(record, expected_version=expected_version)

    def update_many(self, updates: list[tuple[Any, int]]) -> list[bool]:
        return [self.update(record, expected_version=version) for record, version in updates]


def test_faults_store_error_after_slack_accepted_does_not_post_twice(
        store: SqliteFindingStore, audited_slack: AuditedSlack, demo_dir: Path, figures: Figures) -> None:
    # GIVEN the store throttles once, exactly when the first Slack delivery is being recorded
    flaky = ThrottledAfterPost(store)
    chain = recorded(chain_for(flaky, audited_slack), demo_dir)
    chain.request_scan(AT, "scan-throttled-after-post")
    # WHEN the chain runs (the failed record is redelivered)
    chain.drain()
    # THEN every alert was still posted exactly once
    report = check_invariant(chain, audited_slack)
    assert not flaky.armed, "the fault fired"
    figures.fault("store error after slack accepted", 1 - int(flaky.armed))
    figures.add(report)
    assert report.ok, str(report)

"""Secrets: the whole Lambda chain runs with canary secret values, and none of them leaks.

The real handlers (`functions/*/app.py`) and their real composition roots run against moto (SQS, DynamoDB,
Secrets Manager): a ScanRequest goes scan → price → dedupe → notify_slack / create_tickets, with the Slack
token and signing secret, the Jira API token and the Prometheus bearer token read from Secrets Manager,
a kube bearer token in the kubeconfig, and faults that make every dependency reject the credentials once
(error paths are where secrets leak). Every log record at DEBUG (any logger, Powertools included, with all
its extra fields and exception text), everything printed, every message and dead letter on the queues,
every Slack call and every Jira issue is then searched for the canaries.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import traceback
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from gpuwaste.bootstrap import pipeline
from gpuwaste.fleet.generator import generate_fleet
from gpuwaste.fleet.recording import write_recording
from gpuwaste.fleet.spec import FleetSpec
from gpuwaste.models.messages import ScanRequest
from gpuwaste.models.settings import PrometheusAuth, PrometheusSettings
from gpuwaste.services.interactions import SignatureError
from gpuwaste.sinks.slack_signature import SlackSignatureVerifier, sign
from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource
from tests.aws_resources import create_stack
from tests.hardening.conftest import Figures
from tests.hardening.harness import AuditedSlack, PromProxy
from tests.lambda_events import FakeLambdaContext, load_handler, sqs_record
from tests.servers import HttpRequest, HttpResponse
from tests.servers.jira_api import FakeJira
from tests.servers.json_webhook import FakeJsonWebhook
from tests.servers.kube_api import KubeApiFactory, write_kubeconfig
from tests.servers.ports import free_port
from tests.servers.prometheus import PrometheusFactory
from tests.servers.teams_webhook import FakeTeams

pytestmark = pytest.mark.integration

CANARIES = {
    "slack token": "xoxb-CANARY-slack-7f3a9c",
    "slack signing secret": "CANARY-signing-5e1d22",
    "jira token": "CANARY-jira-token-9b8c7d",
    "prometheus bearer": "CANARY-prom-bearer-4a4a4a",
    "prometheus password": "CANARY-prom-password-3c3c3c",
    "kube token": "CANARY-kube-token-6d6d6d",
    "aws session token": "CANARY-aws-session-token-8e8e8e",
    "webhook path token": "CANARYlambdaHookPathToken5f5f",
    "webhook signing secret": "CANARY-lambda-whsec-2b2b2b",
}
SPEC = FleetSpec()
# botocore's wire log: at DEBUG it prints every response body, GetSecretValue's included, unless the composition
# root's filter (bootstrap/pipeline.py) redacts it.
WIRE_LOGGERS = ("botocore.parsers ",)
PLURALS = {"Pod": "pods", "Node": "nodes", "Namespace": "namespaces", "ReplicaSet": "replicasets",
           "Deployment": "deployments", "StatefulSet": "statefulsets", "DaemonSet": "daemonsets", "Job": "jobs",
           "CronJob": "cronjobs"}


class PathTokenWebhook(FakeJsonWebhook):
    """The JSON webhook receiver at a path that holds a token, shaped like a Slack incoming webhook's
    (`/services/T…/B…/<token>`), as many relays' URLs are: the path is the credential."""

    def __init__(self, *, secret: str, token: str) -> None:
        super().__init__(secret=secret)
        self.path = f"/services/T0CANARY1/B0CANARY2/{token}"

    @property
    def url(self) -> str:
        """The hook's URL, its token in the path."""
        return f"{self.base_url}{self.path}"

    def handle(self, request: HttpRequest) -> HttpResponse:
        if request.path != self.path:
            return HttpResponse.json_body(404, {"error": "not found"})
        return super().handle(dataclasses.replace(request, path="/hooks/gpuwaste"))


class Everything(logging.Handler):
    """Keeps every record as text: message, args, every attribute (Powertools extras) and the traceback."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record still gets searched
            message = str(record.msg)
        attrs = json.dumps({k: v for k, v in record.__dict__.items() if k not in ("exc_info",)}, default=str)
        trace = logging.Formatter().formatException(record.exc_info) if record.exc_info else ""
        self.texts.append(f"{record.name} {message} {attrs} {trace}")


@pytest.fixture
def captured() -> Iterator[Everything]:
    """Attach a DEBUG catch-all handler to the root logger and to every non-propagating logger (Powertools)."""
    for function, _, _ in STAGES:  # create the handlers' Powertools Loggers first, so they are captured too
        load_handler(function)
    handler = Everything()
    root = logging.getLogger()
    old_level = root.level
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    extra: list[tuple[logging.Logger, int]] = []
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger) and not logger.propagate:
            extra.append((logger, logger.level))
            logger.addHandler(handler)
            logger.setLevel(logging.DEBUG)
    yield handler
    root.removeHandler(handler)
    root.setLevel(old_level)
    for logger, level in extra:
        logger.removeHandler(handler)
        logger.setLevel(level)


def leaks(texts: list[str]) -> list[tuple[str, str]]:
    """(canary name, excerpt) for every text holding a canary value."""
    found = []
    for text in texts:
        for name, value in CANARIES.items():
            if value in text:
                at = text.index(value)
                found.append((name, text[max(0, at - 80): at + 40]))
    return found


@pytest.fixture
def world(aws: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kube_api: KubeApiFactory,
          prometheus_factory: PrometheusFactory) -> Iterator[dict[str, Any]]:
    """Moto stack + secrets, fake Slack/Jira/kube/Prometheus/Teams/webhook with the canary credentials, config file,
    env (an AWS session token, which SigV4 signs into every AWS call)."""
    monkeypatch.setenv("AWS_SESSION_TOKEN", CANARIES["aws session token"])
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # credentials are resolved again, with the token
    sqs, ddb, sm = boto3.client("sqs"), boto3.client("dynamodb"), boto3.client("secretsmanager")
    stack = create_stack(sqs, ddb)
    slack_arn = sm.create_secret(Name="gpuwaste/slack", SecretString=json.dumps(
        {"bot_token": CANARIES["slack token"], "signing_secret": CANARIES["slack signing secret"]}))["ARN"]
    jira_arn = sm.create_secret(Name="gpuwaste/jira", SecretString=json.dumps({"api_token": CANARIES["jira token"]}))["ARN"]
    prom_arn = sm.create_secret(Name="gpuwaste/prom", SecretString=CANARIES["prometheus bearer"])["ARN"]
    recording = write_recording(generate_fleet(SPEC), tmp_path / "demo", compress=False)
    fleet = generate_fleet(SPEC)
    by: dict[str, list[dict[str, Any]]] = {}
    for obj in fleet.objects:
        by.setdefault(PLURALS[obj["kind"]], []).append(obj)
    kube = kube_api(by.pop("pods", []), by.pop("nodes", []), by, token=CANARIES["kube token"])
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", kube.url, CANARIES["kube token"])
    proxy = PromProxy(prometheus_factory(recording / "telemetry.om").url).start()
    proxy.bearer = CANARIES["prometheus bearer"]
    slack = AuditedSlack(token=CANARIES["slack token"]).start()
    jira = FakeJira(api_token=CANARIES["jira token"]).start()
    teams = FakeTeams().start()
    hook = PathTokenWebhook(secret=CANARIES["webhook signing secret"], token=CANARIES["webhook path token"]).start()
    flow = teams.add_flow("general")
    monkeypatch.setitem(CANARIES, "teams sig", flow.rsplit("sig=", 1)[1])
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({
        "clusters": [{"name": "demo",
                      "prometheus": {"url": proxy.base_url, "max_retries": 0,
                                     "auth": {"kind": "bearer", "bearer_token_secret_arn": prom_arn}},
                      "kubernetes": {"mode": "kubeconfig", "kubeconfig": str(kubeconfig), "timeout_s": 5}}],
        "scan": {"window_s": SPEC.history_s - 600, "scrape_interval_s": SPEC.step_s},
        "delivery": {"default_channel": "#gpu-waste",
                     "slack": {"secret_arn": slack_arn, "base_url": slack.url, "rate_limit_retries": 0,
                               "server_error_retries": 0},
                     "jira": {"base_url": jira.url, "email": jira.email, "api_token_secret_arn": jira_arn,
                              "default_project": "OPS"},
                     "msteams": {"webhooks": {"general": flow}, "default_webhook": "general", "server_error_retries": 0},
                     "webhook": {"url": hook.url, "signing_secret": CANARIES["webhook signing secret"],
                                 "server_error_retries": 0}},
    }))
    env = {"CONFIG_FILE": str(config), "FINDINGS_TABLE_NAME": stack.table_name, "POWERTOOLS_LOG_LEVEL": "DEBUG",
           "FINDINGS_QUEUE_URL": stack.queue_urls["FindingsQueue"], "PRICED_QUEUE_URL": stack.queue_urls["PricedQueue"],
           "ALERTS_QUEUE_URL": stack.queue_urls["AlertsQueue"], "TICKETS_QUEUE_URL": stack.queue_urls["TicketsQueue"],
           "SCAN_REQUESTS_QUEUE_URL": stack.queue_urls["ScanRequestsQueue"]}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    _reset_roots()
    yield {"sqs": sqs, "stack": stack, "slack": slack, "jira": jira, "proxy": proxy, "kube": kube, "teams": teams,
           "hook": hook, "monkeypatch": monkeypatch}
    _reset_roots()
    for server in (proxy, slack, jira, teams, hook):
        server.stop()


def _reset_roots() -> None:
    from gpuwaste.bootstrap import dedupe, notify, price, scan, tickets

    pipeline.reset()
    for fn in (scan.scan_service, price.pricing_service, dedupe.lifecycle_service, notify.notify_service,
               tickets.ticket_service):
        fn.cache_clear()
    from aws_lambda_powertools.utilities import parameters

    parameters.clear_caches()


STAGES = [  # function, its input queue, its DLQ
    ("scan_gpu_waste", "ScanRequestsQueue", "ScanRequestsDlq"),
    ("price_findings", "FindingsQueue", "FindingsDlq"),
    ("dedupe_findings", "PricedQueue", "PricedDlq"),
    ("notify_slack", "AlertsQueue", "AlertsDlq"),
    ("create_tickets", "TicketsQueue", "TicketsDlq"),
]


def _pump(world: dict[str, Any], outputs: list[str], *, rounds: int = 3) -> None:
    """Deliver every queue's messages to its function as Lambda would (failed records stay for redelivery)."""
    sqs, urls = world["sqs"], world["stack"].queue_urls
    for _ in range(rounds):
        for function, queue, dlq in STAGES:
            world["monkeypatch"].setenv("DEAD_LETTER_QUEUE_URL", urls[dlq])
            while True:
                got = sqs.receive_message(QueueUrl=urls[queue], MaxNumberOfMessages=10, VisibilityTimeout=0,
                                          MessageAttributeNames=["All"]).get("Messages", [])
                if not got:
                    break
                event = {"Records": [sqs_record(m["Body"], message_id=m["MessageId"]) for m in got]}
                try:
                    result = load_handler(function).lambda_handler(event, FakeLambdaContext())
                except Exception as exc:  # noqa: BLE001 - a whole-batch failure: SQS would redeliver; keep its text
                    outputs.append(f"{type(exc).__name__}: {exc}")
                    break
                outputs.append(json.dumps(result, default=str))
                failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
                for m in got:
                    if m["MessageId"] not in failed:
                        sqs.delete_message(QueueUrl=urls[queue], ReceiptHandle=m["ReceiptHandle"])
                if failed:
                    break  # leave the failures for the next round, as the visibility timeout would


def _queue_texts(world: dict[str, Any]) -> list[str]:
    sqs, urls = world["sqs"], world["stack"].queue_urls
    texts = []
    for url in urls.values():
        for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]).get("Messages", []):
            texts.append(m["Body"] + json.dumps(m.get("MessageAttributes", {})))
    return texts


def test_secrets_whole_chain_with_faults_never_leaks_a_canary(
        world: dict[str, Any], captured: Everything, capfd: pytest.CaptureFixture[str], figures: Figures) -> None:
    # GIVEN every dependency rejects the credentials once (Prometheus 401, kube 401, Slack invalid_auth,
    # Jira 401) and three scans are requested (the first two are dead-lettered by the auth failures)
    slack, jira, proxy, kube = world["slack"], world["jira"], world["proxy"], world["kube"]
    proxy.mode, proxy.times = "401", 1
    kube.fail_next(401)
    slack.fail_next("chat.postMessage", error="invalid_auth")
    jira.fail_next("/rest/api/3", 401)
    urls = world["stack"].queue_urls
    for n, at in enumerate(SPEC.eval_time - timedelta(minutes=m) for m in (20, 10, 0)):
        world["sqs"].send_message(QueueUrl=urls["ScanRequestsQueue"], MessageBody=ScanRequest(
            cluster="demo", scheduled_time=at, scan_id=f"secrets-{n}").model_dump_json())
    outputs: list[str] = []
    # WHEN the real handlers process every queue until it is empty
    _pump(world, outputs)
    printed = capfd.readouterr()
    figures.fault("secrets run: credential rejections", sum(slack.faults_served.values()) + sum(jira.faults_served.values())
                  + proxy.faults_served["401"] + sum(kube.faults_served.values()))
    # THEN the chain really ran (with the canary credentials accepted by the fakes) ...
    assert slack.accepted and jira.issues, "Slack posts and Jira tickets were made with the canary credentials"
    assert world["teams"].posts and world["hook"].events, "Teams and the webhook accepted posts"
    assert f"Bearer {CANARIES['prometheus bearer']}" in proxy.seen_authorization
    # ... and no log record, printed line, handler result, queue message, dead letter, Slack call or Jira
    # issue contains any canary
    texts = (captured.texts + [printed.out, printed.err] + outputs + _queue_texts(world)
             + [json.dumps(c.body, default=str) for c in slack.calls]
             + [json.dumps(i.fields, default=str) + json.dumps(i.comments, default=str) for i in jira.issues.values()])
    assert len(captured.texts) > 50, "DEBUG logging was captured"
    assert leaks(texts) == []
    assert any(t.startswith("aws_lambda_powertools") for t in captured.texts), "Powertools' own logs were captured"
    assert any("x-amz-security-token:" in t for t in captured.texts), "botocore logged SigV4 with the session token"


def test_secrets_source_errors_never_carry_credentials(figures: Figures) -> None:
    # GIVEN a Prometheus with basic-auth credentials and a bearer token that cannot be reached
    port = free_port()
    errors: list[str] = []
    for auth in (PrometheusAuth(kind="bearer", bearer_token=CANARIES["prometheus bearer"]),
                 PrometheusAuth(kind="basic", username="u", password=CANARIES["prometheus password"])):
        source = PrometheusGpuMetricsSource.from_settings(
            PrometheusSettings(url=f"http://u:{CANARIES['prometheus password']}@127.0.0.1:{port}", auth=auth,
                               max_retries=0), cluster="c", backoff_s=0.0)
        # WHEN a query fails
        try:
            source.probe(["DCGM_FI_DEV_GPU_UTIL"], at=SPEC.eval_time)
        except Exception as exc:  # noqa: BLE001 - the text is what is checked
            errors.append(f"{exc!r} {exc} {exc.__cause__!r}")
        figures.fault("secrets run: unreachable prometheus")
    # THEN the errors (and their causes) name the URL without the credentials
    assert len(errors) == 2 and leaks(errors) == []


def test_secrets_settings_repr_and_json_hide_secret_values() -> None:
    # GIVEN settings holding secrets
    settings = PrometheusSettings(url="http://p", auth=PrometheusAuth(kind="bearer", bearer_token=CANARIES["prometheus bearer"]))
    # WHEN printed or dumped as they would be in a log or a config echo
    texts = [repr(settings), str(settings), settings.model_dump_json()]
    # THEN the values are masked
    assert leaks(texts) == []


def test_secrets_bad_slack_signature_error_does_not_echo_the_secret() -> None:
    # GIVEN a request signed with the wrong secret
    body = b"payload=%7B%7D"
    now = SPEC.eval_time
    ts = str(int(now.timestamp()))
    headers = {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sign("wrong-secret", ts, body)}
    # WHEN verified with the real signing secret
    with pytest.raises(SignatureError) as err:
        SlackSignatureVerifier(CANARIES["slack signing secret"], now=lambda: now).verify(headers, body)
    # THEN the error says why without the secret or the expected signature's input
    assert leaks([str(err.value), repr(err.value)]) == []


def test_secrets_botocore_wire_log_at_debug_does_not_print_secret_values(
        world: dict[str, Any], captured: Everything) -> None:
    # GIVEN the real notify_slack root reading the Slack secret from Secrets Manager with DEBUG logging on
    from gpuwaste.bootstrap import notify

    # WHEN the composition root builds its notifier (reads the secret)
    notify.notify_service()
    wire = [t for t in captured.texts if t.startswith(WIRE_LOGGERS)]
    # THEN botocore's wire log does not contain the secret values
    assert wire, "botocore logged at DEBUG"
    assert leaks(wire) == []


def test_secrets_last_applied_configuration_never_leaves_the_cluster(tmp_path: Path) -> None:
    # GIVEN an idle pod whose kubectl last-applied-configuration annotation holds a plain-text env secret
    from gpuwaste.bootstrap import local
    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.queue.memory import MemoryQueue
    from gpuwaste.services.scan import ScanService

    path = write_recording(generate_fleet(SPEC), tmp_path / "rec", compress=False)
    kube = json.loads((path / "cluster.json").read_text())
    manifest = json.dumps({"spec": {"containers": [{"env": [{"name": "DB_PASSWORD", "value": CANARIES["kube token"]}]}]}})
    marked = 0
    for obj in kube["items"]:
        if obj["kind"] in ("Pod", "Namespace"):
            obj["metadata"].setdefault("annotations", {})["kubectl.kubernetes.io/last-applied-configuration"] = manifest
            marked += 1
    (path / "cluster.json").write_text(json.dumps(kube))
    cfg = GpuWasteConfig()
    sources = local.recording_sources(path, cfg)
    queue = MemoryQueue()
    # WHEN the cluster is scanned
    ScanService(cluster_source=sources.cluster, telemetry_source=sources.telemetry, settings=cfg.detectors,
                window=timedelta(seconds=SPEC.history_s - 600), queue=queue).scan(at=SPEC.eval_time, scan_id="s")
    bodies = queue.drain()
    # THEN findings were sent, and none carries the annotation (nor the secret inside it)
    assert marked and len(bodies) > 1
    assert leaks(bodies) == [] and not any("last-applied-configuration" in b for b in bodies)


# -- every command of the CLI at -v ---------------------------------------------------------------------------
#: canary values in every secret slot the CLI has (config file, environment, URLs); the Teams `sig` is the fake's own
CLI_CANARIES = {
    "slack bot token": "xoxb-CANARY-cli-slack-1a2b3c",
    "slack signing secret": "CANARY-cli-signing-4d5e6f",
    "jira token": "CANARY-cli-jira-7a8b9c",
    "prometheus bearer": "CANARY-cli-bearer-0d1e2f",
    "prometheus password": "CANARY-cli-password-3a4b5c",
    "prometheus url password": "CANARY-cli-urlpass-6d7e8f",
    "kube token": "CANARY-cli-kube-9a0b1c",
    "webhook path token": "CANARYcliHookPathToken2d3e",
    "webhook signing secret": "CANARY-cli-whsec-4f5a6b",
    "aws secret key": "CANARYcliAwsSecretKey7c8d9e0f1a2b3c4d5e6f7a8b",
    "aws session token": "CANARY-cli-session-token-FQoGZXIvYXdzEJr",
    "aws access key id": "ASIACANARYCLI0KEY12",
}


@dataclasses.dataclass
class CliWorld:
    """What the command sweep runs against; `canaries` includes the Teams flow's `sig`."""

    tmp: Path
    config: Path
    kubeconfig: Path
    recording: Path
    proxy: PromProxy
    slack: AuditedSlack
    jira: FakeJira
    teams: FakeTeams
    hook: PathTokenWebhook
    env: dict[str, str]
    canaries: dict[str, str]
    proxy_url: str


@pytest.fixture(scope="module")
def cli_world(tmp_path_factory: pytest.TempPathFactory, kube_api: KubeApiFactory,
              prometheus_factory: PrometheusFactory) -> Iterator[CliWorld]:
    """A real Prometheus (behind a proxy that records the credentials it is sent), a fake kube-apiserver, fake
    Slack, Jira, Teams and JSON webhook, and a config file with a canary in every secret slot."""
    tmp = tmp_path_factory.mktemp("cli-secrets")
    fleet = generate_fleet(SPEC)
    recording = write_recording(fleet, tmp / "demo", compress=False)
    by: dict[str, list[dict[str, Any]]] = {}
    for obj in fleet.objects:
        by.setdefault(PLURALS[obj["kind"]], []).append(obj)
    kube = kube_api(by.pop("pods", []), by.pop("nodes", []), by, token=CLI_CANARIES["kube token"])
    kubeconfig = write_kubeconfig(tmp / "kubeconfig", kube.url, CLI_CANARIES["kube token"])
    proxy = PromProxy(prometheus_factory(recording / "telemetry.om").url).start()
    slack = AuditedSlack(token=CLI_CANARIES["slack bot token"]).start()
    jira = FakeJira(api_token=CLI_CANARIES["jira token"]).start()
    teams = FakeTeams().start()
    hook = PathTokenWebhook(secret=CLI_CANARIES["webhook signing secret"], token=CLI_CANARIES["webhook path token"]).start()
    flow = teams.add_flow("general")
    canaries = {**CLI_CANARIES, "teams sig": flow.rsplit("sig=", 1)[1]}
    host = proxy.base_url.split("://", 1)[1]
    kubernetes = {"mode": "kubeconfig", "kubeconfig": str(kubeconfig), "timeout_s": 5}
    config = tmp / "config.yaml"
    config.write_text(json.dumps({
        "clusters": [
            {"name": "demo", "prometheus": {"url": proxy.base_url, "max_retries": 0, "auth": {
                "kind": "bearer", "bearer_token": CLI_CANARIES["prometheus bearer"]}}, "kubernetes": kubernetes},
            {"name": "basic", "prometheus": {
                "url": f"http://u:{CLI_CANARIES['prometheus url password']}@{host}", "max_retries": 0,
                "auth": {"kind": "basic", "username": "u", "password": CLI_CANARIES["prometheus password"]}},
             "kubernetes": kubernetes},
            {"name": "sigv4", "prometheus": {"url": proxy.base_url, "max_retries": 0, "auth": {
                "kind": "sigv4", "sigv4_region": "us-east-1"}}, "kubernetes": kubernetes},
        ],
        "scan": {"window_s": SPEC.history_s - 600, "scrape_interval_s": SPEC.step_s},
        "delivery": {
            "default_channel": "#gpu-waste",
            "slack": {"bot_token": CLI_CANARIES["slack bot token"], "signing_secret": CLI_CANARIES["slack signing secret"],
                      "base_url": slack.url, "rate_limit_retries": 0, "server_error_retries": 0},
            "msteams": {"webhooks": {"general": flow}, "default_webhook": "general", "server_error_retries": 0},
            "webhook": {"url": hook.url, "signing_secret": CLI_CANARIES["webhook signing secret"],
                        "server_error_retries": 0},
            "jira": {"base_url": jira.url, "email": jira.email, "api_token": CLI_CANARIES["jira token"],
                     "default_project": "OPS"}},
    }))
    env = {"AWS_ACCESS_KEY_ID": CLI_CANARIES["aws access key id"], "AWS_SECRET_ACCESS_KEY": CLI_CANARIES["aws secret key"],
           "AWS_SESSION_TOKEN": CLI_CANARIES["aws session token"], "AWS_DEFAULT_REGION": "us-east-1",
           "GPUWASTE_SLACK_BOT_TOKEN": CLI_CANARIES["slack bot token"],
           "GPUWASTE_SLACK_SIGNING_SECRET": CLI_CANARIES["slack signing secret"],
           "GPUWASTE_JIRA_API_TOKEN": CLI_CANARIES["jira token"],
           "GPUWASTE_PROMETHEUS_BEARER_TOKEN": CLI_CANARIES["prometheus bearer"],
           "COLUMNS": "200", "NO_COLOR": "1"}
    yield CliWorld(tmp, config, kubeconfig, recording, proxy, slack, jira, teams, hook, env, canaries,
                   f"http://u:{CLI_CANARIES['prometheus url password']}@{host}")
    for server in (proxy, slack, jira, teams, hook):
        server.stop()


def _commands(w: CliWorld) -> dict[str, list[str]]:
    """Each command of `gpuwaste --help` with arguments that make it use its secrets (live sources, delivery)."""
    at = SPEC.eval_time.isoformat()
    state = str(w.tmp / "state.db")
    return {
        "scan (bearer)": ["scan", "-c", str(w.config), "--cluster", "demo", "--at", at, "-v"],
        "scan (basic + URL password)": ["scan", "-c", str(w.config), "--cluster", "basic", "--at", at, "-o", "json", "-v"],
        "scan (sigv4)": ["scan", "-c", str(w.config), "--cluster", "sigv4", "--at", at, "-o", "csv", "-v"],
        "run (live, every sink)": ["run", "-c", str(w.config), "--cluster", "demo", "--at", at, "--state", state],
        "run (recording, every sink)": ["run", "-r", str(w.recording), "-c", str(w.config), "--state",
                                        str(w.tmp / "state-rec.db")],
        "record": ["record", str(w.tmp / "recorded"), "-c", str(w.config), "--cluster", "demo", "--at", at,
                   "-w", "30m", "--force"],
        "record (basic + URL password)": ["record", str(w.tmp / "recorded-basic"), "-c", str(w.config), "--cluster",
                                          "basic", "--at", at, "-w", "30m", "--force"],
        "doctor": ["doctor", "-p", w.proxy_url, "--at", at],
        "explain": ["explain", "FINDING", "--state", state, "-c", str(w.config)],
        "summary (markdown)": ["summary", "--state", state, "-o", "markdown", "-c", str(w.config)],
        "summary (html to a file)": ["summary", "--state", state, "-o", "html", "--out", str(w.tmp / "s.html"),
                                     "-c", str(w.config)],
        "serve (one scan)": ["serve", "-c", str(w.config), "--cluster", "demo", "--state", str(w.tmp / "serve.db"),
                             "--port", "0", "--max-scans", "1", "--interval", "1s"],
        "replay alibaba": ["replay", "alibaba", "--trace-dir", str(w.tmp / "no-trace")],
        "demo": ["demo"],
        "config-schema": ["config-schema"],
        "generate-fleet": ["generate-fleet", str(w.tmp / "fleet"), "--force"],
    }


def _first_finding_id(state: Path) -> str:
    from gpuwaste.store.sqlite import SqliteFindingStore

    if not state.exists():
        return "0000000000"
    records = SqliteFindingStore(str(state)).open_for_cluster("demo")
    return records[0].fingerprint[:12] if records else "0000000000"


def _written_texts(root: Path, inputs: set[Path]) -> list[str]:
    """Every file the commands wrote (reports, recordings, state, any log), as text; not the `inputs` they read."""
    texts = []
    for path in root.rglob("*"):
        if path.is_file() and path not in inputs and path.stat().st_size < 50_000_000:
            texts.append(f"{path.name} " + path.read_bytes().decode("utf-8", "replace"))
    return texts


def test_secrets_every_command_at_verbose_never_prints_or_logs_a_canary(
        cli_world: CliWorld, captured: Everything, figures: Figures) -> None:
    # GIVEN a canary in every secret slot (config, environment, URL userinfo, webhook path, Teams sig, AWS keys)
    # and every command of `gpuwaste --help` set up to use them against real or fake servers
    from typer.testing import CliRunner

    from gpuwaste.cli import app

    w = cli_world
    commands = _commands(w)
    results: dict[str, Any] = {}
    texts: list[str] = []
    # WHEN each runs at -v (debug logging of every library), run before the commands that read its state
    for name, args in commands.items():
        if args[0] == "explain":
            args = [a if a != "FINDING" else _first_finding_id(w.tmp / "state.db") for a in args]
        result = CliRunner().invoke(app, ["-v", *args], env=w.env)
        results[name] = result
        texts += [result.stdout, result.stderr]
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            texts.append("".join(traceback.format_exception(result.exception)))
        figures.fault(f"secrets run: gpuwaste {args[0]} at -v")
    texts += captured.texts + _written_texts(w.tmp, {w.config, w.kubeconfig})
    # THEN the commands really used the canary credentials: Prometheus got the bearer, basic and SigV4 headers,
    # Slack, Jira, Teams and the webhook accepted posts authenticated by them, and debug logging was on
    seen = w.proxy.seen_authorization
    assert f"Bearer {CLI_CANARIES['prometheus bearer']}" in seen
    assert any(a.startswith("Basic ") for a in seen)
    assert any(a.startswith("AWS4-HMAC-SHA256 Credential=" + CLI_CANARIES["aws access key id"]) for a in seen)
    assert w.slack.accepted and w.jira.issues and w.teams.posts and w.hook.events
    assert sum("DEBUG urllib3" in r.stderr for r in results.values()) >= 3, "urllib3's request lines were logged"
    assert any("DEBUG botocore" in r.stderr for r in results.values()), "botocore's signing was logged"
    # every command did its work (replay has no public trace here: its usage error is the path it takes)
    assert {n: r.exit_code for n, r in results.items()} == {n: 2 if n.startswith("replay") else 0 for n in commands}
    # ... and no printed line, log record or written file holds any canary
    found = _leaks(texts, w.canaries)
    assert found == [], "\n".join(f"{name}: {excerpt!r}" for name, excerpt in found)


def _leaks(texts: list[str], canaries: dict[str, str]) -> list[tuple[str, str]]:
    found = []
    for text in texts:
        for name, value in canaries.items():
            if value in text:
                at = text.index(value)
                found.append((name, text[max(0, at - 100): at + 30]))
    return found

"""Reclaim, counted at a fake apiserver speaking the Kubernetes wire format (tests/servers/kube_writes.py) through the
official client: exactly the PATCH/DELETE calls the policy allows, none without opt-in, none in dry-run; Keep before
the deadline cancels; undo restores; a redelivered run or click never acts twice; a 403 is reported, not retried; and
a property test over random fleets and policies: no call for a finding that is not idle with high confidence at the
current scan. The thread (fake Slack), the store (SQLite, DynamoDB over moto) and the apiserver must agree."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client as k8s_client

from gpuwaste.models.findings import Confidence, Cost, Finding, Subject, WasteKind
from gpuwaste.models.lifecycle import FindingRecord, FindingState, Justification
from gpuwaste.models.messages import FindingMessage
from gpuwaste.models.notices import MessageRef
from gpuwaste.models.reclaim import ReclaimKind, ReclaimMode, ReclaimStatus
from gpuwaste.models.settings import LifecycleSettings, ReclaimSettings, SlackSettings
from gpuwaste.ports import FindingStore
from gpuwaste.queue.memory import MemoryQueue
from gpuwaste.services.interactions import InteractionService
from gpuwaste.services.lifecycle import LifecycleService
from gpuwaste.services.reclaim import ReclaimService
from gpuwaste.sinks.kube_actuator import MERGE_PATCH, KubernetesActuator
from gpuwaste.sinks.slack import SlackNotifier
from gpuwaste.sinks.slack_interactions import read_request
from gpuwaste.store.dynamodb import DynamoDbFindingStore
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.aws_resources import create_stack
from tests.servers import HttpRequest, HttpResponse
from tests.servers.kube_api import write_kubeconfig
from tests.servers.kube_writes import FakeKubeWrites
from tests.servers.slack_api import FakeSlack

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
SCALE_PATH = "/apis/apps/v1/namespaces/ml/deployments/trainer/scale"
OPTED_IN = {"gpuwaste.io/reclaim": "scale,suspend,stop-notebook,delete-orphan"}


class Clock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


def deployment(name: str = "trainer", ns: str = "ml", replicas: int = 3) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "resourceVersion": "7"},
            "spec": {"replicas": replicas}}


def finding(at: datetime, *, name: str = "trainer", ns: str = "ml", kind: str = "Deployment",
            waste: WasteKind = WasteKind.IDLE, confidence: Confidence = Confidence.HIGH,
            ns_annotations: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
            pod: str | None = None, owner_exists: bool | None = None, money_owner: str | None = None) -> Finding:
    cost = Cost(priced=True, usd_per_day=Decimal("98.40"), wasted_gpu_share=Decimal(1),
                usd_per_gpu_hour=Decimal("4.10"), formula="test")
    return Finding(kind=waste, detector=waste.value, title=f"{name} holds an idle H100", recommendation="scale down",
                   subject=Subject(cluster="c1", namespace=ns, workload_kind=kind, workload_name=name, pod=pod or f"{name}-0",
                                   owner_exists=owner_exists, labels={"gpuwaste.io/team": "ml"},
                                   annotations=annotations or {},
                                   namespace_annotations=OPTED_IN if ns_annotations is None else ns_annotations),
                   observed_at=at, window_s=3600, wasted_gpu_share=Decimal(1), cost=cost, confidence=confidence,
                   money_owner=money_owner)


class World:
    """Store + lifecycle + fake apiserver + fake Slack thread + the reclaim service and the chat buttons."""

    def __init__(self, store: FindingStore, kube: FakeKubeWrites, slack: FakeSlack, **policy: Any) -> None:
        self.store, self.kube, self.slack = store, kube, slack
        self.clock = Clock(T0)
        self.lifecycle = LifecycleService(store=store, alerts=MemoryQueue("a"), tickets=None,
                                          settings=LifecycleSettings(), clock=self.clock)
        self.notifier = SlackNotifier.from_settings(SlackSettings(base_url=slack.url), token=slack.token,
                                                    default_channel="#gpu-waste")
        config = k8s_client.Configuration()
        config.host = kube.base_url
        self.actuator = KubernetesActuator(k8s_client.ApiClient(config), now=self.clock.now)
        self.settings = ReclaimSettings(**{"enabled": True, "idle_for": timedelta(hours=1), "notice": timedelta(hours=2),
                                           **policy})
        self.reclaim = ReclaimService(store=store, actuator=self.actuator, notifier=self.notifier,
                                      settings=self.settings, now=self.clock.now)
        self.chat = InteractionService(verifier=None, reader=read_request, store=store, now=self.clock.now,
                                       notifier=self.notifier, reclaim=self.reclaim)
        self.scans = 0

    def scan(self, *findings: Finding) -> str:
        """Apply one scan at the clock's time; the first sighting of a finding also gets its owner's thread."""
        self.scans += 1
        scan_id = f"scan-{self.scans}"
        for f in findings:
            f = f.model_copy(update={"observed_at": self.clock.at})
            self.lifecycle.handle_finding(FindingMessage(scan_id=scan_id, finding=f))
            record = self.store.get(f.fingerprint)
            assert record is not None
            if not record.messages:
                parent = self.notifier._call("chat.postMessage", channel="#ml", text=f.title)  # the owner's alert
                ref = MessageRef(sink="slack", destination=str(parent["channel"]), message_id=str(parent["ts"]))
                assert self.store.update(record.model_copy(update={"messages": (ref,), "version": record.version + 1}),
                                         expected_version=record.version)
        return scan_id

    def click(self, action: str, fingerprint: str, user: str = "U0ANA") -> dict[str, Any]:
        payload = {"type": "block_actions", "user": {"id": user}, "channel": {"id": "C0000000001"},
                   "message": {"ts": "1700000000.000100"},
                   "actions": [{"action_id": f"gpuwaste_{action}", "type": "button", "value": f"{action}|{fingerprint}"}]}
        return self.chat.handle(headers={}, body=urlencode({"payload": json.dumps(payload)}).encode()).body

    def thread_texts(self) -> list[str]:
        return [c["text"] for c in self.slack.calls_to("chat.postMessage") if c.get("thread_ts")]

    def actions(self, fingerprint: str) -> tuple[Any, ...]:
        record = self.store.get(fingerprint)
        assert record is not None
        return record.reclaims


@pytest.fixture(scope="module")
def kube_server() -> Iterator[FakeKubeWrites]:
    with FakeKubeWrites() as server:
        yield server


@pytest.fixture
def kube(kube_server: FakeKubeWrites) -> FakeKubeWrites:
    kube_server.forbidden = set()
    kube_server.set_objects([deployment()])
    return kube_server


@pytest.fixture(params=["sqlite", "dynamodb"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> FindingStore:
    if request.param == "sqlite":
        return SqliteFindingStore(tmp_path / "state.db")
    request.getfixturevalue("aws")
    ddb = boto3.client("dynamodb")
    stack = create_stack(boto3.client("sqs"), ddb)
    return DynamoDbFindingStore(client=ddb, table_name=stack.table_name)


def test_auto_scales_an_opted_in_idle_deployment_after_its_notice_once_and_undo_restores_it(
        any_store: FindingStore, kube: FakeKubeWrites, slack_api: FakeSlack) -> None:
    # GIVEN an opted-in namespace, mode auto, an idle high-confidence Deployment seen for 1 h
    w = World(any_store, kube, slack_api, mode=ReclaimMode.AUTO)
    f = finding(T0)
    w.scan(f)
    w.clock.at = T0 + timedelta(hours=1)
    # WHEN the run after its scan plans the action
    report = w.reclaim.run("c1", scan_id=w.scan(f))
    # THEN it is announced in the owner's thread with a deadline and a Keep button; nothing is written yet
    (planned,) = report.planned
    assert planned.status is ReclaimStatus.NOTICED and planned.deadline == T0 + timedelta(hours=3)
    assert kube.writes() == [] and any("will scale Deployment ml/trainer to 0" in t for t in w.thread_texts())
    notice = [c for c in slack_api.calls_to("chat.postMessage") if "will scale" in c["text"]][0]
    assert [e["value"] for b in notice["blocks"] if b["type"] == "actions" for e in b["elements"]] == [f"reclaim_keep|{f.fingerprint}"]
    # WHEN the deadline passes and the next scan still sees it idle; the run is then repeated (a redelivery)
    w.clock.at = T0 + timedelta(hours=3, minutes=5)
    scan_id = w.scan(f)
    first = w.reclaim.run("c1", scan_id=scan_id)
    again = w.reclaim.run("c1", scan_id=scan_id)
    # THEN exactly one PATCH of the scale subresource, as a merge patch to 0 replicas, was made
    writes = kube.writes()
    assert [(r.method, r.path, r.content_type, r.body) for r in writes] == [
        ("PATCH", SCALE_PATH, MERGE_PATCH, {"spec": {"replicas": 0}})]
    assert len(first.performed) == 1 and again.performed == [] and again.planned == []
    assert kube.object("deployments", "ml", "trainer")["spec"]["replicas"] == 0  # type: ignore[index]
    # AND the store records who, what, before/after and the evidence; the thread says so with the undo command
    (done,) = w.actions(f.fingerprint)
    assert (done.status, done.by, done.before, done.after) == (ReclaimStatus.DONE, "auto", {"replicas": 3}, {"replicas": 0})
    assert "idle H100" in done.evidence and "scan-2" in done.evidence
    assert any(f"gpuwaste undo {done.id}" in t and "replicas=3 → replicas=0" in t for t in w.thread_texts())
    # WHEN undone
    undone = w.reclaim.undo(done.id, by="ana")
    # THEN one more PATCH puts the 3 replicas back, and the store and the thread say so
    assert [(r.method, r.path, r.body) for r in kube.writes()[1:]] == [("PATCH", SCALE_PATH, {"spec": {"replicas": 3}})]
    assert kube.object("deployments", "ml", "trainer")["spec"]["replicas"] == 3  # type: ignore[index]
    assert undone.status is ReclaimStatus.UNDONE and w.actions(f.fingerprint)[0].undone_by == "ana"
    assert any(f"ana undid action {done.id}" in t for t in w.thread_texts())
    # AND a later run does not scale it down again in this open period
    w.clock.at += timedelta(hours=5)
    w.reclaim.run("c1", scan_id=w.scan(f))
    assert len(kube.writes()) == 2


def test_a_namespace_that_did_not_opt_in_is_never_touched(kube: FakeKubeWrites, slack_api: FakeSlack) -> None:
    # GIVEN mode auto with no notice, and the same idle Deployment in a namespace without the annotation
    w = World(SqliteFindingStore(":memory:"), kube, slack_api, mode=ReclaimMode.AUTO, notice=timedelta(0))
    f = finding(T0, ns_annotations={})
    vetoed = finding(T0, name="vetoed", ns_annotations=OPTED_IN, annotations={"gpuwaste.io/reclaim": "off"})
    system = finding(T0, name="sys", ns="kube-system")
    for n in range(3):
        w.clock.at = T0 + timedelta(hours=2 * n)
        report = w.reclaim.run("c1", scan_id=w.scan(f, vetoed, system))
        assert report.planned == [] and report.performed == []
    # THEN not one request reached the apiserver, and nothing was announced or recorded
    assert kube.requests == [] and w.thread_texts() == []
    assert all(w.actions(x.fingerprint) == () for x in (f, vetoed, system))


def test_dry_run_is_the_default_and_never_calls_the_apiserver(kube: FakeKubeWrites, slack_api: FakeSlack) -> None:
    # GIVEN reclaim enabled without a mode
    w = World(SqliteFindingStore(":memory:"), kube, slack_api, notice=timedelta(0))
    assert w.settings.mode is ReclaimMode.DRY_RUN
    f = finding(T0)
    w.scan(f)
    for n in range(1, 4):
        w.clock.at = T0 + timedelta(hours=2 * n)
        w.reclaim.run("c1", scan_id=w.scan(f))
    # THEN what would be done is said once in the thread and recorded, and no request was made
    (action,) = w.actions(f.fingerprint)
    assert action.status is ReclaimStatus.DRY_RUN and kube.requests == []
    assert len([t for t in w.thread_texts() if "would scale Deployment ml/trainer to 0" in t and "dry-run" in t]) == 1


def test_keep_before_the_deadline_cancels_and_becomes_a_justification(kube: FakeKubeWrites, slack_api: FakeSlack) -> None:
    w = World(SqliteFindingStore(":memory:"), kube, slack_api, mode=ReclaimMode.AUTO)
    f = finding(T0)
    w.scan(f)
    w.clock.at = T0 + timedelta(hours=1)
    w.reclaim.run("c1", scan_id=w.scan(f))
    # WHEN the owner presses Keep (twice: a redelivered click) before the deadline
    w.clock.at = T0 + timedelta(hours=2)
    texts = [w.click("reclaim_keep", f.fingerprint)["text"] for _ in range(2)]
    w.clock.at = T0 + timedelta(hours=4)
    w.reclaim.run("c1", scan_id=w.scan(f))
    # THEN nothing reaches the apiserver; the action is kept and a justification covers the finding
    assert kube.requests == [] and "will not scale" in texts[0]
    record = w.store.get(f.fingerprint)
    assert record is not None and record.justification is not None
    assert (record.justification.source, record.justification.by) == ("reclaim-keep", "<@U0ANA>")
    assert record.justification.until == T0 + timedelta(hours=2, days=7)
    assert [a.status for a in record.reclaims] == [ReclaimStatus.KEPT]


def test_approve_mode_acts_only_on_an_approvers_button_after_the_deadline(kube: FakeKubeWrites, slack_api: FakeSlack) -> None:
    w = World(SqliteFindingStore(":memory:"), kube, slack_api, mode=ReclaimMode.APPROVE, approvers=["UPLAT"])
    f = finding(T0)
    w.scan(f)
    w.clock.at = T0 + timedelta(hours=1)
    w.reclaim.run("c1", scan_id=w.scan(f))
    notice = [c for c in slack_api.calls_to("chat.postMessage") if "approver" in c["text"]][0]
    assert {e["value"].split("|")[0] for b in notice["blocks"] if b["type"] == "actions" for e in b["elements"]} == {
        "reclaim_keep", "reclaim_approve"}
    # WHEN the owner (no approver) presses Approve, and the deadline passes without an approval
    assert "not a reclaim approver" in w.click("reclaim_approve", f.fingerprint, user="U0ANA")["text"]
    w.clock.at = T0 + timedelta(hours=4)
    w.reclaim.run("c1", scan_id=w.scan(f))
    assert kube.writes() == []
    # WHEN the approver presses it (twice)
    w.click("reclaim_approve", f.fingerprint, user="UPLAT")
    w.click("reclaim_approve", f.fingerprint, user="UPLAT")
    # THEN one PATCH, recorded as the approver's
    assert [(r.method, r.path) for r in kube.writes()] == [("PATCH", SCALE_PATH)]
    (action,) = w.actions(f.fingerprint)
    assert (action.status, action.by) == (ReclaimStatus.DONE, "<@UPLAT>")


def test_a_403_is_reported_and_never_retried_as_another_verb(kube: FakeKubeWrites, slack_api: FakeSlack) -> None:
    kube.forbidden = {("patch", "deployments/scale")}
    w = World(SqliteFindingStore(":memory:"), kube, slack_api, mode=ReclaimMode.AUTO, notice=timedelta(0))
    f = finding(T0)
    w.scan(f)
    w.clock.at = T0 + timedelta(hours=1)
    report = w.reclaim.run("c1", scan_id=w.scan(f))
    w.clock.at = T0 + timedelta(hours=2)
    w.reclaim.run("c1", scan_id=w.scan(f))
    # THEN one GET and one refused PATCH, nothing else (no PUT of the Deployment, no second try)
    assert [(r.method, r.path) for r in kube.requests] == [("GET", SCALE_PATH), ("PATCH", SCALE_PATH)]
    (failed,) = report.failed
    assert failed.status is ReclaimStatus.FAILED and failed.error is not None and failed.error.startswith("403")
    assert any("answered 403" in t and "not retried" in t for t in w.thread_texts())
    assert kube.object("deployments", "ml", "trainer")["spec"]["replicas"] == 3  # type: ignore[index]


@pytest.mark.parametrize(("obj", "f_kwargs", "expected", "undo"), [
    ({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "etl", "namespace": "ml", "uid": "j1"},
      "spec": {"suspend": False}},
     {"name": "etl", "kind": "Job"},
     [("PATCH", "/apis/batch/v1/namespaces/ml/jobs/etl", MERGE_PATCH, {"spec": {"suspend": True}})],
     ("PATCH", "/apis/batch/v1/namespaces/ml/jobs/etl", {"spec": {"suspend": False}})),
    ({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": "ml", "uid": "c1"},
      "spec": {"schedule": "0 1 * * *"}},
     {"name": "nightly", "kind": "CronJob"},
     [("PATCH", "/apis/batch/v1/namespaces/ml/cronjobs/nightly", MERGE_PATCH, {"spec": {"suspend": True}})],
     ("PATCH", "/apis/batch/v1/namespaces/ml/cronjobs/nightly", {"spec": {"suspend": False}})),
    ({"apiVersion": "kubeflow.org/v1", "kind": "Notebook", "metadata": {"name": "nb", "namespace": "ml", "uid": "n1"},
      "spec": {}},
     {"name": "nb", "kind": "Notebook"},
     [("PATCH", "/apis/kubeflow.org/v1/namespaces/ml/notebooks/nb", MERGE_PATCH,
       {"metadata": {"annotations": {"kubeflow-resource-stopped": "2026-03-02T12:05:00Z"}}})],
     ("PATCH", "/apis/kubeflow.org/v1/namespaces/ml/notebooks/nb", {"metadata": {"annotations": {"kubeflow-resource-stopped": None}}})),
    ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "lost-0", "namespace": "ml", "uid": "p-77"}, "spec": {}},
     {"name": "lost", "kind": "ReplicaSet", "waste": WasteKind.ORPHANED, "pod": "lost-0", "owner_exists": False},
     [("DELETE", "/api/v1/namespaces/ml/pods/lost-0", "application/json",
       {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "p-77"}})],
     None),
])
def test_each_action_makes_exactly_its_call_and_undo_writes_the_value_before(
        kube: FakeKubeWrites, slack_api: FakeSlack, obj: dict[str, Any], f_kwargs: dict[str, Any],
        expected: list[tuple[str, str, str, Any]], undo: tuple[str, str, Any] | None) -> None:
    kube.set_objects([obj])
    w = World(SqliteFindingStore(":memory:"), kube, slack_api, mode=ReclaimMode.AUTO)
    f = finding(T0, **f_kwargs)
    w.scan(f)
    w.clock.at = T0 + timedelta(hours=1)
    w.reclaim.run("c1", scan_id=w.scan(f))
    w.clock.at = T0 + timedelta(hours=3, minutes=5)
    w.reclaim.run("c1", scan_id=w.scan(f))
    assert [(r.method, r.path, r.content_type, r.body) for r in kube.writes()] == expected
    (done,) = w.actions(f.fingerprint)
    assert done.status is ReclaimStatus.DONE
    if undo is None:
        with pytest.raises(Exception, match="nothing can restore it"):
            w.reclaim.undo(done.id, by="ana")
        assert len(kube.writes()) == 1 and kube.object("pods", "ml", "lost-0") is None
        return
    w.reclaim.undo(done.id, by="ana")
    assert [(r.method, r.path, r.body) for r in kube.writes()[1:]] == [undo]


_ACTION_OBJECTS = [
    (deployment(), {}),
    ({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": "ml", "uid": "s1"},
      "spec": {"replicas": 2}}, {"name": "db", "kind": "StatefulSet"}),
    ({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "etl", "namespace": "ml", "uid": "j1"}, "spec": {}},
     {"name": "etl", "kind": "Job"}),
    ({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": "ml", "uid": "c1"},
      "spec": {}}, {"name": "nightly", "kind": "CronJob"}),
    ({"apiVersion": "kubeflow.org/v1", "kind": "Notebook", "metadata": {"name": "nb", "namespace": "ml", "uid": "n1"},
      "spec": {}}, {"name": "nb", "kind": "Notebook"}),
    ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "lost-0", "namespace": "ml", "uid": "p-77"}, "spec": {}},
     {"name": "lost", "kind": "ReplicaSet", "waste": WasteKind.ORPHANED, "pod": "lost-0", "owner_exists": False}),
]


def _grant(method: str, path: str) -> tuple[str, str, str]:
    """(API group, resource[/subresource], RBAC verb) of a request path as the apiserver's authorizer sees it."""
    parts = path.strip("/").split("/")
    group = "" if parts[0] == "api" else parts[1]
    rest = parts[3:] if parts[0] == "api" else parts[4:]  # namespaces/NS/RESOURCE/NAME[/SUB]
    resource = rest[1] + (f"/{rest[3]}" if len(rest) > 3 else "")
    return group, resource, {"GET": "get", "PATCH": "patch", "DELETE": "delete"}[method]


def test_the_acting_role_grants_exactly_the_calls_the_actions_make(kube: FakeKubeWrites, slack_api: FakeSlack) -> None:
    import yaml

    # GIVEN every action kind performed and undone at the fake apiserver
    kube.set_objects([o for o, _ in _ACTION_OBJECTS])
    w = World(SqliteFindingStore(":memory:"), kube, slack_api, mode=ReclaimMode.AUTO, notice=timedelta(0),
              max_actions_per_team=10, max_actions_per_run=10)
    fs = [finding(T0, **kw) for _, kw in _ACTION_OBJECTS]
    w.scan(*fs)
    w.clock.at = T0 + timedelta(hours=1)
    report = w.reclaim.run("c1", scan_id=w.scan(*fs))
    assert len(report.performed) == len(_ACTION_OBJECTS)
    for done in report.performed:
        if done.kind is not ReclaimKind.DELETE_ORPHAN:
            w.reclaim.undo(done.id, by="ana")
    used = {_grant(r.method, r.path) for r in kube.requests}
    # THEN deploy/rbac-reclaim.yaml grants those (group, resource, verb) and nothing else
    root = Path(__file__).resolve().parents[2]
    role = next(d for d in yaml.safe_load_all((root / "deploy" / "rbac-reclaim.yaml").read_text())
                if d and d["kind"] == "ClusterRole")
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert used == granted


def test_at_most_n_actions_per_run_and_per_team(kube: FakeKubeWrites, slack_api: FakeSlack) -> None:
    names = [f"w{i}" for i in range(5)]
    kube.set_objects([deployment(n) for n in names])
    w = World(SqliteFindingStore(":memory:"), kube, slack_api, mode=ReclaimMode.AUTO, notice=timedelta(0),
              max_actions_per_run=3, max_actions_per_team=2)
    fs = [finding(T0, name=n) for n in names]
    w.scan(*fs)
    w.clock.at = T0 + timedelta(hours=1)
    report = w.reclaim.run("c1", scan_id=w.scan(*fs))
    # THEN one team's two, the other three left for a later run
    assert len(report.performed) == 2 and len(report.capped) == 3
    assert len([r for r in kube.writes() if r.method == "PATCH"]) == 2


def test_cli_reclaim_then_undo_against_the_state_and_a_kubeconfig(kube: FakeKubeWrites, slack_api: FakeSlack,
                                                                   tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpuwaste.cli import app

    # GIVEN a state file with the idle Deployment seen for 2 h, a config enabling auto without notice, a kubeconfig
    state = tmp_path / "state.db"
    w = World(SqliteFindingStore(state), kube, slack_api)
    f = finding(T0, ns_annotations={})  # opted in by the config's namespaces, not by annotation
    w.scan(f)
    w.clock.at = datetime.now(UTC)
    w.scan(f)
    config = tmp_path / "config.yaml"
    config.write_text("reclaim:\n  enabled: true\n  mode: auto\n  notice: 0\n  idle_for: 0\n  namespaces:\n    ml: [scale]\n")
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", kube.base_url)
    # WHEN `gpuwaste reclaim` runs twice
    args = ["--state", str(state), "--kubeconfig", str(kubeconfig)]
    first = CliRunner().invoke(app, ["reclaim", "--cluster", "c1", "--config", str(config), *args])
    second = CliRunner().invoke(app, ["reclaim", "--cluster", "c1", "--config", str(config), *args])
    # THEN one PATCH scaled it to zero, and the action is in the state
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    assert "1 planned, 1 performed" in first.output and "0 planned, 0 performed" in second.output
    assert [(r.method, r.path, r.body) for r in kube.writes()] == [("PATCH", SCALE_PATH, {"spec": {"replicas": 0}})]
    (done,) = SqliteFindingStore(state).get(f.fingerprint).reclaims  # type: ignore[union-attr]
    # WHEN `gpuwaste undo ID`
    undone = CliRunner().invoke(app, ["undo", done.id, *args, "--by", "ana"])
    # THEN the replicas are back, and undoing again is refused
    assert undone.exit_code == 0, undone.output
    assert kube.object("deployments", "ml", "trainer")["spec"]["replicas"] == 3  # type: ignore[index]
    again = CliRunner().invoke(app, ["undo", done.id, *args])
    assert again.exit_code == 2 and "undone" in again.output and len(kube.writes()) == 2


class _TlsKubeWrites(FakeKubeWrites):
    """The fake apiserver over TLS (a self-signed certificate for 127.0.0.1), as in a pod, keeping each bearer token."""

    def __init__(self, cert: Path, key: Path) -> None:
        super().__init__()
        self.cert, self.key, self.tokens = cert, key, []  # type: list[str]

    def start(self) -> _TlsKubeWrites:
        import ssl

        super().start()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, self.key)
        assert self._httpd is not None
        self._httpd.socket = ctx.wrap_socket(self._httpd.socket, server_side=True)
        return self

    def handle(self, request: HttpRequest) -> HttpResponse:
        self.tokens.append(request.headers.get("authorization", ""))
        return super().handle(request)


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(T0 - timedelta(days=3650))
            .not_valid_after(datetime.now(UTC) + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "ca.crt", tmp_path / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_cli_reclaim_in_a_pod_acts_with_the_service_account(slack_api: FakeSlack, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes.config import incluster_config
    from typer.testing import CliRunner

    from gpuwaste.cli import app

    # GIVEN a pod's environment: KUBERNETES_SERVICE_HOST/PORT pointing at a TLS apiserver, the service account's
    # token and CA where the client's in-cluster loader reads them, no kubeconfig
    cert, key = _self_signed(tmp_path)
    token = tmp_path / "token"
    token.write_text("reclaimer-sa-token")
    with _TlsKubeWrites(cert, key) as kube:
        kube.set_objects([deployment()])
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(kube.port))
        monkeypatch.delenv("KUBECONFIG", raising=False)
        monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
        monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(cert))
        state = tmp_path / "state.db"
        w = World(SqliteFindingStore(state), kube, slack_api)
        f = finding(T0, ns_annotations={})
        w.scan(f)
        w.clock.at = datetime.now(UTC)
        w.scan(f)
        config = tmp_path / "config.yaml"
        config.write_text("reclaim:\n  enabled: true\n  mode: auto\n  notice: 0\n  idle_for: 0\n  namespaces:\n    ml: [scale]\n")
        # WHEN `gpuwaste reclaim` runs without --kubeconfig
        result = CliRunner().invoke(app, ["reclaim", "--cluster", "c1", "--config", str(config), "--state", str(state)])
        # THEN the one PATCH went over TLS with the service account's token
        assert result.exit_code == 0, result.output
        assert "1 performed" in result.output
        assert [(r.method, r.path) for r in kube.writes()] == [("PATCH", SCALE_PATH)]
        assert kube.tokens and {t.lower() for t in kube.tokens} == {"bearer reclaimer-sa-token"}


def test_cli_reclaim_in_a_pod_without_a_token_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes.config import incluster_config
    from typer.testing import CliRunner

    from gpuwaste.cli import app

    # GIVEN KUBERNETES_SERVICE_HOST set but no service-account token mounted, and a state with one open finding
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "absent-token"))
    state = tmp_path / "state.db"
    store = SqliteFindingStore(state)
    LifecycleService(store=store, alerts=MemoryQueue("a"), tickets=None, settings=LifecycleSettings(),
                     clock=Clock(T0)).handle_finding(FindingMessage(scan_id="scan-1", finding=finding(T0)))
    store.close()
    config = tmp_path / "config.yaml"
    config.write_text("reclaim:\n  enabled: true\n")
    # WHEN / THEN: exit 2 naming the in-cluster service account
    result = CliRunner().invoke(app, ["reclaim", "--cluster", "c1", "--config", str(config), "--state", str(state)])
    assert result.exit_code == 2, result.output
    assert "in-cluster service account" in result.output


def _serve(state: Path, kube: FakeKubeWrites, slack: FakeSlack, clock: Clock, reclaim: dict[str, Any]) -> Any:
    from gpuwaste.commands.serve import Server
    from gpuwaste.config import GpuWasteConfig

    cfg = GpuWasteConfig.model_validate({"reclaim": reclaim, "delivery": {
        "default_channel": "#gpu-waste", "slack": {"base_url": slack.url, "bot_token": slack.token}}})
    config = k8s_client.Configuration()
    config.host = kube.base_url
    return Server(None, cfg, cluster="c1", window_s=3600, state=state, interval_s=300,  # type: ignore[arg-type]
                  clock=clock.now, actuator=KubernetesActuator(k8s_client.ApiClient(config), now=clock.now))


def test_serve_reclaim_step_notices_then_acts_after_the_notice_once(kube: FakeKubeWrites, slack_api: FakeSlack,
                                                                      tmp_path: Path) -> None:
    # GIVEN serve's state with the opted-in idle Deployment, and `reclaim` enabled in auto mode with a 2 h notice
    state = tmp_path / "state.db"
    w = World(SqliteFindingStore(state), kube, slack_api)
    f = finding(T0)
    w.scan(f)
    server = _serve(state, kube, slack_api, w.clock, {"enabled": True, "mode": "auto", "idle_for": 0, "notice": 7200})
    # WHEN serve's reclaim step runs after the scan
    first = server.reclaim_once()
    # THEN it planned and announced the action in the owner's thread, and made no write yet
    assert first is not None and len(first.planned) == 1 and first.performed == []
    assert kube.writes() == []
    assert any("will scale" in t for t in w.thread_texts())
    # WHEN the next scan, after the notice, sees it idle again, and the step runs twice (a redelivery)
    w.clock.at = T0 + timedelta(hours=3)
    w.scan(f)
    second, again = server.reclaim_once(), server.reclaim_once()
    # THEN exactly one PATCH scaled it to zero
    assert second is not None and len(second.performed) == 1 and again is not None and again.performed == []
    assert [(r.method, r.path, r.body) for r in kube.writes()] == [("PATCH", SCALE_PATH, {"spec": {"replicas": 0}})]


def test_serve_reclaim_step_is_off_unless_enabled_and_dry_run_by_default(kube: FakeKubeWrites, slack_api: FakeSlack,
                                                                         tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    w = World(SqliteFindingStore(state), kube, slack_api)
    w.scan(finding(T0))
    w.clock.at = T0 + timedelta(hours=3)
    w.scan(finding(T0))
    # GIVEN no `reclaim` section: the step does nothing
    assert _serve(state, kube, slack_api, w.clock, {}).reclaim_once() is None
    # GIVEN `reclaim.enabled` only: dry-run, said in the thread, never a write
    report = _serve(state, kube, slack_api, w.clock, {"enabled": True, "idle_for": 0}).reclaim_once()
    assert report is not None and len(report.planned) == 1 and report.performed == []
    assert kube.writes() == [] and any("dry-run" in t for t in w.thread_texts())


def test_approve_without_cluster_credentials_is_recorded_for_the_next_run(kube: FakeKubeWrites,
                                                                          slack_api: FakeSlack) -> None:
    # GIVEN approve mode, a noticed action past its deadline, and the Lambda's service: no actuator
    w = World(SqliteFindingStore(":memory:"), kube, slack_api, mode=ReclaimMode.APPROVE, approvers=["UPLAT"])
    f = finding(T0)
    w.scan(f)
    w.clock.at = T0 + timedelta(hours=1)
    scan_id = w.scan(f)
    w.reclaim.run("c1", scan_id=scan_id)
    w.clock.at = T0 + timedelta(hours=4)
    scan_id = w.scan(f)
    lambda_side = ReclaimService(store=w.store, actuator=None, notifier=w.notifier, settings=w.settings, now=w.clock.now)
    # WHEN the approver presses Approve there
    reply = lambda_side.approve(f.fingerprint, by="UPLAT")
    # THEN nothing is written to the cluster, the reply says who performs it, and the next run (with credentials) does
    assert kube.writes() == [] and "gpuwaste serve" in reply and "gpuwaste reclaim" in reply
    report = w.reclaim.run("c1", scan_id=scan_id)
    assert len(report.performed) == 1 and report.performed[0].by == "UPLAT"
    assert [(r.method, r.path) for r in kube.writes()] == [("PATCH", SCALE_PATH)]


# -- property: never an action on a finding that is not idle with high confidence at the current scan -------------
#: Each random finding starts eligible and gets none, one or two of these faults; only one without any may be acted on.
FAULTS = ("underused", "data_quality", "stalled", "medium", "low", "old_scan", "missed", "superseded", "kube-system",
          "gpu-operator", "ns_off", "workload_off", "not_opted", "bogus_opt", "justified", "resolved", "young")
_KIND_FAULTS = {"underused": WasteKind.UNDERUSED, "data_quality": WasteKind.DATA_QUALITY, "stalled": WasteKind.STALLED}
_fleet_item = st.fixed_dictionaries({
    "faults": st.one_of(st.just(frozenset()), st.sets(st.sampled_from(FAULTS), min_size=1, max_size=1),
                        st.sets(st.sampled_from(FAULTS), min_size=2, max_size=2)),
    "waste": st.sampled_from([WasteKind.IDLE, WasteKind.INFERENCE_IDLE]),
    "ns": st.sampled_from(["ml", "vision"]),
    "opt": st.sampled_from(["scale", "all", "scale,suspend;notice=0m"]),
})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fleet=st.lists(_fleet_item, min_size=2, max_size=10),
       policy=st.fixed_dictionaries({"mode": st.sampled_from([ReclaimMode.AUTO] * 3 + [ReclaimMode.APPROVE, ReclaimMode.DRY_RUN]),
                                     "per_run": st.sampled_from([0, 1, 3, 20, 20, 20]),
                                     "per_team": st.sampled_from([0, 1, 2, 20, 20, 20])}))
def test_property_no_call_unless_idle_high_confidence_at_the_current_scan(
        kube_server: FakeKubeWrites, fleet: list[dict[str, Any]], policy: dict[str, Any]) -> None:
    check_fleet(kube_server, fleet, policy)


@pytest.mark.parametrize("fault", FAULTS)
def test_each_rule_alone_stops_the_action(kube_server: FakeKubeWrites, fault: str) -> None:
    # GIVEN two findings alike but for one fault, in auto mode with room for both: only the faultless one is acted on
    eligible = {"faults": frozenset(), "waste": WasteKind.IDLE, "ns": "ml", "opt": "scale"}
    check_fleet(kube_server, [eligible, {**eligible, "faults": frozenset({fault})}],
                {"mode": ReclaimMode.AUTO, "per_run": 20, "per_team": 20})
    assert [r.path.split("/")[-2] for r in kube_server.writes()] == ["w0"]


def check_fleet(kube_server: FakeKubeWrites, fleet: list[dict[str, Any]], policy: dict[str, Any]) -> None:
    """Store the fleet's records, run reclaim twice on the current scan, and check the calls at the fake apiserver."""
    now = T0 + timedelta(days=3)
    current = "scan-now"
    store = SqliteFindingStore(":memory:")
    objects, eligible_paths = [], set()
    for i, item in enumerate(fleet):
        faults, name = item["faults"], f"w{i}"
        ns = next((n for n in ("kube-system", "gpu-operator") if n in faults), item["ns"])
        objects.append(deployment(name, ns=ns))
        ns_opt = "off" if "ns_off" in faults else "" if "not_opted" in faults else "gpu,memory" if "bogus_opt" in faults \
            else item["opt"]
        f = finding(now, name=name, ns=ns, waste=next((_KIND_FAULTS[k] for k in faults if k in _KIND_FAULTS), item["waste"]),
                    confidence=Confidence.LOW if "low" in faults else Confidence.MEDIUM if "medium" in faults else Confidence.HIGH,
                    ns_annotations={"gpuwaste.io/reclaim": ns_opt} if ns_opt else {},
                    annotations={"gpuwaste.io/reclaim": "off"} if "workload_off" in faults else {},
                    money_owner="other" if "superseded" in faults else None)
        record = FindingRecord(
            fingerprint=f.fingerprint, cluster="c1", namespace=ns, workload=name, kind=f.kind.value,
            detector=f.detector, state=FindingState.RESOLVED if "resolved" in faults else FindingState.OPEN,
            first_seen=now - timedelta(minutes=10 if "young" in faults else 600), last_seen=now,
            last_scan_id="scan-old" if "old_scan" in faults else current, missed_scans=1 if "missed" in faults else 0,
            usd_per_day=Decimal(10 + i), team="ml" if i % 2 else "vision", finding_json=f.model_dump_json(),
            justification=Justification(kind="expected", reason="r", by="u", at=now, until=now + timedelta(days=1))
            if "justified" in faults else None, version=1)
        store.put_new(record)
        if not faults:
            eligible_paths.add(f"/apis/apps/v1/namespaces/{ns}/deployments/{name}/scale")
    kube_server.forbidden = set()
    kube_server.set_objects(objects)
    config = k8s_client.Configuration()
    config.host = kube_server.base_url
    reclaim_settings = ReclaimSettings(enabled=True, mode=policy["mode"], notice=timedelta(0), idle_for=timedelta(hours=1),
                                       max_actions_per_run=policy["per_run"], max_actions_per_team=policy["per_team"])
    service = ReclaimService(store=store, actuator=KubernetesActuator(k8s_client.ApiClient(config)), notifier=None,
                             settings=reclaim_settings, now=lambda: now)
    service.run("c1", scan_id=current)
    service.run("c1", scan_id=current)  # redelivered
    writes = kube_server.writes()
    # THEN every call is on a finding without a fault (idle, high confidence, current scan, opted in…), once, within
    # the caps; none at all unless the mode is auto; and in auto every fault-free finding the caps allow is acted on
    paths = [r.path for r in writes]
    assert set(paths) <= eligible_paths
    assert len(paths) == len(set(paths))
    assert len(paths) <= min(policy["per_run"], 2 * policy["per_team"])
    if policy["mode"] is not ReclaimMode.AUTO:
        assert writes == []
    elif policy["per_run"] >= len(fleet) and policy["per_team"] >= len(fleet):
        assert set(paths) == eligible_paths  # and nothing eligible was left out


def test_serve_runs_the_reclaim_step_after_each_scan(tmp_path: Path) -> None:
    from gpuwaste.bootstrap import local
    from gpuwaste.commands.serve import Server
    from gpuwaste.config import GpuWasteConfig

    def server(cfg: GpuWasteConfig) -> Server:
        sources = local.recording_sources(local.demo_recording(), cfg)
        assert sources.recording is not None
        return Server(sources, cfg, cluster=sources.recording.cluster, window_s=sources.recording.meta.window_s,
                      state=tmp_path / "state.db", interval_s=60, fixed_time=sources.recording.end_time())

    # GIVEN a scan of the demo recording without reclaim: no action on any record
    assert server(GpuWasteConfig()).scan_once()
    store = SqliteFindingStore(tmp_path / "state.db")
    (cluster,) = {r.cluster for r in store.history(since=T0 - timedelta(days=3650), until=datetime.now(UTC))}
    records = store.open_for_cluster(cluster)
    assert records and all(not r.reclaims for r in records)
    namespaces = sorted({r.namespace for r in records if r.namespace})
    store.close()
    # WHEN serve scans again with reclaim enabled for those namespaces (mode left at its default)
    cfg = GpuWasteConfig.model_validate({"reclaim": {"enabled": True, "idle_for": 0,
                                                     "namespaces": {ns: ["scale", "suspend", "delete-orphan", "stop-notebook"] for ns in namespaces}}})
    assert server(cfg).scan_once()
    # THEN the scan was followed by the reclaim step: dry-run actions recorded at that scan, none performed
    store = SqliteFindingStore(tmp_path / "state.db")
    actions = [a for r in store.open_for_cluster(cluster) for a in r.reclaims]
    store.close()
    assert actions and {a.status for a in actions} == {ReclaimStatus.DRY_RUN}


def test_the_lambda_interaction_service_keeps_and_approves_without_touching_the_cluster(
        kube: FakeKubeWrites, slack_api: FakeSlack, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuwaste.bootstrap import delivery, interactions, pipeline
    from gpuwaste.config import GpuWasteConfig

    # GIVEN two noticed approve-mode actions in the store, and the function's configuration enabling reclaim
    kube.set_objects([deployment(), deployment("eval")])
    w = World(SqliteFindingStore(":memory:"), kube, slack_api, mode=ReclaimMode.APPROVE, approvers=["UPLAT"])
    kept, approved = finding(T0), finding(T0, name="eval")
    w.scan(kept, approved)
    w.clock.at = T0 + timedelta(hours=1)
    w.reclaim.run("c1", scan_id=w.scan(kept, approved))
    cfg = GpuWasteConfig.model_validate({
        "reclaim": {"enabled": True, "mode": "approve", "approvers": ["UPLAT"]},
        "delivery": {"default_channel": "#gpu-waste",
                     "slack": {"base_url": slack_api.url, "bot_token": slack_api.token, "signing_secret": "s" * 32}}})
    monkeypatch.setattr(pipeline, "config", lambda: cfg)
    monkeypatch.setattr(delivery, "lambda_store", lambda: w.store)
    interactions.interaction_service.cache_clear()
    try:
        service = interactions.interaction_service()
        assert service.reclaim is not None and service.reclaim.actuator is None
        w.chat = service
        service.verifier = None  # the request verification has its own tests; here the buttons' effect
        # WHEN the owner presses Keep on one and the approver Approve on the other
        w.click("reclaim_keep", kept.fingerprint, user="U0ANA")
        w.click("reclaim_approve", approved.fingerprint, user="UPLAT")
    finally:
        interactions.interaction_service.cache_clear()
    # THEN no call reached the cluster; Keep is a justification and the action KEPT; Approve is recorded
    assert kube.requests == []
    record = w.store.get(kept.fingerprint)
    assert record is not None and record.justification is not None and record.reclaims[-1].status is ReclaimStatus.KEPT
    assert (w.actions(approved.fingerprint)[-1].by or "").strip("<@>") == "UPLAT"
    assert any("gpuwaste serve" in t for t in w.thread_texts())
    # AND without reclaim in the configuration the buttons say it is not configured
    monkeypatch.setattr(pipeline, "config", lambda: cfg.model_copy(update={"reclaim": type(cfg.reclaim)()}))
    try:
        assert interactions.interaction_service().reclaim is None
    finally:
        interactions.interaction_service.cache_clear()


def test_serve_acts_with_the_clusters_kubernetes_credentials_or_only_announces(kube: FakeKubeWrites,
                                                                               tmp_path: Path) -> None:
    from gpuwaste.commands.serve import acting_actuator
    from gpuwaste.models.settings import ClusterConfig, KubernetesSettings

    # GIVEN a cluster whose kubernetes section names a kubeconfig for the fake apiserver
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", kube.base_url)
    actuator = acting_actuator(ClusterConfig(name="c1", kubernetes=KubernetesSettings(kubeconfig=str(kubeconfig))))
    # THEN serve's actuator speaks to that apiserver
    assert isinstance(actuator, KubernetesActuator)
    assert actuator.api_client.configuration.host == kube.base_url
    # GIVEN a kubeconfig that does not exist: no actuator (announced and recorded only)
    missing = ClusterConfig(name="c1", kubernetes=KubernetesSettings(kubeconfig=str(tmp_path / "absent")))
    assert acting_actuator(missing) is None


def test_serve_slack_endpoint_approves_with_the_reclaim_service_once(kube: FakeKubeWrites, slack_api: FakeSlack,
                                                                     tmp_path: Path) -> None:
    import io
    import time

    from gpuwaste.commands.serve import SLACK_PATH, Server
    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.sinks.slack_signature import sign

    # GIVEN serve's state with an approve-mode action past its deadline, and serve with a Slack signing secret
    state = tmp_path / "state.db"
    w = World(SqliteFindingStore(state), kube, slack_api, mode=ReclaimMode.APPROVE, approvers=["UPLAT"])
    f = finding(T0)
    w.scan(f)
    w.clock.at = T0 + timedelta(hours=1)
    w.reclaim.run("c1", scan_id=w.scan(f))
    w.clock.at = T0 + timedelta(hours=4)
    w.scan(f)
    secret = "s" * 32
    cfg = GpuWasteConfig.model_validate({
        "reclaim": {"enabled": True, "mode": "approve", "approvers": ["UPLAT"], "idle_for": 3600},
        "delivery": {"default_channel": "#gpu-waste",
                     "slack": {"base_url": slack_api.url, "bot_token": slack_api.token, "signing_secret": secret}}})
    config = k8s_client.Configuration()
    config.host = kube.base_url
    server = Server(None, cfg, cluster="c1", window_s=3600, state=state, interval_s=300,  # type: ignore[arg-type]
                    clock=w.clock.now, actuator=KubernetesActuator(k8s_client.ApiClient(config), now=w.clock.now))
    app_ = server.wsgi_app()
    payload = {"type": "block_actions", "user": {"id": "UPLAT"}, "channel": {"id": "C0000000001"},
               "message": {"ts": "1700000000.000100"},
               "actions": [{"action_id": "gpuwaste_reclaim_approve", "type": "button",
                            "value": f"reclaim_approve|{f.fingerprint}"}]}
    body = urlencode({"payload": json.dumps(payload)}).encode()

    def post(signature: str, ts: str) -> str:
        seen: dict[str, str] = {}
        environ = {"PATH_INFO": SLACK_PATH, "REQUEST_METHOD": "POST", "CONTENT_LENGTH": str(len(body)),
                   "wsgi.input": io.BytesIO(body), "HTTP_X_SLACK_REQUEST_TIMESTAMP": ts,
                   "HTTP_X_SLACK_SIGNATURE": signature, "CONTENT_TYPE": "application/x-www-form-urlencoded"}
        b"".join(app_(environ, lambda status, headers: seen.update(status=status)))
        return seen["status"]

    ts = str(int(time.time()))
    # WHEN a forged request, then the approver's signed press, then the same signed request again (a replay)
    forged = post("v0=" + "0" * 64, ts)
    signed = post(sign(secret, ts, body), ts)
    replay = post(sign(secret, ts, body), ts)
    # THEN only the signed press acted: one PATCH scaled it to zero; forged and replay are 401
    assert (forged, signed, replay) == ("401 Unauthorized", "200 OK", "401 Unauthorized")
    assert [(r.method, r.path, r.body) for r in kube.writes()] == [("PATCH", SCALE_PATH, {"spec": {"replicas": 0}})]
    assert w.actions(f.fingerprint)[-1].status is ReclaimStatus.DONE

"""Integration: `KubernetesClusterSource` against the fake kube-apiserver (real HTTP, the API's JSON).

The live path must give the same `ClusterState` as the recording path on the same objects, page with
`limit`/`continue`, restart a list once on `410 Expired`, and translate every failure into the
product's errors.
"""

from __future__ import annotations

import base64
import json
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from gpuwaste.errors import ConfigError, PermanentError, SourceAuthError, SourceUnavailableError
from gpuwaste.fleet.generator import FleetSpec, generate_fleet
from gpuwaste.models.cluster import ClusterState
from gpuwaste.models.settings import ClusterReadSettings, KubernetesSettings
from gpuwaste.sources.kubernetes import DRA_VERSIONS, LISTS, KubernetesClusterSource, _dra_lists
from gpuwaste.sources.recording import RecordingClusterSource
from tests.servers.kube_api import FakeKubeApi, KubeApiFactory, kube_status, write_kubeconfig

pytestmark = pytest.mark.integration

AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
PLURALS = {
    "Pod": "pods",
    "Node": "nodes",
    "Namespace": "namespaces",
    "ReplicaSet": "replicasets",
    "Deployment": "deployments",
    "StatefulSet": "statefulsets",
    "DaemonSet": "daemonsets",
    "Job": "jobs",
    "CronJob": "cronjobs",
}


def _split(objects: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    by: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        by.setdefault(PLURALS[obj["kind"]], []).append(obj)
    pods, nodes = by.pop("pods", []), by.pop("nodes", [])
    return pods, nodes, by


def _source(server: FakeKubeApi, tmp_path: Path, *, page_size: int = 500, token: str | None = None, **kw: Any) -> KubernetesClusterSource:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url, token)
    settings = KubernetesSettings(mode="kubeconfig", kubeconfig=str(kubeconfig), page_size=page_size, timeout_s=5)
    return KubernetesClusterSource.from_settings(settings, cluster="demo", **kw)


def _normalised(state: ClusterState) -> dict[str, Any]:
    data = state.model_dump(exclude={"source", "owner_kinds_listed"})
    data["pods"] = sorted(data["pods"], key=lambda p: (p["namespace"], p["name"]))
    data["nodes"] = sorted(data["nodes"], key=lambda n: n["name"])
    return data


def _pod(name: str, owner: tuple[str, str, str] | None, *, ns: str = "ml", gpus: int = 1) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{name}"}
    if owner:
        api, kind, owner_name = owner
        meta["ownerReferences"] = [{"apiVersion": api, "kind": kind, "name": owner_name, "uid": f"uid-{owner_name}", "controller": True}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
        "status": {"phase": "Running"},
    }


def _controller(api: str, kind: str, name: str, parent: tuple[str, str] | None = None, *, ns: str = "ml") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{name}"}
    if parent:
        meta["ownerReferences"] = [{"apiVersion": api, "kind": parent[0], "name": parent[1], "uid": f"uid-{parent[1]}", "controller": True}]
    return {"apiVersion": api, "kind": kind, "metadata": meta}


NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8"}},
    "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}},
}


def test_kubernetes_source_matches_recording_path_on_demo_fleet(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN the demo fleet served by the fake apiserver and the same objects written as a kubectl List
    fleet = generate_fleet(FleetSpec())
    pods, nodes, others = _split(fleet.objects)
    server = kube_api(pods, nodes, others)
    recording = tmp_path / "cluster.json"
    recording.write_text(json.dumps(fleet.kube_list()))
    # WHEN both sources read the cluster
    with _source(server, tmp_path) as source:
        live = source.cluster_state(at=AT)
    recorded = RecordingClusterSource(recording, cluster="demo").cluster_state(at=AT)
    # THEN the states are equal, and the live one judged every controller kind (DaemonSet included)
    assert live.pods, "the demo fleet has GPU pods"
    assert _normalised(live) == _normalised(recorded)
    assert live.owner_kinds_listed == {"ReplicaSet", "Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"}
    assert live.source == f"kubernetes {server.url}"


def test_kubernetes_source_builds_no_client_model_objects(kube_api: KubeApiFactory, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the demo fleet served by the fake apiserver, and every kubernetes client model class counting the
    # objects built from it (V1Pod, V1Node, V1ObjectMeta, ... — what the client's deserializer builds)
    import kubernetes.client.models as client_models  # noqa: PLC0415

    built: dict[str, int] = {}
    for name in dir(client_models):
        cls = getattr(client_models, name)
        if isinstance(cls, type) and hasattr(cls, "openapi_types"):
            def counting(self: Any, *args: Any, __init: Any = cls.__init__, __name: str = name, **kwargs: Any) -> None:
                built[__name] = built.get(__name, 0) + 1
                __init(self, *args, **kwargs)

            monkeypatch.setattr(cls, "__init__", counting)
    fleet = generate_fleet(FleetSpec())
    pods, nodes, others = _split(fleet.objects)
    server = kube_api(pods, nodes, others)
    # WHEN the cluster is read
    with _source(server, tmp_path) as source:
        state = source.cluster_state(at=AT)
    # THEN the state has the fleet's GPU pods and nodes, read from the raw JSON: not one client model object was built
    assert state.pods and state.nodes
    assert built == {}
    # (the counting itself works: one model built by hand is counted)
    client_models.V1ObjectMeta(name="control")
    assert built == {"V1ObjectMeta": 1}


def test_kubernetes_source_pages_with_limit_and_continue(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN five GPU pods and a page size of 2
    server = kube_api([_pod(f"p{i}", None) for i in range(5)], [NODE])
    # WHEN the source lists the cluster
    with _source(server, tmp_path, page_size=2) as source:
        state = source.cluster_state(at=AT)
    # THEN pods came in three requests with limit=2, the later ones carrying the continue token
    pod_requests = server.requests_to("/api/v1/pods")
    assert [r.query.get("limit") for r in pod_requests] == ["2", "2", "2"]
    assert "continue" not in pod_requests[0].query
    assert all(r.query.get("continue") for r in pod_requests[1:])
    assert sorted(p.name for p in state.pods) == ["p0", "p1", "p2", "p3", "p4"]


def test_kubernetes_source_restarts_a_list_once_when_continue_expires(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN pods over three pages, and etcd compaction right after the first page
    server = kube_api([_pod(f"p{i}", None) for i in range(5)], [NODE])
    expired: list[str] = []

    def compact_once(line: str) -> None:
        if line.startswith("pods:") and not expired:
            expired.append(line)
            server.expire_continue_tokens()

    # WHEN the source lists the cluster
    with _source(server, tmp_path, page_size=2, progress=compact_once) as source:
        state = source.cluster_state(at=AT)
    # THEN the pod list restarted from scratch once and every pod is there exactly once
    pod_requests = server.requests_to("/api/v1/pods")
    starts = [r for r in pod_requests if "continue" not in r.query]
    assert len(starts) == 2
    assert len(pod_requests) == 1 + 1 + 3  # first page, the expired continue, then a full fresh list
    assert sorted(p.name for p in state.pods) == ["p0", "p1", "p2", "p3", "p4"]


def test_kubernetes_source_fails_clearly_when_continue_expires_twice(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN compaction after every page of pods
    server = kube_api([_pod(f"p{i}", None) for i in range(5)], [NODE])

    def compact(line: str) -> None:
        if line.startswith("pods:"):
            server.expire_continue_tokens()

    # WHEN / THEN the second expiry is a retryable error that says what happened and what to change
    with _source(server, tmp_path, page_size=2, progress=compact) as source, pytest.raises(SourceUnavailableError) as err:
        source.cluster_state(at=AT)
    assert "expired twice" in str(err.value)
    assert "page_size" in str(err.value)


def test_kubernetes_source_410_on_a_continue_from_fail_next_restarts(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN the fake answers the next request (the first continue) with the apiserver's 410 Status
    server = kube_api([_pod(f"p{i}", None) for i in range(3)], [NODE])
    armed: list[bool] = []

    def inject(line: str) -> None:
        if line.startswith("pods:") and not armed:
            armed.append(True)
            server.fail_next(410, body=kube_status(410))

    # WHEN the source lists
    with _source(server, tmp_path, page_size=2, progress=inject) as source:
        state = source.cluster_state(at=AT)
    # THEN it restarted and got every pod
    assert sorted(p.name for p in state.pods) == ["p0", "p1", "p2"]


def test_kubernetes_source_401_is_auth_error(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN a server that wants a token the kubeconfig does not have
    server = kube_api([_pod("p0", None)], [NODE], token="right")
    # WHEN / THEN
    with _source(server, tmp_path, token="wrong") as source, pytest.raises(SourceAuthError) as err:
        source.cluster_state(at=AT)
    assert "401" in str(err.value)
    assert "wrong" not in str(err.value)


def test_kubernetes_source_403_names_the_denied_resource(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN RBAC that denies the first list (pods)
    server = kube_api([_pod("p0", None)], [NODE])
    server.fail_next(403, body=kube_status(403, 'pods is forbidden: User "gpuwaste" cannot list resource "pods"'))
    # WHEN / THEN the error names the verb, the resource and the RBAC file
    with _source(server, tmp_path) as source, pytest.raises(SourceAuthError) as err:
        source.cluster_state(at=AT)
    message = str(err.value)
    assert "list pods" in message
    assert "deploy/rbac.yaml" in message


def test_kubernetes_source_403_on_a_controller_kind_names_its_group(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN pods, nodes and namespaces are readable but replicasets are denied (4th request)
    server = kube_api([_pod("p0", None)], [NODE])

    def deny_replicasets(line: str) -> None:
        if line.startswith("namespaces:"):
            server.fail_next(403)

    # WHEN / THEN
    with _source(server, tmp_path, progress=deny_replicasets) as source, pytest.raises(SourceAuthError) as err:
        source.cluster_state(at=AT)
    assert "list replicasets.apps" in str(err.value)


def test_kubernetes_source_500_is_retryable(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN an apiserver failing with 500
    server = kube_api([_pod("p0", None)], [NODE])
    server.fail_next(500)
    # WHEN / THEN
    with _source(server, tmp_path) as source, pytest.raises(SourceUnavailableError) as err:
        source.cluster_state(at=AT)
    assert "HTTP 500" in str(err.value)


def test_kubernetes_source_other_4xx_is_permanent(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN an apiserver answering 400
    server = kube_api([_pod("p0", None)], [NODE])
    server.fail_next(400)
    # WHEN / THEN
    with _source(server, tmp_path) as source, pytest.raises(PermanentError) as err:
        source.cluster_state(at=AT)
    assert not isinstance(err.value, SourceAuthError)
    assert "HTTP 400" in str(err.value)


def test_kubernetes_source_unreachable_is_retryable_without_credentials(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN a server that is stopped (its port refuses connections), and a URL with user info
    server = kube_api([], [])
    url = server.url
    server.stop()
    kubeconfig = write_kubeconfig(tmp_path / "kc", url.replace("http://", "http://user:secret@"), "tok")
    settings = KubernetesSettings(kubeconfig=str(kubeconfig), timeout_s=2)
    # WHEN / THEN
    with KubernetesClusterSource.from_settings(settings, cluster="x") as source, pytest.raises(SourceUnavailableError) as err:
        source.cluster_state(at=AT)
    assert url.removeprefix("http://") in str(err.value)
    assert "secret" not in str(err.value)


def test_kubernetes_source_kubeconfig_token_is_sent_as_bearer(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN a server that checks a bearer token and a kubeconfig holding it
    server = kube_api([_pod("p0", None)], [NODE], token="t0ken")
    # WHEN
    with _source(server, tmp_path, token="t0ken") as source:
        state = source.cluster_state(at=AT)
    # THEN every request carried it
    assert [p.name for p in state.pods] == ["p0"]
    assert {r.headers.get("authorization") for r in server.requests} == {"Bearer t0ken"}


def test_kubernetes_source_eks_mode_sends_a_fresh_token_per_request(kube_api: KubeApiFactory) -> None:
    # GIVEN "eks" mode with a token provider that hands out a new token per call (renewal)
    server = kube_api([_pod("p0", None)], [NODE])
    issued: list[str] = []

    def provider() -> str:
        issued.append(f"k8s-aws-v1.tok{len(issued)}")
        return issued[-1]

    settings = KubernetesSettings(mode="eks", eks_cluster_name="prod", eks_region="us-east-1", server=server.url)
    # WHEN
    with KubernetesClusterSource.from_settings(settings, cluster="prod", token_provider=provider) as source:
        source.cluster_state(at=AT)
    # THEN each request asked the provider and sent what it returned
    sent = [r.headers.get("authorization") for r in server.requests]
    assert len(sent) == 12  # nine core/apps/batch lists + ResourceClaims, ResourceSlices, DeviceClasses
    assert all(h and h.startswith("Bearer k8s-aws-v1.tok") for h in sent)
    assert sent[-1] == f"Bearer {issued[-1]}"


def test_kubernetes_source_eks_mode_writes_the_ca_bundle(kube_api: KubeApiFactory) -> None:
    # GIVEN "eks" mode with base64 CA data
    server = kube_api([], [])
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    settings = KubernetesSettings(
        mode="eks", eks_cluster_name="prod", eks_region="us-east-1", server=server.url, ca_data=base64.b64encode(pem).decode()
    )
    # WHEN
    source = KubernetesClusterSource.from_settings(settings, cluster="prod", token_provider=lambda: "k8s-aws-v1.x")
    # THEN the client verifies against a file holding exactly that CA
    ca_path = source.api_client.configuration.ssl_ca_cert
    source.close()
    assert Path(ca_path).read_bytes() == pem


def test_kubernetes_source_resolves_replicaset_to_deployment_via_api(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN pod → ReplicaSet → Deployment, all served
    pod = _pod("web-abc12-x", ("apps/v1", "ReplicaSet", "web-abc12"))
    rs = _controller("apps/v1", "ReplicaSet", "web-abc12", ("Deployment", "web"))
    dep = _controller("apps/v1", "Deployment", "web")
    server = kube_api([pod], [NODE], {"replicasets": [rs], "deployments": [dep]})
    # WHEN
    with _source(server, tmp_path) as source:
        (got,) = source.cluster_state(at=AT).pods
    # THEN the top owner is the Deployment, read from the API
    assert (got.workload.kind, got.workload.name, got.workload.resolution) == ("Deployment", "web", "api")
    assert got.workload.chain == ("ReplicaSet/web-abc12", "Deployment/web")
    assert got.workload.exists is True


def test_kubernetes_source_marks_pod_of_missing_replicaset_as_orphan(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN a pod whose ReplicaSet is gone, while replicasets were listed
    pod = _pod("old-abc12-x", ("apps/v1", "ReplicaSet", "old-abc12"))
    server = kube_api([pod], [NODE], {"replicasets": [_controller("apps/v1", "ReplicaSet", "other-1")]})
    # WHEN
    with _source(server, tmp_path) as source:
        (got,) = source.cluster_state(at=AT).pods
    # THEN its workload is known not to exist
    assert got.workload.exists is False
    assert got.workload.kind == "ReplicaSet"


def test_kubernetes_source_resolves_job_to_cronjob(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN pod → Job → CronJob
    pod = _pod("nightly-28711440-abcde", ("batch/v1", "Job", "nightly-28711440"))
    job = _controller("batch/v1", "Job", "nightly-28711440", ("CronJob", "nightly"))
    cron = _controller("batch/v1", "CronJob", "nightly")
    server = kube_api([pod], [NODE], {"jobs": [job], "cronjobs": [cron]})
    # WHEN
    with _source(server, tmp_path) as source:
        (got,) = source.cluster_state(at=AT).pods
    # THEN
    assert (got.workload.kind, got.workload.name, got.workload.resolution, got.workload.exists) == ("CronJob", "nightly", "api", True)


def test_kubernetes_source_keeps_custom_resource_owner_as_top(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN a pod owned by a PyTorchJob (a kind the source does not list)
    pod = _pod("train-master-0", ("kubeflow.org/v1", "PyTorchJob", "train"))
    server = kube_api([pod], [NODE])
    # WHEN
    with _source(server, tmp_path) as source:
        (got,) = source.cluster_state(at=AT).pods
    # THEN the custom resource is the workload; its existence is not judged
    assert (got.workload.kind, got.workload.name, got.workload.api_version) == ("PyTorchJob", "train", "kubeflow.org/v1")
    assert got.workload.exists is None


def test_kubernetes_source_keeps_only_gpu_pods_and_exporters(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN a GPU pod, a CPU-only pod and a dcgm-exporter pod
    cpu = _pod("cpu-only", None)
    cpu["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "2"}}
    exporter = _pod("nvidia-dcgm-exporter-abcde", None, ns="gpu-operator")
    exporter["spec"]["containers"][0]["resources"] = {}
    exporter["status"]["podIP"] = "10.1.2.3"
    server = kube_api([_pod("gpu", None), cpu, exporter], [NODE])
    # WHEN
    with _source(server, tmp_path) as source:
        state = source.cluster_state(at=AT)
    # THEN only the GPU pod is a pod of the state, and the exporter is mapped to its node
    assert [p.name for p in state.pods] == ["gpu"]
    assert state.exporter_pods == {"nvidia-dcgm-exporter-abcde": "gpu-1"}
    assert state.exporter_pod_ips == {"10.1.2.3": "gpu-1"}


def test_kubernetes_source_namespace_setting_lists_one_namespace(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN GPU pods in two namespaces, and a source limited to one
    server = kube_api([_pod("a", None, ns="ml"), _pod("b", None, ns="other")], [NODE])
    # WHEN
    with _source(server, tmp_path, read=ClusterReadSettings(namespace="ml")) as source:
        state = source.cluster_state(at=AT)
    # THEN only that namespace's pods were requested and returned
    assert [p.name for p in state.pods] == ["a"]
    assert server.requests_to("/api/v1/namespaces/ml/pods")
    assert not server.requests_to("/api/v1/pods")
    assert set(state.namespace_labels) == {"ml"}


def test_kubernetes_source_only_reads(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN a small cluster
    server = kube_api([_pod("p0", None)], [NODE])
    # WHEN
    with _source(server, tmp_path) as source:
        source.cluster_state(at=AT)
    # THEN the adapter only read: nine lists and the three DRA lists (resource.k8s.io/v1), all GET
    assert {r.method for r in server.requests} == {"GET"}
    assert len(server.requests) == 12


def test_kubernetes_source_times_out_on_a_silent_server(tmp_path: Path) -> None:
    # GIVEN a TCP port that accepts connections but never answers
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        kubeconfig = write_kubeconfig(tmp_path / "kc", url, "tok")
        settings = KubernetesSettings(kubeconfig=str(kubeconfig), timeout_s=0.3)
        # WHEN / THEN the request gives up after its timeout with a retryable error
        with KubernetesClusterSource.from_settings(settings, cluster="x") as source, pytest.raises(SourceUnavailableError) as err:
            source.cluster_state(at=AT)
    assert "Timeout" in str(err.value)


def test_rbac_grants_exactly_the_reads_the_adapter_makes() -> None:
    # GIVEN deploy/rbac.yaml and the collections the adapter lists
    docs = list(yaml.safe_load_all((Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml").read_text()))
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    # WHEN the rules are flattened to (group, resource, verb)
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    # THEN every list the adapter makes is granted, and nothing beyond get/list/watch on those resources
    dra = {(s.group, s.plural) for version, api in DRA_VERSIONS for s in _dra_lists(version, api)}
    assert {(s.group, s.plural, "list") for s in LISTS} <= granted
    assert {(g, r, "list") for g, r in dra} <= granted
    assert {v for _, _, v in granted} == {"get", "list", "watch"}
    assert {(g, r) for g, r, _ in granted} == {(s.group, s.plural) for s in LISTS} | dra
    subjects = {(s["kind"], s["name"]) for d in docs if d["kind"] == "ClusterRoleBinding" for s in d["subjects"]}
    assert subjects == {("Group", "gpuwaste-readers"), ("ServiceAccount", "gpuwaste")}


def test_kubernetes_source_missing_kubeconfig_or_context_is_config_error(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN a kubeconfig path that does not exist, and a real kubeconfig asked for an unknown context
    server = kube_api([], [])
    kubeconfig = write_kubeconfig(tmp_path / "kc", server.url, "tok")
    missing = KubernetesSettings(kubeconfig=str(tmp_path / "nope"))
    wrong_context = KubernetesSettings(kubeconfig=str(kubeconfig), context="elsewhere")
    # WHEN / THEN both fail before any request, naming the mode
    with pytest.raises(ConfigError, match=r"kubernetes \(kubeconfig\)"):
        KubernetesClusterSource.from_settings(missing, cluster="x")
    with pytest.raises(ConfigError, match="elsewhere"):
        KubernetesClusterSource.from_settings(wrong_context, cluster="x")
    assert server.requests == []


def test_kubernetes_source_in_cluster_mode_outside_a_pod_is_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN no service environment (not running in a pod)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    # WHEN / THEN
    with pytest.raises(ConfigError, match=r"kubernetes \(in-cluster\)"):
        KubernetesClusterSource.from_settings(KubernetesSettings(mode="in-cluster"), cluster="x")


def test_kubernetes_source_kube_list_replays_to_the_same_state(kube_api: KubeApiFactory, tmp_path: Path) -> None:
    # GIVEN the demo fleet plus a CPU-only pod, served by the fake apiserver
    fleet = generate_fleet(FleetSpec())
    pods, nodes, others = _split(fleet.objects)
    cpu = _pod("cpu-only", None)
    cpu["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "2"}}
    server = kube_api([*pods, cpu], nodes, others)
    # WHEN the source captures what it reads (as `gpuwaste record` does) and the capture is replayed
    with _source(server, tmp_path) as source:
        captured = source.kube_list()
        live = source.cluster_state(at=AT)
    (tmp_path / "cluster.json").write_text(json.dumps(captured))
    replayed = RecordingClusterSource(tmp_path / "cluster.json", cluster="demo").cluster_state(at=AT)
    # THEN the capture holds no CPU-only pod, every item has a kind, and the replay equals the live state
    assert captured["kind"] == "List"
    assert all(item.get("kind") and item.get("apiVersion") for item in captured["items"])
    assert "cpu-only" not in {item["metadata"]["name"] for item in captured["items"]}
    assert _normalised(replayed) == _normalised(live)


def test_kubernetes_source_eks_mode_signs_tokens_from_the_session(kube_api: KubeApiFactory) -> None:
    # GIVEN "eks" mode with the default token provider over a session holding fixed credentials
    server = kube_api([_pod("p0", None)], [NODE])
    session = boto3.session.Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret", region_name="us-east-1")
    settings = KubernetesSettings(mode="eks", eks_cluster_name="prod", server=f"{server.url}/", eks_region="eu-central-1")
    # WHEN
    with KubernetesClusterSource.from_settings(settings, cluster="prod", session=session) as source:
        source.cluster_state(at=AT)
    # THEN every request carried one cached EKS token for the configured region and cluster
    headers = {r.headers.get("authorization") for r in server.requests}
    assert len(headers) == 1
    (header,) = headers
    assert header is not None and header.startswith("Bearer k8s-aws-v1.")
    body = header.removeprefix("Bearer k8s-aws-v1.")
    url = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()
    assert url.startswith("https://sts.eu-central-1.amazonaws.com/?")
    assert "x-k8s-aws-id" in url

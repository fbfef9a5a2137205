"""Integration: DRA objects (ResourceClaim, ResourceSlice, DeviceClass) through `KubernetesPodSource` and the fake
kube-apiserver, in the real wire format (typed lists, `limit`/`continue`, version fallback, RBAC denial).

The live path must give the same claims as the recording path, and the DRA resolver must find the B25 holder
from what the live source read.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuwaste.allocation.dra import DraResolver
from gpuwaste.models.settings import KubernetesSettings
from gpuwaste.models.telemetry import DeviceId
from gpuwaste.sources.k8s_objects import cluster_state_from_objects
from gpuwaste.sources.kubernetes import KubernetesPodSource
from gpuwaste.sources.recording import RecordingClusterSource
from tests.fixtures.allocation.objects import claim_pod, device_classes, dra_node, resource_claim, resource_slice, uuid
from tests.servers.kube_api import FakeKubeApi, KubeApiFactory, write_kubeconfig

pytestmark = pytest.mark.integration

AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
NODE = "ip-10-0-9-1.ec2.internal"
H100 = [uuid(0x64 + i) for i in range(8)]


def _objects(claims: int = 3) -> tuple[list[dict], list[dict], dict[str, list[dict]]]:
    pods = [claim_pod("research", f"trainer-{i}", NODE, f"trainer-{i}-gpus") for i in range(claims)]
    pods.append({"kind": "Pod", "metadata": {"name": "web-0", "namespace": "web"}, "spec": {"nodeName": NODE, "containers": [{"name": "w"}]},
                 "status": {"phase": "Running"}})  # no GPU, no claim: not kept
    rcs = [resource_claim("research", f"trainer-{i}-gpus", NODE, [f"gpu-{2 * i}", f"gpu-{2 * i + 1}"],
                          consumers=[(f"trainer-{i}", f"uid-research-trainer-{i}")]) for i in range(claims)]
    return pods, [dra_node(NODE)], {"resourceclaims": rcs, "resourceslices": [resource_slice(NODE, H100)], "deviceclasses": device_classes()}


def _source(server: FakeKubeApi, tmp_path, *, page_size: int = 500) -> KubernetesPodSource:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url)
    return KubernetesPodSource.from_settings(KubernetesSettings(mode="kubeconfig", kubeconfig=str(kubeconfig), page_size=page_size, timeout_s=5),
                                             cluster="demo")


def test_live_source_reads_claims_slices_and_classes_page_by_page(kube_api: KubeApiFactory, tmp_path):
    # GIVEN a v1 DRA cluster with 3 claims (2 GPUs each), one slice of 8 GPUs, 2 device classes
    pods, nodes, others = _objects()
    server = kube_api(pods, nodes, others)
    # WHEN the live source lists it with pages of 2
    with _source(server, tmp_path, page_size=2) as src:
        state = src.cluster_state(at=AT)
    # THEN every claim, the slice and both classes were read, the claim pods kept, the plain pod not
    assert state.dra_listed
    assert sorted(c.name for c in state.resource_claims) == ["trainer-0-gpus", "trainer-1-gpus", "trainer-2-gpus"]
    assert [len(s.devices) for s in state.resource_slices] == [8]
    assert sorted(c.name for c in state.device_classes) == ["gpu.nvidia.com", "mig.nvidia.com"]
    assert sorted(p.name for p in state.pods) == ["trainer-0", "trainer-1", "trainer-2"]
    # AND the claims were paged: 2 requests for 3 claims at limit=2, the second with the continue token
    claim_requests = server.requests_to("/apis/resource.k8s.io/v1/resourceclaims")
    assert [r.query.get("limit") for r in claim_requests] == ["2", "2"]
    assert "continue" in claim_requests[1].query
    # AND the live state equals the recording path's on the same objects
    items = [*pods, *nodes, *others["resourceclaims"], *others["resourceslices"], *others["deviceclasses"]]
    recorded = cluster_state_from_objects(items, cluster="demo", observed_at=AT)
    assert state.resource_claims == recorded.resource_claims and state.resource_slices == recorded.resource_slices


def test_live_source_then_dra_resolver_finds_each_claim_holder(kube_api: KubeApiFactory, tmp_path):
    pods, nodes, others = _objects()
    with _source(kube_api(pods, nodes, others), tmp_path) as src:
        state = src.cluster_state(at=AT)
    result = DraResolver().resolve(state, (), handled=frozenset())
    assert sorted((h.pod.name, h.share) for h in result.holdings) == [(f"trainer-{i}", Decimal(2)) for i in range(3)]
    # no exporter at all: every claimed GPU is unmonitored, none dropped
    assert set(result.unmonitored) == {DeviceId(uuid=u) for u in H100[:6]}
    assert result.physical_gpus == {NODE: 8}


def test_a_v1beta1_only_cluster_is_read_after_the_newer_versions_404(kube_api: KubeApiFactory, tmp_path):
    # GIVEN a Kubernetes 1.32-style server that serves resource.k8s.io/v1beta1 only
    pods, nodes, others = _objects(claims=1)
    server = kube_api(pods, nodes, others, dra_versions=("v1beta1",))
    with _source(server, tmp_path) as src:
        state = src.cluster_state(at=AT)
    # THEN v1 and v1beta2 were tried (404) and v1beta1 read
    assert server.requests_to("/apis/resource.k8s.io/v1/resourceclaims")
    assert server.requests_to("/apis/resource.k8s.io/v1beta2/resourceclaims")
    assert state.dra_listed and [c.api_version for c in state.resource_claims] == ["resource.k8s.io/v1beta1"]


def test_a_cluster_without_dra_scans_with_no_claims(kube_api: KubeApiFactory, tmp_path):
    pods, nodes, _ = _objects(claims=0)
    with _source(kube_api(pods, nodes, dra_versions=()), tmp_path) as src:
        state = src.cluster_state(at=AT)
    assert state.resource_claims == () and not state.dra_listed


def test_rbac_without_dra_kinds_still_scans_and_the_resolver_names_the_missing_grant(kube_api: KubeApiFactory, tmp_path, caplog):
    # GIVEN a service account whose ClusterRole predates DRA (403 on resourceclaims)
    pods, nodes, others = _objects(claims=1)
    server = kube_api(pods, nodes, others, forbidden=("resourceclaims",))
    with _source(server, tmp_path) as src:
        state = src.cluster_state(at=AT)
    # THEN the scan read the pods, no claims, warned, and the DRA resolver says what to grant
    assert [p.name for p in state.pods] == ["trainer-0"] and state.resource_claims == () and not state.dra_listed
    assert any("DRA objects not readable" in r.getMessage() for r in caplog.records)
    notes = DraResolver().resolve(state, (), handled=frozenset()).notes
    assert any("deploy/rbac.yaml" in n for n in notes)


def test_deploy_rbac_grants_read_only_access_to_the_dra_kinds():
    docs = list(yaml.safe_load_all((Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml").read_text()))
    rules: list[dict[str, Any]] = [r for d in docs if d and d.get("kind") == "ClusterRole" for r in d.get("rules", [])]
    dra = [r for r in rules if "resource.k8s.io" in r.get("apiGroups", [])]
    assert dra, "deploy/rbac.yaml has no rule for resource.k8s.io"
    granted = {res for r in dra for res in r["resources"]}
    assert {"resourceclaims", "resourceslices", "deviceclasses"} <= granted
    assert all(set(r["verbs"]) <= {"get", "list", "watch"} for r in dra)


def test_recorded_capture_of_a_dra_cluster_replays_to_the_same_claims(kube_api: KubeApiFactory, tmp_path):
    # GIVEN a DRA cluster captured the way `gpuwaste record` does
    pods, nodes, others = _objects()
    with _source(kube_api(pods, nodes, others), tmp_path) as src:
        captured = src.kube_list()
        live = src.cluster_state(at=AT)
    (tmp_path / "cluster.json").write_text(json.dumps(captured))
    replayed = RecordingClusterSource(tmp_path / "cluster.json", cluster="demo").cluster_state(at=AT)
    # THEN the capture holds the DRA objects with their kind and apiVersion, and the replay has the same claims
    kinds = {i["kind"] for i in captured["items"]}
    assert {"ResourceClaim", "ResourceSlice", "DeviceClass"} <= kinds
    assert all(i["apiVersion"] == "resource.k8s.io/v1" for i in captured["items"] if i["kind"] in ("ResourceClaim", "ResourceSlice"))
    assert (replayed.resource_claims, replayed.resource_slices, replayed.device_classes) == (
        live.resource_claims, live.resource_slices, live.device_classes)
    assert sorted(p.name for p in replayed.pods) == sorted(p.name for p in live.pods)

"""Integration: DRA objects (ResourceClaim, ResourceSlice, DeviceClass) through `KubernetesClusterSource` and the fake
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
from gpuwaste.sources.kubernetes import KubernetesClusterSource
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


def _source(server: FakeKubeApi, tmp_path, *, page_size: int = 500) -> KubernetesClusterSource:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url)
    return KubernetesClusterSource.from_settings(KubernetesSettings(mode="kubeconfig", kubeconfig=str(kubeconfig), page_size=page_size, timeout_s=5),
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


# --- issue 21 §6: capacity the exporter hides ------------------------------------------------------------------------


def _scan_hidden(kube_api: KubeApiFactory, tmp_path: Path, *, reported: list[int], api_version: str):  # type: ignore[no-untyped-def]
    """A p5.48xlarge DRA node: its ResourceSlice lists 8 H100s, one claim holds gpu-0 and gpu-1 for trainer-0, and the
    exporter reports only the GPUs `reported` (busy): what an exporter that shows claimed GPUs only exports. Read through
    the fake kube-apiserver (`api_version` of resource.k8s.io), judged with the recording's DCGM series, priced."""
    from gpuwaste.detectors import DetectorSettings, run_detectors
    from gpuwaste.join import join
    from gpuwaste.pricing.catalog import PriceBook
    from gpuwaste.pricing.cost import price_finding
    from gpuwaste.sources.recording import RecordingTelemetrySource
    from tests.fixtures.field_guide import builders as b

    v1beta1 = api_version == "v1beta1"
    pods = [claim_pod("research", "trainer-0", NODE, "trainer-0-gpus")]
    rc = resource_claim("research", "trainer-0-gpus", NODE, ["gpu-0", "gpu-1"], consumers=[("trainer-0", "uid-research-trainer-0")],
                        api_version=f"resource.k8s.io/{api_version}")
    others = {"resourceclaims": [rc], "resourceslices": [resource_slice(NODE, H100, v1beta1=v1beta1)], "deviceclasses": device_classes()}
    server = kube_api(pods, [dra_node(NODE)], others, dra_versions=(api_version,))
    with _source(server, tmp_path) as src:
        state = src.cluster_state(at=b.EVAL)
    series = [b.S("DCGM_FI_DEV_GPU_UTIL", {"gpu": str(i), "UUID": H100[i], "Hostname": NODE, "modelName": "NVIDIA H100 80GB HBM3"}, 80.0)
              for i in reported]
    (tmp_path / "telemetry.prom").write_text(b.exposition(series))
    (tmp_path / "recording.json").write_text(json.dumps({"cluster": "demo", "eval_time": b.EVAL.isoformat(), "window_s": 3600,
                                                        "scrape_interval_s": b.STEP_S, "format": "text"}))
    tel = RecordingTelemetrySource(tmp_path).telemetry(at=b.EVAL, window=b.WINDOW)
    settings = DetectorSettings(enabled=list(b.CORE_DETECTORS))
    ctx = join(state, tel, settings.common)
    book = PriceBook.bundled()
    findings = [price_finding(f, book) for f in run_detectors(ctx, settings.by_name(), settings.enabled).findings]
    rate = book.gpu_hour_rate(instance_type="p5.48xlarge", capacity_type=None, gpu_model=None, physical_gpus=8, region="us-east-1",
                              accelerator=None).usd_per_gpu_hour
    return ctx, findings, rate


@pytest.mark.parametrize("api_version", ["v1", "v1beta1"])
def test_unclaimed_gpus_the_exporter_hides_are_free_capacity_from_the_resource_slices(kube_api: KubeApiFactory, tmp_path, api_version):
    from gpuwaste.models.findings import WasteKind
    from gpuwaste.services.scan import allocation_notes, inventory_of

    # GIVEN 8 H100s in the node's ResourceSlice, 2 claimed by trainer-0 and reported busy by DCGM, 6 claimed by nobody
    # and not exported at all
    ctx, findings, rate = _scan_hidden(kube_api, tmp_path, reported=[0, 1], api_version=api_version)
    # THEN the node has 8 physical GPUs (DCGM's 2 and the slice's 8 are one set, never 10), 6 of them free capacity
    assert inventory_of(ctx).physical_gpus == 8 and ctx.nodes[NODE].capacity_gpus() == 8
    (free,) = [f for f in findings if f.kind is WasteKind.UNALLOCATED]
    assert free.subject.node == NODE and free.wasted_gpu_share == Decimal(6)
    assert free.title.startswith("6 of 8 GPUs")
    assert free.usd_per_day == (Decimal(6) * rate * 24).quantize(Decimal("0.01"))
    assert "ResourceSlices" in next(e.note for e in free.evidence if e.signal == "physical_gpus")
    # AND the hidden GPUs are not also "unmonitored" (a broken GPU or a crashed exporter): counted once, as free
    assert not [f for f in findings if f.details.get("check") == "unmonitored_gpus"]
    assert any("6 that no claim holds are counted as free capacity" in n for n in allocation_notes(ctx))
    # AND trainer-0 holds its 2 GPUs and is busy: no waste on it
    assert not [f for f in findings if f.subject.pod == "trainer-0" and f.kind.is_waste]


def test_a_claimed_gpu_the_exporter_drops_stays_unmonitored_and_is_no_free_capacity(kube_api: KubeApiFactory, tmp_path):
    from gpuwaste.models.findings import WasteKind

    # GIVEN the same node, but DCGM reports only gpu-0 of trainer-0's two claimed GPUs
    ctx, findings, _ = _scan_hidden(kube_api, tmp_path, reported=[0], api_version="v1")
    # THEN free capacity is still the 6 unclaimed GPUs (the claimed silent one is held, not free)
    (free,) = [f for f in findings if f.kind is WasteKind.UNALLOCATED]
    assert free.wasted_gpu_share == Decimal(6)
    # AND the claimed GPU DCGM does not report is the one unmonitored GPU
    (dq,) = [f for f in findings if f.details.get("check") == "unmonitored_gpus"]
    assert dq.details == {"check": "unmonitored_gpus", "expected_gpus": 2, "observed_gpus": 1}
    assert "6 more that no claim holds are counted as free capacity" in dq.title

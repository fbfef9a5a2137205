"""Integration: the generated "allocation" fleet — device plugin, DRA, HAMi, KAI and Blackwell MIG on one cluster —
read through the Kubernetes API source (fake apiserver, real wire format), the recording path and kube-state-metrics
series (where the kind is visible there), resolved by the
allocation resolvers, and compared with the generator's ground truth: every GPU counted once, every share charged
to the pod (and so the team) that holds it, no infrastructure pod named as an owner.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from gpuwaste.allocation import resolve
from gpuwaste.allocation._index import devices_by_node
from gpuwaste.allocation.dra import DraResolver
from gpuwaste.allocation.hami import HamiResolver
from gpuwaste.allocation.kai import KaiResolver
from gpuwaste.allocation.physical import physical_gpu_count
from gpuwaste.allocation.vgpu import VgpuResolver
from gpuwaste.fleet.generator import Fleet, FleetSpec, generate_fleet, write_recording
from gpuwaste.models.cluster import ClusterState, gpu_share_for_request
from gpuwaste.models.settings import KubernetesSettings
from gpuwaste.sources.ksm import KsmRecordingSource
from gpuwaste.sources.kubernetes import KubernetesClusterSource
from gpuwaste.sources.recording import RecordingClusterSource, RecordingTelemetrySource
from tests.servers.kube_api import KubeApiFactory, write_kubeconfig

pytestmark = pytest.mark.integration

PLURALS = {"Pod": "pods", "Node": "nodes", "Namespace": "namespaces", "ReplicaSet": "replicasets", "Deployment": "deployments",
           "StatefulSet": "statefulsets", "Job": "jobs", "CronJob": "cronjobs", "ResourceClaim": "resourceclaims",
           "ResourceSlice": "resourceslices", "DeviceClass": "deviceclasses"}


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return generate_fleet(FleetSpec(layout="allocation", cluster="mixed", label_style="pod", inference_metrics=False))


@pytest.fixture(scope="module")
def recorded(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory):
    out = write_recording(fleet, tmp_path_factory.mktemp("allocation-fleet"))
    at = fleet.spec.eval_time
    telemetry = RecordingTelemetrySource(out).telemetry(at=at, window=timedelta(seconds=fleet.spec.history_s - 600))
    return RecordingClusterSource(out).cluster_state(at=at), tuple(telemetry.gpus)


def _live(fleet: Fleet, kube_api: KubeApiFactory, tmp_path) -> ClusterState:
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for obj in fleet.objects:
        by[PLURALS[obj["kind"]]].append(obj)
    server = kube_api(by.pop("pods"), by.pop("nodes"), dict(by))
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url)
    settings = KubernetesSettings(mode="kubeconfig", kubeconfig=str(kubeconfig), page_size=7, timeout_s=5)
    with KubernetesClusterSource.from_settings(settings, cluster="mixed") as src:
        return src.cluster_state(at=fleet.spec.eval_time)


def _resolve(cluster: ClusterState, devices) -> dict[str, Any]:
    handled: frozenset[tuple[str, str, str]] = frozenset()
    out = {}
    for resolver in (DraResolver(), HamiResolver(), KaiResolver(), VgpuResolver()):
        if resolver.applies(cluster, devices):
            result = resolver.resolve(cluster, devices, handled=handled)
            handled |= result.handled_pods
            out[resolver.name] = result
    return out


@pytest.mark.parametrize("source", ["api", "recording"])
def test_every_share_is_charged_to_the_pod_that_holds_it(fleet: Fleet, recorded, kube_api: KubeApiFactory, tmp_path, source: str):
    # GIVEN the mixed cluster read through the live API (paged) or its recording, and its telemetry
    cluster = _live(fleet, kube_api, tmp_path) if source == "api" else recorded[0]
    devices = recorded[1]
    truth = fleet.allocation
    assert truth is not None
    # WHEN the DRA, HAMi, KAI and vGPU resolvers run (device-plugin and MIG pods are left to their own resolvers)
    results = _resolve(cluster, devices)
    holdings = [h for r in results.values() for h in r.holdings]
    got = {(h.pod.namespace, h.pod.name): h for h in holdings}
    # THEN each DRA / HAMi / KAI holder holds exactly its true share of its true GPUs, in its own namespace (team)
    expected = [t for t in truth.holders if t.mechanism in ("DRA", "HAMi", "KAI")]
    assert sorted(got) == sorted((t.namespace, t.pod) for t in expected)
    for t in expected:
        h = got[(t.namespace, t.pod)]
        assert (h.mechanism, h.share, h.node) == (t.mechanism, Decimal(str(t.share)), t.node), t.pod
        assert {d.uuid for d in h.devices} == set(t.devices), t.pod
    # AND no infrastructure pod holds anything, and each is reported as infrastructure
    infra = set(truth.infrastructure)
    assert not infra & set(got)
    assert results["KAI"].infrastructure_pods == infra
    # AND a pod is never held twice (each resolver skips what an earlier one handled)
    assert len(holdings) == len(got)


def test_device_plugin_and_blackwell_mig_shares_come_from_the_catalogue(fleet: Fleet, recorded):
    cluster, _ = recorded
    nodes = {n.name: n for n in cluster.nodes}
    pods = {p.key: p for p in cluster.pods}
    for t in fleet.allocation.holders:
        if t.mechanism not in ("device-plugin", "mig"):
            continue
        pod = pods[(t.namespace, t.pod)]
        share = sum(gpu_share_for_request(r, c, nodes[t.node]) for r, c in pod.gpu_requests.items())
        assert share == Decimal(str(t.share)), t.pod


def test_every_physical_gpu_is_counted_once_never_from_capacity(fleet: Fleet, recorded):
    # GIVEN the recording: HAMi advertises 40 nvidia.com/gpu on 4 GPUs, the DRA node advertises none, the MIG node
    # advertises MIG devices
    cluster, devices = recorded
    seen = devices_by_node(cluster, devices)
    slices = DraResolver().resolve(cluster, devices, handled=frozenset()).physical_gpus
    nodes = {n.name: n for n in cluster.nodes}
    # WHEN each node's physical GPUs are counted
    counts = {name: physical_gpu_count(nodes[name], len(seen.get(name, ())), known_by_resolvers=slices.get(name)) for name in fleet.allocation.physical_gpus}
    # THEN they match the hardware, and the 40 shares are explained, not counted
    assert {n: c.gpus for n, c in counts.items()} == fleet.allocation.physical_gpus
    assert sum(c.gpus for c in counts.values()) == 4 + 8 + 4 + 4 + 2
    hami_node = "ip-10-1-0-30.ec2.internal"
    assert any("advertises 40 nvidia.com/gpu" in n for n in counts[hami_node].notes)


def test_the_fleet_truth_names_no_infrastructure_pod_as_a_finding_subject(fleet: Fleet):
    infra = set(fleet.allocation.infrastructure)
    assert all(t.kind is None for t in fleet.truth if (t.namespace, t.pod) in infra)
    idle = {(t.namespace, t.pod): t.gpus for t in fleet.truth if t.kind == "idle_allocation"}
    assert idle[("embed", "embed-k-0")] == 0.25 and idle[("ml", "notebook-1")] == 0.5 and idle[("viz", "render-1")] == 0.25


def test_through_kube_state_metrics_every_kind_ksm_can_show_is_charged_to_its_holder(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory):
    # GIVEN the mixed cluster only as kube-state-metrics series (no cluster.json), allow-listed as `gpuwaste doctor`
    # recommends: the fraction and memory annotations, the group label, the reserved device and the HAMi grant
    out = write_recording(fleet, tmp_path_factory.mktemp("allocation-ksm"))
    (out / "cluster.json").unlink()
    at, window = fleet.spec.eval_time, timedelta(seconds=fleet.spec.history_s - 600)
    cluster = KsmRecordingSource(out, window=window).cluster_state(at=at)
    devices = tuple(RecordingTelemetrySource(out).telemetry(at=at, window=window).gpus)
    # WHEN every registered resolver runs
    resolved = resolve(cluster, devices)
    got = {(h.pod.namespace, h.pod.name): h for h in resolved.holdings}
    # THEN device-plugin, HAMi, KAI and MIG holders hold their true shares; reservation pods are infrastructure
    visible = [t for t in fleet.allocation.holders if t.mechanism != "DRA"]
    for t in visible:
        h = got[(t.namespace, t.pod)]
        assert (h.share, h.node) == (Decimal(str(t.share)), t.node), t.pod
    assert set(resolved.infrastructure_pods) == set(fleet.allocation.infrastructure)
    # AND DRA claims are visible through kube_pod_resourceclaim_info (KSM v2.20, issue 21 §6): those pods hold their
    # true share of the GPUs the exporter's dra_* labels name
    dra = [t for t in fleet.allocation.holders if t.mechanism == "DRA"]
    assert dra
    for t in dra:
        h = got[(t.namespace, t.pod)]
        assert (h.share, h.node) == (Decimal(str(t.share)), t.node), t.pod


def test_live_kube_state_metrics_finds_fractional_pods_that_request_no_gpu(
        fleet: Fleet, tmp_path_factory: pytest.TempPathFactory, prometheus_factory: Any):
    # GIVEN the mixed cluster's KSM series backfilled into a real Prometheus (KAI notebooks ask for a fraction by
    # annotation and request no GPU resource, so no request series names them)
    from gpuwaste.models.settings import PrometheusSettings
    from gpuwaste.sources.ksm import PrometheusKsmSource
    from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource

    out = write_recording(fleet, tmp_path_factory.mktemp("allocation-live"), compress=False)
    server = prometheus_factory(out / "telemetry.om")
    at, window = fleet.spec.eval_time, timedelta(seconds=fleet.spec.history_s - 600)
    prom = PrometheusGpuMetricsSource.from_settings(PrometheusSettings(url=server.url), cluster="alloc", scrape_interval_s=30)
    # WHEN the live KSM source reads the cluster
    cluster = PrometheusKsmSource(prom, cluster="alloc", window=window, scrape_interval_s=60).cluster_state(at=at)
    # THEN the KAI holders are there and resolve to their true shares, like the recording path gives them
    kai = [t for t in fleet.allocation.holders if t.mechanism == "KAI"]
    assert kai
    pods = {p.key for p in cluster.pods}
    assert {(t.namespace, t.pod) for t in kai} <= pods
    resolved = {(h.pod.namespace, h.pod.name): h for h in resolve(cluster, ()).holdings}
    for t in kai:
        assert resolved[(t.namespace, t.pod)].share == Decimal(str(t.share)), t.pod

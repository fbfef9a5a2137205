"""Integration: the mixed-allocation fleet scanned end to end — cluster from the fake kube-apiserver (paged, real
wire format, DRA objects included), telemetry from the recording, the join over every registered resolver, the
detectors and the price book — against the generator's ground truth (issue 11 "done when")."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from gpuwaste.detectors import DetectorSettings, run_detectors
from gpuwaste.fleet.generator import FleetSpec, generate_fleet, write_recording
from gpuwaste.fleet.truth import compare
from gpuwaste.join import join
from gpuwaste.models.findings import WasteKind
from gpuwaste.models.settings import KubernetesSettings
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.pricing.cost import price_finding
from gpuwaste.services.scan import allocation_notes
from gpuwaste.sources.kubernetes import KubernetesClusterSource
from gpuwaste.sources.recording import RecordingTelemetrySource
from tests.servers.kube_api import KubeApiFactory, write_kubeconfig

pytestmark = pytest.mark.integration

PLURALS = {"Pod": "pods", "Node": "nodes", "Namespace": "namespaces", "ReplicaSet": "replicasets", "Deployment": "deployments",
           "StatefulSet": "statefulsets", "Job": "jobs", "CronJob": "cronjobs", "ResourceClaim": "resourceclaims",
           "ResourceSlice": "resourceslices", "DeviceClass": "deviceclasses"}
CORE = ["idle_allocation", "underused_allocation", "unallocated_capacity", "data_quality"]


def test_mixed_cluster_every_gpu_once_every_share_to_its_holder_no_infrastructure_owner(kube_api: KubeApiFactory, tmp_path):
    # GIVEN device-plugin GPUs, DRA claims, HAMi shares, KAI fractions and Blackwell MIG on one cluster
    fleet = generate_fleet(FleetSpec(layout="allocation", cluster="mixed", label_style="pod", inference_metrics=False))
    truth = fleet.allocation
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for obj in fleet.objects:
        by[PLURALS[obj["kind"]]].append(obj)
    server = kube_api(by.pop("pods"), by.pop("nodes"), dict(by))
    settings = KubernetesSettings(mode="kubeconfig", kubeconfig=str(write_kubeconfig(tmp_path / "kc", server.url)), page_size=7, timeout_s=5)
    at = fleet.spec.eval_time
    with KubernetesClusterSource.from_settings(settings, cluster="mixed") as src:
        cluster = src.cluster_state(at=at)
    telemetry = RecordingTelemetrySource(write_recording(fleet, tmp_path / "rec")).telemetry(at=at, window=timedelta(seconds=fleet.spec.history_s - 600))
    # WHEN scanned
    det = DetectorSettings(enabled=CORE)
    ctx = join(cluster, telemetry, det.common)
    book = PriceBook.bundled()
    findings = [price_finding(f, book) for f in run_detectors(ctx, det.by_name(), det.enabled).findings]
    # THEN the findings are exactly the truth: idle holders (by their share) and free capacity per node, nothing else
    result = compare(findings, [t.model_dump() for t in fleet.truth])
    assert (result.missed, result.unexpected) == ([], [])
    idle = {(f.subject.namespace, f.subject.pod): f.subject.gpu_share for f in findings if f.kind is WasteKind.IDLE}
    for t in truth.holders:
        if t.scenario == "idle":
            assert idle[(t.namespace, t.pod)] == Decimal(str(t.share)), t.pod
    free = {f.subject.node: f.wasted_gpu_share for f in findings if f.kind is WasteKind.UNALLOCATED}
    assert free == {n: Decimal(str(g)) for n, g in truth.free_gpus.items() if g}
    # AND every holder is in the join with its true share, each physical GPU counted once per node
    held = {(a.pod.namespace, a.pod.name): a for a in ctx.allocations}
    assert sorted(held) == sorted((t.namespace, t.pod) for t in truth.holders)
    for t in truth.holders:
        assert held[(t.namespace, t.pod)].share == Decimal(str(t.share)), t.pod
        assert {d.device.uuid for d in held[(t.namespace, t.pod)].devices} == set(t.devices), t.pod
    assert {n: inv.capacity_gpus() for n, inv in ctx.nodes.items()} == truth.physical_gpus
    # AND no infrastructure pod is an owner anywhere
    infra = set(truth.infrastructure)
    assert not infra & set(held) and not any((f.subject.namespace, f.subject.pod) in infra for f in findings)
    assert set(ctx.resolved.infrastructure_pods) == infra
    # AND the scan's allocation mix names each mechanism
    assert {"DRA", "HAMi", "KAI", "MIG", "device plugin"} <= set(ctx.resolved.mix)
    # AND the only capacity disagreement is HAMi's 40 shares on 4 GPUs, said once
    notes = [n for n in allocation_notes(ctx) if "advertises" in n]
    assert notes == ["node ip-10-1-0-30.ec2.internal advertises 40 nvidia.com/gpu, DCGM sees 4 GPUs: HAMi shares"]

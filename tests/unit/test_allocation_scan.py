"""Allocation end to end: the field guide's DRA, HAMi and KAI inputs scanned through the recording adapters, the
join (with every resolver registered) and the detectors, priced — the values the field guide gives."""

from __future__ import annotations

from decimal import Decimal

from gpuwaste.allocation import mix_text, resolvers
from gpuwaste.models.findings import Attribution, WasteKind
from gpuwaste.models.telemetry import Signal
from tests.fixtures.allocation.objects import (
    claim_pod,
    device_classes,
    dra_node,
    hami_node,
    hami_pod,
    kai_pod,
    kai_reservation,
    resource_claim,
    resource_slice,
    uuid,
)
from tests.fixtures.field_guide.builders import S, node, pod, scan

GR = Signal.GR_ENGINE_ACTIVE.value
IDLE, UNALLOC, DQ = WasteKind.IDLE, WasteKind.UNALLOCATED, WasteKind.DATA_QUALITY


def test_registry_asks_the_specific_mechanisms_before_the_device_plugin():
    names = [r.name for r in resolvers()]
    assert names.index("DRA") < names.index("MIG") and names.index("HAMi") < names.index("device plugin")
    assert names.index("KAI") < names.index("device plugin") and names.index("vGPU") < names.index("shared")


def test_b25_dra_trainer_idle_660_48_a_day_and_four_unallocated_gpus_660_48(tmp_path):
    # GIVEN the B25 input: 8 x H100 p5.48xlarge, trainer-0 holds 4 through a ResourceClaim, all idle
    host = "ip-10-0-9-1.ec2.internal"
    gpus = [uuid(0x64 + i) for i in range(8)]
    series = []
    for i, u in enumerate(gpus):
        labels = {"gpu": str(i), "UUID": u, "modelName": "NVIDIA H100 80GB HBM3", "Hostname": host}
        if i < 4:
            labels |= {"container": "main", "namespace": "research", "pod": "trainer-0", "dra_claim_name": "trainer-0-gpus-x7k2p",
                       "dra_claim_namespace": "research", "dra_driver_name": "gpu.nvidia.com", "dra_pool_name": host, "dra_device_name": f"gpu-{i}"}
        else:
            labels |= {"container": "", "namespace": "", "pod": ""}
        series.append(S(GR, labels, 0.001))
    objs = [dra_node(host), claim_pod("research", "trainer-0", host, "trainer-0-gpus-x7k2p"),
            resource_claim("research", "trainer-0-gpus-x7k2p", host, [f"gpu-{i}" for i in range(4)], consumers=[("trainer-0", "uid-research-trainer-0")]),
            resource_slice(host, gpus), *device_classes()]
    # WHEN scanned
    sc = scan(tmp_path, series, objs)
    # THEN trainer-0 is idle with 4 GPUs at $660.48/day, the other 4 are unallocated at $660.48/day, nothing else
    [idle] = sc.of_kind(IDLE)
    assert (idle.subject.namespace, idle.subject.pod, idle.subject.gpu_share) == ("research", "trainer-0", Decimal(4))
    assert idle.usd_per_day == Decimal("660.48")
    assert (idle.details["mechanism"], idle.details["activity_scope"]) == ("DRA", "per pod")
    [free] = sc.of_kind(UNALLOC)
    assert free.wasted_gpu_share == 4 and free.usd_per_day == Decimal("660.48")
    assert not sc.of_kind(DQ)
    assert mix_text(sc.ctx.resolved.mix) == "DRA 4 GPUs (1 pod)"


def test_b27_hami_four_quarter_shares_idle_and_three_gpus_unallocated_136_13_a_day(tmp_path):
    # GIVEN the B27 input: g5.12xlarge, capacity 40 nvidia.com/gpu, 4 pods x 25 % of GPU 0, all idle, no pod labels
    host = "ip-10-0-7-7.ec2.internal"
    gpus = [uuid(0xC8 + i) for i in range(4)]
    series = [S(GR, {"gpu": str(i), "UUID": u, "modelName": "NVIDIA A10G", "Hostname": host, "pod": "", "namespace": ""}, 0.001)
              for i, u in enumerate(gpus)]
    objs = [hami_node(host)] + [hami_pod("embed", f"embed-k-{i}", host, gpus[0]) for i in range(4)]
    sc = scan(tmp_path, series, objs)
    # THEN 4 idle findings of 0.25 GPU each, tied to GPU 0 by the HAMi annotation; 3 GPUs unallocated; $136.13/day in all
    idle = sc.of_kind(IDLE)
    assert sorted((f.subject.pod, f.subject.gpu_share) for f in idle) == [(f"embed-k-{i}", Decimal("0.25")) for i in range(4)]
    assert all(f.subject.attribution is Attribution.ALLOCATION and [g.uuid for g in f.subject.gpus] == [gpus[0]] for f in idle)
    assert {f.details["activity_scope"] for f in idle} == {"device-level, not attributable"}
    [free] = sc.of_kind(UNALLOC)
    assert free.wasted_gpu_share == 3
    # (each finding is rounded to cents for display; the field guide's total is of the exact amounts)
    total = sum((f.cost.usd_per_gpu_hour * f.cost.wasted_gpu_share * 24 for f in [*idle, free]), Decimal(0))
    assert total.quantize(Decimal("0.01")) == Decimal("136.13")
    assert sum(f.usd_per_day for f in idle) == Decimal("34.04") and free.usd_per_day == Decimal("102.10")
    # AND 40 shares are not 40 GPUs: no unmonitored-GPU or unknown-resource diagnostics
    assert not sc.checks()
    assert any("advertises 40 nvidia.com/gpu, DCGM sees 4 GPUs: HAMi shares" in n for n in sc.ctx.resolved.notes)


def test_b28_kai_notebooks_charged_team_ml_reservation_pod_never_an_owner(tmp_path):
    # GIVEN the B28 input: GPU 0 reserved by a runai-reservation pod for two notebooks at 0.5 each; all idle
    host = "ip-10-0-3-3.ec2.internal"
    gpus = [uuid(0x12C + i) for i in range(4)]
    res = kai_reservation(host, gpus[0], "grp-1")
    series = [S(GR, {"gpu": "0", "UUID": gpus[0], "modelName": "NVIDIA A10G", "Hostname": host, "namespace": "runai-reservation",
                     "pod": res["metadata"]["name"], "container": "runai-reservation"}, 0.001)]
    series += [S(GR, {"gpu": str(i), "UUID": u, "modelName": "NVIDIA A10G", "Hostname": host}, 0.001) for i, u in enumerate(gpus) if i]
    objs = [node(host, itype="g5.12xlarge", gpus=4), res, kai_pod("ml", "notebook-0", host, "grp-1"), kai_pod("ml", "notebook-1", host, "grp-1")]
    sc = scan(tmp_path, series, objs)
    # THEN the notebooks (namespace/team ml) are idle at 0.5 GPU each; 3 GPUs unallocated; the reservation pod appears nowhere
    idle = sc.of_kind(IDLE)
    assert sorted((f.subject.namespace, f.subject.pod, f.subject.gpu_share) for f in idle) == [
        ("ml", "notebook-0", Decimal("0.5")), ("ml", "notebook-1", Decimal("0.5"))]
    [free] = sc.of_kind(UNALLOC)
    assert free.wasted_gpu_share == 3
    assert all(f.subject.namespace != "runai-reservation" for f in sc.findings)
    assert all(res["metadata"]["name"] in f.details["allocation"] and f.details["mechanism"] == "KAI" for f in idle)
    assert not sc.checks()


def _shared_scan(tmp_path, labels: dict[str, str], replicas: int = 4):
    host = "ip-10-0-5-5.ec2.internal"
    n = node(host, itype="g5.xlarge", gpus=1, labels={"nvidia.com/gpu.replicas": str(replicas), **labels})
    n["status"] = {"capacity": {"nvidia.com/gpu": str(replicas)}, "allocatable": {"nvidia.com/gpu": str(replicas)}}
    objs = [n, pod("a", "p-0", host), pod("a", "p-1", host)]
    series = [S(GR, {"gpu": "0", "UUID": uuid(0x500), "modelName": "NVIDIA A10G", "Hostname": host, "namespace": "a", "pod": p}, 0.001)
              for p in ("p-0", "p-1")]
    return scan(tmp_path, series, objs)


def test_time_slicing_sharers_hold_one_replica_each_with_device_level_activity(tmp_path):
    # GIVEN one A10G advertised as 4 time-sliced replicas, two idle pods with one replica each
    sc = _shared_scan(tmp_path, {})
    idle = sc.of_kind(IDLE)
    # THEN each holds 1/4 GPU, its activity is the device's, and 2/4 of the GPU are free
    assert sorted((f.subject.pod, f.subject.gpu_share) for f in idle) == [("p-0", Decimal("0.25")), ("p-1", Decimal("0.25"))]
    assert {(f.details["mechanism"], f.details["activity_scope"]) for f in idle} == {("time-slicing", "device-level, not attributable")}
    [free] = sc.of_kind(UNALLOC)
    assert free.wasted_gpu_share == Decimal("0.5")


def test_mps_and_gke_time_sharing_keep_their_shares(tmp_path):
    # GIVEN the same sharing under MPS, then under GKE GPU time-sharing
    (tmp_path / "mps").mkdir()
    mps = _shared_scan(tmp_path / "mps", {"nvidia.com/gpu.sharing-strategy": "mps"})
    assert {(f.details["mechanism"], f.subject.gpu_share) for f in mps.of_kind(IDLE)} == {("MPS", Decimal("0.25"))}
    (tmp_path / "gke").mkdir()
    gke = _shared_scan(tmp_path / "gke", {"cloud.google.com/gke-max-shared-clients-per-gpu": "4"})
    assert {(f.details["mechanism"], f.subject.gpu_share) for f in gke.of_kind(IDLE)} == {("GKE time-sharing", Decimal("0.25"))}


def test_b25_unclaimed_gpus_the_exporter_stops_reporting_are_free_capacity_not_dropped(tmp_path):
    # GIVEN the B25 node where the exporter reports only the 4 claimed GPUs (it may drop the unclaimed ones)
    host = "ip-10-0-9-1.ec2.internal"
    gpus = [uuid(0x64 + i) for i in range(8)]
    series = [S(GR, {"gpu": str(i), "UUID": gpus[i], "modelName": "NVIDIA H100 80GB HBM3", "Hostname": host, "container": "main",
                     "namespace": "research", "pod": "trainer-0", "dra_claim_name": "c", "dra_claim_namespace": "research",
                     "dra_driver_name": "gpu.nvidia.com", "dra_pool_name": host, "dra_device_name": f"gpu-{i}"}, 0.001) for i in range(4)]
    objs = [dra_node(host), claim_pod("research", "trainer-0", host, "c"),
            resource_claim("research", "c", host, [f"gpu-{i}" for i in range(4)]), resource_slice(host, gpus)]
    sc = scan(tmp_path, series, objs)
    # THEN trainer-0 is idle (4 GPUs) and the other 4 — listed by the node's ResourceSlice, claimed by nobody — are
    # unallocated capacity (the field guide's B25: "4 unallocated GPUs ($660.48/day)"), never silently gone and never
    # also called unmonitored (issue 21 §6)
    assert [(f.subject.pod, f.subject.gpu_share) for f in sc.of_kind(IDLE)] == [("trainer-0", Decimal(4))]
    [free] = sc.of_kind(WasteKind.UNALLOCATED)
    assert free.subject.node == host and free.wasted_gpu_share == Decimal(4) and free.usd_per_day == Decimal("660.48")
    assert "unmonitored_gpus" not in sc.checks()


def test_dra_claim_holder_whose_owner_is_gone_is_orphaned(tmp_path):
    # GIVEN trainer-0 (holding 4 GPUs through its claim) owned by a ReplicaSet that no longer exists (ReplicaSets listed)
    from gpuwaste.detectors import DetectorSettings  # noqa: PLC0415

    host = "ip-10-0-9-1.ec2.internal"
    gpus = [uuid(0x64 + i) for i in range(8)]
    p = claim_pod("research", "trainer-0", host, "c")
    p["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "trainer-7d9c5", "uid": "u", "controller": True}]
    other_rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "unrelated-5f", "namespace": "research"}}
    objs = [dra_node(host), p, other_rs, resource_claim("research", "c", host, ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]), resource_slice(host, gpus)]
    series = [S(GR, {"gpu": str(i), "UUID": gpus[i], "modelName": "NVIDIA H100 80GB HBM3", "Hostname": host, "namespace": "research",
                     "pod": "trainer-0", "container": "main"}, 0.5) for i in range(4)]
    sc = scan(tmp_path, series, objs, settings=DetectorSettings(enabled=["orphaned"]))
    # THEN the claim holder is reported as orphaned with its 4 GPUs
    [f] = sc.of_kind(WasteKind.ORPHANED)
    assert (f.subject.pod, f.subject.gpu_share) == ("trainer-0", Decimal(4))


def test_mps_with_per_client_values_judges_each_pod_on_its_own_activity(tmp_path):
    # GIVEN an MPS GPU (4 replicas) where the exporter reports each client's own activity: p-0 busy, p-1 idle
    host = "ip-10-0-5-5.ec2.internal"
    n = node(host, itype="g5.xlarge", gpus=1, labels={"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "mps"})
    n["status"] = {"capacity": {"nvidia.com/gpu": "4"}, "allocatable": {"nvidia.com/gpu": "4"}}
    base = {"gpu": "0", "UUID": uuid(0x501), "modelName": "NVIDIA A10G", "Hostname": host, "namespace": "a"}
    series = [S(GR, base | {"pod": "p-0"}, 0.62), S(GR, base | {"pod": "p-1"}, 0.001)]
    sc = scan(tmp_path, series, [n, pod("a", "p-0", host), pod("a", "p-1", host)])
    # THEN only p-1 is idle, judged on its own (measured per pod) series
    [idle] = sc.of_kind(IDLE)
    assert (idle.subject.pod, idle.subject.gpu_share, idle.details["activity_scope"]) == ("p-1", Decimal("0.25"), "per pod")


def test_b25_dra_trainer_through_kube_state_metrics_reads_its_claim_from_kube_pod_resourceclaim_info(tmp_path, monkeypatch):
    # GIVEN the B25 input (trainer-0 holds 4 of 8 H100s through a ResourceClaim, all idle) with the cluster read from
    # kube-state-metrics series only: kube_pod_resourceclaim_info names the pod's claim, KSM exports no ResourceClaim
    # object, the GPUs carry the exporter's dra_* labels
    from tests.fixtures.field_guide import builders

    monkeypatch.setattr(builders, "CLUSTER_VIA", "ksm")
    host = "ip-10-0-9-1.ec2.internal"
    gpus = [uuid(0x64 + i) for i in range(8)]
    series = []
    for i, u in enumerate(gpus):
        labels = {"gpu": str(i), "UUID": u, "modelName": "NVIDIA H100 80GB HBM3", "Hostname": host}
        if i < 4:
            labels |= {"container": "main", "namespace": "research", "pod": "trainer-0", "dra_claim_name": "trainer-0-gpus-x7k2p",
                       "dra_claim_namespace": "research", "dra_driver_name": "gpu.nvidia.com", "dra_pool_name": host, "dra_device_name": f"gpu-{i}"}
        else:
            labels |= {"container": "", "namespace": "", "pod": ""}
        series.append(S(GR, labels, 0.001))
    objs = [dra_node(host), claim_pod("research", "trainer-0", host, "trainer-0-gpus-x7k2p", via_template=True)]
    assert "kube_pod_resourceclaim_info" in builders.ksm_text(objs)
    # WHEN scanned
    sc = scan(tmp_path, series, objs)
    # THEN the pod is in the state with its claim (pod-local name, resolved claim, template), and it is idle with its 4
    # GPUs at $660.48/day, attributed through the claim named on the GPUs (the claim object itself unread)
    (trainer,) = [p for p in sc.ctx.cluster.pods if p.name == "trainer-0"]
    assert [(r.name, r.claim_name, r.template) for r in trainer.resource_claims] == [("gpus", "trainer-0-gpus-x7k2p", "trainer-0-tmpl")]
    [idle] = sc.of_kind(IDLE)
    assert (idle.subject.namespace, idle.subject.pod, idle.subject.gpu_share) == ("research", "trainer-0", Decimal(4))
    assert idle.usd_per_day == Decimal("660.48") and idle.details["mechanism"] == "DRA"

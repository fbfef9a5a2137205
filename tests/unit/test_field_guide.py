"""Field guide (../shared/reference/field-guide.md): each item's minimal input through the real path, right value asserted.

Each minimal input is written as a recording — text exposition with millisecond timestamps (the item's
values repeated every 30 s over one hour) plus a `kubectl get -o json` List — read by the recording
adapters and scanned by the detectors, exactly as `gpuwaste scan --recording` does. Every test runs twice:
with the cluster as a kubectl List (the Kubernetes API's shape) and as kube-state-metrics series in the same
file (a Prometheus-only cluster); the right value is the same.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuwaste.detectors import DetectorSettings
from gpuwaste.models.cluster import gpu_share_for_request
from gpuwaste.models.findings import Attribution, IdleMode, WasteKind
from gpuwaste.models.settings import DEFAULT_GPU_RESOURCES, ClusterReadSettings
from gpuwaste.models.telemetry import Signal
from gpuwaste.sources.k8s_objects import pod_from_dict
from tests.fixtures.field_guide import builders
from tests.fixtures.field_guide.builders import S, node, pod, scan


@pytest.fixture(autouse=True, params=["api", "ksm"])
def cluster_via(request, monkeypatch):
    """Each field-guide case through the API-shaped List and through kube-state-metrics series."""
    monkeypatch.setattr(builders, "CLUSTER_VIA", request.param)
    return request.param

UTIL = Signal.GPU_UTIL.value
GR = Signal.GR_ENGINE_ACTIVE.value
FB = Signal.FB_USED.value
POWER = Signal.POWER_USAGE.value
ENERGY = Signal.TOTAL_ENERGY.value
IDLE = WasteKind.IDLE
UNDER = WasteKind.UNDERUSED
UNALLOC = WasteKind.UNALLOCATED


def _dev(uuid: str, host: str, **extra: str) -> dict[str, str]:
    return {"gpu": "0", "UUID": uuid, "device": "nvidia0", "modelName": "NVIDIA A10G", "Hostname": host, **extra}


# --- B01: empty workload labels ---------------------------------------------------------------------------


def test_field_guide_b01_empty_labels_attributed_by_elimination_when_counts_match(tmp_path):
    # GIVEN the B01 series (container="", namespace="", pod="") on a one-GPU node where team-a/trainer-0 holds 1 GPU
    labels = {"gpu": "0", "UUID": "GPU-1111aaaa-0001", "pci_bus_id": "00000000:00:04.0", "device": "nvidia0",
              "modelName": "Tesla T4", "Hostname": "gke-pool-gpu-7c1d", "container": "", "namespace": "", "pod": ""}
    objs = [node("gke-pool-gpu-7c1d", itype="n1-standard-8", gpus=1), pod("team-a", "trainer-0", "gke-pool-gpu-7c1d")]
    # WHEN scanned
    sc = scan(tmp_path, [S(GR, labels, 0.0)], objs)
    # THEN the idle GPU is the trainer's, attributed by elimination, and nothing is reported for namespace ""
    idle = sc.of_kind(IDLE)
    assert [(f.subject.namespace, f.subject.pod) for f in idle] == [("team-a", "trainer-0")]
    assert idle[0].subject.attribution is Attribution.ELIMINATION
    assert all(f.subject.namespace != "" for f in sc.findings)
    assert not sc.of_kind(UNALLOC)


def test_field_guide_b01_empty_labels_counts_differ_gives_attribution_missing_not_idle(tmp_path):
    # GIVEN two unlabelled GPUs on a node where one pod holds 1 GPU (counts do not match: elimination is unsafe)
    objs = [node("gke-pool-gpu-7c1d", itype="n1-standard-8", gpus=2), pod("team-a", "trainer-0", "gke-pool-gpu-7c1d")]
    series = [S(GR, {"UUID": f"GPU-1111aaaa-000{i}", "gpu": str(i), "modelName": "Tesla T4", "Hostname": "gke-pool-gpu-7c1d",
                     "container": "", "namespace": "", "pod": ""}, 0.0) for i in (1, 2)]
    # WHEN scanned
    sc = scan(tmp_path, series, objs)
    # THEN a configuration diagnostic for the node, no idle verdict for the pod, 1 GPU free by counts, nothing for namespace ""
    dq = sc.checks()
    assert "attribution_missing" in dq
    assert dq["attribution_missing"][0].subject.node == "gke-pool-gpu-7c1d"
    assert not sc.of_kind(IDLE)
    (free,) = sc.of_kind(UNALLOC)  # 2 GPUs − 1 requested: counted from requests, not from empty labels
    assert free.wasted_gpu_share == 1 and free.details["unheld_devices"] == 0
    assert all(f.subject.namespace != "" for f in sc.findings)


def test_field_guide_b01_no_elimination_when_a_gpu_of_the_node_is_unmonitored(tmp_path):
    # GIVEN a node that should have 2 GPUs (gpu.count / capacity), DCGM sees 1 unlabelled GPU, one pod holds 1 GPU
    series = [S(GR, {"UUID": "GPU-1111aaaa-0201", "gpu": "0", "modelName": "Tesla T4", "Hostname": "gke-2",
                     "container": "", "namespace": "", "pod": ""}, 0.0)]
    objs = [node("gke-2", itype="n1-standard-8", gpus=2), pod("team-a", "trainer-0", "gke-2")]
    # WHEN scanned
    sc = scan(tmp_path, series, objs)
    # THEN no elimination (the pod may hold the unmonitored GPU): no idle verdict; attribution_missing + unmonitored_gpus
    assert not sc.of_kind(IDLE)
    assert [a.attribution for a in sc.ctx.allocations] == [Attribution.UNKNOWN]
    assert {"attribution_missing", "unmonitored_gpus"} <= set(sc.checks())


# --- B02: exported_* labels ------------------------------------------------------------------------------


def test_field_guide_b02_exported_pod_is_the_workload_and_exporter_never_reported(tmp_path):
    # GIVEN the B02 series: pod= the exporter, exported_pod= the workload (Helm honorLabels: false)
    labels = {"gpu": "1", "UUID": "GPU-2222bbbb-0001", "device": "nvidia1", "modelName": "NVIDIA A10G", "Hostname": "node-a",
              "container": "nvidia-dcgm-exporter", "namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-abcde",
              "exported_container": "evaluator", "exported_namespace": "research", "exported_pod": "llm-eval-7d9-xk2",
              "job": "nvidia-dcgm-exporter", "instance": "10.0.0.5:9400"}
    objs = [node("node-a"), pod("research", "llm-eval-7d9-xk2", "node-a"),
            pod("gpu-operator", "nvidia-dcgm-exporter-abcde", "node-a", gpus=0, owner=("DaemonSet", "nvidia-dcgm-exporter"), ip="10.0.0.5")]
    # WHEN scanned
    sc = scan(tmp_path, [S(UTIL, labels, 0.0)], objs)
    # THEN research/llm-eval-7d9-xk2 is idle, attributed by its exported_* labels; the exporter appears nowhere
    idle = sc.of_kind(IDLE)
    assert [(f.subject.namespace, f.subject.pod) for f in idle] == [("research", "llm-eval-7d9-xk2")]
    assert idle[0].subject.attribution is Attribution.LABELS
    assert sc.ctx.telemetry.gpus[0].groups[0].label_family == "exported_pod"
    assert all(f.subject.pod != "nvidia-dcgm-exporter-abcde" and f.subject.namespace != "gpu-operator" for f in sc.findings)


def test_field_guide_b02_exporter_pod_label_alone_is_not_a_workload(tmp_path):
    # GIVEN a series whose only pod label is the exporter's own (no exported_*), one workload pod on the node
    labels = _dev("GPU-2222bbbb-0002", "node-a", container="nvidia-dcgm-exporter", namespace="gpu-operator",
                  pod="nvidia-dcgm-exporter-abcde")
    objs = [node("node-a"), pod("research", "llm-eval-7d9-xk2", "node-a")]
    # WHEN scanned
    sc = scan(tmp_path, [S(UTIL, labels, 0.0)], objs)
    # THEN the GPU is the workload's (elimination), never the exporter's
    idle = sc.of_kind(IDLE)
    assert [(f.subject.pod, f.subject.attribution) for f in idle] == [("llm-eval-7d9-xk2", Attribution.ELIMINATION)]
    assert not [f for f in sc.findings if f.subject.pod == "nvidia-dcgm-exporter-abcde"]


# --- B03: Hostname is not the node name -------------------------------------------------------------------

B03_NODE = "ip-10-0-7-88.us-west-2.compute.internal"


def test_field_guide_b03_hostname_is_exporter_pod_name_resolved_via_its_node(tmp_path):
    # GIVEN Hostname = the exporter pod's name (no workload labels, so only the exporter route can place the GPU)
    labels = _dev("GPU-3333cccc-0001", "dcgm-exporter-x9f2t", instance="10.0.7.140:9400")
    objs = [node(B03_NODE), pod("monitoring", "dcgm-exporter-x9f2t", B03_NODE, gpus=0, owner=("DaemonSet", "dcgm-exporter"), ip="10.0.7.140")]
    # WHEN scanned
    sc = scan(tmp_path, [S(UTIL, labels, 0.0)], objs)
    # THEN the GPU is on the exporter pod's node (never "unknown node") and priced with that node's instance type
    assert sc.ctx.unmapped_devices == []
    assert {d.device.uuid for d in sc.ctx.nodes[B03_NODE].devices} == {"GPU-3333cccc-0001"}
    free = sc.of_kind(UNALLOC)
    assert [f.subject.node for f in free] == [B03_NODE]
    assert free[0].cost is not None and free[0].cost.priced and free[0].subject.instance_type == "g5.xlarge"


def test_field_guide_b03_workload_idle_priced_with_resolved_node(tmp_path):
    # GIVEN the B03 minimal input: Hostname = exporter pod name, workload demand/forecast-train-84c-m3n
    labels = _dev("GPU-3333cccc-0002", "dcgm-exporter-x9f2t", container="forecaster", namespace="demand",
                  pod="forecast-train-84c-m3n", instance="10.0.7.140:9400")
    objs = [node(B03_NODE), pod("demand", "forecast-train-84c-m3n", B03_NODE),
            pod("monitoring", "dcgm-exporter-x9f2t", B03_NODE, gpus=0, owner=("DaemonSet", "dcgm-exporter"), ip="10.0.7.140")]
    # WHEN scanned
    sc = scan(tmp_path, [S(UTIL, labels, 0.0)], objs)
    # THEN the idle finding names the resolved node and is priced at g5.xlarge's rate ($1.006/GPU-h → $24.14/day)
    (idle,) = sc.of_kind(IDLE)
    assert idle.subject.node == B03_NODE
    assert idle.cost is not None and idle.cost.usd_per_day == Decimal("24.14")


def test_field_guide_b03_instance_ip_of_exporter_pod_resolves_node(tmp_path):
    # GIVEN a Hostname that names nothing, but `instance` is the exporter pod's IP
    labels = _dev("GPU-3333cccc-0003", "unknown-host", instance="10.0.7.140:9400")
    objs = [node(B03_NODE), pod("monitoring", "dcgm-exporter-x9f2t", B03_NODE, gpus=0, ip="10.0.7.140")]
    # WHEN scanned
    sc = scan(tmp_path, [S(UTIL, labels, 0.0)], objs)
    # THEN the exporter pod IP → its node
    assert sc.ctx.unmapped_devices == []
    assert [d.device.uuid for d in sc.ctx.nodes[B03_NODE].devices] == ["GPU-3333cccc-0003"]


def test_field_guide_b03_ec2_instance_id_in_provider_id_resolves_node(tmp_path):
    # GIVEN Hostname = an EC2 instance id (as on the real kops L4 scrape) and a node whose providerID ends with it
    labels = _dev("GPU-3333cccc-0004", "i-030791dc5a37cd257")
    objs = [node(B03_NODE, provider_id="aws:///us-west-2a/i-030791dc5a37cd257")]
    # WHEN scanned
    sc = scan(tmp_path, [S(UTIL, labels, 0.0)], objs)
    # THEN the instance id → that node
    assert sc.ctx.unmapped_devices == []
    assert [d.device.uuid for d in sc.ctx.nodes[B03_NODE].devices] == ["GPU-3333cccc-0004"]


def test_field_guide_b03_falls_back_to_the_workload_pods_node(tmp_path):
    # GIVEN a Hostname that names nothing, no `instance`, but workload labels of a pod scheduled on the node
    labels = _dev("GPU-3333cccc-0007", "dcgm-exporter-gone", namespace="demand", pod="forecast-train-84c-m3n")
    objs = [node(B03_NODE), pod("demand", "forecast-train-84c-m3n", B03_NODE)]
    # WHEN scanned
    sc = scan(tmp_path, [S(UTIL, labels, 0.0)], objs)
    # THEN the GPU is placed on the workload pod's node and the idle finding is priced there
    assert sc.ctx.unmapped_devices == []
    (idle,) = sc.of_kind(IDLE)
    assert idle.subject.node == B03_NODE and idle.cost is not None and idle.cost.priced


def test_field_guide_b03_both_hostname_spellings_resolve_the_same_node(tmp_path):
    # GIVEN one GPU labelled `Hostname=` (before the May 2026 rename) and one labelled `hostname=` (after)
    old = {"gpu": "0", "UUID": "GPU-3333cccc-0005", "modelName": "NVIDIA A10G", "Hostname": "node-b"}
    new = {"gpu": "1", "UUID": "GPU-3333cccc-0006", "modelName": "NVIDIA A10G", "hostname": "node-b"}
    objs = [node("node-b", itype="g5.12xlarge", gpus=2)]
    # WHEN scanned
    sc = scan(tmp_path, [S(UTIL, old, 0.0), S(UTIL, new, 0.0)], objs)
    # THEN both GPUs are on node-b and nothing is unmapped
    assert sc.ctx.unmapped_devices == []
    assert sc.ctx.nodes["node-b"].physical_uuids == {"GPU-3333cccc-0005", "GPU-3333cccc-0006"}


# --- B04: only GPU_UTIL -----------------------------------------------------------------------------------


def test_field_guide_b04_gpu_util_fallback_named_and_percent_converted_to_ratio(tmp_path):
    # GIVEN the B04 input (no PROF series) with GPU_UTIL = 3 %
    labels = {"gpu": "0", "UUID": "GPU-4444dddd-0001", "device": "nvidia0", "modelName": "Tesla T4", "Hostname": "node-b",
              "container": "ocr", "namespace": "docs", "pod": "ocr-worker-1"}
    objs = [node("node-b", itype="g4dn.xlarge"), pod("docs", "ocr-worker-1", "node-b")]
    # WHEN scanned
    sc = scan(tmp_path, [S(UTIL, labels, 3.0)], objs)
    # THEN idle, with GPU_UTIL named as the signal and 3 % shown as the ratio 0.03 against 0.05
    (idle,) = sc.of_kind(IDLE)
    ev = idle.evidence[0]
    assert (ev.signal, ev.unit, ev.avg, ev.p95, ev.threshold) == (UTIL, "ratio", 0.03, 0.03, 0.05)
    assert idle.details["activity_signal"] == UTIL
    assert "÷ 100" in ev.note


def test_field_guide_b04_gpu_util_ten_percent_is_underused_not_idle(tmp_path):
    # GIVEN GPU_UTIL = 10 % (0.10: above idle 0.05, below under-used 0.20)
    labels = _dev("GPU-4444dddd-0002", "node-b", namespace="docs", pod="ocr-worker-1")
    objs = [node("node-b", itype="g4dn.xlarge"), pod("docs", "ocr-worker-1", "node-b")]
    # WHEN scanned
    sc = scan(tmp_path, [S(UTIL, labels, 10.0)], objs)
    # THEN under-used at activity 0.10 (not idle, no "unknown")
    assert not sc.of_kind(IDLE)
    (under,) = sc.of_kind(UNDER)
    assert under.details["activity_avg_ratio"] == 0.1
    assert "no_activity_signal" not in sc.checks()


# --- B05: MIG: GPU_UTIL absent or 0 -----------------------------------------------------------------------

_MIG = {"gpu": "0", "UUID": "GPU-5555eeee-0001", "device": "nvidia0", "modelName": "NVIDIA A100 80GB PCIe",
        "GPU_I_PROFILE": "3g.40gb", "GPU_I_ID": "1", "Hostname": "node-c", "container": "triton", "namespace": "speech", "pod": "asr-0"}


def _mig_objs() -> list[dict]:
    return [node("node-c", itype="Standard_NC24ads_A100_v4", gpus=None, resource="",
                 labels={"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.product": "NVIDIA-A100-PCIE-80GB"}),
            pod("speech", "asr-0", "node-c", resource="nvidia.com/mig-3g.40gb")]


def test_field_guide_b05_mig_ignores_gpu_util_and_uses_gr_engine_per_instance(tmp_path):
    # GIVEN the B05 input: GPU_UTIL 0 and GR_ENGINE_ACTIVE 0.563120 on (UUID, GPU_I_ID=1)
    series = [S(UTIL, _MIG, 0.0), S(GR, _MIG, 0.56312)]
    # WHEN scanned
    sc = scan(tmp_path, series, _mig_objs())
    # THEN the instance's activity is GR_ENGINE 0.563 → neither idle nor under-used
    dev = next(d for d in sc.ctx.telemetry.gpus if d.device.gpu_i_id == "1")
    assert sc.ctx.activity_signal(dev) is Signal.GR_ENGINE_ACTIVE
    act = sc.ctx.activity([dev])
    assert act is not None and round(act.avg, 6) == 0.56312
    assert not sc.of_kind(IDLE) and not sc.of_kind(UNDER)


def test_field_guide_b05_mig_without_prof_is_activity_unknown_not_idle(tmp_path):
    # GIVEN a MIG instance with only GPU_UTIL (pinned at 0) and no PROF field
    # WHEN scanned
    sc = scan(tmp_path, [S(UTIL, _MIG, 0.0), S(FB, _MIG, 1000.0)], _mig_objs())
    # THEN "activity unknown" (data quality no_activity_signal), never idle
    assert not sc.of_kind(IDLE) and not sc.of_kind(UNDER)
    (dq,) = sc.checks()["no_activity_signal"]
    assert dq.subject.pod == "asr-0"
    assert "activity unknown" in dq.title and "GR_ENGINE" in dq.recommendation


# --- B06: MIG repeats device-level values -----------------------------------------------------------------


def test_field_guide_b06_power_counted_once_per_uuid_not_summed_over_instances(tmp_path):
    # GIVEN the B06 input: the same 52.636 W on GPU instances 3 and 4 of one A30, with idle GR_ENGINE per instance
    base = {"gpu": "0", "UUID": "GPU-6666ffff-0001", "modelName": "NVIDIA A30", "GPU_I_PROFILE": "1g.6gb", "Hostname": "node-d"}
    i3 = {**base, "GPU_I_ID": "3", "namespace": "ml", "pod": "tenant-3"}
    i4 = {**base, "GPU_I_ID": "4", "namespace": "ml", "pod": "tenant-4"}
    series = [S(POWER, {**base, "GPU_I_ID": "3"}, 52.636), S(POWER, {**base, "GPU_I_ID": "4"}, 52.636), S(GR, i3, 0.0), S(GR, i4, 0.0)]
    objs = [node("node-d", itype=None, gpus=None, resource="", labels={"nvidia.com/mig.strategy": "mixed"}),
            pod("ml", "tenant-3", "node-d", resource="nvidia.com/mig-1g.6gb"), pod("ml", "tenant-4", "node-d", resource="nvidia.com/mig-1g.6gb")]
    # WHEN scanned
    sc = scan(tmp_path, series, objs)
    # THEN each instance reads the board's power once: 52.636 W from one series' 120 samples (the window is
    # left-open: the sample exactly at its start is outside), never 105.272 W
    inst = [d for d in sc.ctx.telemetry.gpus if d.device.gpu_i_id]
    assert len(inst) == 2
    for d in inst:
        p = d.merged(Signal.POWER_USAGE)
        assert p is not None and p.count == 120 and round(p.avg, 3) == 52.636
    assert len({d.device.uuid for d in sc.ctx.telemetry.gpus}) == 1
    idle = sc.of_kind(IDLE)
    assert len(idle) == 2
    assert all(next(e for e in f.evidence if e.signal == POWER).avg == 52.636 for f in idle)


# --- B07 / B08: MIG profile spellings, single strategy ----------------------------------------------------


def test_field_guide_b07_slice_fraction_from_leading_ng_for_both_spellings():
    # GIVEN the device-plugin spelling (1g.12gb) and the DCGM spelling (1g.11gb) of one profile
    # WHEN converted to physical-GPU shares
    plugin = gpu_share_for_request("nvidia.com/mig-1g.12gb", 1, None)
    dcgm = gpu_share_for_request("nvidia.com/mig-1g.11gb", 1, None)
    seven = gpu_share_for_request("nvidia.com/mig-7g.80gb", 1, None)
    # THEN both are 1/7 (memory part ignored) and 7g is a whole GPU
    assert plugin == dcgm == Decimal(1) / Decimal(7)
    assert seven == Decimal(1)


def test_field_guide_b07_mig_series_joined_by_pod_labels_not_profile_text(tmp_path):
    # GIVEN the B07 input: DCGM says 1g.11gb, the pod requests nvidia.com/mig-1g.12gb
    labels = {"gpu": "0", "UUID": "GPU-7777aaaa-0001", "modelName": "NVIDIA H100 NVL", "GPU_I_PROFILE": "1g.11gb", "GPU_I_ID": "7",
              "Hostname": "node-e", "namespace": "rag", "pod": "embedder-0"}
    objs = [node("node-e", itype="Standard_NC80adis_H100_v5", gpus=None, resource="", labels={"nvidia.com/mig.strategy": "mixed"}),
            pod("rag", "embedder-0", "node-e", resource="nvidia.com/mig-1g.12gb")]
    # WHEN scanned
    sc = scan(tmp_path, [S(FB, labels, 12.0), S(GR, labels, 0.0)], objs)
    # THEN the idle slice is the pod's, worth 1/7 of a GPU
    (idle,) = sc.of_kind(IDLE)
    assert idle.subject.pod == "embedder-0"
    assert idle.wasted_gpu_share == Decimal(1) / Decimal(7)


def test_field_guide_b08_single_strategy_priced_per_physical_gpu_times_slice(tmp_path):
    # GIVEN the B08 node (mig.strategy single, gpu.count 14, product ...-MIG-1g.12gb) with 2 physical GPUs × 7 instances in DCGM
    n = node("node-h100", itype="Standard_NC80adis_H100_v5", gpus=14,
             labels={"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.product": "NVIDIA-H100-NVL-MIG-1g.12gb"})
    series = []
    for g in (1, 2):
        for i in range(7, 14):
            lab = {"gpu": str(g - 1), "UUID": f"GPU-8888bbbb-000{g}", "modelName": "NVIDIA H100 NVL", "GPU_I_PROFILE": "1g.11gb",
                   "GPU_I_ID": str(i), "Hostname": "node-h100"}
            if g == 1 and i == 7:
                lab.update(namespace="rag", pod="embedder-0")
            series.append(S(GR, lab, 0.0 if (g == 1 and i == 7) else 0.0))
    objs = [n, pod("rag", "embedder-0", "node-h100")]
    # WHEN scanned
    sc = scan(tmp_path, series, objs)
    # THEN one nvidia.com/gpu unit = 1/7 GPU, physical GPUs = 2 UUIDs (not 14), price = ($13.96 ÷ 2) × 1/7 × 24
    (idle,) = sc.of_kind(IDLE)
    assert idle.wasted_gpu_share == Decimal(1) / Decimal(7)
    assert idle.subject.physical_gpus_on_node == 2
    assert idle.cost is not None and idle.cost.usd_per_gpu_hour == Decimal("6.98")
    assert idle.cost.usd_per_day == (Decimal("6.98") * Decimal(1) / Decimal(7) * 24).quantize(Decimal("0.01"))
    assert "unmonitored_gpus" not in sc.checks()
    (free,) = sc.of_kind(UNALLOC)
    assert free.wasted_gpu_share == Decimal(2) - Decimal(1) / Decimal(7)


# --- B10: stale pod label ---------------------------------------------------------------------------------


def test_field_guide_b10_finished_pod_label_counts_as_unallocated_node_capacity(tmp_path):
    # GIVEN a Succeeded pod whose name stays on the GPU's series for 40 min, then the labels vanish (pod="")
    base = _dev("GPU-aaaa1010-0001", "node-f")
    series = [S(UTIL, {**base, "namespace": "search", "pod": "nightly-embed-28711440-x7k2p"}, 0.0, until_minute=40),
              S(UTIL, {**base, "namespace": "", "pod": ""}, 0.0, from_minute=40)]
    objs = [node("node-f"), pod("search", "nightly-embed-28711440-x7k2p", "node-f", phase="Succeeded", owner=("Job", "nightly-embed-28711440"))]
    # WHEN scanned
    sc = scan(tmp_path, series, objs)
    # THEN no idle finding for the finished pod; the node has 1 unallocated GPU; the stale label is reported; one device
    assert not sc.for_pod("nightly-embed-28711440-x7k2p") or all(f.kind is WasteKind.DATA_QUALITY for f in sc.for_pod("nightly-embed-28711440-x7k2p"))
    (free,) = sc.of_kind(UNALLOC)
    assert free.subject.node == "node-f" and free.wasted_gpu_share == 1 and free.details["unheld_devices"] == 1
    assert "stale_pod_label" in sc.checks()
    assert len(sc.ctx.telemetry.gpus) == 1 and len(sc.ctx.telemetry.gpus[0].groups) == 2


# --- B11: KSM requests of finished / unscheduled pods ------------------------------------------------------


def test_field_guide_b11_succeeded_and_unscheduled_pods_hold_nothing(tmp_path):
    # GIVEN a Succeeded pod requesting 8 on an 8-GPU node and an unscheduled pod (node "") requesting 4
    base = {"modelName": "NVIDIA A100-SXM4-40GB", "Hostname": "ip-10-1-90-3"}
    series = [S(UTIL, {**base, "gpu": str(i), "UUID": f"GPU-bbbb1111-000{i}"}, 0.0) for i in range(8)]
    objs = [node("ip-10-1-90-3", itype="p4d.24xlarge", gpus=8),
            pod("ads", "offline-eval-28712000-abcde", "ip-10-1-90-3", gpus=8, phase="Succeeded"),
            pod("ads", "big-sweep-trial-17", None, gpus=4, phase="Pending")]
    # WHEN scanned
    sc = scan(tmp_path, series, objs)
    # THEN neither pod holds GPUs: all 8 GPUs are unallocated, and no pod-level waste is reported
    assert sc.ctx.allocations == []
    (free,) = sc.of_kind(UNALLOC)
    assert free.wasted_gpu_share == 8
    assert not sc.of_kind(IDLE) and not sc.of_kind(UNDER)


def test_field_guide_b11_effective_request_is_max_of_init_and_sum_of_app_containers():
    # GIVEN pods with (init 4, app 1+1) and (init 1, app 2+2)
    big_init = pod("ads", "a", "n", gpus=1, containers=2, init_gpus=4)
    small_init = pod("ads", "b", "n", gpus=2, containers=2, init_gpus=1)
    # WHEN read
    a = pod_from_dict(big_init, DEFAULT_GPU_RESOURCES)
    b = pod_from_dict(small_init, DEFAULT_GPU_RESOURCES)
    # THEN effective request = max(largest init container, sum of app containers)
    assert a.gpu_requests == {"nvidia.com/gpu": 4}
    assert b.gpu_requests == {"nvidia.com/gpu": 4}


# --- B12: exporter gaps, restarts, frozen values -----------------------------------------------------------


def test_field_guide_b12_gap_of_27_minutes_reports_coverage_and_no_idle(tmp_path):
    # GIVEN a pod's GPU at 0 % with no samples for 27 minutes of the hour, and a new `instance` after the gap
    base = {"gpu": "4", "UUID": "GPU-9999cccc-0001", "modelName": "NVIDIA A10G", "Hostname": "node-g", "namespace": "vision",
            "pod": "resnet-train-2-worker-0"}
    series = [S(UTIL, {**base, "instance": "10.1.44.12:9400"}, 0.0, until_minute=5),
              S(UTIL, {**base, "instance": "10.1.44.87:9400"}, 0.0, from_minute=32)]
    objs = [node("node-g"), pod("vision", "resnet-train-2-worker-0", "node-g")]
    # WHEN scanned
    sc = scan(tmp_path, series, objs)
    # THEN the two instances are one GPU; coverage (~0.55) is reported as data quality, and no idle verdict
    assert len(sc.ctx.telemetry.gpus) == 1
    assert sc.ctx.telemetry.gpus[0].instances == ("10.1.44.12:9400", "10.1.44.87:9400")
    assert not sc.of_kind(IDLE) and not sc.of_kind(UNDER)
    (dq,) = sc.checks()["partial_coverage"]
    assert dq.details["coverage"] == round((9 + 57) / 120, 4)  # (0, 5) min and [32, 60] min: the window is left-open


def test_field_guide_b12_restart_with_new_instance_merged_by_uuid_and_stays_busy(tmp_path):
    # GIVEN the B12 minimal input (97 % then 96 % across an instance change) with a 1-minute restart gap
    base = {"gpu": "4", "UUID": "GPU-9999cccc-0002", "modelName": "NVIDIA A10G", "Hostname": "node-g", "namespace": "vision",
            "pod": "resnet-train-2-worker-0"}
    series = [S(UTIL, {**base, "instance": "10.1.44.12:9400"}, 97.0, until_minute=30),
              S(UTIL, {**base, "instance": "10.1.44.87:9400"}, 96.0, from_minute=31)]
    objs = [node("node-g"), pod("vision", "resnet-train-2-worker-0", "node-g")]
    # WHEN scanned
    sc = scan(tmp_path, series, objs)
    # THEN one device whose merged series counts every sample once (59 + 59 = 118: the window is left-open) and no
    # waste or coverage finding
    dev = sc.ctx.telemetry.gpus[0]
    stats = dev.merged(Signal.GPU_UTIL)
    assert stats is not None and stats.count == 118 and stats.series == 2
    assert sc.findings == [] or all(f.kind is WasteKind.DATA_QUALITY and f.details["check"] != "partial_coverage" for f in sc.findings)


def test_field_guide_b12_frozen_exporter_is_data_quality_not_idle(tmp_path):
    # GIVEN every field, the energy counter included, bit-identical for the hour while the pod runs
    base = {"gpu": "0", "UUID": "GPU-9999cccc-0003", "modelName": "NVIDIA A10G", "Hostname": "node-g",
            "namespace": "vision", "pod": "resnet-train-3"}
    series = [S(UTIL, base, 0.0), S(ENERGY, base, 123456789.0), S(POWER, base, 60.0)]
    objs = [node("node-g"), pod("vision", "resnet-train-3", "node-g")]
    # WHEN scanned
    sc = scan(tmp_path, series, objs)
    # THEN frozen_exporter data quality, no idle
    assert not sc.of_kind(IDLE)
    (dq,) = sc.checks()["frozen_exporter"]
    assert dq.subject.pod == "resnet-train-3"


def test_field_guide_b12_series_stopped_before_window_end_is_stale_not_idle(tmp_path):
    # GIVEN a GPU at 0 % whose samples stop 12 minutes before the window's end (coverage still 80 %)
    labels = _dev("GPU-9999cccc-0004", "node-g", namespace="vision", pod="resnet-train-4")
    objs = [node("node-g"), pod("vision", "resnet-train-4", "node-g")]
    # WHEN scanned
    sc = scan(tmp_path, [S(UTIL, labels, 0.0, until_minute=48)], objs)
    # THEN the GPU's state is unknown (stale_series), never idle
    assert not sc.of_kind(IDLE)
    assert "stale_series" in sc.checks()


# --- B16: inference servers hold memory while idle ---------------------------------------------------------


def test_field_guide_b16_vllm_high_fb_used_with_zero_gr_engine_is_idle(tmp_path):
    # GIVEN the B16 input: FB_USED 42112 MiB, GR_ENGINE 0.000412, vLLM: no running requests, flat token counter
    labels = {"gpu": "0", "UUID": "GPU-16161616-0001", "modelName": "NVIDIA L40S", "Hostname": "node-l",
              "namespace": "llm", "pod": "llama31-8b-vllm-6d5-wq2"}
    app = {"engine": "0", "model_name": "meta-llama/Llama-3.1-8B-Instruct", "namespace": "llm", "pod": "llama31-8b-vllm-6d5-wq2"}
    series = [S(FB, labels, 42112.0), S(GR, labels, 0.000412), S("vllm:num_requests_running", app, 0.0),
              S("vllm:generation_tokens_total", app, 18234561.0)]
    objs = [node("node-l", itype="g6e.xlarge"), pod("llm", "llama31-8b-vllm-6d5-wq2", "node-l", owner=("ReplicaSet", "llama31-8b-vllm-6d5"),
                                                   image="vllm/vllm-openai:v0.6.0")]
    # WHEN scanned
    sc = scan(tmp_path, series, objs)
    # THEN idle (inference) on GR_ENGINE; FB_USED is supporting evidence only, never the activity signal
    (idle,) = sc.of_kind(IDLE)
    assert idle.details["activity_signal"] == GR
    assert idle.evidence[0].signal == GR
    assert idle.idle_mode is IdleMode.INFERENCE
    fb = next(e for e in idle.evidence if e.signal == FB)
    assert fb.avg == 42112.0 and fb.unit == "MiB"


def test_field_guide_b16_both_kv_cache_metric_names_are_read(tmp_path):
    # GIVEN an idle vLLM pod exporting the old kv-cache name and another exporting the new one
    def series_for(i: int, metric: str) -> list[S]:
        labels = {"gpu": str(i), "UUID": f"GPU-16161616-001{i}", "modelName": "NVIDIA L40S", "Hostname": "node-l",
                  "namespace": "llm", "pod": f"vllm-{i}"}
        return [S(GR, labels, 0.0), S(metric, {"namespace": "llm", "pod": f"vllm-{i}"}, 0.01)]
    series = series_for(0, "vllm:gpu_cache_usage_perc") + series_for(1, "vllm:kv_cache_usage_perc")
    objs = [node("node-l", itype="g6e.12xlarge", gpus=2), pod("llm", "vllm-0", "node-l"), pod("llm", "vllm-1", "node-l")]
    # WHEN scanned
    sc = scan(tmp_path, series, objs)
    # THEN both names reach the pod telemetry and both pods are idle inference servers
    pods = {p.pod: set(p.signals) for p in sc.ctx.telemetry.pods}
    assert pods == {"vllm-0": {"vllm:gpu_cache_usage_perc"}, "vllm-1": {"vllm:kv_cache_usage_perc"}}
    assert sorted((f.subject.pod, f.idle_mode) for f in sc.of_kind(IDLE)) == [("vllm-0", IdleMode.INFERENCE), ("vllm-1", IdleMode.INFERENCE)]


# --- B17: duplicate series ---------------------------------------------------------------------------------


def test_field_guide_b17_duplicate_exporter_series_counted_once(tmp_path):
    # GIVEN the B17 input: one UUID from two exporters (one with workload labels, one without)
    a = {"gpu": "0", "UUID": "GPU-cccc3333-0001", "modelName": "NVIDIA A10G", "Hostname": "ip-10-2-3-4.ec2.internal",
         "namespace": "search", "pod": "reranker-5d6-p2k", "job": "gpu-operator/nvidia-dcgm-exporter", "instance": "10.2.3.190:9400"}
    b = {"gpu": "0", "UUID": "GPU-cccc3333-0001", "modelName": "NVIDIA A10G", "Hostname": "ip-10-2-3-4.ec2.internal",
         "job": "node-dcgm-exporter", "instance": "10.2.3.4:9400"}
    objs = [node("ip-10-2-3-4.ec2.internal"), pod("search", "reranker-5d6-p2k", "ip-10-2-3-4.ec2.internal")]
    # WHEN scanned
    sc = scan(tmp_path, [S(UTIL, a, 0.0), S(UTIL, b, 0.0)], objs)
    # THEN one physical GPU, attributed by the labelled series, priced once (1 GPU → $24.14/day), no free capacity
    assert sc.ctx.nodes["ip-10-2-3-4.ec2.internal"].physical_uuids == {"GPU-cccc3333-0001"}
    (idle,) = sc.of_kind(IDLE)
    assert idle.subject.attribution is Attribution.LABELS
    assert idle.wasted_gpu_share == 1 and len(idle.subject.gpus) == 1
    assert idle.cost is not None and idle.cost.usd_per_day == Decimal("24.14")
    assert not sc.of_kind(UNALLOC)


# --- B20: GPU resource names ------------------------------------------------------------------------------


def _vgpu_input() -> tuple[list[S], list[dict]]:
    series = [S(UTIL, {"gpu": str(i), "UUID": f"GPU-20202020-000{i}", "modelName": "NVIDIA A10G", "Hostname": "n1"}, 0.0) for i in range(4)]
    objs = [node("n1", itype="g5.12xlarge", gpus=40, resource="k8s.amazonaws.com/vgpu"),
            pod("ml", "vgpu-user", "n1", gpus=10, resource="k8s.amazonaws.com/vgpu")]
    return series, objs


def test_field_guide_b20_unknown_gpu_resource_warns_and_never_prices_zero_or_negative(tmp_path):
    # GIVEN the B20 input: allocatable k8s.amazonaws.com/vgpu 40, 4 UUIDs in DCGM, no nvidia.com/gpu requests
    series, objs = _vgpu_input()
    # WHEN scanned with the default resource names
    sc = scan(tmp_path, series, objs)
    # THEN an unknown_gpu_resource warning, and no finding with a zero or negative share or cost
    (dq,) = sc.checks()["unknown_gpu_resource"]
    assert dq.subject.node == "n1" and "k8s.amazonaws.com/vgpu" in str(dq.details["resources"])
    for f in sc.findings:
        if f.kind.is_waste:
            assert f.wasted_gpu_share > 0
            assert f.cost is not None and (f.cost.usd_per_day is None or f.cost.usd_per_day > 0)
    assert not sc.of_kind(UNALLOC)


def test_field_guide_b20_configured_custom_resource_is_counted(tmp_path):
    # GIVEN the same cluster with k8s.amazonaws.com/vgpu configured as a GPU resource
    series, objs = _vgpu_input()
    read = ClusterReadSettings(gpu_resource_names=(*DEFAULT_GPU_RESOURCES, "k8s.amazonaws.com/vgpu"))
    # WHEN scanned
    sc = scan(tmp_path, series, objs, read=read)
    # THEN the pod requesting vgpu is a GPU pod holding 10 of 40 vGPUs on 4 GPUs = 1 physical GPU (not 10)
    assert [(a.pod.name, a.pod.gpu_requests) for a in sc.ctx.allocations] == [("vgpu-user", {"k8s.amazonaws.com/vgpu": 10})]
    assert sc.ctx.allocations[0].share == 1
    assert sc.ctx.cluster.nodes[0].allocatable_gpu == {"k8s.amazonaws.com/vgpu": 40}


# --- B21: power alone ----------------------------------------------------------------------------------------


def test_field_guide_b21_power_alone_never_makes_idle(tmp_path):
    # GIVEN a GPU with only power (101.3 W) and no activity field at all
    labels = {"gpu": "0", "UUID": "GPU-21212121-0001", "modelName": "NVIDIA A100-SXM4-40GB", "Hostname": "node-p",
              "namespace": "ml", "pod": "p-0"}
    objs = [node("node-p", itype="p4d.24xlarge", gpus=1), pod("ml", "p-0", "node-p")]
    # WHEN scanned
    sc = scan(tmp_path, [S(POWER, labels, 101.3)], objs)
    # THEN no idle verdict: activity is unknown
    assert not sc.of_kind(IDLE)
    assert "no_activity_signal" in sc.checks()


def test_field_guide_b21_low_power_does_not_make_a_busy_gpu_idle_nor_high_power_a_zero_activity_gpu_busy(tmp_path):
    # GIVEN pod a: GR_ENGINE 0.6 at 30 W; pod b: all PROF ratios 0 at 101.3 W (B21's idle-at-100 W A100)
    def gpu(i: int, gr: float, watts: float) -> list[S]:
        lab = {"gpu": str(i), "UUID": f"GPU-21212121-001{i}", "modelName": "NVIDIA A100-SXM4-40GB", "Hostname": "node-p",
               "namespace": "ml", "pod": f"p-{i}"}
        return [S(GR, lab, gr), S(POWER, lab, watts)]
    objs = [node("node-p", itype="p4d.24xlarge", gpus=2), pod("ml", "p-0", "node-p"), pod("ml", "p-1", "node-p")]
    # WHEN scanned
    sc = scan(tmp_path, gpu(0, 0.6, 30.0) + gpu(1, 0.0, 101.3), objs)
    # THEN only p-1 is idle: activity decides, power is only reported alongside
    (idle,) = sc.of_kind(IDLE)
    assert idle.subject.pod == "p-1"
    assert next(e for e in idle.evidence if e.signal == POWER).avg == 101.3


# --- B23: a broken GPU has no metrics -----------------------------------------------------------------------


def test_field_guide_b23_eight_expected_seven_observed_is_unmonitored_not_idle(tmp_path):
    # GIVEN a g5.48xlarge (gpu.count 8) running one pod that requests 8, DCGM series for 7 UUIDs only (busy)
    series = [S(UTIL, {"gpu": str(i), "UUID": f"GPU-23232323-000{i}", "modelName": "NVIDIA A10G", "Hostname": "node-z",
                       "namespace": "ml", "pod": "trainer-8"}, 80.0) for i in range(7)]
    objs = [node("node-z", itype="g5.48xlarge", gpus=8), pod("ml", "trainer-8", "node-z", gpus=8)]
    # WHEN scanned
    sc = scan(tmp_path, series, objs)
    # THEN unmonitored_gpus (8 expected, 7 observed, 1 GPU billed), no idle and no unallocated capacity
    (dq,) = sc.checks()["unmonitored_gpus"]
    assert (dq.details["expected_gpus"], dq.details["observed_gpus"]) == (8, 7)
    assert dq.subject.gpu_share == 1
    assert not sc.of_kind(IDLE) and not sc.of_kind(UNALLOC)


def test_field_guide_b23_no_series_at_all_is_unmonitored(tmp_path):
    # GIVEN the same node with no DCGM series at all (exporter in CrashLoopBackOff) and a second node that reports
    other = {"gpu": "0", "UUID": "GPU-23232323-0100", "modelName": "NVIDIA A10G", "Hostname": "node-ok"}
    objs = [node("node-z", itype="g5.48xlarge", gpus=8), node("node-ok"), pod("ml", "trainer-8", "node-z", gpus=8)]
    # WHEN scanned
    sc = scan(tmp_path, [S(UTIL, other, 90.0)], objs)
    # THEN node-z: 8 expected, 0 observed → unmonitored; its pod gets no idle verdict
    dq = [f for f in sc.checks()["unmonitored_gpus"] if f.subject.node == "node-z"]
    assert len(dq) == 1 and dq[0].details["observed_gpus"] == 0
    assert not sc.for_pod("trainer-8") or all(f.kind is WasteKind.DATA_QUALITY for f in sc.for_pod("trainer-8"))


def test_field_guide_defaults_thresholds_are_the_documented_ones():
    # GIVEN the default detector settings
    # WHEN read
    s = DetectorSettings()
    # THEN idle < 0.05 (5 %), under-used 10-min average < 0.20, coverage ≥ 0.8
    assert (s.idle_allocation.max_activity_ratio, s.underused_allocation.max_avg_10m_ratio, s.common.min_coverage) == (0.05, 0.20, 0.8)


def test_field_guide_whole_registry_never_calls_power_only_or_label_free_gpus_idle(tmp_path):
    # GIVEN the B21 power-only GPU, and a B01 empty-label GPU on a node where 1 of 2 GPUs is unmonitored (B23)
    power_only = {"gpu": "0", "UUID": "GPU-21212121-0100", "modelName": "NVIDIA A100-SXM4-40GB", "Hostname": "node-p",
                  "namespace": "ml", "pod": "p-0"}
    empty = {"gpu": "0", "UUID": "GPU-1111aaaa-0100", "modelName": "Tesla T4", "Hostname": "gke-1", "container": "", "namespace": "", "pod": ""}
    objs = [node("node-p", itype="p4d.24xlarge", gpus=1), pod("ml", "p-0", "node-p"), node("gke-1", itype="n1-standard-8", gpus=2),
            pod("team-a", "trainer-0", "gke-1")]
    # WHEN scanned with the full registry (the catalogue's detectors included)
    sc = scan(tmp_path, [S(POWER, power_only, 101.3), S(GR, empty, 0.0)], objs, settings=DetectorSettings())
    # THEN no idle verdict for either, and nothing for namespace ""
    assert not sc.of_kind(IDLE)
    assert all(f.subject.namespace != "" for f in sc.findings)

"""Who holds a shared GPU and what a window covers: time-sliced and GKE time-shared GPUs held by every client pod,
elimination that never hands one pod the replicas of one GPU, pods younger than the window without a verdict,
regional prices reaching the finding, idle replicas as one finding with all their money, duplicate exporters
that are not full coverage, and a MIG node without telemetry reported as such."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gpuwaste.detectors.allocation import (
    IdleSettings,
    UnderusedSettings,
    detect_idle_allocation,
    detect_underused_allocation,
)
from gpuwaste.detectors.registry import NoVerdict
from gpuwaste.join import join
from gpuwaste.models.cluster import ClusterState, Node, Pod, PodPhase, Workload
from gpuwaste.models.findings import Attribution, Finding
from gpuwaste.models.telemetry import AttributedSeries, DeviceId, GpuTelemetry, Signal, TelemetryWindow, WindowStats
from gpuwaste.sources.dcgm import build_gpu_telemetry
from gpuwaste.sources.window import quantile

T = datetime(2026, 11, 1, 12, tzinfo=UTC)


def _stats(values: list[float], m10: float) -> WindowStats:
    return WindowStats(count=len(values), total=sum(values), max=max(values), min=min(values), p95=quantile(0.95, values),
                       max_avg_10m=m10, recent_count=20, changes=5)


def _pod(name: str, req: dict[str, int], started: datetime = T - timedelta(days=2)) -> Pod:
    return Pod(namespace="team", name=name, node_name="n1", phase=PodPhase.RUNNING, gpu_requests=req, started_at=started,
               workload=Workload(kind="Deployment", name=name, namespace="team"))


def _node(gpus: int, replicas: int = 1) -> Node:
    cap = {"nvidia.com/gpu": gpus}
    return Node(name="n1", instance_type="g5.xlarge", created_at=T - timedelta(days=5), capacity_gpu=cap, allocatable_gpu=cap,
                gpu_replicas=replicas)


def test_time_sliced_gpu_labelled_with_four_pods_is_held_by_all_four() -> None:
    # GIVEN one GPU advertised as 4 time-sliced replicas, labelled with 4 idle pods (one series each)
    rows = [(Signal.SM_ACTIVE.value, {"UUID": "GPU-1", "Hostname": "n1", "pod": f"c{i}", "namespace": "team"},
             _stats([0.0] * 2880, 0.0)) for i in range(4)]
    cluster = ClusterState(cluster="c", observed_at=T, nodes=(_node(4, replicas=4),), pods=tuple(_pod(f"c{i}", {"nvidia.com/gpu": 1}) for i in range(4)))
    ctx = join(cluster, TelemetryWindow(cluster="c", eval_time=T, window_s=86400, gpus=tuple(build_gpu_telemetry(rows))))
    # WHEN the idle detector runs
    found = [f for f in detect_idle_allocation(ctx, IdleSettings()) if isinstance(f, Finding)]
    # THEN every pod holds the GPU by labels, and together they waste exactly one GPU
    assert sorted((a.pod.name, a.attribution) for a in ctx.allocations) == [(f"c{i}", Attribution.LABELS) for i in range(4)]
    assert len(found) == 4 and sum(f.wasted_gpu_share for f in found) == Decimal(1)


def test_elimination_never_gives_four_gpus_to_a_pod_holding_four_replicas_of_one() -> None:
    # GIVEN 4 unlabelled GPUs advertised as 16 replicas and one pod requesting 4 replicas (= 1 GPU)
    devs = tuple(GpuTelemetry(device=DeviceId(uuid=f"GPU-{i}"), hostname="n1",
                              groups=(AttributedSeries(signals={Signal.SM_ACTIVE.value: _stats([0.0] * 2880, 0.0)}),)) for i in range(4))
    cluster = ClusterState(cluster="c", observed_at=T, nodes=(_node(16, replicas=4),), pods=(_pod("p", {"nvidia.com/gpu": 4}),))
    # WHEN the scan joins them
    ctx = join(cluster, TelemetryWindow(cluster="c", eval_time=T, window_s=86400, gpus=devs))
    # THEN the pod is not handed the 4 GPUs by elimination (its share is 1 GPU), and 3 GPUs stay free
    (alloc,) = ctx.allocations
    assert alloc.attribution is not Attribution.ELIMINATION and alloc.devices == ()
    assert alloc.share == Decimal(1)
    assert 4 - ctx.nodes["n1"].requested_share == 3


def test_unlabelled_pod_that_started_inside_the_window_gets_no_verdict() -> None:
    # GIVEN a GPU without pod labels: 22 h idle before the pod existed, then 2 h of the pod at 15 %
    series = AttributedSeries(signals={Signal.SM_ACTIVE.value: _stats([0.0] * 2640 + [0.15] * 240, 0.15)})
    dev = GpuTelemetry(device=DeviceId(uuid="GPU-1"), hostname="n1", groups=(series,))
    cluster = ClusterState(cluster="c", observed_at=T, nodes=(_node(1),), pods=(_pod("p", {"nvidia.com/gpu": 1}, started=T - timedelta(hours=2)),))
    ctx = join(cluster, TelemetryWindow(cluster="c", eval_time=T, window_s=86400, gpus=(dev,)))
    # WHEN the under-used detector runs (the 22 idle hours would dilute the pod's 15 % to ~1 %)
    out = list(detect_underused_allocation(ctx, UnderusedSettings()))
    # THEN there is no verdict, with the reason, rather than a diluted number
    assert ctx.allocations[0].attribution is Attribution.ELIMINATION
    assert [o.reason for o in out if isinstance(o, NoVerdict)] == ["pod started inside the window and its GPUs carry no pod labels"]
    assert not [o for o in out if isinstance(o, Finding)]


def test_regional_and_gke_accelerator_prices_reach_the_finding() -> None:
    # GIVEN findings on an Azure westus ND H100 node and on a GKE N1 node with an attached T4
    from gpuwaste.models.findings import Subject, WasteKind
    from gpuwaste.pricing.catalog import PriceBook
    from gpuwaste.pricing.cost import cost_of

    def finding(**subject: object) -> Finding:
        return Finding(kind=WasteKind.IDLE, detector="idle_allocation", subject=Subject(cluster="c", **subject), title="t",
                       recommendation="r", observed_at=T, window_s=3600, wasted_gpu_share=Decimal(1))

    book = PriceBook.bundled()
    # WHEN they are priced
    west = cost_of(finding(instance_type="Standard_ND96isr_H100_v5", region="westus", gpu_model="NVIDIA H100 80GB HBM3"), book)
    east = cost_of(finding(instance_type="Standard_ND96isr_H100_v5", region="eastus", gpu_model="NVIDIA H100 80GB HBM3"), book)
    gke = cost_of(finding(instance_type="n1-standard-8", accelerator="nvidia-tesla-t4", gpu_model="Tesla T4"), book)
    # THEN the node's region picks its regional row (westus 127.816/8 per GPU-h), and the GKE T4 is priced per GPU
    assert west.priced and west.usd_per_gpu_hour == Decimal("127.816") / 8
    assert east.priced and east.usd_per_gpu_hour == Decimal("98.32") / 8
    assert gke.priced and gke.usd_per_gpu_hour == Decimal("0.35")


def test_idle_replicas_of_one_workload_become_one_finding_with_all_their_money() -> None:
    # GIVEN two idle replicas of one Deployment on a g5.12xlarge, each holding one GPU
    from gpuwaste.models.lifecycle import FindingState
    from gpuwaste.models.messages import FindingMessage
    from gpuwaste.models.settings import LifecycleSettings
    from gpuwaste.pricing.catalog import PriceBook
    from gpuwaste.pricing.cost import price_finding
    from gpuwaste.queue.memory import MemoryQueue
    from gpuwaste.services.lifecycle import LifecycleService
    from gpuwaste.services.scan import merge_replicas
    from gpuwaste.store.sqlite import SqliteFindingStore

    wl = Workload(kind="Deployment", name="svc", namespace="team")
    pods = tuple(Pod(namespace="team", name=f"svc-abc-{i}", node_name="n1", phase=PodPhase.RUNNING, gpu_requests={"nvidia.com/gpu": 1},
                     started_at=T - timedelta(days=2), workload=wl) for i in range(2))
    devs = tuple(GpuTelemetry(device=DeviceId(uuid=f"GPU-{i}"), hostname="n1", model_name="NVIDIA A10G", groups=(
        AttributedSeries(pod=f"svc-abc-{i}", namespace="team", signals={Signal.SM_ACTIVE.value: _stats([0.0] * 2880, 0.0)}),)) for i in range(2))
    node = Node(name="n1", instance_type="g5.12xlarge", created_at=T - timedelta(days=5),
                capacity_gpu={"nvidia.com/gpu": 2}, allocatable_gpu={"nvidia.com/gpu": 2})
    ctx = join(ClusterState(cluster="c", observed_at=T, nodes=(node,), pods=pods),
                        TelemetryWindow(cluster="c", eval_time=T, window_s=86400, gpus=devs))
    found = [f for f in detect_idle_allocation(ctx, IdleSettings()) if isinstance(f, Finding)]
    # WHEN the scan merges them and the lifecycle stores the result
    merged = [price_finding(f, PriceBook.bundled()) for f in merge_replicas(found)]

    class Clock:
        def now(self) -> datetime:
            return T

    store = SqliteFindingStore(":memory:")
    service = LifecycleService(store=store, alerts=MemoryQueue("a"), tickets=None, settings=LifecycleSettings(), clock=Clock())
    for i, f in enumerate(merged):
        service.handle_finding(FindingMessage(scan_id="s1", scan_seq=i, scan_total=len(merged), finding=f))
    # THEN there is one finding for both pods, with both GPUs' money ($1.418/GPU-h × 2 × 24 = $68.06/day), all stored
    assert len(found) == 2 and len(merged) == 1
    (one,) = merged
    assert one.wasted_gpu_share == 2 and one.usd_per_day == Decimal("68.06")
    assert one.details["pods"] == "svc-abc-0, svc-abc-1"
    record = store.get(one.fingerprint)
    assert record is not None and record.state is FindingState.OPEN and record.usd_per_day == Decimal("68.06")


def test_duplicate_exporters_with_half_a_window_each_are_not_full_coverage() -> None:
    # GIVEN two exporters (different `instance`) reporting the same GPU side by side for the last 12 h of a 24 h window
    half = _stats([0.0] * 1440, 0.0)
    rows = [(Signal.SM_ACTIVE.value, {"UUID": "GPU-1", "Hostname": "n1", "instance": f"10.0.0.{i}:9400"}, half) for i in (1, 2)]
    cluster = ClusterState(cluster="c", observed_at=T, nodes=(_node(1),), pods=(_pod("p", {"nvidia.com/gpu": 1}),))
    ctx = join(cluster, TelemetryWindow(cluster="c", eval_time=T, window_s=86400, scrape_interval_s=30,
                                                 gpus=tuple(build_gpu_telemetry(rows))))
    # WHEN the idle detector judges the pod (2,880 samples in all: the count of a full window)
    alloc = ctx.allocations[0]
    act = ctx.activity(alloc.devices, alloc.pod)
    out = list(detect_idle_allocation(ctx, IdleSettings()))
    # THEN coverage is 50 % (the copies overlap), so there is no idle verdict
    assert act is not None and act.samples == 2880 and act.coverage == 0.5
    assert not [o for o in out if isinstance(o, Finding)]


def test_mig_single_node_without_any_telemetry_is_reported_as_no_telemetry() -> None:
    # GIVEN a MIG-single H100 NVL node (14 slices advertised as nvidia.com/gpu) and no DCGM series at all
    from gpuwaste.detectors.data_quality import DataQualitySettings, detect_data_quality

    node = Node(name="n1", instance_type="Standard_NC80adis_H100_v5", created_at=T - timedelta(days=5),
                gpu_product="NVIDIA-H100-NVL-MIG-1g.12gb", mig_strategy="single", gpu_count_label=14,
                capacity_gpu={"nvidia.com/gpu": 14}, allocatable_gpu={"nvidia.com/gpu": 14})
    cluster = ClusterState(cluster="c", observed_at=T, nodes=(node,), pods=(_pod("p", {"nvidia.com/gpu": 2}),))
    ctx = join(cluster, TelemetryWindow(cluster="c", eval_time=T, window_s=86400, gpus=()))
    # WHEN data quality is checked
    checks = [f.details.get("check") for f in detect_data_quality(ctx, DataQualitySettings()) if isinstance(f, Finding)]
    # THEN the missing telemetry is reported (it was reported nowhere before)
    assert checks == ["no_telemetry"]


def test_gke_time_sharing_clients_count_as_replicas() -> None:
    # GIVEN a GKE node sharing each GPU between 4 clients (cloud.google.com/gke-max-shared-clients-per-gpu)
    from gpuwaste.models.cluster import gpu_share_for_request
    from gpuwaste.sources.k8s_objects import node_from_dict

    obj = {"kind": "Node", "metadata": {"name": "gke-n1", "labels": {"cloud.google.com/gke-max-shared-clients-per-gpu": "4",
                                                                      "cloud.google.com/gke-accelerator": "nvidia-l4"}},
           "status": {"capacity": {"nvidia.com/gpu": "4"}, "allocatable": {"nvidia.com/gpu": "4"}}}
    # WHEN the node is read and a client's one-unit request is converted to GPUs
    node = node_from_dict(obj)
    # THEN each client holds a quarter of the GPU, not a whole one
    assert node.gpu_replicas == 4
    assert gpu_share_for_request("nvidia.com/gpu", 1, node) == Decimal("0.25")

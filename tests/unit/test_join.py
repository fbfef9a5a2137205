"""The join package and the allocation resolvers: who holds which share of which GPU, from when to when."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from gpuwaste.allocation import AllocationResult, Holding, mix_text, resolve, resolvers
from gpuwaste.allocation.device_plugin import DevicePluginResolver
from gpuwaste.join import join
from gpuwaste.models.cluster import ClusterState, PodPhase
from gpuwaste.models.findings import Attribution
from gpuwaste.models.telemetry import GpuTelemetry, Signal
from tests.unit.timeline_builders import T, cluster, const, gpu, node, pod, window

SM = Signal.SM_ACTIVE


class _ClaimsEverything:
    """A resolver asked before the device plugin that accounts for pod `a` as a half-GPU share."""

    name = "fractions"

    def applies(self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...]) -> bool:
        return True

    def resolve(self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...], *, handled: frozenset[tuple[str, str, str]]) -> AllocationResult:
        a = next(p for p in cluster.pods if p.name == "a")
        return AllocationResult(holdings=(Holding(pod=a, node=a.node_name, share=Decimal("0.5"), mechanism="fractions"),),
                                handled_pods=frozenset({a.identity}))


def test_resolvers_are_asked_in_a_fixed_order_with_the_device_plugin_last() -> None:
    # GIVEN the registry
    # WHEN listed twice
    names = [r.name for r in resolvers()]
    # THEN the order is stable and the fallback comes last
    assert names == [r.name for r in resolvers()]
    assert names[-1] == "device plugin" and {"MIG", "shared"} <= set(names)


def test_a_pod_handled_by_an_earlier_resolver_is_not_counted_again_by_the_device_plugin() -> None:
    # GIVEN pods a and b requesting nvidia.com/gpu 4 each, and a resolver that says a holds half a GPU
    cl = cluster(node(gpus=8), pod("a", 4), pod("b", 4))
    # WHEN resolved with that resolver first
    res = resolve(cl, (), chain=(_ClaimsEverything(), DevicePluginResolver()))
    # THEN a is held once, as its fraction; b as 4 GPUs by the device plugin; the mix says so
    shares = {h.pod.name: (h.mechanism, h.share) for h in res.holdings}
    assert shares == {"a": ("fractions", Decimal("0.5")), "b": ("device plugin", Decimal(4))}
    assert res.applied == ("fractions", "device plugin")
    assert mix_text(res.mix) == "device plugin 4 GPUs (1 pod), fractions 0.5 GPU (1 pod)"


def test_mig_profiles_time_slices_and_custom_resources_get_their_physical_share() -> None:
    # GIVEN a MIG 3g.40gb pod, a pod with 1 of 4 GKE time-sharing replicas, and 10 units of a 40-unit custom resource on 4 GPUs
    mig_node = node("mig", gpus=1)
    shared = node("ts", gpus=4, labels={"cloud.google.com/gke-max-shared-clients-per-gpu": "4"}, gpu_replicas=4)
    vgpu = node("vg", gpus=0).model_copy(update={"allocatable_gpu": {"k8s.amazonaws.com/vgpu": 40}, "capacity_gpu": {"k8s.amazonaws.com/vgpu": 40}})
    devs = tuple(gpu(f"GPU-v{i}", "vg", {SM: const(0.5)}) for i in range(4))
    cl = cluster(mig_node, shared, vgpu, pod("m", 1, node_name="mig", resource="nvidia.com/mig-3g.40gb"),
                 pod("t", 1, node_name="ts"), pod("v", 10, node_name="vg", resource="k8s.amazonaws.com/vgpu"))
    # WHEN resolved by the registry
    res = resolve(cl, devs)
    # THEN each mechanism charges its physical share
    got = {h.pod.name: (h.mechanism, h.share) for h in res.holdings}
    assert got["m"] == ("MIG", Decimal(3) / Decimal(7))
    assert got["t"] == ("GKE time-sharing", Decimal("0.25"))
    assert got["v"] == ("device plugin", Decimal(1))  # 10 units × 4 GPUs ÷ 40 units (B20)


def test_a_job_that_finished_mid_window_holds_its_gpu_until_it_ended_and_the_gpu_is_free_afterwards() -> None:
    # GIVEN a Succeeded Job pod that ended 20 minutes before the end of a 1-hour window, on a 1-GPU node
    done = T - timedelta(minutes=20)
    job = pod("eval-1", 1, phase=PodPhase.SUCCEEDED, kind="Job", finished=done)
    tel = window(gpu("GPU-1", "n1", {SM: const(0.0)}, pod="eval-1", namespace="ml"))
    # WHEN joined
    ctx = join(cluster(node(gpus=1), job), tel)
    # THEN the Job holds the GPU, by its labels, until it ended; the node holds nothing now; the labels are no stray
    (a,) = ctx.allocations
    assert (a.pod.name, a.attribution, a.held_until, a.holds_now) == ("eval-1", Attribution.LABELS, done, False)
    inv = ctx.nodes["n1"]
    assert inv.requested_share == 0 and inv.requested_share_at(done - timedelta(minutes=1)) == 1
    assert ctx.held_span(a) == (T - timedelta(hours=1), done)
    assert ctx.stray_labels == []


def test_a_job_that_ended_before_the_window_or_whose_end_is_unknown_holds_nothing() -> None:
    # GIVEN a Job that ended 2 hours before the window's end and a Failed pod without a known end
    old = pod("old", 1, phase=PodPhase.SUCCEEDED, finished=T - timedelta(hours=2))
    unknown = pod("gone", 1, phase=PodPhase.FAILED)
    # WHEN joined
    ctx = join(cluster(node(gpus=2), old, unknown), window(gpu("GPU-1", "n1", {SM: const(0.0)})))
    # THEN neither holds anything in the window
    assert ctx.allocations == []


def test_the_allocation_mix_is_in_the_joined_view() -> None:
    # GIVEN two device-plugin pods and one MIG pod
    cl = cluster(node(gpus=8), pod("a", 2), pod("b", 1), node("mig", gpus=1), pod("m", 2, node_name="mig", resource="nvidia.com/mig-1g.10gb"))
    # WHEN joined
    ctx = join(cl, window())
    # THEN the mix names each mechanism with its pods and physical-GPU equivalents
    assert ctx.allocation_mix == {"device plugin": (2, Decimal(3)), "MIG": (1, 2 * (Decimal(1) / Decimal(7)))}


class _NamesDevices:
    """A resolver that knows which GPU each pod holds (as DRA claim results or a device annotation say)."""

    name = "claims"

    def applies(self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...]) -> bool:
        return True

    def resolve(self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...], *, handled: frozenset[tuple[str, str, str]]) -> AllocationResult:
        from gpuwaste.models.telemetry import DeviceId

        hs = tuple(Holding(pod=p, node=p.node_name, share=Decimal(1), mechanism="claims", devices=(DeviceId(uuid=f"GPU-{p.name[0]}"),))
                   for p in cluster.pods)
        return AllocationResult(holdings=hs, handled_pods=frozenset(h.pod.identity for h in hs))


def test_gpus_without_pod_labels_are_tied_to_pods_by_the_devices_their_allocation_names() -> None:
    # GIVEN two unlabelled GPUs and two pods whose allocation names their GPU (elimination could not tell them apart)
    tel = window(gpu("GPU-a", "n1", {SM: const(0.0)}), gpu("GPU-b", "n1", {SM: const(0.9)}))
    cl = cluster(node(gpus=2), pod("a-0"), pod("b-0"))
    # WHEN joined with that resolver
    ctx = join(cl, tel, chain=(_NamesDevices(), DevicePluginResolver()))
    # THEN each pod holds its own GPU (node + device), nothing is ambiguous or unheld
    got = {a.pod.name: ([d.device.uuid for d in a.devices], a.attribution) for a in ctx.allocations}
    assert got == {"a-0": (["GPU-a"], Attribution.ALLOCATION), "b-0": (["GPU-b"], Attribution.ALLOCATION)}
    assert ctx.nodes["n1"].ambiguous_pods == [] and ctx.nodes["n1"].unheld_devices == []

"""Detectors: the joined view of one scan — GPUs ↔ pods ↔ nodes — that every detector reads.

Pure: cluster state + telemetry window in, joined allocations out. Implements the attribution rules of
the field guide: exported_* labels (B02), node resolution from Hostname / exporter pod / EC2 instance
id (B03), attribution by elimination (B01), MIG devices keyed by UUID + GPU_I_ID (B05–B08), KSM/API
lifecycle over stale DCGM pod labels (B10, B11), physical GPUs counted by UUID (B17).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from pydantic import Field

from gpuwaste.models.base import SettingsModel
from gpuwaste.models.cluster import ClusterState, Node, Pod, PodPhase, gpu_share_for_request
from gpuwaste.models.findings import Attribution, Evidence, GpuRef, Subject
from gpuwaste.models.telemetry import ACTIVITY_SIGNALS, GpuTelemetry, Signal, TelemetryWindow, WindowStats, summarises


class CommonSettings(SettingsModel):
    """Settings shared by every detector.

    Attributes:
        min_coverage: share 0–1 of the expected samples a window needs before any verdict.
        pod_grace_s: pods younger than this (seconds) get no verdict.
        node_grace_s: nodes younger than this (seconds) are not reported as unallocated capacity.
    """

    min_coverage: float = Field(0.8, gt=0, le=1)
    pod_grace_s: int = Field(900, ge=0)
    node_grace_s: int = Field(900, ge=0)


@dataclass(frozen=True)
class ActivityReading:
    """Activity of a set of devices, as a 0–1 ratio.

    Attributes:
        signal: the DCGM field used (SM_ACTIVE, GR_ENGINE_ACTIVE, or GPU_UTIL ÷ 100).
        avg: mean over devices of each device's window average. p95, max: the highest over devices.
        max_avg_10m: the highest 10-minute average of any device.
        coverage: the lowest device coverage (0–1). samples: total samples.
    """

    signal: Signal
    avg: float
    p95: float
    max: float
    min: float
    max_avg_10m: float | None
    coverage: float
    samples: int
    devices: int

    def evidence(self, window_s: int, *, threshold: float | None = None, comparison: str = "") -> Evidence:
        """Express this reading as finding evidence (unit: ratio 0–1)."""
        return Evidence(
            signal=self.signal.value,
            unit="ratio",
            window_s=window_s,
            avg=round(self.avg, 6),
            p95=round(self.p95, 6),
            max=round(self.max, 6),
            min=round(self.min, 6),
            max_avg_10m=None if self.max_avg_10m is None else round(self.max_avg_10m, 6),
            samples=self.samples,
            coverage=round(min(1.0, self.coverage), 4),
            threshold=threshold,
            comparison=comparison,
            note="GPU_UTIL is percent; shown here ÷ 100" if self.signal is Signal.GPU_UTIL else "",
        )


@dataclass(frozen=True)
class Allocation:
    """A pod that holds GPUs now, with the devices it holds.

    Attributes:
        share: physical-GPU equivalents requested (MIG slices N/7, time-slices 1/replicas).
        devices: devices tied to the pod (empty when telemetry cannot tell which).
        attribution: how `devices` were found.
        labelled: True when the devices carry this pod's labels (use pod-scoped samples).
    """

    pod: Pod
    node: Node | None
    share: Decimal
    devices: tuple[GpuTelemetry, ...]
    attribution: Attribution
    labelled: bool


@dataclass
class NodeInventory:
    """GPUs seen on one node and who holds them."""

    name: str
    node: Node | None
    devices: list[GpuTelemetry] = field(default_factory=list)
    allocations: list[Allocation] = field(default_factory=list)
    unheld_devices: list[GpuTelemetry] = field(default_factory=list)
    unattributed_devices: list[GpuTelemetry] = field(default_factory=list)
    ambiguous_pods: list[Pod] = field(default_factory=list)

    @property
    def physical_uuids(self) -> set[str]:
        """Distinct physical GPU UUIDs seen on the node (never series or requests; B17)."""
        return {d.device.uuid for d in self.devices}

    @property
    def requested_share(self) -> Decimal:
        """Physical-GPU equivalents held by pods scheduled on the node and not terminal."""
        return sum((a.share for a in self.allocations), Decimal(0))

    def capacity_gpus(self) -> int:
        """Physical GPUs on the node: DCGM UUIDs when seen, else the node's advertised capacity."""
        observed = len(self.physical_uuids)
        return observed if observed else self.expected_gpus() or 0

    def expected_gpus(self) -> int | None:
        """Physical GPUs the node should have from its own description (None when unknown)."""
        n = self.node
        if n is None:
            return None
        if n.mig_strategy == "single" or (n.gpu_product and "-MIG-" in n.gpu_product.upper()):
            return None  # gpu.count and capacity count MIG devices, not GPUs (B08)
        cap = n.capacity_gpu.get("nvidia.com/gpu") or n.capacity_gpu.get("nvidia.com/gpu.shared")
        if cap:
            return cap // max(1, n.gpu_replicas)
        return n.gpu_count_label


@dataclass
class ScanContext:
    """The joined view of one scan.

    Attributes:
        allocations: every pod holding GPUs, across nodes.
        nodes: node name → inventory.
        unmapped_devices: devices whose node could not be resolved.
        stray_labels: (device, namespace, pod, reason) for DCGM pod labels that contradict the cluster.
        power_limits_w: GPU model name as the telemetry spells it → bundled board power limit (W), filled
            by the scan service from the pricing catalog; used when DCGM exports no power-limit field.
    """

    cluster: ClusterState
    telemetry: TelemetryWindow
    common: CommonSettings
    allocations: list[Allocation]
    nodes: dict[str, NodeInventory]
    unmapped_devices: list[GpuTelemetry]
    stray_labels: list[tuple[GpuTelemetry, str, str, str]]
    power_limits_w: dict[str, float] = field(default_factory=dict)

    def pod_signals(self, namespace: str, pod: str) -> dict[str, WindowStats]:
        """Pod-level signals (CPU, inference server) of one pod; empty when none were scraped."""
        index = self.__dict__.get("_pod_index")
        if index is None:
            index = {(p.namespace, p.pod): p.signals for p in self.telemetry.pods}
            self.__dict__["_pod_index"] = index
        return index.get((namespace, pod), {})

    def unscheduled_gpu_requests(self) -> list[Decimal]:
        """Physical-GPU shares requested by Pending pods that no node took yet (smallest first)."""
        return sorted(
            sum((gpu_share_for_request(r, c, None) for r, c in p.gpu_requests.items()), Decimal(0))
            for p in self.cluster.pods
            if p.phase is PodPhase.PENDING and not p.node_name and p.gpu_requests
        )

    def stranded_by_fragmentation(self, free: Decimal) -> bool:
        """True when GPU work waits unscheduled while `free` GPUs on a node are too few for the smallest request."""
        waiting = self.unscheduled_gpu_requests()
        return bool(waiting) and free < waiting[0]

    def holder_of(self, device: GpuTelemetry) -> Allocation | None:
        """The allocation that holds a device, or None."""
        index = self.__dict__.get("_holder_index")
        if index is None:
            index = {id(d): a for a in self.allocations for d in a.devices}
            self.__dict__["_holder_index"] = index
        return index.get(id(device))

    @property
    def eval_time(self) -> datetime:
        """The scan's evaluation time (UTC)."""
        return self.telemetry.eval_time

    @property
    def window_s(self) -> int:
        """The scan window (seconds)."""
        return self.telemetry.window_s

    # --- signal access -------------------------------------------------------------------------
    def device_stats(self, device: GpuTelemetry, signal: Signal | str, pod: Pod | None = None) -> WindowStats | None:
        """A device's window summary for `signal`, restricted to `pod`'s labelled samples when given."""
        if pod is not None:
            scoped = device.for_workload(pod.namespace, pod.name, signal)
            if scoped is not None:
                return scoped
        return device.merged(signal)

    def activity_signal(self, device: GpuTelemetry) -> Signal | None:
        """Best activity signal present for a device (B04, B05, B15).

        SM_ACTIVE, then GR_ENGINE_ACTIVE, then GPU_UTIL — except on MIG instances, where GPU_UTIL
        is a whole-GPU value that reads 0, so only the PROF ratios count.
        """
        cache: dict[int, Signal | None] = self.__dict__.setdefault("_signal_cache", {})
        if id(device) in cache:
            return cache[id(device)]
        found: Signal | None = None
        for sig in ACTIVITY_SIGNALS:
            if sig is Signal.GPU_UTIL and device.device.gpu_i_id is not None:
                continue
            stats = device.merged(sig)
            if stats is not None and (stats.count > 0 or stats.unreadable > 0):
                found = sig  # a signal whose samples were unreadable is still this device's signal: no quiet fallback
                break
        cache[id(device)] = found
        return found

    def expected_samples(self, pod: Pod | None = None) -> float:
        """Samples expected in the window, shortened to the pod's lifetime when it started inside it."""
        span = float(self.window_s)
        if pod is not None and pod.started_at is not None:
            alive = (self.eval_time - pod.started_at).total_seconds()
            span = max(0.0, min(span, alive))
        return span / self.telemetry.scrape_interval_s

    def coverage(self, stats: WindowStats | None, pod: Pod | None = None) -> float:
        """Share 0–1 of the expected samples present (capped at 1)."""
        if stats is None or stats.count == 0:
            return 0.0
        expected = self.expected_samples(pod)
        if expected <= 0:
            return 0.0
        return min(1.0, stats.count / self._overlap(stats) / expected)

    @staticmethod
    def _overlap(stats: WindowStats) -> float:
        """How many merged series ran side by side (duplicate exporters, B17), 1 for a restart (B12): copies that
        both still report at the end of the window doubled the count; a restart's old series has stopped."""
        return float(max(1, min(stats.series, stats.live_series)))

    def activity(self, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry], pod: Pod | None = None) -> ActivityReading | None:
        """Activity over `devices` as a ratio 0–1; None when any device lacks an activity signal.

        Each device uses its own best signal; the reading names the weakest signal used (GPU_UTIL
        when any device fell back to it).
        """
        if not devices:
            return None
        cache: dict[tuple[object, ...], ActivityReading | None] = self.__dict__.setdefault("_activity_cache", {})
        key = (tuple(id(d) for d in devices), pod.key if pod is not None else None)
        if key not in cache:
            cache[key] = self._activity(devices, pod)
        return cache[key]

    def _activity(self, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry], pod: Pod | None) -> ActivityReading | None:
        readings: list[tuple[Signal, WindowStats]] = []
        for dev in devices:
            sig = self.activity_signal(dev)
            if sig is None:
                return None
            stats = self.device_stats(dev, sig, pod if self._labelled_for(dev, pod) else None)
            if stats is None or stats.count == 0:
                return None
            readings.append((sig, stats))
        order = {s: i for i, s in enumerate(ACTIVITY_SIGNALS)}
        weakest = max((s for s, _ in readings), key=lambda s: order[s])
        ratio = [(s, st) for s, st in readings]
        avgs = [s.to_ratio(st.avg) for s, st in ratio]
        m10 = [s.to_ratio(st.max_avg_10m) for s, st in ratio if st.max_avg_10m is not None]
        return ActivityReading(
            signal=weakest,
            avg=sum(avgs) / len(avgs),
            p95=max(s.to_ratio(st.p95) for s, st in ratio),
            max=max(s.to_ratio(st.max) for s, st in ratio),
            min=min(s.to_ratio(st.min) for s, st in ratio),
            max_avg_10m=max(m10) if m10 else None,
            coverage=min(self.coverage(st, pod) for _, st in ratio),
            samples=sum(st.count for _, st in ratio),
            devices=len(ratio),
        )

    def signal_evidence(
        self, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry], signal: Signal, pod: Pod | None = None
    ) -> Evidence | None:
        """Evidence for a non-activity signal over devices (avg of averages, highest p95/max); None if absent."""
        stats = [self.device_stats(d, signal, pod if self._labelled_for(d, pod) else None) for d in devices]
        present = [s for s in stats if s is not None and s.count > 0]
        if not present:
            return None
        m10 = [s.max_avg_10m for s in present if s.max_avg_10m is not None]
        return Evidence(
            signal=signal.value,
            unit=signal.unit,
            window_s=self.window_s,
            avg=round(sum(s.avg for s in present) / len(present), 6),
            p95=round(max(s.p95 for s in present), 6) if summarises(signal, "p95") else None,
            max=round(max(s.max for s in present), 6),
            min=round(min(s.min for s in present), 6) if summarises(signal, "min") else None,
            max_avg_10m=round(max(m10), 6) if m10 else None,
            samples=sum(s.count for s in present),
            coverage=round(min(self.coverage(s, pod) for s in present), 4),
        )

    def device_problem(self, device: GpuTelemetry, stale_min_samples: int = 20) -> str | None:
        """Why a device's telemetry cannot be trusted, or None: "no_activity_signal", "stale_series"
        (stopped reporting before the window's end) or "frozen_exporter" (every value, energy counter
        included, bit-identical for the window; field guide B12). Such devices are never judged idle.
        """
        sig = self.activity_signal(device)
        if sig is None:
            return "no_activity_signal"
        if self.telemetry.single_instant:
            return None
        stats = device.merged(sig)
        if stats is None:
            return "no_activity_signal"
        if stats.count > 0 and stats.recent_count == 0:
            return "stale_series"
        energy = device.merged(Signal.TOTAL_ENERGY)
        if (
            energy is not None
            and energy.count >= stale_min_samples
            and energy.changes == 0
            and stats.changes == 0
            and stats.count >= stale_min_samples
        ):
            return "frozen_exporter"
        return None

    @staticmethod
    def _labelled_for(device: GpuTelemetry, pod: Pod | None) -> bool:
        return pod is not None and (pod.namespace, pod.name) in device.workloads

    # --- subjects ------------------------------------------------------------------------------
    def subject_for(self, alloc: Allocation) -> Subject:
        """The finding subject for an allocation (workload, node, devices, pricing inputs)."""
        inv = self.nodes.get(alloc.pod.node_name or "")
        return Subject(
            cluster=self.cluster.cluster,
            namespace=alloc.pod.namespace,
            workload_kind=alloc.pod.workload.kind,
            workload_name=alloc.pod.workload.name,
            pod=alloc.pod.name,
            node=alloc.pod.node_name,
            gpus=tuple(gpu_ref(d) for d in alloc.devices),
            gpu_model=_model_of(alloc.devices, alloc.node),
            gpu_share=alloc.share,
            instance_type=alloc.node.instance_type if alloc.node else None,
            capacity_type=alloc.node.capacity_type if alloc.node else None,
            region=alloc.node.region if alloc.node else None,
            accelerator=alloc.node.labels.get("cloud.google.com/gke-accelerator") if alloc.node else None,
            physical_gpus_on_node=len(inv.physical_uuids) if inv and inv.devices else None,
            attribution=alloc.attribution,
            labels=dict(alloc.pod.labels),
            annotations=dict(alloc.pod.annotations),
            namespace_labels=dict(self.cluster.namespace_labels.get(alloc.pod.namespace, {})),
            namespace_annotations=dict(self.cluster.namespace_annotations.get(alloc.pod.namespace, {})),
        )

    def node_subject(self, inv: NodeInventory, devices: list[GpuTelemetry], share: Decimal) -> Subject:
        """The finding subject for a node-level finding."""
        n = inv.node
        return Subject(
            cluster=self.cluster.cluster,
            node=inv.name,
            workload_kind="Node",
            workload_name=inv.name,
            gpus=tuple(gpu_ref(d) for d in devices),
            gpu_model=_model_of(tuple(inv.devices), n),
            gpu_share=share,
            instance_type=n.instance_type if n else None,
            capacity_type=n.capacity_type if n else None,
            region=n.region if n else None,
            accelerator=n.labels.get("cloud.google.com/gke-accelerator") if n else None,
            physical_gpus_on_node=len(inv.physical_uuids) or None,
            attribution=Attribution.NODE,
            labels=dict(n.labels) if n else {},
        )


def gpu_ref(device: GpuTelemetry) -> GpuRef:
    """A finding's reference to a device."""
    return GpuRef(
        uuid=device.device.uuid,
        gpu_i_id=device.device.gpu_i_id,
        mig_profile=device.mig_profile,
        model_name=device.model_name,
    )


def _model_of(devices: tuple[GpuTelemetry, ...], node: Node | None) -> str | None:
    for d in devices:
        if d.model_name:
            return d.model_name
    return node.gpu_product if node else None


# --- the join ------------------------------------------------------------------------------------


def build_context(
    cluster: ClusterState,
    telemetry: TelemetryWindow,
    common: CommonSettings | None = None,
    *,
    power_limits_w: dict[str, float] | None = None,
) -> ScanContext:
    """Join telemetry devices to nodes and pods.

    Node of a device, in order (B03): `Hostname` equal to a node name or its `kubernetes.io/hostname`
    label; `Hostname` equal to an exporter pod's name → that pod's node; `Hostname` equal to an EC2
    instance id in a node's providerID; else the node of the (running) pod named in the device's
    labels. A device labelled with a pod that does not hold GPUs now (finished, deleted, moved) is
    treated as unheld (B10) and recorded in `stray_labels`.
    """
    common = common or CommonSettings()
    nodes_by_name = {n.name: n for n in cluster.nodes}
    by_hostname: dict[str, str] = {}
    for n in cluster.nodes:
        by_hostname[n.name] = n.name
        if n.hostname_label:
            by_hostname.setdefault(n.hostname_label, n.name)
        if n.provider_id:
            by_hostname.setdefault(n.provider_id.rsplit("/", 1)[-1], n.name)
        for ip in n.internal_ips:
            by_hostname.setdefault(ip, n.name)
    pods_by_key = {p.key: p for p in cluster.pods}
    holding = [p for p in cluster.pods if p.holds_gpus]
    holding_by_node: dict[str, list[Pod]] = defaultdict(list)
    for p in holding:
        holding_by_node[p.node_name or ""].append(p)

    inventories: dict[str, NodeInventory] = {}

    def inv(name: str) -> NodeInventory:
        if name not in inventories:
            inventories[name] = NodeInventory(name=name, node=nodes_by_name.get(name))
        return inventories[name]

    unmapped: list[GpuTelemetry] = []
    for dev in telemetry.gpus:
        if dev.is_mig_parent:
            continue  # the whole-GPU entity of a MIG GPU; its instances are the devices
        node_name = _resolve_node(dev, by_hostname, cluster, pods_by_key)
        if node_name is None:
            unmapped.append(dev)
        else:
            inv(node_name).devices.append(dev)
    for n in cluster.nodes:
        if n.allocatable_gpu or n.capacity_gpu or n.gpu_product:
            inv(n.name)

    # device ↔ pod by labels
    device_owner: dict[int, tuple[str, str]] = {}
    stray: list[tuple[GpuTelemetry, str, str, str]] = []
    pods_devices: dict[tuple[str, str], list[GpuTelemetry]] = defaultdict(list)
    for node_name, node_inv in inventories.items():
        for dev in node_inv.devices:
            current: list[tuple[str, str]] = []  # a time-sliced GPU is held by every pod labelled on it
            for ns, pod_name in dev.workloads:
                pod = pods_by_key.get((ns, pod_name))
                if pod is None:
                    stray.append((dev, ns, pod_name, "pod not found in the cluster"))
                elif not pod.holds_gpus:
                    stray.append((dev, ns, pod_name, f"pod is {pod.phase.value}; its GPUs are free"))
                elif pod.node_name != node_name:
                    stray.append((dev, ns, pod_name, f"pod runs on {pod.node_name}, device on {node_name}"))
                else:
                    current.append((ns, pod_name))
            if current:
                device_owner[id(dev)] = current[0]
                for key in current:
                    pods_devices[key].append(dev)

    allocations: list[Allocation] = []
    for node_name, node_inv in inventories.items():
        node = node_inv.node
        node_pods = holding_by_node.get(node_name, [])
        first_alloc = len(allocations)
        unlabelled = [d for d in node_inv.devices if id(d) not in device_owner]
        uncovered = [p for p in node_pods if p.key not in pods_devices]
        for pod in node_pods:
            share = _pod_share(pod, node, len(node_inv.physical_uuids))
            devs = pods_devices.get(pod.key)
            if devs:
                allocations.append(Allocation(pod, node, share, tuple(devs), Attribution.LABELS, True))
        expected = node_inv.expected_gpus()
        # B01 + B23: elimination is safe only when every GPU the node should have is seen in DCGM;
        # otherwise the pod may hold the unmonitored GPU and the seen one be free.
        fully_seen = expected is None or len(node_inv.physical_uuids) >= expected
        if len(uncovered) == 1 and unlabelled and fully_seen and _fits(uncovered[0], unlabelled, node):
            pod = uncovered[0]
            allocations.append(
                Allocation(pod, node, _pod_share(pod, node, len(node_inv.physical_uuids)), tuple(unlabelled), Attribution.ELIMINATION, False)
            )
            unlabelled = []
        else:
            for pod in uncovered:
                allocations.append(Allocation(pod, node, _pod_share(pod, node, len(node_inv.physical_uuids)), (), Attribution.UNKNOWN, False))
            if uncovered and unlabelled:
                node_inv.ambiguous_pods.extend(uncovered)
                node_inv.unattributed_devices.extend(unlabelled)
        node_inv.allocations = allocations[first_alloc:]
        node_inv.unheld_devices = [] if node_inv.ambiguous_pods else list(unlabelled)
    for pod in holding:
        if pod.node_name and pod.node_name not in inventories:
            node_inv = inv(pod.node_name)
            a = Allocation(pod, node_inv.node, _pod_share(pod, node_inv.node), (), Attribution.UNKNOWN, False)
            allocations.append(a)
            node_inv.allocations.append(a)
    return ScanContext(cluster, telemetry, common, allocations, inventories, unmapped, stray, dict(power_limits_w or {}))


def _pod_share(pod: Pod, node: Node | None, physical: int = 0) -> Decimal:
    """Physical-GPU equivalents a pod requests on `node` (`physical`: DCGM UUIDs seen there, 0 when unknown).

    A configured non-NVIDIA resource (e.g. `k8s.amazonaws.com/vgpu`, 40 allocatable on 4 GPUs) is worth
    physical ÷ allocatable GPUs per unit (B20), not one GPU per unit.
    """
    total = Decimal(0)
    for r, c in pod.gpu_requests.items():
        alloc = node.allocatable_gpu.get(r) if node is not None else None
        if not r.startswith("nvidia.com/") and alloc and physical and alloc > physical:
            total += Decimal(c) * Decimal(physical) / Decimal(alloc)
        else:
            total += gpu_share_for_request(r, c, node)
    return total


def _fits(pod: Pod, devices: list[GpuTelemetry], node: Node | None) -> bool:
    """Elimination is safe when the pod's request matches the unlabelled devices exactly (B01)."""
    mig = [d for d in devices if d.device.gpu_i_id is not None]
    if mig:
        return len(mig) == sum(pod.gpu_requests.values())
    whole = sum(c for r, c in pod.gpu_requests.items() if "mig-" not in r)
    replicas = max(1, node.gpu_replicas if node else 1)
    # time-sliced replicas are compared as physical GPUs: 4 replicas of 1 GPU never "fit" 4 GPUs
    return Decimal(whole) / replicas == len({d.device.uuid for d in devices})


def _resolve_node(
    dev: GpuTelemetry, by_hostname: dict[str, str], cluster: ClusterState, pods: dict[tuple[str, str], Pod]
) -> str | None:
    host = dev.hostname
    if host:
        if host in by_hostname:
            return by_hostname[host]
        if host in cluster.exporter_pods:
            return cluster.exporter_pods[host]
    for inst in dev.instances:
        ip = inst.rsplit(":", 1)[0]
        if ip in cluster.exporter_pod_ips:
            return cluster.exporter_pod_ips[ip]
    for ns, name in dev.workloads:
        pod = pods.get((ns, name))
        if pod is not None and pod.node_name:
            return pod.node_name
    return None

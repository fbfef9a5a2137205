"""Join: the joined view of one scan — GPUs ↔ pods ↔ nodes over the window — as data.

Pure. `JoinedView` holds what the join found: the allocations (who holds which devices, with what share, from when
to when), the node inventories, the devices it could not place, the window and its buckets, and the finding
subjects built from them. The readings every detector shares over that data (best activity signal, coverage
against the sample spacing, pod-scoped samples, activity, evidence, data problems) are `ScanContext`'s, in
`gpuwaste.join.readings`. Built by `gpuwaste.join.build.join`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from operator import itemgetter
from typing import Any, TypeVar

from pydantic import Field

from gpuwaste.allocation import Resolved
from gpuwaste.allocation.physical import physical_gpu_count
from gpuwaste.models.base import SettingsModel
from gpuwaste.models.cluster import ClusterState, Node, Pod, PodPhase, gpu_share_for_request
from gpuwaste.models.findings import Attribution, Episode, GpuRef, Subject
from gpuwaste.models.telemetry import (
    Bucket,
    GpuTelemetry,
    TelemetryWindow,
    WindowStats,
)

_T = TypeVar("_T")
_END = itemgetter(0)  # a Bucket's end


class CommonSettings(SettingsModel):
    """Settings shared by every detector.

    Attributes:
        min_coverage: share 0–1 of the expected samples a window needs before any verdict.
        pod_grace_s: pods younger than this (seconds) get no verdict.
        node_grace_s: nodes younger than this (seconds) are not reported as unallocated capacity.
        min_episode_s: the shortest stretch of waste (seconds) reported as an episode inside a longer observed
            span; a stretch that covers everything observed of a subject is reported whatever its length.
        min_episode_share: stretches of waste that ended before the evaluation time make a verdict only when
            together they cover at least this share 0–1 of the observed span (a stretch still going on always does).
        confident_observed_s: findings resting on fewer observed seconds than this get LOW confidence (a short
            window sees a bursty workload's quiet phase, not its pattern).
    """

    min_coverage: float = Field(0.8, gt=0, le=1)
    pod_grace_s: int = Field(900, ge=0)
    node_grace_s: int = Field(900, ge=0)
    min_episode_s: int = Field(1800, ge=60)
    min_episode_share: float = Field(0.25, ge=0, le=1)
    confident_observed_s: int = Field(1800, ge=0)



@dataclass(frozen=True)
class Allocation:
    """A pod that holds GPUs in the window, with the devices it holds and when.

    Attributes:
        held_from, held_until: the holding span clipped to the window (None: from the window start / to its
            end, i.e. still held at the evaluation time). A Job that finished mid-window has `held_until`.
        mechanism: the allocation resolver that found the holding ("device plugin", "MIG", "time-slicing", …).
        share: physical-GPU equivalents requested (MIG slices N/7, time-slices 1/replicas).
        devices: devices tied to the pod (empty when telemetry cannot tell which).
        attribution: how `devices` were found.
        labelled: True when the devices carry this pod's labels (use pod-scoped samples).
        lost_devices: devices of the pod that went silent inside the window while its other devices kept reporting
            (a GPU fell off the bus: only an XID series left); they are not judged, `devices` holds the observed ones.
        lost_share: the physical-GPU share of `lost_devices` (still held and billed); `share` is the observed part.
        lost_since: when the lost devices last reported.
    """

    pod: Pod
    node: Node | None
    share: Decimal
    devices: tuple[GpuTelemetry, ...]
    attribution: Attribution
    labelled: bool
    held_from: datetime | None = None
    held_until: datetime | None = None
    mechanism: str = "device plugin"
    per_pod_activity: bool = True
    note: str = ""
    lost_devices: tuple[GpuTelemetry, ...] = ()
    lost_share: Decimal = Decimal(0)
    lost_since: datetime | None = None

    @property
    def held_share(self) -> Decimal:
        """Physical-GPU equivalents the pod holds: the observed share and the lost devices' share."""
        return self.share + self.lost_share

    def held_at(self, t: datetime) -> bool:
        """True when the pod holds its share at time `t` (inside its holding span)."""
        return (self.held_from is None or self.held_from < t) and (self.held_until is None or t <= self.held_until)

    @property
    def holds_now(self) -> bool:
        """True when the pod still holds its share at the end of the window (not terminal)."""
        return self.held_until is None


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
    known_gpus: int | None = None  # physical GPUs an allocation resolver knows (DRA ResourceSlices), never capacity
    #: GPU UUIDs the node's DRA ResourceSlices list (a MIG device as its parent), reported by DCGM or not
    slice_uuids: frozenset[str] = frozenset()
    #: of those, the GPUs no allocated claim holds: free capacity, also when the exporter shows claimed GPUs only
    unclaimed_uuids: frozenset[str] = frozenset()

    @property
    def gpus_known_otherwise(self) -> bool:
        """True when the node's GPUs are known without a device-plugin resource.

        A resolver knows them (DRA ResourceSlices) or a pod holds a share of them (DRA claims, HAMi, KAI) — an
        unknown resource name is then not a configuration gap (B20 does not apply).
        """
        return bool(self.known_gpus) or bool(self.allocations)

    @property
    def physical_uuids(self) -> set[str]:
        """Distinct physical GPU UUIDs seen on the node (never series or requests; B17)."""
        return {d.device.uuid for d in self.devices}

    @property
    def requested_share(self) -> Decimal:
        """Physical-GPU equivalents held at the evaluation time by pods scheduled on the node and not terminal."""
        return sum((a.held_share for a in self.allocations if a.holds_now), Decimal(0))

    def requested_share_at(self, t: datetime) -> Decimal:
        """Physical-GPU equivalents held at time `t` (pods whose holding span covers `t`)."""
        return sum((a.held_share for a in self.allocations if a.held_at(t)), Decimal(0))

    @property
    def hidden_unclaimed(self) -> frozenset[str]:
        """GPUs the node's ResourceSlices list that no claim holds and DCGM does not report.

        An exporter that shows claimed GPUs only: free capacity counted from the slices, never unmonitored,
        never counted twice.
        """
        return self.unclaimed_uuids - self.physical_uuids

    def capacity_gpus(self) -> int:
        """Physical GPUs on the node.

        The distinct UUIDs DCGM reports and its DRA ResourceSlices list (one GPU in both counted once), else the
        node's advertised capacity.
        """
        observed = len(self.physical_uuids | self.slice_uuids)
        return observed if observed else self.expected_gpus() or 0

    def expected_gpus(self) -> int | None:
        """Physical GPUs the node should have from its own description (None when unknown).

        From `allocation.physical.physical_gpu_count`: ResourceSlices, GFD `nvidia.com/gpu.count` (with
        `nvidia.com/mig.config` under MIG single, B08), the instance type's catalogue entry. Node capacity is
        a last resort only where nothing else describes the node, because it counts HAMi shares (B27),
        time-slicing replicas and MIG devices, not GPUs.
        """
        n = self.node
        if n is None:
            return self.known_gpus
        described = physical_gpu_count(n, 0, known_by_resolvers=self.known_gpus).expected
        if described is not None:
            return described
        if n.mig_strategy == "single" or (n.gpu_product and "-MIG-" in n.gpu_product.upper()):
            return None  # gpu.count and capacity count MIG devices, not GPUs (B08)
        cap = n.capacity_gpu.get("nvidia.com/gpu") or n.capacity_gpu.get("nvidia.com/gpu.shared")
        if cap:
            return cap // max(1, n.gpu_replicas)
        return n.gpu_count_label


#: A finding's subject as supersession compares it: (namespace, pod, node when there is no pod).
SubjectKey = tuple[str | None, str | None, str | None]
#: (detector, subject key, episodes) → True when a finding that will be dropped in favour of one already reported
#: (`detectors.registry` supersession) — see `ScanContext.superseded_now`.
SupersededCheck = Callable[[str, SubjectKey, tuple[Episode, ...]], bool]


def _never_superseded(_detector: str, _key: SubjectKey, _episodes: tuple[Episode, ...]) -> bool:
    return False


@dataclass
class JoinedView:
    """The joined view of one scan.

    Attributes:
        allocations: every pod holding GPUs, across nodes.
        nodes: node name → inventory.
        unmapped_devices: devices whose node could not be resolved.
        stray_labels: (device, namespace, pod, reason) for DCGM pod labels that contradict the cluster.
        resolved: the merged answer of the allocation resolvers (holdings, mechanisms, notes).
        power_limits_w: GPU model name as the telemetry spells it → bundled board power limit (W), filled
            by the scan service from the pricing catalog; used when DCGM exports no power-limit field.
        superseded_now: while `detectors.registry.run_detectors` runs the detectors, True for (detector, subject key,
            episodes) when a finding already reported supersedes such a finding (same subject, overlapping time), so
            the detector can skip building it and report `registry.Superseded` instead; outside a run, always False.
    """

    cluster: ClusterState
    telemetry: TelemetryWindow
    common: CommonSettings
    allocations: list[Allocation]
    nodes: dict[str, NodeInventory]
    unmapped_devices: list[GpuTelemetry]
    stray_labels: list[tuple[GpuTelemetry, str, str, str]]
    power_limits_w: dict[str, float] = field(default_factory=dict)
    resolved: Resolved = field(default_factory=Resolved)
    superseded_now: SupersededCheck = field(default=_never_superseded, repr=False, compare=False)

    # --- the window ---------------------------------------------------------------------------
    @property
    def eval_time(self) -> datetime:
        """The scan's evaluation time (UTC)."""
        return self.telemetry.eval_time

    @property
    def window_s(self) -> int:
        """The scan window (seconds)."""
        return self.telemetry.window_s

    @property
    def window_start(self) -> datetime:
        """The start of the scan window (UTC)."""
        start: datetime | None = self.__dict__.get("_window_start")
        if start is None:
            start = self.__dict__["_window_start"] = self.eval_time - timedelta(seconds=self.window_s)
        return start

    def held_span(self, alloc: Allocation) -> tuple[datetime, datetime]:
        """An allocation's holding span clipped to the window."""
        start = self.window_start if alloc.held_from is None else max(self.window_start, alloc.held_from)
        end = self.eval_time if alloc.held_until is None else min(self.eval_time, alloc.held_until)
        return start, max(start, end)

    # --- who holds what -----------------------------------------------------------------------
    @property
    def allocation_mix(self) -> dict[str, tuple[int, Decimal]]:
        """Mechanism → (pods, physical-GPU equivalents held) over the scan (for the report header)."""
        return {k: (v.pods, v.share) for k, v in self.resolved.mix.items()}

    def pod_signals(self, namespace: str, pod: str) -> dict[str, WindowStats]:
        """Pod-level signals (CPU, inference server) of one pod; empty when none were scraped."""
        index: dict[tuple[str, str], dict[str, WindowStats]] | None = self.__dict__.get("_pod_index")
        if index is None:
            index = {(p.namespace, p.pod): p.signals for p in self.telemetry.pods}
            self.__dict__["_pod_index"] = index
        return index.get((namespace, pod), {})

    def unscheduled_gpu_requests(self) -> list[Decimal]:
        """Physical-GPU shares requested by Pending pods that no node took yet (smallest first; once per scan)."""
        cached: list[Decimal] | None = self.__dict__.get("_unscheduled")
        if cached is None:
            cached = sorted(
                sum((gpu_share_for_request(r, c, None) for r, c in p.gpu_requests.items()), Decimal(0))
                for p in self.cluster.pods
                if p.phase is PodPhase.PENDING and not p.node_name and p.gpu_requests
            )
            self.__dict__["_unscheduled"] = cached
        return list(cached)

    def stranded_by_fragmentation(self, free: Decimal) -> bool:
        """True when GPU work waits unscheduled while `free` GPUs on a node are too few for the smallest request."""
        waiting = self.unscheduled_gpu_requests()
        return bool(waiting) and free < waiting[0]

    def allocation_of(self, namespace: str, pod: str) -> Allocation | None:
        """The allocation of a pod (namespace, name), or None when it holds no GPU in the window."""
        index = self.__dict__.get("_alloc_index")
        if index is None:
            # a name recreated in the window (another uid) has one allocation per pod object: the one holding now wins
            index = {(a.pod.namespace, a.pod.name): a for a in sorted(self.allocations, key=lambda a: a.holds_now)}
            self.__dict__["_alloc_index"] = index
        return index.get((namespace, pod))

    def holder_of(self, device: GpuTelemetry) -> Allocation | None:
        """The allocation that holds a device, or None."""
        index = self.__dict__.get("_holder_index")
        if index is None:
            index = {id(d): a for a in self.allocations for d in (*a.devices, *a.lost_devices)}
            self.__dict__["_holder_index"] = index
        return index.get(id(device))

    def memo(self, kind: str, obj: object, compute: Callable[[], _T]) -> _T:
        """`compute()` once per scan for `obj` (an allocation, a device…) under `kind`; later calls return its value.

        The entry keeps `obj` alive, so its id is never reused while the context lives.
        """
        cache: dict[tuple[str, int], tuple[object, Any]] = self.__dict__.setdefault("_memo", {})
        key = (kind, id(obj))
        hit = cache.get(key)
        if hit is None or hit[0] is not obj:
            hit = cache[key] = (obj, compute())
        value: _T = hit[1]
        return value

    # --- time: the window's buckets ------------------------------------------------------------
    @property
    def slots(self) -> tuple[tuple[datetime, datetime], ...]:
        """The window's buckets as (start, end] pairs, oldest first; empty when the telemetry did not resolve time.

        They tile the window from its start (`models.telemetry.Bucket`), so none reaches outside it.
        """
        cached = self.__dict__.get("_slots")
        if cached is None:
            b = self.telemetry.bucket_s
            if not b or self.telemetry.single_instant or b > self.window_s:
                cached = ()
            else:
                start = self.window_start
                cached = tuple((start + timedelta(seconds=k * b), start + timedelta(seconds=(k + 1) * b))
                               for k in range(self.window_s // b))
            self.__dict__["_slots"] = cached
        return cached

    def _slot_index(self) -> dict[datetime, int]:
        """Slot end → slot index (cached)."""
        index = self.__dict__.get("_slot_ends")
        if index is None:
            index = {end: i for i, (_, end) in enumerate(self.slots)}
            self.__dict__["_slot_ends"] = index
        return index

    def buckets_of(self, stats: WindowStats | None) -> list[Bucket | None]:
        """A summary's buckets aligned with `slots` (None where the bucket holds no sample)."""
        out: list[Bucket | None] = [None] * len(self.slots)
        if stats is None or not stats.buckets:
            return out
        index = self._slot_index()
        for b in stats.buckets:
            i = index.get(b.end)
            if i is not None and b.count:
                out[i] = b
        return out

    def _grid(self) -> tuple[tuple[datetime, ...], list[tuple[int, int]]]:
        """The slot ends, oldest first, and each 10-minute group as a [lo, hi) run of slot positions (cached).

        The groups are `_ten_minute_group`'s.
        """
        grid: tuple[tuple[datetime, ...], list[tuple[int, int]]] | None = self.__dict__.get("_grid_runs")
        if grid is None:
            group = self._ten_minute_group()
            ends = tuple(end for _, end in self.slots)
            runs: list[tuple[int, int]] = []
            for i, end in enumerate(ends):
                if runs and group[ends[runs[-1][0]]] == group[end]:
                    runs[-1] = (runs[-1][0], i + 1)
                else:
                    runs.append((i, i + 1))
            grid = self.__dict__["_grid_runs"] = (ends, runs)
        return grid

    def _ten_minute_group(self) -> dict[datetime, int]:
        """Slot end → its 10-minute group, counted backwards from the evaluation time (cached)."""
        group: dict[datetime, int] | None = self.__dict__.get("_ten_minute_groups")
        if group is None:
            group = {end: int((self.eval_time - end).total_seconds() // 600) for _, end in self.slots}
            self.__dict__["_ten_minute_groups"] = group
        return group

    # --- subjects ------------------------------------------------------------------------------
    def subject_for(self, alloc: Allocation) -> Subject:
        """The finding subject for an allocation (workload, node, devices, pricing inputs).

        Built once per scan and shared by the findings about the allocation (a frozen model).
        """
        return self.memo("subject", alloc, lambda: self._subject_for(alloc))

    def _subject_for(self, alloc: Allocation) -> Subject:
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
            gpu_share=alloc.held_share,
            instance_type=alloc.node.instance_type if alloc.node else None,
            capacity_type=alloc.node.capacity_type if alloc.node else None,
            region=alloc.node.region if alloc.node else None,
            accelerator=alloc.node.labels.get("cloud.google.com/gke-accelerator") if alloc.node else None,
            physical_gpus_on_node=self._physical_gpus(inv) if inv and inv.devices else None,
            attribution=alloc.attribution,
            owner_exists=alloc.pod.workload.exists,
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
            physical_gpus_on_node=self._physical_gpus(inv) or None,
            attribution=Attribution.NODE,
            labels=dict(n.labels) if n else {},
        )

    def _physical_gpus(self, inv: NodeInventory) -> int:
        """Distinct physical GPU UUIDs on a node, counted once per scan.

        `NodeInventory.physical_uuids` and the DRA ResourceSlices' UUIDs.
        """
        return self.memo("physical_gpus", inv, lambda: len(inv.physical_uuids | inv.slice_uuids))


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


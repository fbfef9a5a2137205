"""Join: the joined view of one scan — GPUs ↔ pods ↔ nodes over the window — that every detector reads.

Pure. `ScanContext` holds the allocations (who holds which devices, with what share, from when to when),
the node inventories, and the signal access every detector shares (best activity signal, coverage against
the sample spacing, pod-scoped samples, data problems). Built by `gpuwaste.join.build.join`.
"""

from __future__ import annotations

import math
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
from gpuwaste.models.findings import Attribution, Episode, Evidence, GpuRef, Subject
from gpuwaste.models.telemetry import (
    ACTIVITY_SIGNALS,
    Bucket,
    GpuTelemetry,
    Signal,
    TelemetryWindow,
    WindowStats,
    summarises,
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


#: Activity signal → its rank in `ACTIVITY_SIGNALS` (higher: weaker).
_ACTIVITY_ORDER: dict[Signal, int] = {s: i for i, s in enumerate(ACTIVITY_SIGNALS)}
#: An activity ratio under this reads "idle" (the idle detector's default threshold).
IDLE_RATIO = 0.05
#: Slack (in ratio units) of the bounds that let a detector skip a subject whose rule cannot fire: a mean of per-slot
#: values is at least the mean of their lower bounds minus float rounding, which is far below this.
BOUND_EPS = 1e-9
#: GPU_UTIL ÷ 100 and power ÷ limit at or above this show work that contradicts an idle profiling ratio.
WORK_RATIO = 0.5


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
        """True when the node's GPUs are known without a device-plugin resource: a resolver knows them (DRA
        ResourceSlices) or a pod holds a share of them (DRA claims, HAMi, KAI) — an unknown resource name is
        then not a configuration gap (B20 does not apply)."""
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
        """GPUs the node's ResourceSlices list that no claim holds and DCGM does not report (an exporter that shows
        claimed GPUs only): free capacity counted from the slices, never unmonitored, never counted twice."""
        return self.unclaimed_uuids - self.physical_uuids

    def capacity_gpus(self) -> int:
        """Physical GPUs on the node: the distinct UUIDs DCGM reports and its DRA ResourceSlices list (one GPU in both
        counted once), else the node's advertised capacity."""
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
class ScanContext:
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

    def attribution_coverage(self) -> dict[str, tuple[Decimal, Decimal]]:
        """Allocation kind (mechanism: "device plugin", "MIG", "time-slicing", "DRA", "HAMi", …) → (allocated
        GPU-hours, GPU-hours with attributable telemetry) in the window (issue 21 §12).

        Allocated: each holding's share (a lost device's included) × its holding span clipped to the window. Attributable:
        the share of its devices tied to it with DCGM series (labels, the allocation's own device names, elimination;
        a lost device not) × the part of the span its activity signal covers. Computed once per scan.
        """
        cached: dict[str, tuple[Decimal, Decimal]] | None = self.__dict__.get("_coverage")
        if cached is None:
            cached = {}
            for a in self.allocations:
                lo, hi = self.held_span(a)
                hours = Decimal(str((hi - lo).total_seconds())) / Decimal(3600)
                allocated = a.held_share * hours
                attributed = Decimal(0)
                if a.devices and a.attribution is not Attribution.UNKNOWN:
                    act = self.activity(a.devices, a.pod)
                    covered = Decimal(str(round(min(1.0, act.coverage), 4))) if act is not None else Decimal(0)
                    attributed = a.share * hours * covered
                got = cached.get(a.mechanism, (Decimal(0), Decimal(0)))
                cached[a.mechanism] = (got[0] + allocated, got[1] + attributed)
            cached = {k: (v[0].quantize(Decimal("0.0001")), v[1].quantize(Decimal("0.0001"))) for k, v in sorted(cached.items())}
            self.__dict__["_coverage"] = cached
        return dict(cached)

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
        """Physical-GPU shares requested by Pending pods that no node took yet (smallest first; computed once per scan)."""
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

    @property
    def eval_time(self) -> datetime:
        """The scan's evaluation time (UTC)."""
        return self.telemetry.eval_time

    @property
    def window_s(self) -> int:
        """The scan window (seconds)."""
        return self.telemetry.window_s

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
                cached = tuple((start + timedelta(seconds=k * b), start + timedelta(seconds=(k + 1) * b)) for k in range(self.window_s // b))
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

    def memo(self, kind: str, obj: object, compute: Callable[[], _T]) -> _T:
        """`compute()` once per scan for `obj` (an allocation, a device…) under `kind`; later calls return the same value.

        The entry keeps `obj` alive, so its id is never reused while the context lives.
        """
        cache: dict[tuple[str, int], tuple[object, Any]] = self.__dict__.setdefault("_memo", {})
        key = (kind, id(obj))
        hit = cache.get(key)
        if hit is None or hit[0] is not obj:
            hit = cache[key] = (obj, compute())
        value: _T = hit[1]
        return value

    def avg_bounds(self, stats: WindowStats | None) -> tuple[float, float] | None:
        """The lowest and highest bucket average of `stats` (in the signal's unit) over its buckets with samples; None
        when no bucket has any (then `buckets_of(stats)` shows no value at all).

        `buckets_of` shows a subset of these buckets, so every value it shows lies between the two: a rule that no value
        between them can meet cannot fire on any slot. Detectors use this to skip subjects without building their
        series — a proof, never a guess (missing samples still read as unknown).
        """
        if stats is None or not stats.buckets:
            return None
        cache: dict[int, tuple[WindowStats, tuple[float, float] | None]] = self.__dict__.setdefault("_bounds_cache", {})
        hit = cache.get(id(stats))
        if hit is not None and hit[0] is stats:
            return hit[1]
        avgs = [total / count for _end, count, total, _max in stats.buckets if count]  # Bucket.avg of those with samples
        value = (min(avgs), max(avgs)) if avgs else None
        cache[id(stats)] = (stats, value)  # the entry keeps `stats` alive, so its id is never reused
        return value

    def _grid(self) -> tuple[tuple[datetime, ...], list[tuple[int, int]]]:
        """The slot ends, oldest first, and each 10-minute group (`_ten_minute_group`) as a [lo, hi) run of slot
        positions (cached)."""
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

    def activity_floor(self, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry], pod: Pod | None = None) -> float | None:
        """A lower bound of every value `activity_series(devices, pod)` shows: the mean over devices of each device's
        lowest bucket activity ratio (0–1; subtract `BOUND_EPS` for rounding); None when the series shows no value in any
        slot (no devices, a device without an activity signal or without buckets)."""
        cache: dict[tuple[object, ...], float | None] = self.__dict__.setdefault("_floor_cache", {})
        key = (tuple(id(d) for d in devices), None if pod is None else (pod.namespace, pod.name))
        if key not in cache:
            cache[key] = self._activity_floor(devices, pod)
        return cache[key]

    def _activity_floor(self, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry], pod: Pod | None) -> float | None:
        lows: list[float] = []
        for dev in devices:
            sig = self.activity_signal(dev)
            if sig is None:
                return None
            bounds = self.avg_bounds(self.device_stats(dev, sig, pod if self._labelled_for(dev, pod) else None))
            if bounds is None:
                return None
            lows.append(sig.to_ratio(bounds[0]))
        return sum(lows) / len(lows) if lows else None

    def resolved_time(self, stats: WindowStats | None) -> bool:
        """True when `stats` carries buckets for this window's slots."""
        return bool(self.slots) and stats is not None and bool(stats.buckets)

    def peak_10m(self, stats: WindowStats) -> float | None:
        """The highest 10-minute average inside the window, in the signal's unit.

        From the buckets when there are any: 10-minute groups tiled backwards from the evaluation time, so no
        group reaches before the window start; else the source's `max_avg_10m`.
        """
        if not self.resolved_time(stats):
            return stats.max_avg_10m
        cache: dict[int, tuple[WindowStats, float | None]] = self.__dict__.setdefault("_peak_cache", {})
        hit = cache.get(id(stats))
        if hit is not None and hit[0] is stats:
            return hit[1]
        buckets = stats.buckets
        grid = self._grid()
        if len(buckets) == len(grid[0]) and tuple(map(_END, buckets)) == grid[0]:
            # the buckets are the window's slots (the usual case): the 10-minute groups are runs of positions
            best: float | None = None
            fsum = math.fsum
            for lo, hi in grid[1]:
                n = 0
                part: list[float] = []
                for b in buckets[lo:hi]:
                    if b[1]:
                        n += b[1]
                        part.append(b[2])
                if n:
                    v = fsum(part) / n
                    if best is None or v > best:
                        best = v
            value = best if best is not None else stats.max_avg_10m
            cache[id(stats)] = (stats, value)  # the entry keeps `stats` alive, so its id is never reused
            return value
        group = self._ten_minute_group()
        totals: dict[int, list[float]] = {}
        counts: dict[int, int] = {}
        for end, count, total, _max in stats.buckets:
            if not count:
                continue
            k = group.get(end)
            if k is None:
                continue
            same = totals.get(k)
            if same is None:
                totals[k] = [total]
                counts[k] = count
            else:
                same.append(total)
                counts[k] += count
        fsum = math.fsum
        value = max([fsum(totals[k]) / n for k, n in counts.items()]) if counts else stats.max_avg_10m
        cache[id(stats)] = (stats, value)  # the entry keeps `stats` alive, so its id is never reused
        return value

    def activity_series(self, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry], pod: Pod | None = None, *,
                        peak: bool = False) -> list[float | None]:
        """Per slot, the mean activity ratio 0–1 over `devices` (each on its own best signal; with `peak`, each bucket's
        highest sample instead of its average); None where any lacks samples."""
        per_dev: list[list[float | None]] = []
        for dev in devices:
            sig = self.activity_signal(dev)
            if sig is None:
                return [None] * len(self.slots)
            st = self.device_stats(dev, sig, pod if self._labelled_for(dev, pod) else None)
            per_dev.append([None if b is None or b.avg is None else sig.to_ratio(b.max if peak else b.avg)
                            for b in self.buckets_of(st)])
        return _mean_columns(per_dev, len(self.slots))

    def contradicted_slots(self, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry], pod: Pod | None = None) -> list[bool]:
        """Per slot, True where some device's profiling ratio reads idle while its GPU_UTIL and power both show work
        (the bucket-level `contradiction`): such a slot is unknown, never idle."""
        out = [False] * len(self.slots)
        for dev in devices:
            sig = self.activity_signal(dev)
            limit = self.power_limit_w(dev)
            if sig is None or sig is Signal.GPU_UTIL or dev.device.gpu_i_id is not None or limit is None:
                continue
            scoped = pod if self._labelled_for(dev, pod) else None
            # no bucket of this device can meet all three conditions when one series' bounds rule it out (`avg_bounds`)
            prof_st = self.device_stats(dev, sig, scoped)
            pb = self.avg_bounds(prof_st)
            if pb is None or sig.to_ratio(pb[0]) >= IDLE_RATIO:
                continue
            util_st = self.device_stats(dev, Signal.GPU_UTIL, scoped)
            ub = self.avg_bounds(util_st)
            if ub is None or Signal.GPU_UTIL.to_ratio(ub[1]) < WORK_RATIO:
                continue
            power_st = self.device_stats(dev, Signal.POWER_USAGE)
            wb = self.avg_bounds(power_st)
            if wb is None or wb[1] < WORK_RATIO * limit:
                continue
            prof = self.buckets_of(prof_st)
            util = self.buckets_of(util_st)
            power = self.buckets_of(power_st)
            for i, (p, u, w) in enumerate(zip(prof, util, power, strict=True)):
                if p is None or u is None or w is None or p.avg is None or u.avg is None or w.avg is None:
                    continue
                if (sig.to_ratio(p.avg) < IDLE_RATIO and Signal.GPU_UTIL.to_ratio(u.avg) >= WORK_RATIO
                        and w.avg >= WORK_RATIO * limit):
                    out[i] = True
        return out

    def signal_series(self, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry], signal: Signal, pod: Pod | None = None,
                      *, ratio: bool = False) -> list[float | None]:
        """Per slot, the mean bucket average of `signal` over `devices` (÷ 100 for percent fields when `ratio`)."""
        per_dev: list[list[float | None]] = []
        for dev in devices:
            st = self.device_stats(dev, signal, pod if self._labelled_for(dev, pod) else None)
            conv = signal.to_ratio if ratio else (lambda v: v)
            per_dev.append([None if b is None or b.avg is None else conv(b.avg) for b in self.buckets_of(st)])
        return _mean_columns(per_dev, len(self.slots))

    # --- signal access -------------------------------------------------------------------------
    def device_stats(self, device: GpuTelemetry, signal: Signal | str, pod: Pod | None = None) -> WindowStats | None:
        """A device's window summary for `signal`, restricted to `pod`'s labelled samples when given.

        Merged once per scan (device, signal, pod): every detector reads the same summary object.
        """
        groups = device.groups
        if len(groups) <= 1:
            # one label group at most (most devices): its summaries are the device's, and the pod's samples (if
            # labelled) are all of the device's samples; whole-GPU fields of a MIG instance come from its parent
            found = groups[0].signals.get(signal) if groups else None
            return found if found is not None else device.parent_signals.get(signal)
        cache: dict[tuple[int, str, object], tuple[GpuTelemetry, WindowStats | None]] = self.__dict__.setdefault("_merged_stats", {})
        key = (id(device), signal, None if pod is None else (pod.namespace, pod.name))
        hit = cache.get(key)
        if hit is None or hit[0] is not device:
            scoped = None if pod is None else device.for_workload(pod.namespace, pod.name, signal)
            # the entry keeps `device` alive, so its id is never reused
            hit = cache[key] = (device, scoped if scoped is not None else device.merged(signal))
        return hit[1]

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
            stats = self.device_stats(device, sig)
            if stats is not None and (stats.count > 0 or stats.unreadable > 0):  # unreadable samples: still this signal
                found = sig
                break
        cache[id(device)] = found
        return found

    def expected_samples(self, pod: Pod | None = None) -> float:
        """Samples expected in the window, shortened to the pod's lifetime when it started (or ended) inside it."""
        if pod is None:
            return self.window_s / self.telemetry.scrape_interval_s
        return self.memo("expected_samples", pod, lambda: self._expected_samples(pod))

    def _expected_samples(self, pod: Pod | None) -> float:
        span = float(self.window_s)
        if pod is not None:
            start = max(self.window_start, pod.started_at) if pod.started_at is not None else self.window_start
            end = self.eval_time
            if pod.finished_at is not None and (pod.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED) or pod.gone_at is not None):
                end = min(end, pod.finished_at)
            span = max(0.0, min(span, (end - start).total_seconds()))
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
        weakest = max((s for s, _ in readings), key=_ACTIVITY_ORDER.__getitem__)
        avgs = [s.to_ratio(st.avg) for s, st in readings]
        m10 = [s.to_ratio(p) for s, st in readings if (p := self.peak_10m(st)) is not None]
        return ActivityReading(
            signal=weakest,
            avg=sum(avgs) / len(avgs),
            p95=max([s.to_ratio(st.p95) for s, st in readings]),
            max=max([s.to_ratio(st.max) for s, st in readings]),
            min=min([s.to_ratio(st.min) for s, st in readings]),
            max_avg_10m=max(m10) if m10 else None,
            coverage=min([self.coverage(st, pod) for _, st in readings]),
            samples=sum([st.count for _, st in readings]),
            devices=len(readings),
        )

    def signal_evidence(
        self, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry], signal: Signal, pod: Pod | None = None
    ) -> Evidence | None:
        """Evidence for a non-activity signal over devices (avg of averages, highest p95/max); None if absent.

        Built once per scan for the same devices, signal and pod (detectors share the frozen evidence)."""
        cache: dict[tuple[object, ...], Evidence | None] = self.__dict__.setdefault("_evidence_cache", {})
        key = (tuple(id(d) for d in devices), signal, None if pod is None else (pod.namespace, pod.name))
        if key not in cache:
            cache[key] = self._signal_evidence(devices, signal, pod)
        return cache[key]

    def _signal_evidence(
        self, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry], signal: Signal, pod: Pod | None
    ) -> Evidence | None:
        present = self._present(devices, signal, pod)
        if not present:
            return None
        return Evidence(
            signal=signal.value,
            unit=signal.unit,
            window_s=self.window_s,
            avg=round(sum([s.avg for s in present]) / len(present), 6),
            p95=round(max([s.p95 for s in present]), 6) if summarises(signal, "p95") else None,
            max=round(max([s.max for s in present]), 6),
            min=round(min([s.min for s in present]), 6) if summarises(signal, "min") else None,
            max_avg_10m=self._evidence_peak(present),
            samples=sum([s.count for s in present]),
            coverage=round(min([self.coverage(s, pod) for s in present]), 4),
        )

    def evidence_peak(self, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry], signal: Signal, pod: Pod | None = None
                      ) -> float | None:
        """`signal_evidence(devices, signal, pod)`'s highest 10-minute average, else its max (as the evidence rounds
        them), without building the evidence; None when that evidence is None."""
        present = self._present(devices, signal, pod)
        if not present:
            return None
        peak = self._evidence_peak(present)
        return peak if peak is not None else round(max(s.max for s in present), 6)

    def _present(self, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry], signal: Signal, pod: Pod | None) -> list[WindowStats]:
        """The devices' summaries of `signal` that hold samples (pod-scoped where the device carries the pod's labels)."""
        if pod is None:
            stats = [self.device_stats(d, signal) for d in devices]
        else:
            stats = [self.device_stats(d, signal, pod if self._labelled_for(d, pod) else None) for d in devices]
        return [s for s in stats if s is not None and s.count > 0]

    def _evidence_peak(self, present: list[WindowStats]) -> float | None:
        if len(present) == 1:
            p = self.peak_10m(present[0])
            return None if p is None else round(p, 6)
        m10 = [p for s in present if (p := self.peak_10m(s)) is not None]
        return round(max(m10), 6) if m10 else None

    def device_problem(self, device: GpuTelemetry, stale_min_samples: int = 20) -> str | None:
        """Why a device's telemetry cannot be trusted, or None: "no_activity_signal", "unreadable_samples"
        (its activity signal has samples, none readable: `WindowStats.unreadable`), "stale_series"
        (stopped reporting before the window's end), "frozen_exporter" (every value, energy counter
        included, bit-identical for the window; field guide B12), or a contradiction (`contradiction`:
        "profiling_counter_broken", "activity_signals_disagree"). Such devices are never judged idle.
        """
        cache: dict[tuple[int, int], tuple[GpuTelemetry, str | None]] = self.__dict__.setdefault("_problem_cache", {})
        key = (id(device), stale_min_samples)
        hit = cache.get(key)
        if hit is None or hit[0] is not device:
            hit = cache[key] = (device, self._device_problem(device, stale_min_samples))
        return hit[1]

    def _device_problem(self, device: GpuTelemetry, stale_min_samples: int) -> str | None:
        sig = self.activity_signal(device)
        if sig is None:
            return "no_activity_signal"
        if self.telemetry.single_instant:
            return None
        stats = self.device_stats(device, sig)
        if stats is None:
            return "no_activity_signal"
        if stats.count == 0 and stats.unreadable > 0:
            return "unreadable_samples"
        if stats.count > 0 and stats.recent_count == 0:
            return "stale_series"
        energy = self.device_stats(device, Signal.TOTAL_ENERGY)
        if (
            energy is not None
            and energy.count >= stale_min_samples
            and energy.changes == 0
            and stats.changes == 0
            and stats.count >= stale_min_samples
        ):
            return "frozen_exporter"
        return self.contradiction(device)

    def contradiction(self, device: GpuTelemetry) -> str | None:
        """A profiling activity ratio that two other signals contradict, or None.

        The PROF ratio (SM_ACTIVE / GR_ENGINE_ACTIVE) reads idle (window average < `IDLE_RATIO`) while GPU_UTIL
        (window average ≥ `WORK_RATIO`) and power (≥ `WORK_RATIO` × the power limit) both show work:
        "profiling_counter_broken" when the ratio never left 0, else "activity_signals_disagree". Either way the
        device gets no idle (or any activity) verdict. Not on MIG instances (GPU_UTIL is whole-GPU there, B05),
        and not when power is idle too (GPU_UTIL busy with no work and idle power is the stall, B14).
        """
        sig = self.activity_signal(device)
        if sig is None or sig is Signal.GPU_UTIL or device.device.gpu_i_id is not None:
            return None
        prof, util, power = self.device_stats(device, sig), self.device_stats(device, Signal.GPU_UTIL), self.device_stats(device, Signal.POWER_USAGE)
        if prof is None or util is None or power is None or not (prof.count and util.count and power.count):
            return None
        if sig.to_ratio(prof.avg) >= IDLE_RATIO or Signal.GPU_UTIL.to_ratio(util.avg) < WORK_RATIO:
            return None
        limit = self.power_limit_w(device)
        if limit is None or power.avg < WORK_RATIO * limit:
            return None
        return "profiling_counter_broken" if prof.max == 0 else "activity_signals_disagree"

    def power_limit_w(self, device: GpuTelemetry) -> float | None:
        """The device's power limit (W): DCGM's enforced or management limit, else the bundled per-model limit."""
        return self.memo("power_limit_w", device, lambda: self._power_limit_w(device))

    def _power_limit_w(self, device: GpuTelemetry) -> float | None:
        for sig in (Signal.POWER_LIMIT, Signal.POWER_MGMT_LIMIT):
            st = self.device_stats(device, sig)
            if st is not None and st.count and st.max > 0:
                return st.max
        return self.power_limits_w.get(device.model_name or "")

    def _labelled_for(self, device: GpuTelemetry, pod: Pod | None) -> bool:
        """True when some of `device`'s series carry `pod`'s labels (its samples can be told apart)."""
        if pod is None:
            return False
        cache: dict[int, tuple[GpuTelemetry, frozenset[tuple[str, str]]]] = self.__dict__.setdefault("_workloads", {})
        hit = cache.get(id(device))
        if hit is None or hit[0] is not device:
            hit = cache[id(device)] = (device, frozenset(device.workloads))
        return (pod.namespace, pod.name) in hit[1]

    # --- subjects ------------------------------------------------------------------------------
    def subject_for(self, alloc: Allocation) -> Subject:
        """The finding subject for an allocation (workload, node, devices, pricing inputs); built once per scan and
        shared by the findings about the allocation (a frozen model)."""
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
        """Distinct physical GPU UUIDs on a node (`NodeInventory.physical_uuids` and the DRA ResourceSlices' UUIDs),
        counted once per scan."""
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


def _mean_columns(rows: list[list[float | None]], n: int) -> list[float | None]:
    """Column-wise mean of equally long rows; None in a column where any row has None (or there are no rows)."""
    if not rows:
        return [None] * n
    out: list[float | None] = []
    for col in zip(*rows, strict=True):
        out.append(None if any(v is None for v in col) else sum(v for v in col if v is not None) / len(col))
    return out

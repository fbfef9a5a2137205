"""Join: the readings every detector takes of the joined view — signals, coverage, activity, evidence, data problems.

Pure. `ScanContext` is the `JoinedView` (`gpuwaste.join.view`: the join's data) with the signal access every
detector shares: a device's best activity signal (B04, B05, B15), its samples restricted to a pod's labels,
coverage against the sample spacing, activity and evidence over a set of devices, per-slot series, the bounds
that let a detector skip a subject whose rule cannot fire, and why a device's telemetry cannot be trusted. Every
reading is computed once per scan and shared. Built by `gpuwaste.join.build.join`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from operator import itemgetter
from typing import TypeAlias

from gpuwaste.join.view import JoinedView
from gpuwaste.models.cluster import Pod, PodPhase
from gpuwaste.models.findings import Attribution, Evidence
from gpuwaste.models.telemetry import ACTIVITY_SIGNALS, GpuTelemetry, Signal, WindowStats, summarises

_END = itemgetter(0)  # a Bucket's end
#: The devices a reading is over (an allocation's tuple, a node's list).
Devices: TypeAlias = tuple[GpuTelemetry, ...] | list[GpuTelemetry]

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


class ScanContext(JoinedView):
    """The joined view of one scan (`JoinedView`: its data) with the readings detectors take of it.

    Every reading is computed once per scan and cached in the instance (`__dict__`, beside the joined data), so
    detectors share one value for the same question.
    """

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
        cache: dict[tuple[int, str, object], tuple[GpuTelemetry, WindowStats | None]]
        cache = self.__dict__.setdefault("_merged_stats", {})
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

    def _labelled_for(self, device: GpuTelemetry, pod: Pod | None) -> bool:
        """True when some of `device`'s series carry `pod`'s labels (its samples can be told apart)."""
        if pod is None:
            return False
        cache: dict[int, tuple[GpuTelemetry, frozenset[tuple[str, str]]]] = self.__dict__.setdefault("_workloads", {})
        hit = cache.get(id(device))
        if hit is None or hit[0] is not device:
            hit = cache[id(device)] = (device, frozenset(device.workloads))
        return (pod.namespace, pod.name) in hit[1]

    def power_limit_w(self, device: GpuTelemetry) -> float | None:
        """The device's power limit (W): DCGM's enforced or management limit, else the bundled per-model limit."""
        return self.memo("power_limit_w", device, lambda: self._power_limit_w(device))

    def _power_limit_w(self, device: GpuTelemetry) -> float | None:
        for sig in (Signal.POWER_LIMIT, Signal.POWER_MGMT_LIMIT):
            st = self.device_stats(device, sig)
            if st is not None and st.count and st.max > 0:
                return st.max
        return self.power_limits_w.get(device.model_name or "")

    # --- coverage ------------------------------------------------------------------------------
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
            ended = pod.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED) or pod.gone_at is not None
            if pod.finished_at is not None and ended:
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
        """How many merged series ran side by side (duplicate exporters, B17), 1 for a restart (B12).

        Copies that both still report at the end of the window doubled the count; a restart's old series has stopped.
        """
        return float(max(1, min(stats.series, stats.live_series)))

    # --- one summary over the window's buckets --------------------------------------------------
    def resolved_time(self, stats: WindowStats | None) -> bool:
        """True when `stats` carries buckets for this window's slots."""
        return bool(self.slots) and stats is not None and bool(stats.buckets)

    def avg_bounds(self, stats: WindowStats | None) -> tuple[float, float] | None:
        """The lowest and highest bucket average of `stats` (in the signal's unit) over its buckets with samples.

        None when no bucket has any (then `buckets_of(stats)` shows no value at all).

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
        # Bucket.avg of those with samples
        avgs = [total / count for _end, count, total, _max in stats.buckets if count]
        value = (min(avgs), max(avgs)) if avgs else None
        cache[id(stats)] = (stats, value)  # the entry keeps `stats` alive, so its id is never reused
        return value

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

    # --- activity ------------------------------------------------------------------------------
    def activity(self, devices: Devices, pod: Pod | None = None) -> ActivityReading | None:
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

    def _activity(self, devices: Devices, pod: Pod | None) -> ActivityReading | None:
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

    def activity_floor(self, devices: Devices, pod: Pod | None = None) -> float | None:
        """A lower bound of every value `activity_series(devices, pod)` shows.

        The mean over devices of each device's lowest bucket activity ratio (0–1; subtract `BOUND_EPS` for rounding);
        None when the series shows no value in any slot (no devices, a device without an activity signal or
        without buckets).
        """
        cache: dict[tuple[object, ...], float | None] = self.__dict__.setdefault("_floor_cache", {})
        key = (tuple(id(d) for d in devices), None if pod is None else (pod.namespace, pod.name))
        if key not in cache:
            cache[key] = self._activity_floor(devices, pod)
        return cache[key]

    def _activity_floor(self, devices: Devices, pod: Pod | None) -> float | None:
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

    def activity_series(self, devices: Devices, pod: Pod | None = None, *,
                        peak: bool = False) -> list[float | None]:
        """Per slot, the mean activity ratio 0–1 over `devices`; None where any lacks samples.

        Each device on its own best signal; with `peak`, each bucket's highest sample instead of its average.
        """
        per_dev: list[list[float | None]] = []
        for dev in devices:
            sig = self.activity_signal(dev)
            if sig is None:
                return [None] * len(self.slots)
            st = self.device_stats(dev, sig, pod if self._labelled_for(dev, pod) else None)
            per_dev.append([None if b is None or b.avg is None else sig.to_ratio(b.max if peak else b.avg)
                            for b in self.buckets_of(st)])
        return _mean_columns(per_dev, len(self.slots))

    def contradicted_slots(self, devices: Devices, pod: Pod | None = None) -> list[bool]:
        """Per slot, True where some device's profiling ratio reads idle while its GPU_UTIL and power both show work.

        The bucket-level `contradiction`: such a slot is unknown, never idle.
        """
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

    def signal_series(self, devices: Devices, signal: Signal, pod: Pod | None = None,
                      *, ratio: bool = False) -> list[float | None]:
        """Per slot, the mean bucket average of `signal` over `devices` (÷ 100 for percent fields when `ratio`)."""
        per_dev: list[list[float | None]] = []
        for dev in devices:
            st = self.device_stats(dev, signal, pod if self._labelled_for(dev, pod) else None)
            conv = signal.to_ratio if ratio else (lambda v: v)
            per_dev.append([None if b is None or b.avg is None else conv(b.avg) for b in self.buckets_of(st)])
        return _mean_columns(per_dev, len(self.slots))

    # --- evidence ------------------------------------------------------------------------------
    def signal_evidence(
        self, devices: Devices, signal: Signal, pod: Pod | None = None
    ) -> Evidence | None:
        """Evidence for a non-activity signal over devices (avg of averages, highest p95/max); None if absent.

        Built once per scan for the same devices, signal and pod (detectors share the frozen evidence).
        """
        cache: dict[tuple[object, ...], Evidence | None] = self.__dict__.setdefault("_evidence_cache", {})
        key = (tuple(id(d) for d in devices), signal, None if pod is None else (pod.namespace, pod.name))
        if key not in cache:
            cache[key] = self._signal_evidence(devices, signal, pod)
        return cache[key]

    def _signal_evidence(
        self, devices: Devices, signal: Signal, pod: Pod | None
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

    def evidence_peak(self, devices: Devices, signal: Signal, pod: Pod | None = None
                      ) -> float | None:
        """`signal_evidence(devices, signal, pod)`'s highest 10-minute average, else its max, without building it.

        Rounded as the evidence rounds them; None when that evidence is None.
        """
        present = self._present(devices, signal, pod)
        if not present:
            return None
        peak = self._evidence_peak(present)
        return peak if peak is not None else round(max(s.max for s in present), 6)

    def _present(self, devices: Devices, signal: Signal, pod: Pod | None) -> list[WindowStats]:
        """The devices' summaries of `signal` that hold samples (pod-scoped where a device carries the pod's labels)."""
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

    # --- data problems -------------------------------------------------------------------------
    def device_problem(self, device: GpuTelemetry, stale_min_samples: int = 20) -> str | None:
        """Why a device's telemetry cannot be trusted, or None.

        "no_activity_signal", "unreadable_samples" (its activity signal has samples, none readable:
        `WindowStats.unreadable`), "stale_series" (stopped reporting before the window's end), "frozen_exporter"
        (every value, energy counter included, bit-identical for the window; field guide B12), or a
        contradiction (`contradiction`: "profiling_counter_broken", "activity_signals_disagree"). Such devices
        are never judged idle.
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
        prof = self.device_stats(device, sig)
        util = self.device_stats(device, Signal.GPU_UTIL)
        power = self.device_stats(device, Signal.POWER_USAGE)
        if prof is None or util is None or power is None or not (prof.count and util.count and power.count):
            return None
        if sig.to_ratio(prof.avg) >= IDLE_RATIO or Signal.GPU_UTIL.to_ratio(util.avg) < WORK_RATIO:
            return None
        limit = self.power_limit_w(device)
        if limit is None or power.avg < WORK_RATIO * limit:
            return None
        return "profiling_counter_broken" if prof.max == 0 else "activity_signals_disagree"

    # --- the scan's attribution coverage ------------------------------------------------------
    def attribution_coverage(self) -> dict[str, tuple[Decimal, Decimal]]:
        """Allocation kind → (allocated GPU-hours, GPU-hours with attributable telemetry) in the window.

        The kind is the mechanism ("device plugin", "MIG", "time-slicing", "DRA", "HAMi", …; issue 21 §12).

        Allocated: each holding's share (a lost device's included) × its holding span clipped to the window.
        Attributable: the share of its devices tied to it with DCGM series (labels, the allocation's own device
        names, elimination; a lost device not) × the part of the span its activity signal covers. Computed once
        per scan.
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
            q = Decimal("0.0001")
            cached = {k: (v[0].quantize(q), v[1].quantize(q)) for k, v in sorted(cached.items())}
            self.__dict__["_coverage"] = cached
        return dict(cached)


def _mean_columns(rows: list[list[float | None]], n: int) -> list[float | None]:
    """Column-wise mean of equally long rows; None in a column where any row has None (or there are no rows)."""
    if not rows:
        return [None] * n
    out: list[float | None] = []
    for col in zip(*rows, strict=True):
        out.append(None if any(v is None for v in col) else sum(v for v in col if v is not None) / len(col))
    return out

"""Detectors: shared readings for the waste catalogue — trusted activity, power vs limit, pod-level signals.

Pure helpers over a `ScanContext`. Pod-level metrics follow `sources/metrics_plan.py`: a gauge is keyed by
its name (full `WindowStats`), a counter by `<name>:rate`, whose `.max` is the per-second rate over the
window summed over the pod's series (never read `.avg` of a rate).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

from gpuwaste.detectors.registry import NoVerdict
from gpuwaste.join import ActivityReading, Allocation, ScanContext
from gpuwaste.models.cluster import PodPhase
from gpuwaste.models.findings import Confidence, Evidence
from gpuwaste.models.telemetry import GpuTelemetry, Signal, WindowStats

RATE = ":rate"


def readable(ctx: ScanContext, alloc: Allocation, name: str) -> ActivityReading | NoVerdict | None:
    """The allocation's trusted activity, a NoVerdict with its reason, or None (not running / no devices).

    Same guards as the idle detector: grace period, untrusted telemetry (stale, frozen; B12; contradicting
    signals), a missing activity signal (B04/B05: on MIG only the PROF ratios count), coverage below
    `common.min_coverage`. A pod that ended inside the window (a finished Job) held its GPUs until it ended —
    they are not free capacity then — but gets no verdict of its own: there is nothing left to act on.
    Judged once per scan and allocation; each detector gets the NoVerdict under its own `name`.
    """
    out = ctx.memo("readable", alloc, lambda: _readable(ctx, alloc))
    if isinstance(out, str):
        return NoVerdict(name, f"{alloc.pod.namespace}/{alloc.pod.name}", out)
    return out


def _readable(ctx: ScanContext, alloc: Allocation) -> ActivityReading | str | None:
    """`readable` with the reason for no verdict as a string."""
    if alloc.pod.phase is not PodPhase.RUNNING or not alloc.devices:
        return None
    started = alloc.pod.started_at or alloc.pod.created_at
    if started is not None and (ctx.eval_time - started).total_seconds() < ctx.common.pod_grace_s:
        return f"pod younger than {ctx.common.pod_grace_s}s"
    window_start = ctx.eval_time - timedelta(seconds=ctx.window_s)
    if not alloc.labelled and started is not None and started > window_start:
        # its GPUs carry no pod labels, so samples from before the pod existed cannot be told apart
        return "pod started inside the window and its GPUs carry no pod labels"
    problems = {p for d in alloc.devices if (p := ctx.device_problem(d))}
    if problems:
        return "untrusted telemetry: " + ", ".join(sorted(problems))
    act = ctx.activity(alloc.devices, alloc.pod)
    if act is None:
        return "no activity signal on its GPUs"
    if act.coverage < ctx.common.min_coverage:
        return f"coverage {act.coverage:.0%} < {ctx.common.min_coverage:.0%}"
    return act


def judged_allocations(ctx: ScanContext, name: str) -> Iterator[tuple[Allocation, ActivityReading] | NoVerdict]:
    """Every running allocation with trusted activity, or the NoVerdict that says why it cannot be judged."""
    for alloc in ctx.allocations:
        act = readable(ctx, alloc, name)
        if act is not None:
            yield act if isinstance(act, NoVerdict) else (alloc, act)


def activity_confidence(act: ActivityReading) -> Confidence:
    """HIGH with a PROF ratio and full coverage; one grade lower for GPU_UTIL (B15) or partial coverage."""
    if act.signal is Signal.GPU_UTIL:
        return Confidence.MEDIUM if act.coverage >= 0.95 else Confidence.LOW
    return Confidence.HIGH if act.coverage >= 0.95 else Confidence.MEDIUM


def lower(conf: Confidence) -> Confidence:
    """One grade lower."""
    return {Confidence.HIGH: Confidence.MEDIUM, Confidence.MEDIUM: Confidence.LOW}.get(conf, Confidence.LOW)


@dataclass(frozen=True)
class PowerReading:
    """Power of the physical GPUs behind a set of devices, each GPU counted once (B06).

    Attributes:
        avg_ratio: mean over GPUs of (window-average power ÷ power limit), 0–1.
        max_avg_10m_ratio: the highest 10-minute average power ÷ limit of any GPU.
        limit_source: "DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "DCGM_FI_DEV_POWER_MGMT_LIMIT" or "bundled catalog".
    """

    avg_w: float
    limit_w: float
    avg_ratio: float
    max_avg_10m_ratio: float
    limit_source: str
    gpus: int
    evidence: Evidence


def power_limit(ctx: ScanContext, device: GpuTelemetry) -> tuple[float, str] | None:
    """The enforced power limit of a device's physical GPU (W) and where it came from, or None.

    Order: DCGM_FI_DEV_ENFORCED_POWER_LIMIT, DCGM_FI_DEV_POWER_MGMT_LIMIT (both whole-GPU fields, read from
    the parent on MIG), else the bundled per-model limit the service put in `ctx.power_limits_w`. Once per device and scan.
    """
    return ctx.memo("power_limit", device, lambda: _power_limit(ctx, device))


def _power_limit(ctx: ScanContext, device: GpuTelemetry) -> tuple[float, str] | None:
    for sig in (Signal.POWER_LIMIT, Signal.POWER_MGMT_LIMIT):
        st = ctx.device_stats(device, sig)
        if st is not None and st.count and st.max > 0:
            return st.max, sig.value
    if device.model_name and device.model_name in ctx.power_limits_w:
        return ctx.power_limits_w[device.model_name], "bundled catalog"
    return None


def physical_gpus(devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry]) -> list[GpuTelemetry]:
    """The first device of each physical GPU UUID in `devices`, in order: MIG instances of one GPU share one power
    value (field guide B06), so power readings count each physical GPU once."""
    first: dict[str, GpuTelemetry] = {}
    for dev in devices:
        first.setdefault(dev.device.uuid, dev)
    return list(first.values())


def _physical_power_inputs(ctx: ScanContext, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry]
                           ) -> dict[str, tuple[WindowStats, float, str]] | None:
    """Physical GPU UUID → (power stats, limit W, limit source), each UUID once; None when power or a limit is missing."""
    seen: dict[str, tuple[WindowStats, float, str]] = {}
    for dev in physical_gpus(devices):
        st = ctx.device_stats(dev, Signal.POWER_USAGE)
        lim = power_limit(ctx, dev)
        if st is None or st.count == 0 or lim is None:
            return None
        seen[dev.device.uuid] = (st, lim[0], lim[1])
    return seen or None


def power_avg_ratio(ctx: ScanContext, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry]) -> float | None:
    """`physical_power(ctx, devices).avg_ratio` without building the reading's evidence; None when that reading is None."""
    seen = _physical_power_inputs(ctx, devices)
    if seen is None:
        return None
    ratios = [st.avg / lim for st, lim, _ in seen.values()]
    return sum(ratios) / len(ratios)


def physical_power(ctx: ScanContext, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry]) -> PowerReading | None:
    """Power ÷ limit over the physical GPUs of `devices`, each UUID once; None when power or a limit is missing."""
    seen = _physical_power_inputs(ctx, devices)
    if seen is None:
        return None
    ratios = [st.avg / lim for st, lim, _ in seen.values()]
    m10 = [(p if (p := ctx.peak_10m(st)) is not None else st.avg) / lim for st, lim, _ in seen.values()]
    stats = [st for st, _, _ in seen.values()]
    limits = [lim for _, lim, _ in seen.values()]
    source = sorted({src for _, _, src in seen.values()})
    avg_w = sum(s.avg for s in stats) / len(stats)
    ev = Evidence(
        signal=Signal.POWER_USAGE.value,
        unit="W",
        window_s=ctx.window_s,
        avg=round(avg_w, 3),
        p95=round(max(s.p95 for s in stats), 3),
        max=round(max(s.max for s in stats), 3),
        min=None,  # not summarised for power (models.telemetry.SUMMARY_STATS)
        max_avg_10m=round(max((ctx.peak_10m(s) or s.avg) for s in stats), 3),
        samples=sum(s.count for s in stats),
        coverage=round(min(ctx.telemetry.coverage(s) for s in stats), 4),
        note=f"{len(seen)} physical GPU(s), each counted once; limit {max(limits):g} W from {', '.join(source)}",
    )
    return PowerReading(avg_w, max(limits), sum(ratios) / len(ratios), max(m10), ", ".join(source), len(seen), ev)


def power_ratio_series(ctx: ScanContext, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry]) -> list[float | None]:
    """Per slot, mean over the physical GPUs of `devices` (each UUID once, B06) of bucket power ÷ limit; None where unknown."""
    rows: list[list[float | None]] = []
    for dev in physical_gpus(devices):
        lim = power_limit(ctx, dev)
        st = ctx.device_stats(dev, Signal.POWER_USAGE)
        if lim is None or st is None:
            return [None] * len(ctx.slots)
        rows.append([None if b is None or b.avg is None else b.avg / lim[0] for b in ctx.buckets_of(st)])
    if not rows:
        return [None] * len(ctx.slots)
    return [None if any(v is None for v in col) else sum(v for v in col if v is not None) / len(col) for col in zip(*rows, strict=True)]


def power_ratio_bounds(ctx: ScanContext, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry]) -> tuple[float, float] | None:
    """Lower and upper bounds of every value `power_ratio_series(ctx, devices)` shows: the means over the physical GPUs of
    each GPU's lowest and highest bucket power ÷ limit (widen by `join.readings.BOUND_EPS` for rounding); None when the
    series shows no value in any slot."""
    lows: list[float] = []
    highs: list[float] = []
    for dev in physical_gpus(devices):
        lim = power_limit(ctx, dev)
        bounds = ctx.avg_bounds(ctx.device_stats(dev, Signal.POWER_USAGE))
        if lim is None or bounds is None:
            return None
        if lim[0] <= 0:
            return -math.inf, math.inf  # no bound (a limit is never ≤ 0 in practice)
        lows.append(bounds[0] / lim[0])
        highs.append(bounds[1] / lim[0])
    if not lows:
        return None
    return sum(lows) / len(lows), sum(highs) / len(highs)


def stat(ctx: ScanContext, alloc: Allocation, signal: Signal) -> Evidence | None:
    """Window evidence of a DCGM signal over an allocation's devices (pod-scoped samples when labelled)."""
    return ctx.signal_evidence(alloc.devices, signal, alloc.pod)


def pod_gauge(ctx: ScanContext, namespace: str, pod: str, *names: str) -> tuple[str, WindowStats] | None:
    """The first gauge of `names` the pod exports (name, window stats), or None."""
    sig = ctx.pod_signals(namespace, pod)
    for n in names:
        st = sig.get(n)
        if st is not None and st.count > 0:
            return n, st
    return None


def pod_rate(ctx: ScanContext, namespace: str, pod: str, name: str) -> float | None:
    """Per-second rate of a counter over the window (metrics plan `<name>:rate`, `.max`), or None."""
    st = ctx.pod_signals(namespace, pod).get(name + RATE)
    if st is None:
        return None
    return st.max


def pod_evidence(ctx: ScanContext, name: str, st: WindowStats, *, unit: str, threshold: float | None = None,
                 comparison: str = "", note: str = "") -> Evidence:
    """Evidence for a pod-level gauge."""
    return Evidence(
        signal=name,
        unit=unit,
        window_s=ctx.window_s,
        avg=round(st.avg, 6),
        p95=round(st.p95, 6),
        max=round(st.max, 6),
        min=round(st.min, 6),
        max_avg_10m=None if st.max_avg_10m is None else round(st.max_avg_10m, 6),
        samples=st.count,
        coverage=round(ctx.telemetry.coverage(st), 4),
        threshold=threshold,
        comparison=comparison,
        note=note,
    )


def rate_evidence(ctx: ScanContext, name: str, value: float, *, unit: str, samples: int = 0, threshold: float | None = None,
                  comparison: str = "", note: str = "") -> Evidence:
    """Evidence for a counter's rate over the window (PromQL `rate(x[window])`)."""
    return Evidence(
        signal=f"rate({name}[{ctx.window_s}s])",
        unit=unit,
        window_s=ctx.window_s,
        avg=round(value, 6),
        samples=samples,
        coverage=1.0 if samples else 0.0,
        threshold=threshold,
        comparison=comparison,
        note=note,
    )


def pod_alloc(ctx: ScanContext, namespace: str, pod: str) -> Allocation | None:
    """The allocation of a pod, or None."""
    return ctx.allocation_of(namespace, pod)


__all__ = [
    "PowerReading",
    "activity_confidence",
    "lower",
    "physical_power",
    "pod_alloc",
    "pod_evidence",
    "pod_gauge",
    "pod_rate",
    "power_limit",
    "power_avg_ratio",
    "power_ratio_bounds",
    "power_ratio_series",
    "rate_evidence",
    "readable",
    "stat",
]

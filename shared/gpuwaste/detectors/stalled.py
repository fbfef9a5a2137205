"""Detectors: stalled GPUs — utilisation looks busy while no real work happens (e.g. a hung NCCL collective, B14)."""

from __future__ import annotations

from pydantic import Field

from gpuwaste.detectors.episodes import episode, finish, from_runs, qualifying, runs, span_seconds
from gpuwaste.detectors.readings import physical_power, power_ratio_bounds, power_ratio_series, readable
from gpuwaste.detectors.registry import DetectorOutput, NoVerdict, detector
from gpuwaste.join import BOUND_EPS, Allocation, ScanContext
from gpuwaste.models.base import SettingsModel
from gpuwaste.models.findings import Confidence, Episode, Finding, WasteKind
from gpuwaste.models.telemetry import Signal


class StalledSettings(SettingsModel):
    """Stalled: busy-looking utilisation, near-zero tensor and DRAM work, near-idle power, for long enough.

    Attributes:
        min_busy_ratio: window average of GPU_UTIL (÷ 100) or GR_ENGINE_ACTIVE (0–1) on every GPU at or above this.
        max_work_ratio: every 10-minute average of tensor and DRAM activity (0–1) at or under this ("≈ 0").
        max_power_ratio: every 10-minute average power ÷ enforced limit (0–1) at or under this (near idle).
        min_duration_s: the window (seconds) must be at least this long: shorter stalls get no verdict.
    """

    min_busy_ratio: float = Field(0.80, gt=0, le=1)
    max_work_ratio: float = Field(0.02, ge=0, le=1)
    max_power_ratio: float = Field(0.35, gt=0, le=1)
    min_duration_s: int = Field(1800, ge=60)


def _busy(ctx: ScanContext, alloc: Allocation) -> tuple[Signal, float] | None:
    """The lowest busy reading over the pod's GPUs: GPU_UTIL (not on MIG, B05) else GR_ENGINE_ACTIVE."""
    readings: list[tuple[Signal, float]] = []
    for dev in alloc.devices:
        chosen = None
        for sig in (Signal.GPU_UTIL, Signal.GR_ENGINE_ACTIVE):
            if sig is Signal.GPU_UTIL and dev.device.gpu_i_id is not None:
                continue
            st = ctx.device_stats(dev, sig, alloc.pod if (alloc.pod.namespace, alloc.pod.name) in dev.workloads else None)
            if st is not None and st.count:
                chosen = (sig, sig.to_ratio(st.avg))
                break
        if chosen is None:
            return None
        readings.append(chosen)
    return min(readings, key=lambda r: r[1])


def _may_stall(ctx: ScanContext, alloc: Allocation, settings: StalledSettings, busy_sig: Signal) -> bool:
    """False when no bucket of `_stall_flags` can be True (a proof from each series' bucket bounds, `ScanContext.avg_bounds`):
    some GPU never looks busy enough, a tensor/DRAM row never gets down to `max_work_ratio`, or power never gets down
    to `max_power_ratio` — or a row shows no value at all (unknown, never a stall)."""
    pod = alloc.pod
    for dev in alloc.devices:
        sig = Signal.GR_ENGINE_ACTIVE if dev.device.gpu_i_id is not None else busy_sig
        bounds = ctx.avg_bounds(ctx.device_stats(dev, sig, pod if (pod.namespace, pod.name) in dev.workloads else None))
        if bounds is None or sig.to_ratio(bounds[1]) < settings.min_busy_ratio:
            return False
    rows = 0
    for s in (Signal.TENSOR_ACTIVE, Signal.DRAM_ACTIVE):
        stats = [ctx.device_stats(d, s, pod if (pod.namespace, pod.name) in d.workloads else None) for d in alloc.devices]
        if not any(st is not None and st.count > 0 for st in stats):
            continue  # not a row of `_stall_flags` (its evidence is None)
        rows += 1
        lows = []
        for st in stats:
            bounds = ctx.avg_bounds(st)
            if bounds is None:
                return False
            lows.append(bounds[0])
        if sum(lows) / len(lows) > settings.max_work_ratio + BOUND_EPS:
            return False
    power = power_ratio_bounds(ctx, alloc.devices)
    return bool(rows) and power is not None and power[0] <= settings.max_power_ratio + BOUND_EPS


def _stall_flags(ctx: ScanContext, alloc: Allocation, settings: StalledSettings, busy_sig: Signal) -> list[bool | None]:
    """Per slot: True when every GPU looks busy, tensor and DRAM work ≈ 0 and power near idle; None when unknown."""
    pod = alloc.pod
    busy_rows = []
    for dev in alloc.devices:
        sig = Signal.GR_ENGINE_ACTIVE if dev.device.gpu_i_id is not None else busy_sig
        st = ctx.device_stats(dev, sig, pod if (pod.namespace, pod.name) in dev.workloads else None)
        busy_rows.append([None if b is None or b.avg is None else sig.to_ratio(b.avg) for b in ctx.buckets_of(st)])
    work_rows = [ctx.signal_series(alloc.devices, s, pod) for s in (Signal.TENSOR_ACTIVE, Signal.DRAM_ACTIVE)
                 if ctx.signal_evidence(alloc.devices, s, pod) is not None]
    power = power_ratio_series(ctx, alloc.devices)
    flags: list[bool | None] = []
    for i in range(len(ctx.slots)):
        busy = [row[i] for row in busy_rows]
        work = [row[i] for row in work_rows]
        if any(v is None for v in busy) or any(v is None for v in work) or power[i] is None or not work:
            flags.append(None)
            continue
        flags.append(min(v for v in busy if v is not None) >= settings.min_busy_ratio
                     and max(v for v in work if v is not None) <= settings.max_work_ratio
                     and (power[i] or 0.0) <= settings.max_power_ratio)
    return flags


@detector(
    "stalled",
    settings=StalledSettings,
    needs_any=(Signal.GPU_UTIL.value, Signal.GR_ENGINE_ACTIVE.value),
    optional=(Signal.TENSOR_ACTIVE.value, Signal.DRAM_ACTIVE.value, Signal.POWER_USAGE.value, Signal.POWER_LIMIT.value,
              Signal.SM_ACTIVE.value),
)
def detect_stalled(ctx: ScanContext, settings: StalledSettings) -> DetectorOutput:
    """Flag pods whose every GPU shows high utilisation but ≈ 0 tensor/DRAM work and near-idle power (B14, B15).

    Needs a busy signal (GPU_UTIL or GR_ENGINE_ACTIVE), at least one of tensor or DRAM activity, and power
    with a limit: power is corroboration only (B21), never the sole criterion. A stall over the whole window
    is one episode; with buckets, a stall that started inside the window (a training job that hangs after its
    first hour) is found as the stretch of buckets meeting all three criteria for at least `min_duration_s`.
    The stalled GPU-hours are priced as waste in full.
    """
    for alloc in ctx.allocations:
        r = readable(ctx, alloc, "stalled")
        if r is None or isinstance(r, NoVerdict):
            if r is not None:
                yield r
            continue
        subject = f"{alloc.pod.namespace}/{alloc.pod.name}"
        busy = _busy(ctx, alloc)
        if busy is None:
            continue
        sig, low = busy
        if not _may_stall(ctx, alloc, settings, sig):
            # no stalled stretch can exist (a proof); what is left needs busy GPUs whose tensor/DRAM work stays ≈ 0
            # over the window (a whole-window stall, or the no-power no-verdict) or lacks tensor/DRAM fields altogether
            if low < settings.min_busy_ratio:
                continue
            peaks = [p for s in (Signal.TENSOR_ACTIVE, Signal.DRAM_ACTIVE) if (p := ctx.evidence_peak(alloc.devices, s, alloc.pod)) is not None]
            if peaks and not all(p <= settings.max_work_ratio for p in peaks):
                continue
        busy_ev = ctx.signal_evidence(alloc.devices, sig, alloc.pod)
        assert busy_ev is not None
        work = [e for e in (ctx.signal_evidence(alloc.devices, s, alloc.pod) for s in (Signal.TENSOR_ACTIVE, Signal.DRAM_ACTIVE)) if e is not None]
        if not work:
            if low >= settings.min_busy_ratio:
                yield NoVerdict("stalled", subject, "busy utilisation but no tensor/DRAM activity fields to tell work from a stall")
            continue
        power = physical_power(ctx, alloc.devices)
        whole = (low >= settings.min_busy_ratio
                 and all((e.max_avg_10m if e.max_avg_10m is not None else e.max or 0.0) <= settings.max_work_ratio for e in work)
                 and power is not None and power.max_avg_10m_ratio <= settings.max_power_ratio)
        span = ctx.held_span(alloc)
        if whole:
            if ctx.window_s < settings.min_duration_s:
                yield NoVerdict("stalled", subject, f"window {ctx.window_s}s shorter than min_duration_s {settings.min_duration_s}s")
                continue
            episodes: tuple[Episode, ...] = (episode(ctx, span[0], span[1], alloc.share),)
        elif ctx.slots and power is not None:
            found = qualifying(ctx, runs(ctx, _stall_flags(ctx, alloc, settings, sig), span), span, settings.min_duration_s)
            if not found:
                continue
            episodes = from_runs(ctx, found, alloc.share)
        else:
            if power is None and low >= settings.min_busy_ratio and all(
                    (e.max_avg_10m if e.max_avg_10m is not None else e.max or 0.0) <= settings.max_work_ratio for e in work):
                yield NoVerdict("stalled", subject, "no power reading or power limit to corroborate a stall (B21)")
            continue
        assert power is not None
        sm = ctx.signal_evidence(alloc.devices, Signal.SM_ACTIVE, alloc.pod)
        conf = Confidence.HIGH if len(work) == 2 and power.limit_source != "bundled catalog" else Confidence.MEDIUM
        hours = sum((e.end - e.start).total_seconds() for e in episodes) / 3600
        since = "" if whole else f" since {episodes[-1].start:%H:%M}Z" if episodes[-1].ongoing else ""
        finding = Finding(
            kind=WasteKind.STALLED,
            detector="stalled",
            subject=ctx.subject_for(alloc),
            title=(f"{len(alloc.devices)} GPU(s) of {subject} look busy but do no work "
                   f"(tensor/DRAM ≈ 0, power near idle) for {hours:.1f} h{since}"),
            recommendation=("The job looks busy but is stuck (typically a hung NCCL collective or a dead rank): check its logs, "
                            "restart it, and set NCCL timeouts (TORCH_NCCL_BLOCKING_WAIT / NCCL_TIMEOUT) so a stall fails fast."),
            evidence=(busy_ev.model_copy(update={"threshold": settings.min_busy_ratio,
                                                 "comparison": f"avg ≥ {settings.min_busy_ratio:g} on every GPU" + ("" if whole else " in every stalled bucket"),
                                                 "note": "GPU_UTIL is percent" if sig is Signal.GPU_UTIL else ""}),
                      *(e.model_copy(update={"threshold": settings.max_work_ratio,
                                             "comparison": f"every 10-min avg ≤ {settings.max_work_ratio:g}" if whole
                                             else f"every stalled bucket avg ≤ {settings.max_work_ratio:g}"}) for e in work),
                      power.evidence.model_copy(update={"threshold": round(settings.max_power_ratio * power.limit_w, 3),
                                                        "comparison": f"every {'10-min' if whole else 'stalled bucket'} avg ≤ "
                                                                      f"{settings.max_power_ratio:g} × limit {power.limit_w:g} W"}),
                      *((sm,) if sm is not None else ())),
            confidence=conf,
            observed_at=ctx.eval_time,
            window_s=ctx.window_s,
            wasted_gpu_share=alloc.share,
            details={"busy_signal": sig.value, "busy_ratio": round(low, 4), "power_ratio": round(power.avg_ratio, 4),
                     "power_limit_source": power.limit_source, "stalled_hours": round(hours, 3),
                     "formula": "wasted GPUs = all GPUs held (stalled hours are never productive)"},
        )
        yield finish(ctx, finding, episodes, span_seconds(span) * r.coverage)


__all__ = ["StalledSettings", "detect_stalled"]

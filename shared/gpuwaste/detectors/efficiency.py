"""Detectors: inefficient work — high power with low SM activity, and low memory bandwidth with low compute."""

from __future__ import annotations

from decimal import Decimal

from pydantic import Field

from gpuwaste.detectors.episodes import (
    completed_episodes,
    episode,
    finish,
    minutes_text,
    qualifying,
    runs,
    span_seconds,
)
from gpuwaste.detectors.readings import (
    activity_confidence,
    judged_allocations,
    lower,
    physical_power,
    power_avg_ratio,
    power_ratio_bounds,
    power_ratio_series,
    stat,
)
from gpuwaste.detectors.registry import DetectorOutput, NoVerdict, Superseded, detector
from gpuwaste.join import BOUND_EPS, Allocation, ScanContext
from gpuwaste.models.base import SettingsModel
from gpuwaste.models.findings import Episode, Finding, WasteKind
from gpuwaste.models.telemetry import Signal

_ACTIVITY = (Signal.SM_ACTIVE.value, Signal.GR_ENGINE_ACTIVE.value, Signal.GPU_UTIL.value)
_SHARE = Decimal("0.0001")


class PowerAnomalySettings(SettingsModel):
    """Power anomaly: the board draws near its limit while the SMs do little (memory-bound or spinning).

    Attributes:
        min_power_ratio: window-average power ÷ enforced power limit (0–1) at or above which power is "high".
        max_activity_ratio: the highest 10-minute average SM activity (0–1) must stay under this.
    """

    min_power_ratio: float = Field(0.80, gt=0, le=1.5)
    max_activity_ratio: float = Field(0.20, ge=0, le=1)


class LowBandwidthSettings(SettingsModel):
    """Low memory bandwidth: neither compute-bound nor memory-bound.

    Attributes:
        max_dram_avg_10m_ratio: the highest 10-minute average DRAM activity (0–1) must stay under this.
        max_activity_p95_ratio: SM activity p95 (0–1) must stay under this (bursty work that saturates the
            SMs is not under-use).
    """

    max_dram_avg_10m_ratio: float = Field(0.30, ge=0, le=1)
    max_activity_p95_ratio: float = Field(0.50, ge=0, le=1)


@detector(
    "power_anomaly",
    settings=PowerAnomalySettings,
    needs_any=(Signal.POWER_USAGE.value,),
    optional=(*_ACTIVITY, Signal.POWER_LIMIT.value, Signal.POWER_MGMT_LIMIT.value, Signal.DRAM_ACTIVE.value),
    superseded_by=("stalled",),
)
def detect_power_anomaly(ctx: ScanContext, settings: PowerAnomalySettings) -> DetectorOutput:
    """Flag pods whose GPUs draw ≥ 80 % of their enforced power limit while SM activity stays under 20 %, for the
    window or (with buckets, not on MIG) for stretches of it.

    Power is compared with the GPU's own limit (DCGM limit field, else the bundled per-model limit) and
    never used as an idle criterion (B21). On MIG, power is a whole-GPU value counted once per physical
    GPU (B06), and the verdict needs every instance of that GPU to be low, so one tenant is not blamed
    for another's draw.
    """
    for item in judged_allocations(ctx, "power_anomaly"):
        if isinstance(item, NoVerdict):
            yield item
            continue
        alloc, act = item
        peak = act.max_avg_10m if act.max_avg_10m is not None else act.avg
        if peak >= settings.max_activity_ratio and not _may_fire(ctx, alloc, settings, power=False):
            continue  # busy over the window and in every bucket: no verdict of any kind can follow (a proof)
        subject = f"{alloc.pod.namespace}/{alloc.pod.name}"
        avg_ratio = power_avg_ratio(ctx, alloc.devices)
        if avg_ratio is None:
            if peak < settings.max_activity_ratio:
                yield NoVerdict("power_anomaly", subject, "no power reading or power limit for its GPUs")
            continue
        whole = peak < settings.max_activity_ratio and avg_ratio >= settings.min_power_ratio
        if not whole and not _may_fire(ctx, alloc, settings):
            continue  # no stretch can be reported either (a proof from the buckets' bounds)
        power = physical_power(ctx, alloc.devices)
        assert power is not None
        span = ctx.held_span(alloc)
        avg = act.avg
        if whole:
            episodes: tuple[Episode, ...] = (episode(ctx, span[0], span[1], _held_wasted(alloc.share, avg)),)
        elif ctx.slots and not any(d.device.gpu_i_id is not None for d in alloc.devices):
            activity = ctx.activity_series(alloc.devices, alloc.pod)
            watts = power_ratio_series(ctx, alloc.devices)
            broken = ctx.contradicted_slots(alloc.devices, alloc.pod)
            flags = [None if a is None or w is None or bad else (a < settings.max_activity_ratio and w >= settings.min_power_ratio)
                     for a, w, bad in zip(activity, watts, broken, strict=True)]
            found = qualifying(ctx, runs(ctx, flags, span), span)
            if not found:
                continue
            episodes = tuple(episode(ctx, r.start, r.end, _held_wasted(alloc.share, _mean([activity[i] for i in r.slots])))
                             for r in found)
            avg = _mean([activity[i] for r in found for i in r.slots])
        else:
            continue
        if any(d.device.gpu_i_id is not None for d in alloc.devices) and not _mig_siblings_low(ctx, alloc, settings):
            yield NoVerdict("power_anomaly", subject, "MIG: another instance on the same GPU is busy; board power is shared (B06)")
            continue
        used = Decimal(str(round(avg, 4)))
        wasted = (alloc.share * (Decimal(1) - used)).quantize(_SHARE)
        conf = activity_confidence(act)
        if power.limit_source == "bundled catalog":
            conf = lower(conf)
        dram = stat(ctx, alloc, Signal.DRAM_ACTIVE)
        cause = "memory-bound" if dram is not None and (dram.avg or 0) >= 0.5 else "spinning or memory-bound"
        pw = power.evidence.model_copy(update={
            "threshold": round(settings.min_power_ratio * power.limit_w, 3),
            "comparison": f"avg ≥ {settings.min_power_ratio:g} × limit {power.limit_w:g} W (ratio {power.avg_ratio:.2f})",
        })
        finding = Finding(
            kind=WasteKind.POWER_ANOMALY,
            detector="power_anomaly",
            subject=ctx.subject_for(alloc),
            title=(f"{len(alloc.devices)} GPU(s) of {subject} draw {power.avg_ratio:.0%} of their power limit "
                   f"at {act.avg:.0%} {act.signal.words} ({cause})" + ("" if whole else f" in stretches totalling {minutes_text(episodes)}")),
            recommendation=("The GPU burns power without computing: profile the job (Nsight Systems) for busy-wait loops, "
                            "host↔device copies or memory-bound kernels; fix the code or batch more work per kernel."),
            evidence=(act.evidence(ctx.window_s, threshold=settings.max_activity_ratio,
                                   comparison=f"highest 10-min avg < {settings.max_activity_ratio:g}"),
                      pw, *(e for e in (dram,) if e is not None)),
            confidence=conf,
            observed_at=ctx.eval_time,
            window_s=ctx.window_s,
            wasted_gpu_share=wasted,
            details={"activity_signal": act.signal.value, "power_ratio": round(power.avg_ratio, 4),
                     "power_limit_w": power.limit_w, "power_limit_source": power.limit_source,
                     "formula": "wasted GPUs = GPUs held × (1 − average activity)", "cause": cause},
        )
        yield finish(ctx, finding, episodes, span_seconds(span) * act.coverage)


def _may_fire(ctx: ScanContext, alloc: Allocation, settings: PowerAnomalySettings, *, power: bool = True) -> bool:
    """False when no bucket can be flagged (low activity and high power in the same bucket): no buckets, a MIG
    allocation (judged over the whole window only), activity that never gets under `max_activity_ratio` or (with
    `power`) power that never reaches `min_power_ratio` (bounds: `ScanContext.activity_floor`, `readings.power_ratio_bounds`)."""
    if not ctx.slots or any(d.device.gpu_i_id is not None for d in alloc.devices):
        return False
    floor = ctx.activity_floor(alloc.devices, alloc.pod)
    if floor is None or floor >= settings.max_activity_ratio + BOUND_EPS:
        return False
    if not power:
        return True
    bounds = power_ratio_bounds(ctx, alloc.devices)
    return bounds is not None and bounds[1] >= settings.min_power_ratio - BOUND_EPS


def _held_wasted(share: Decimal, activity: float) -> Decimal:
    return (share * (Decimal(1) - Decimal(str(round(activity, 4))))).quantize(_SHARE)


def _mean(values: list[float | None]) -> float:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else 0.0


def _mig_siblings_low(ctx: ScanContext, alloc: Allocation, settings: PowerAnomalySettings) -> bool:
    uuids = {d.device.uuid for d in alloc.devices}
    siblings = [g for g in ctx.telemetry.gpus if g.device.uuid in uuids and g.device.gpu_i_id is not None]
    reading = ctx.activity(siblings)
    if reading is None:
        return False
    peak = reading.max_avg_10m if reading.max_avg_10m is not None else reading.max
    return peak < settings.max_activity_ratio


@detector(
    "low_memory_bandwidth",
    settings=LowBandwidthSettings,
    needs_any=(Signal.DRAM_ACTIVE.value,),
    optional=_ACTIVITY,
    superseded_by=("idle_allocation", "underused_allocation", "stalled", "power_anomaly", "cpu_bound",
                   "inference_idle", "wrong_hardware"),
)
def detect_low_memory_bandwidth(ctx: ScanContext, settings: LowBandwidthSettings) -> DetectorOutput:
    """Flag pods whose DRAM activity stays under 30 % (every 10-min average) while SM activity stays low."""
    for item in judged_allocations(ctx, "low_memory_bandwidth"):
        if isinstance(item, NoVerdict):
            yield item
            continue
        alloc, act = item
        if act.p95 >= settings.max_activity_p95_ratio:
            continue
        dram = stat(ctx, alloc, Signal.DRAM_ACTIVE)
        if dram is None:
            yield NoVerdict("low_memory_bandwidth", f"{alloc.pod.namespace}/{alloc.pod.name}", "no DCGM_FI_PROF_DRAM_ACTIVE")
            continue
        dram_peak = dram.max_avg_10m if dram.max_avg_10m is not None else (dram.avg or 0.0)
        if dram_peak >= settings.max_dram_avg_10m_ratio:
            continue
        busiest = max(act.avg, dram.avg or 0.0)
        wasted = (alloc.share * (Decimal(1) - Decimal(str(round(busiest, 4))))).quantize(_SHARE)
        key = (alloc.pod.namespace, alloc.pod.name, None)
        episodes = completed_episodes(ctx, alloc.pod.namespace, alloc.pod.name, wasted)
        if ctx.superseded_now("low_memory_bandwidth", key, episodes):
            yield Superseded("low_memory_bandwidth", key, episodes)  # an idle, under-used… finding already covers it
            continue
        subject = f"{alloc.pod.namespace}/{alloc.pod.name}"
        yield Finding(
            kind=WasteKind.LOW_MEMORY_BANDWIDTH,
            detector="low_memory_bandwidth",
            subject=ctx.subject_for(alloc),
            title=f"{len(alloc.devices)} GPU(s) of {subject}: memory bandwidth {dram.avg or 0:.0%}, {act.signal.words} {act.avg:.0%}",
            recommendation=("Neither the GPU's compute nor its memory bandwidth is used much: a GPU with less HBM bandwidth "
                            "(e.g. L40S/L4 instead of H100/A100) or a MIG slice would do the same work for less."),
            evidence=(dram.model_copy(update={"threshold": settings.max_dram_avg_10m_ratio,
                                              "comparison": f"highest 10-min avg < {settings.max_dram_avg_10m_ratio:g}"}),
                      act.evidence(ctx.window_s, threshold=settings.max_activity_p95_ratio,
                                   comparison=f"p95 < {settings.max_activity_p95_ratio:g}")),
            confidence=lower(activity_confidence(act)),
            observed_at=ctx.eval_time,
            window_s=ctx.window_s,
            wasted_gpu_share=wasted,
            details={"activity_signal": act.signal.value, "dram_avg_ratio": dram.avg,
                     "formula": "wasted GPUs = GPUs held × (1 − max(SM avg, DRAM avg))"},
        )

"""Detectors: idle and under-used GPU allocations (a running pod holds GPUs that do little or no work)."""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

from pydantic import Field

from gpuwaste.detectors.episodes import episode, finish, from_runs, minutes_text, qualifying, runs, span_seconds
from gpuwaste.detectors.readings import activity_confidence, judged_allocations
from gpuwaste.detectors.registry import DetectorOutput, NoVerdict, Superseded, detector
from gpuwaste.join import BOUND_EPS, ActivityReading, Allocation, ScanContext
from gpuwaste.models.base import SettingsModel
from gpuwaste.models.findings import Episode, Evidence, Finding, IdleMode, WasteKind
from gpuwaste.models.telemetry import Signal

_ACTIVITY = tuple(s.value for s in (Signal.SM_ACTIVE, Signal.GR_ENGINE_ACTIVE, Signal.GPU_UTIL))
_OPTIONAL = (Signal.FB_USED.value, Signal.POWER_USAGE.value)
BATCH_KINDS = frozenset({"Job", "CronJob", "PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "JobSet", "RayJob", "Workflow"})
INFERENCE_KINDS = frozenset({"InferenceService", "ServingRuntime", "LeaderWorkerSet", "RayService"})
INFERENCE_IMAGES = ("vllm", "text-generation-inference", "tritonserver", "sglang", "tensorrt-llm", "kserve")
NOTEBOOK_KINDS = frozenset({"Notebook", "StatefulSet"})


class IdleSettings(SettingsModel):
    """Idle allocation: activity stays under `max_activity_ratio` over the window.

    Attributes:
        max_activity_ratio: ratio 0–1 (0.05 = 5 %) that the chosen statistic and every
            10-minute average must stay under.
        statistic: which window statistic is compared ("p95" tolerates a few stray samples).
        held_memory_mib: framebuffer use (MiB) above which an idle GPU counts as "idle-held".
        max_burst_ratio: ratio 0–1; with buckets wider than 10 minutes (windows over 4 h) a bucket is idle only when
            its highest sample also stays under this (a burst above it is work, however low the bucket's average).
    """

    max_activity_ratio: float = Field(0.05, ge=0, le=1)
    statistic: Literal["p95", "max", "avg"] = "p95"
    held_memory_mib: float = Field(1024, ge=0)
    max_burst_ratio: float = Field(0.20, ge=0, le=1)


#: Buckets wider than this (s) are checked for bursts before they count as idle.
COARSE_BUCKET_S = 600


class UnderusedSettings(SettingsModel):
    """Under-used allocation: every 10-minute average of SM activity stays under `max_avg_10m_ratio`.

    Attributes:
        max_avg_10m_ratio: ratio 0–1 (0.20 = 20 %); compared with the highest 10-minute average.
    """

    max_avg_10m_ratio: float = Field(0.20, ge=0, le=1)


def _fmt_share(share: Decimal) -> str:
    return f"{share.normalize():f}" if share == share.to_integral() else f"{share.quantize(Decimal('0.0001'))}"


def idle_mode(ctx: ScanContext, alloc: Allocation) -> IdleMode:
    """Class an idle allocation: batch (Job-like owner), inference (serving stack), else idle-held."""
    pod = alloc.pod
    if pod.workload.kind in BATCH_KINDS or any(r.kind == "Job" for r in pod.owner_refs):
        return IdleMode.BATCH
    images = " ".join(pod.container_images).lower()
    has_inference_metrics = any(k.startswith(("vllm:", "tgi_", "nv_inference")) for k in ctx.pod_signals(pod.namespace, pod.name))
    if pod.workload.kind in INFERENCE_KINDS or has_inference_metrics or any(i in images for i in INFERENCE_IMAGES):
        return IdleMode.INFERENCE
    return IdleMode.IDLE_HELD


def _supporting(ctx: ScanContext, alloc: Allocation) -> list[Evidence]:
    out = []
    for sig in (Signal.FB_USED, Signal.POWER_USAGE, Signal.TENSOR_ACTIVE, Signal.DRAM_ACTIVE):
        ev = ctx.signal_evidence(alloc.devices, sig, alloc.pod)
        if ev is not None:
            out.append(ev)
    return out


def is_idle(act: ActivityReading, settings: IdleSettings) -> bool:
    """True when the reading meets the idle criterion of `settings`."""
    value = {"p95": act.p95, "max": act.max, "avg": act.avg}[settings.statistic]
    sustained = act.max_avg_10m is None or act.max_avg_10m < settings.max_activity_ratio
    return value < settings.max_activity_ratio and sustained


def idle_episodes(ctx: ScanContext, alloc: Allocation, act: ActivityReading, settings: IdleSettings) -> tuple[Episode, ...]:
    """The idle stretches of an allocation's held span.

    Idle over the whole span by the window criterion (`is_idle`: tolerates a few stray samples) → one episode
    over the span. Otherwise, with buckets, every stretch of at least `common.min_episode_s` whose buckets all
    average under the threshold (a job that went idle after its first hour); a bucket whose profiling ratio GPU_UTIL
    and power both contradict is unknown, never idle.
    """
    span = ctx.held_span(alloc)
    coarse = bool(ctx.slots) and (ctx.telemetry.bucket_s or 0) > COARSE_BUCKET_S
    if is_idle(act, settings) and not coarse:
        return (episode(ctx, span[0], span[1], alloc.share),)
    if not ctx.slots:
        return ()
    floor = ctx.activity_floor(alloc.devices, alloc.pod)
    if floor is None or floor >= settings.max_activity_ratio + BOUND_EPS:
        return ()  # no bucket can read idle (a proof from the buckets' bounds: `ScanContext.activity_floor`)
    series = ctx.activity_series(alloc.devices, alloc.pod)
    broken = ctx.contradicted_slots(alloc.devices, alloc.pod)
    flags = [None if v is None or bad else v < settings.max_activity_ratio for v, bad in zip(series, broken, strict=True)]
    if coarse:
        # a bucket wider than 10 minutes can average under the threshold around real bursts: it is idle only when
        # its highest sample stays under the burst ceiling too, so a coarser (longer) window never calls idle what a
        # finer (shorter) one saw working
        peaks = ctx.activity_series(alloc.devices, alloc.pod, peak=True)
        flags = [f and p is not None and p < settings.max_burst_ratio if f is not None else None
                 for f, p in zip(flags, peaks, strict=True)]
    found = qualifying(ctx, runs(ctx, flags, span), span)
    return from_runs(ctx, found, alloc.share)


@detector("idle_allocation", settings=IdleSettings, needs_any=_ACTIVITY, optional=_OPTIONAL, superseded_by=("orphaned", "stalled"))
def detect_idle_allocation(ctx: ScanContext, settings: IdleSettings) -> DetectorOutput:
    """Flag running pods whose GPUs stayed under the idle activity threshold, for the whole window or long stretches of it."""
    for item in judged_allocations(ctx, "idle_allocation"):
        if isinstance(item, NoVerdict):
            yield item
            continue
        alloc, act = item
        episodes = idle_episodes(ctx, alloc, act, settings)
        if not episodes:
            continue
        whole = is_idle(act, settings)
        mode = idle_mode(ctx, alloc)
        support = _supporting(ctx, alloc)
        fb = next((e for e in support if e.signal == Signal.FB_USED.value), None)
        if mode is IdleMode.IDLE_HELD and fb is not None and (fb.avg or 0) < settings.held_memory_mib:
            note = "no framebuffer memory held either: the GPU is allocated but unused"
        else:
            note = ""
        gpus = len(alloc.devices)
        pct = settings.max_activity_ratio * 100
        span = ctx.held_span(alloc)
        comparison = (f"{settings.statistic} < {settings.max_activity_ratio} and every 10-min avg < {settings.max_activity_ratio} ({pct:g} %)"
                      if whole else f"every {ctx.telemetry.bucket_s}s bucket avg < {settings.max_activity_ratio} ({pct:g} %) "
                                    f"for ≥ {ctx.common.min_episode_s // 60} min")
        finding = Finding(
            kind=WasteKind.IDLE,
            detector="idle_allocation",
            subject=ctx.subject_for(alloc),
            title=(f"{gpus} GPU{'' if gpus == 1 else 's'} held by {alloc.pod.namespace}/{alloc.pod.name} idle for "
                   f"{minutes_text(episodes)}"),
            recommendation=_idle_advice(mode),
            evidence=(act.evidence(ctx.window_s, threshold=settings.max_activity_ratio, comparison=comparison), *support),
            confidence=activity_confidence(act),
            idle_mode=mode,
            observed_at=ctx.eval_time,
            window_s=ctx.window_s,
            wasted_gpu_share=alloc.share,
            details={"activity_signal": act.signal.value, "attribution": alloc.attribution.value, "note": note, **allocation_details(alloc)},
        )
        yield finish(ctx, finding, episodes, span_seconds(span) * act.coverage)


def allocation_details(alloc: Allocation) -> dict[str, str]:
    """How the pod holds its share, and whose activity the verdict reads (issue 11 §4): "per pod" when the
    exporter reports the pod's own series, else "device-level, not attributable" (HAMi, KAI fractions, shared
    DRA claims, time-slicing: every sharer sees the whole device's activity)."""
    out = {"mechanism": alloc.mechanism,
           "activity_scope": "per pod" if alloc.per_pod_activity else "device-level, not attributable"}
    if alloc.note:
        out["allocation"] = alloc.note
    return out


def _idle_advice(mode: IdleMode) -> str:
    if mode is IdleMode.BATCH:
        return "The job holds its GPUs without computing: end it when the run is over, or let it release GPUs between runs."
    if mode is IdleMode.INFERENCE:
        return "The model is loaded but serves no traffic: scale the deployment to zero or share the GPU (MIG/time-slicing)."
    return "The pod holds the GPU without using it: stop it, scale it to zero, or move the work to a shared GPU."


@detector(
    "underused_allocation",
    settings=UnderusedSettings,
    needs_any=_ACTIVITY,
    optional=_OPTIONAL,
    superseded_by=("idle_allocation", "stalled", "power_anomaly", "cpu_bound", "wrong_hardware", "inference_idle", "orphaned"),
)
def detect_underused_allocation(ctx: ScanContext, settings: UnderusedSettings) -> DetectorOutput:
    """Flag running pods whose every 10-minute average activity stayed under 20 % (not idle), for the window or long stretches."""
    for item in judged_allocations(ctx, "underused_allocation"):
        if isinstance(item, NoVerdict):
            yield item
            continue
        alloc, act = item
        span = ctx.held_span(alloc)
        peak = act.max_avg_10m if act.max_avg_10m is not None else act.avg
        whole = peak < settings.max_avg_10m_ratio
        avg = act.avg
        if whole:
            episodes: tuple[Episode, ...] = (episode(ctx, span[0], span[1], _wasted(alloc.share, avg)),)
        elif ctx.slots:
            floor = ctx.activity_floor(alloc.devices, alloc.pod)
            if floor is None or floor >= settings.max_avg_10m_ratio + BOUND_EPS:
                continue  # no bucket can read under-used (a proof from the buckets' bounds)
            series = ctx.activity_series(alloc.devices, alloc.pod)
            broken = ctx.contradicted_slots(alloc.devices, alloc.pod)
            flags = [None if v is None or bad else v < settings.max_avg_10m_ratio for v, bad in zip(series, broken, strict=True)]
            found = qualifying(ctx, runs(ctx, flags, span), span)
            if not found:
                continue
            episodes = tuple(episode(ctx, r.start, r.end, _wasted(alloc.share, _mean([series[i] for i in r.slots]))) for r in found)
            avg = _mean([series[i] for r in found for i in r.slots])
        else:
            continue
        key = (alloc.pod.namespace, alloc.pod.name, None)
        if ctx.superseded_now("underused_allocation", key, episodes):
            yield Superseded("underused_allocation", key, episodes)  # an idle finding already covers it
            continue
        used = Decimal(str(round(avg, 4)))
        wasted = _wasted(alloc.share, avg)
        comparison = (f"highest 10-min avg < {settings.max_avg_10m_ratio} ({settings.max_avg_10m_ratio * 100:g} %)" if whole
                      else f"every {ctx.telemetry.bucket_s}s bucket avg < {settings.max_avg_10m_ratio} for ≥ {ctx.common.min_episode_s // 60} min")
        finding = Finding(
            kind=WasteKind.UNDERUSED,
            detector="underused_allocation",
            subject=ctx.subject_for(alloc),
            title=f"{len(alloc.devices)} GPU(s) of {alloc.pod.namespace}/{alloc.pod.name} at {avg:.0%} {act.signal.words}"
                  + ("" if whole else f" for {minutes_text(episodes)}"),
            recommendation="Pack more work onto fewer GPUs, batch requests, or move to a smaller GPU or MIG slice.",
            evidence=(act.evidence(ctx.window_s, threshold=settings.max_avg_10m_ratio, comparison=comparison), *_supporting(ctx, alloc)),
            confidence=activity_confidence(act),
            observed_at=ctx.eval_time,
            window_s=ctx.window_s,
            wasted_gpu_share=wasted,
            details={"activity_signal": act.signal.value, "activity_avg_ratio": round(avg, 6),
                     "wasted_share_formula": f"{_fmt_share(alloc.share)} GPU held × (1 − {used} average activity) = {wasted} GPU",
                     "attribution": alloc.attribution.value, **allocation_details(alloc)},
        )
        yield finish(ctx, finding, episodes, span_seconds(span) * act.coverage)


def _wasted(share: Decimal, activity: float) -> Decimal:
    return (share * (Decimal(1) - Decimal(str(round(activity, 4))))).quantize(Decimal("0.0001"))


def _mean(values: list[float | None]) -> float:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else 0.0

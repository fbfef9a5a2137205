"""Detectors: CPU-bound GPU starvation — the GPU waits on a pod whose CPU is throttled at its limit."""

from __future__ import annotations

from decimal import Decimal

from pydantic import Field

from gpuwaste.detectors.readings import activity_confidence, judged_allocations, pod_rate, rate_evidence
from gpuwaste.detectors.registry import DetectorOutput, NoVerdict, detector
from gpuwaste.join import ScanContext
from gpuwaste.models.base import SettingsModel
from gpuwaste.models.findings import Finding, WasteKind
from gpuwaste.models.telemetry import Signal

CPU_USAGE = "container_cpu_usage_seconds_total"
CFS_THROTTLED = "container_cpu_cfs_throttled_periods_total"
CFS_PERIODS = "container_cpu_cfs_periods_total"


class CpuBoundSettings(SettingsModel):
    """CPU-bound starvation.

    Attributes:
        max_activity_avg_ratio: GPU activity window average (0–1) under this counts as "low or spiky".
        min_throttled_ratio: throttled CFS periods ÷ all CFS periods over the window (0–1) at or above this
            means the pod's CPU sits at its limit.
        min_limit_use_ratio: CPU cores used ÷ the pod's CPU limit (Kubernetes API) at or above this (0–1)
            also means the CPU sits at its limit (when throttling counters are not scraped).
    """

    max_activity_avg_ratio: float = Field(0.50, gt=0, le=1)
    min_throttled_ratio: float = Field(0.25, gt=0, le=1)
    min_limit_use_ratio: float = Field(0.90, gt=0, le=1)


@detector(
    "cpu_bound",
    settings=CpuBoundSettings,
    needs_any=(CFS_THROTTLED + ":rate",),
    optional=(CFS_PERIODS + ":rate", CPU_USAGE + ":rate", Signal.SM_ACTIVE.value, Signal.GR_ENGINE_ACTIVE.value),
)
def detect_cpu_bound(ctx: ScanContext, settings: CpuBoundSettings) -> DetectorOutput:
    """Flag pods whose GPU activity is low while their CPU sits at its limit (CFS throttling ≥ 25 % of periods, or usage ≥ 90 % of the limit).

    Throttling is `rate(container_cpu_cfs_throttled_periods_total) ÷ rate(container_cpu_cfs_periods_total)`
    over the window (cAdvisor, summed over the pod's containers). A pod without a CPU limit is never
    throttled, so it gets no verdict rather than a guess.
    """
    if CFS_THROTTLED not in ctx.telemetry.metrics_present and CPU_USAGE not in ctx.telemetry.metrics_present:
        return  # cAdvisor not scraped: `gpuwaste doctor` says so; no per-pod noise
    for item in judged_allocations(ctx, "cpu_bound"):
        if isinstance(item, NoVerdict):
            yield item
            continue
        alloc, act = item
        if act.avg >= settings.max_activity_avg_ratio:
            continue
        ns, name = alloc.pod.namespace, alloc.pod.name
        throttled = pod_rate(ctx, ns, name, CFS_THROTTLED)
        periods = pod_rate(ctx, ns, name, CFS_PERIODS)
        usage = pod_rate(ctx, ns, name, CPU_USAGE)
        limit = alloc.pod.cpu_limit_cores
        ratio = throttled / periods if throttled is not None and periods else None
        limit_use = usage / limit if usage is not None and limit else None
        if ratio is None and limit_use is None:
            yield NoVerdict("cpu_bound", f"{ns}/{name}", "no cAdvisor CFS throttling rates for the pod, and no CPU usage against a CPU limit")
            continue
        throttled_hard = ratio is not None and ratio >= settings.min_throttled_ratio
        at_limit = limit_use is not None and limit_use >= settings.min_limit_use_ratio
        if not (throttled_hard or at_limit):
            continue
        used = Decimal(str(round(act.avg, 4)))
        wasted = (alloc.share * (Decimal(1) - used)).quantize(Decimal("0.0001"))
        ev = [act.evidence(ctx.window_s, threshold=settings.max_activity_avg_ratio, comparison=f"avg < {settings.max_activity_avg_ratio:g}")]
        if ratio is not None:
            ev.append(rate_evidence(ctx, f"{CFS_THROTTLED} ÷ {CFS_PERIODS}", ratio, unit="ratio", threshold=settings.min_throttled_ratio,
                                    comparison=f"≥ {settings.min_throttled_ratio:g}", note=f"{throttled:.3f} throttled of {periods:.3f} periods per second"))
        if usage is not None:
            note = f"CPU cores used by the pod's containers; limit {limit:g} cores" if limit else "CPU cores used by the pod's containers; no CPU limit"
            ev.append(rate_evidence(ctx, CPU_USAGE, usage, unit="cores", note=note,
                                    threshold=None if not limit else limit * settings.min_limit_use_ratio,
                                    comparison="" if not limit else f"≥ {settings.min_limit_use_ratio:g} × limit"))
        yield Finding(
            kind=WasteKind.CPU_BOUND,
            detector="cpu_bound",
            subject=ctx.subject_for(alloc),
            title=(f"{len(alloc.devices)} GPU(s) of {ns}/{name} starve at {act.avg:.0%} {act.signal.words}: "
                   + (f"CPU throttled {ratio:.0%} of the time" if throttled_hard and ratio is not None
                      else f"CPU at {limit_use:.0%} of its {limit:g}-core limit")),
            recommendation=("The GPU waits for its CPU: raise the pod's CPU limit (or remove it), add data-loader workers, "
                            "pre-process data offline, or pin the loader to more cores."),
            evidence=tuple(ev),
            confidence=activity_confidence(act),
            observed_at=ctx.eval_time,
            window_s=ctx.window_s,
            wasted_gpu_share=wasted,
            details={"activity_signal": act.signal.value, "throttled_ratio": None if ratio is None else round(ratio, 4),
                     "cpu_limit_cores": limit, "cpu_limit_use_ratio": None if limit_use is None else round(limit_use, 4),
                     "cpu_cores_used": None if usage is None else round(usage, 3),
                     "formula": "wasted GPUs = GPUs held × (1 − average activity)"},
        )

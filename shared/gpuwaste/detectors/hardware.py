"""Detectors: wrong hardware — peak memory and activity over a long look-back fit a smaller GPU or MIG slice.

The detector states the demand (memory per GPU with headroom, compute as a share of the current GPU);
the pricing step (`pricing/hardware_fit.py`) picks the cheapest fitting GPU model or MIG profile from the
catalog and price book and prices the USD/day difference. Inference servers pre-allocate memory (vLLM
reserves `--gpu-memory-utilization` of the GPU at start-up, B16), so for them framebuffer use is not
demand: the demand is the model weights plus the KV cache actually used.
"""

from __future__ import annotations

import re
from decimal import Decimal

from pydantic import Field

from gpuwaste.detectors.readings import judged_allocations, pod_gauge
from gpuwaste.detectors.registry import DetectorOutput, NoVerdict, detector
from gpuwaste.join import Allocation, ScanContext
from gpuwaste.models.base import SettingsModel
from gpuwaste.models.findings import Confidence, Evidence, Finding, WasteKind
from gpuwaste.models.telemetry import Signal
from gpuwaste.people import duration

KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_ARG = r"--{name}(?:=|\s+)(\S+)"


class WrongHardwareSettings(SettingsModel):
    """Wrong hardware.

    Attributes:
        lookback_s: the window (seconds) the verdict needs: a week by default, so weekly peaks count. Scans with
            a shorter window give no verdict; run this detector from a scan with `--window 7d` (see docs/catalogue.md).
        max_activity_ratio: the highest 10-minute average activity (0–1) must stay under this.
        memory_headroom: added to the peak memory demand (0.2 = 20 %).
        max_memory_fit: demand with headroom must be at most this share of the current GPU's memory.
        weights_annotation: pod annotation giving an inference server's model weights in MiB (all GPUs together).
        default_gpu_memory_utilization: vLLM's default `--gpu-memory-utilization` when the args do not set it.
    """

    lookback_s: int = Field(7 * 86400, ge=600)
    max_activity_ratio: float = Field(0.50, gt=0, le=1)
    memory_headroom: float = Field(0.20, ge=0, le=2)
    max_memory_fit: float = Field(0.50, gt=0, le=1)
    weights_annotation: str = "gpuwaste.io/model-weights-mib"
    default_gpu_memory_utilization: float = Field(0.90, gt=0, le=1)


def _arg(args: tuple[str, ...], name: str) -> str | None:
    for a in args:
        m = re.search(_ARG.format(name=re.escape(name)), a)
        if m:
            return m.group(1)
    return None


def is_vllm(ctx: ScanContext, alloc: Allocation) -> bool:
    """True when the pod runs vLLM (image, command line, or `vllm:` metrics)."""
    pod = alloc.pod
    text = " ".join(pod.container_images + pod.container_args).lower()
    return "vllm" in text or any(k.startswith("vllm:") for k in ctx.pod_signals(pod.namespace, pod.name))


def _device_memory_mib(ctx: ScanContext, alloc: Allocation) -> float | None:
    used = ctx.signal_evidence(alloc.devices, Signal.FB_USED, alloc.pod)
    free = ctx.signal_evidence(alloc.devices, Signal.FB_FREE, alloc.pod)
    if used is not None and free is not None and used.avg is not None and free.avg is not None:
        return used.avg + free.avg
    if alloc.node is not None and alloc.node.gpu_memory_mib:
        return float(alloc.node.gpu_memory_mib)
    return None


def _demand(ctx: ScanContext, alloc: Allocation, s: WrongHardwareSettings, total: float) -> tuple[float, str, list[Evidence]] | str:
    """Peak memory demand per GPU (MiB, without headroom), its basis and evidence; or why it is unknown."""
    fb = ctx.signal_evidence(alloc.devices, Signal.FB_USED, alloc.pod)
    if not is_vllm(ctx, alloc):
        if fb is None or fb.max is None:
            return "no DCGM_FI_DEV_FB_USED for its GPUs"
        return fb.max, "peak framebuffer use", [fb.model_copy(update={"comparison": "peak = demand"})]
    pod = alloc.pod
    weights = pod.annotations.get(s.weights_annotation)
    if weights is None:
        return (f"inference server pre-allocates GPU memory (B16): framebuffer use is not demand; set the pod annotation "
                f"{s.weights_annotation} to the model's weight size to judge its hardware")
    try:
        weights_mib = float(weights)
    except ValueError:
        return f"annotation {s.weights_annotation}={weights!r} is not a number of MiB"
    tp = int(_arg(pod.container_args, "tensor-parallel-size") or _arg(pod.container_args, "tp") or 1)
    util = float(_arg(pod.container_args, "gpu-memory-utilization") or s.default_gpu_memory_utilization)
    per_gpu_weights = weights_mib / max(1, tp)
    pool = max(0.0, util * total - per_gpu_weights)
    kv = pod_gauge(ctx, pod.namespace, pod.name, *KV_USAGE)
    if kv is None:
        return "vLLM KV-cache usage (vllm:kv_cache_usage_perc) not scraped: KV demand unknown"
    kv_name, kv_st = kv
    demand = per_gpu_weights + kv_st.max * pool
    ev = [
        Evidence(signal=kv_name, unit="ratio", window_s=ctx.window_s, avg=round(kv_st.avg, 6), max=round(kv_st.max, 6),
                 samples=kv_st.count, coverage=round(ctx.telemetry.coverage(kv_st), 4), note="peak KV-cache use of the reserved pool"),
        Evidence(signal="vllm_args", unit="MiB", window_s=ctx.window_s, avg=round(per_gpu_weights, 1),
                 note=(f"weights {weights_mib:g} MiB ÷ tensor-parallel {tp}; --gpu-memory-utilization {util:g} reserves "
                       f"{util * total:.0f} MiB, KV pool {pool:.0f} MiB; --max-model-len {_arg(pod.container_args, 'max-model-len') or 'default'}")),
    ]
    if fb is not None:
        ev.append(fb.model_copy(update={"note": "pre-allocated by vLLM: not demand (B16)"}))
    return demand, "weights + peak KV cache (vLLM)", ev


@detector(
    "wrong_hardware",
    settings=WrongHardwareSettings,
    needs_any=(Signal.FB_USED.value, *KV_USAGE),
    optional=(Signal.FB_FREE.value, Signal.SM_ACTIVE.value, Signal.GR_ENGINE_ACTIVE.value, Signal.GPU_UTIL.value),
    superseded_by=("idle_allocation", "stalled", "inference_idle", "orphaned"),
)
def detect_wrong_hardware(ctx: ScanContext, settings: WrongHardwareSettings) -> DetectorOutput:
    """Flag pods whose peak memory (with headroom) and peak activity over the look-back fit a much smaller GPU."""
    if ctx.window_s < settings.lookback_s:
        yield NoVerdict("wrong_hardware", ctx.cluster.cluster,
                        f"the {duration(ctx.window_s)} window is shorter than the {duration(settings.lookback_s)} look-back "
                        f"(needs {settings.lookback_s // 86400 or 1} day(s) of telemetry: a daily scan of Prometheus over that look-back)")
        return
    for item in judged_allocations(ctx, "wrong_hardware"):
        if isinstance(item, NoVerdict):
            yield item
            continue
        alloc, act = item
        subject = f"{alloc.pod.namespace}/{alloc.pod.name}"
        peak = act.max_avg_10m if act.max_avg_10m is not None else act.max
        if peak >= settings.max_activity_ratio:
            continue
        total = _device_memory_mib(ctx, alloc)
        if total is None:
            yield NoVerdict("wrong_hardware", subject, "GPU memory size unknown (no FB_FREE and no GFD gpu.memory label)")
            continue
        demand = _demand(ctx, alloc, settings, total)
        if isinstance(demand, str):
            yield NoVerdict("wrong_hardware", subject, demand)
            continue
        need_mib, basis, mem_ev = demand
        need = need_mib * (1 + settings.memory_headroom)
        if need > settings.max_memory_fit * total:
            continue
        compute = min(1.0, peak * (1 + settings.memory_headroom))
        dev = alloc.devices[0]
        yield Finding(
            kind=WasteKind.WRONG_HARDWARE,
            detector="wrong_hardware",
            subject=ctx.subject_for(alloc),
            title=(f"{subject} needs {need / 1024:.1f} GiB and {peak:.0%} of its {dev.model_name or 'GPU'} "
                   f"({total / 1024:.0f} GiB): a smaller GPU or MIG slice fits"),
            recommendation=("Move the workload to the cheapest fitting option named in the cost (a smaller GPU model or a MIG "
                            "slice); keep the headroom shown."),
            evidence=(*mem_ev,
                      Evidence(signal="memory_demand", unit="MiB", window_s=ctx.window_s, avg=round(need, 1),
                               threshold=round(settings.max_memory_fit * total, 1),
                               comparison=f"{basis} × (1 + {settings.memory_headroom:g}) ≤ {settings.max_memory_fit:g} × {total:.0f} MiB"),
                      act.evidence(ctx.window_s, threshold=settings.max_activity_ratio,
                                   comparison=f"highest 10-min avg < {settings.max_activity_ratio:g}")),
            confidence=Confidence.MEDIUM if act.signal is not Signal.GPU_UTIL else Confidence.LOW,
            observed_at=ctx.eval_time,
            window_s=ctx.window_s,
            wasted_gpu_share=Decimal(0),
            details={
                "required_memory_mib": round(need, 1),
                "required_compute_ratio": round(compute, 4),
                "current_memory_mib": round(total, 1),
                "current_mig_profile": dev.mig_profile,
                "gpus": len(alloc.devices),
                "demand_basis": basis,
                "lookback_s": ctx.window_s,
                "formula": "wasted GPUs = GPUs held × (1 − cheapest fitting $/GPU-h ÷ current $/GPU-h); set by pricing",
            },
        )

"""Detectors: inference servers — KV-cache pressure (mis-sized) and inference idle (model loaded, no traffic).

Reads the pod-level serving metrics of `sources/metrics_plan/plan.py` (vLLM, TGI, Triton). Both vLLM KV-cache
gauge names are accepted: `vllm:kv_cache_usage_perc` and the deprecated `vllm:gpu_cache_usage_perc` (B16);
both are ratios 0–1 despite the name. Counters are read as window rates (`<name>:rate`, `.max`).
"""

from __future__ import annotations

from decimal import Decimal

from pydantic import Field

from gpuwaste.detectors.readings import pod_evidence, pod_gauge, pod_rate, rate_evidence
from gpuwaste.detectors.registry import DetectorOutput, NoVerdict, detector
from gpuwaste.join import Allocation, ScanContext
from gpuwaste.models.base import SettingsModel
from gpuwaste.models.cluster import PodPhase
from gpuwaste.models.findings import Confidence, Evidence, Finding, IdleMode, WasteKind
from gpuwaste.models.telemetry import Signal, WindowStats

KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
VLLM_RUNNING = "vllm:num_requests_running"
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_PREEMPT = "vllm:num_preemptions_total"
VLLM_TOKENS = ("vllm:generation_tokens_total", "vllm:prompt_tokens_total")
TGI_QUEUE = "tgi_queue_size"
TGI_BATCH = "tgi_batch_current_size"
TRITON_SUCCESS = "nv_inference_request_success"
TRITON_QUEUE_US = "nv_inference_queue_duration_us"

SERVING_SIGNALS = (*KV_USAGE, VLLM_RUNNING, VLLM_WAITING, VLLM_PREEMPT + ":rate", *(t + ":rate" for t in VLLM_TOKENS),
                   TGI_QUEUE, TGI_BATCH, TRITON_SUCCESS + ":rate", TRITON_QUEUE_US + ":rate")


class KvCachePressureSettings(SettingsModel):
    """KV-cache pressure.

    Attributes:
        min_kv_usage_ratio: the highest 10-minute average KV-cache usage (0–1) at or above this is "near full".
        min_waiting: the highest 10-minute average of waiting requests at or above this counts as queueing.
        min_preemptions_per_s: a preemption rate (per second) above this counts as pressure.
        tgi_min_queue: TGI: highest 10-minute average queue size at or above this (TGI exports no KV usage).
        triton_max_queue_ms: Triton: average queue time per request (ms) above this.
    """

    min_kv_usage_ratio: float = Field(0.90, gt=0, le=1)
    min_waiting: float = Field(1.0, gt=0)
    min_preemptions_per_s: float = Field(0.0, ge=0)
    tgi_min_queue: float = Field(4.0, gt=0)
    triton_max_queue_ms: float = Field(100.0, gt=0)


class InferenceIdleSettings(SettingsModel):
    """Inference idle: the server holds GPUs but serves nothing.

    Attributes:
        min_window_s: the window (seconds) must be at least this long.
        max_token_rate_per_s: token counters (generation + prompt) must grow slower than this (per second).
    """

    min_window_s: int = Field(1800, ge=60)
    max_token_rate_per_s: float = Field(0.0, ge=0)


def _serving(ctx: ScanContext) -> list[Allocation]:
    out = []
    for a in ctx.allocations:
        if a.pod.phase is not PodPhase.RUNNING:
            continue
        sig = ctx.pod_signals(a.pod.namespace, a.pod.name)
        if any(k.startswith(("vllm:", "tgi_", "nv_inference_")) for k in sig):
            out.append(a)
    return out


def _young(ctx: ScanContext, a: Allocation) -> bool:
    started = a.pod.started_at or a.pod.created_at
    return started is not None and (ctx.eval_time - started).total_seconds() < ctx.common.pod_grace_s


def _peak(st: WindowStats) -> float:
    return st.max_avg_10m if st.max_avg_10m is not None else st.avg


@detector(
    "kv_cache_pressure",
    settings=KvCachePressureSettings,
    needs_any=(*KV_USAGE, TGI_QUEUE, TRITON_QUEUE_US),
    optional=(VLLM_WAITING, VLLM_PREEMPT, TGI_BATCH, TRITON_SUCCESS),
)
def detect_kv_cache_pressure(ctx: ScanContext, settings: KvCachePressureSettings) -> DetectorOutput:
    """Flag inference servers whose KV cache is near full while requests wait or get preempted (mis-sized)."""
    for a in _serving(ctx):
        ns, name = a.pod.namespace, a.pod.name
        if _young(ctx, a):
            yield NoVerdict("kv_cache_pressure", f"{ns}/{name}", f"pod younger than {ctx.common.pod_grace_s}s")
            continue
        evidence: list[Evidence] = []
        server = ""
        kv = pod_gauge(ctx, ns, name, *KV_USAGE)
        if kv is not None:
            server = "vLLM"
            kv_name, kv_st = kv
            if _peak(kv_st) < settings.min_kv_usage_ratio:
                continue
            evidence.append(pod_evidence(ctx, kv_name, kv_st, unit="ratio", threshold=settings.min_kv_usage_ratio,
                                         comparison=f"highest 10-min avg ≥ {settings.min_kv_usage_ratio:g}",
                                         note="deprecated name (B16)" if kv_name == KV_USAGE[1] else ""))
            waiting = pod_gauge(ctx, ns, name, VLLM_WAITING)
            preempt = pod_rate(ctx, ns, name, VLLM_PREEMPT)
            queued = waiting is not None and _peak(waiting[1]) >= settings.min_waiting
            preempted = preempt is not None and preempt > settings.min_preemptions_per_s
            if not (queued or preempted):
                continue
            if waiting is not None:
                evidence.append(pod_evidence(ctx, VLLM_WAITING, waiting[1], unit="requests", threshold=settings.min_waiting,
                                             comparison=f"highest 10-min avg ≥ {settings.min_waiting:g}"))
            if preempt is not None:
                evidence.append(rate_evidence(ctx, VLLM_PREEMPT, preempt, unit="per_s", threshold=settings.min_preemptions_per_s,
                                              comparison=f"> {settings.min_preemptions_per_s:g}/s"))
        elif (q := pod_gauge(ctx, ns, name, TGI_QUEUE)) is not None:
            server = "TGI"
            if _peak(q[1]) < settings.tgi_min_queue:
                continue
            evidence.append(pod_evidence(ctx, TGI_QUEUE, q[1], unit="requests", threshold=settings.tgi_min_queue,
                                         comparison=f"highest 10-min avg ≥ {settings.tgi_min_queue:g}",
                                         note="TGI exports no KV-cache usage; a sustained queue is the pressure signal"))
            if (b := pod_gauge(ctx, ns, name, TGI_BATCH)) is not None:
                evidence.append(pod_evidence(ctx, TGI_BATCH, b[1], unit="requests"))
        else:
            qus = pod_rate(ctx, ns, name, TRITON_QUEUE_US)
            ok = pod_rate(ctx, ns, name, TRITON_SUCCESS)
            if qus is None or not ok:
                continue
            server = "Triton"
            per_req_ms = qus / ok / 1000.0
            if per_req_ms <= settings.triton_max_queue_ms:
                continue
            evidence.append(rate_evidence(ctx, TRITON_QUEUE_US, per_req_ms, unit="ms", threshold=settings.triton_max_queue_ms,
                                          comparison=f"queue µs rate ÷ request rate ÷ 1000 > {settings.triton_max_queue_ms:g} ms",
                                          note="Triton exports no KV-cache usage; queue time per request is the pressure signal"))
        yield Finding(
            kind=WasteKind.KV_CACHE_PRESSURE,
            detector="kv_cache_pressure",
            subject=ctx.subject_for(a),
            title=f"{server} server {ns}/{name} is short of KV cache: requests queue or get preempted",
            recommendation=("The server is mis-sized for its traffic: raise --gpu-memory-utilization or lower --max-model-len, "
                            "add replicas, or move to a GPU with more memory (tensor parallelism). Preempted requests are recomputed."),
            evidence=tuple(evidence),
            confidence=Confidence.HIGH if server == "vLLM" and len(evidence) >= 2 else Confidence.MEDIUM,
            observed_at=ctx.eval_time,
            window_s=ctx.window_s,
            wasted_gpu_share=Decimal(0),
            details={"server": server, "formula": "sizing finding: costs latency and recomputation, not idle GPUs (priced at 0)"},
        )


def _idle_engines(ctx: ScanContext, a: Allocation, settings: InferenceIdleSettings) -> DetectorOutput:
    """Under-use of a serving data-parallel pod: engines (`PodTelemetry.engines`) that ran no request, queued none and
    generated no token all window while another engine served. The pod is not idle; the idle engines' share of its GPUs
    is (each engine holds an equal share: data parallelism replicates the model)."""
    ns, name = a.pod.namespace, a.pod.name
    engines = next((p.engines for p in ctx.telemetry.pods if p.namespace == ns and p.pod == name), {})
    if len(engines) < 2:
        return
    idle: list[tuple[str, WindowStats]] = []
    for engine, sig in sorted(engines.items()):
        running, waiting = sig.get(VLLM_RUNNING), sig.get(VLLM_WAITING)
        if running is None or running.max > 0 or (waiting is not None and waiting.max > 0):
            continue
        if any((r := sig.get(t + ":rate")) is not None and r.max > settings.max_token_rate_per_s for t in VLLM_TOKENS):
            continue
        if ctx.telemetry.coverage(running) < ctx.common.min_coverage:
            continue  # an engine seen for part of the window only: missing is never idle
        idle.append((engine, running))
    if not idle:
        return
    share = a.share * Decimal(len(idle)) / Decimal(len(engines))
    names = ", ".join(e for e, _ in idle)
    yield Finding(
        kind=WasteKind.UNDERUSED,
        detector="inference_idle",
        subject=ctx.subject_for(a),
        scope_key="idle-engines",
        title=f"vLLM server {ns}/{name} serves, but {len(idle)} of its {len(engines)} engines ({names}) ran no request for "
              f"{ctx.window_s // 60} min",
        recommendation="Traffic reaches only some data-parallel engines: lower --data-parallel-size (fewer GPUs), or check "
                       "the load balancing across engines.",
        evidence=tuple(pod_evidence(ctx, f"{VLLM_RUNNING}{{{e}}}", st, unit="requests", threshold=0, comparison="max = 0")
                       for e, st in idle),
        confidence=Confidence.MEDIUM,
        observed_at=ctx.eval_time,
        window_s=ctx.window_s,
        wasted_gpu_share=share,
        details={"server": "vLLM", "engines": str(len(engines)), "idle_engines": names,
                 "formula": "wasted GPUs = GPUs held × idle engines ÷ engines (each engine holds an equal share)"},
    )


@detector(
    "inference_idle",
    settings=InferenceIdleSettings,
    needs_any=(VLLM_RUNNING, TGI_BATCH, TRITON_SUCCESS),
    optional=(VLLM_WAITING, *VLLM_TOKENS, TGI_QUEUE),
    superseded_by=("idle_allocation",),
)
def detect_inference_idle(ctx: ScanContext, settings: InferenceIdleSettings) -> DetectorOutput:
    """Flag inference servers holding GPUs with no running or waiting requests and flat token counters.

    The server's own metrics are the demand signal (B16: framebuffer use is pre-allocated, not demand). When
    the GPUs are also idle by DCGM, the idle-allocation finding (idle mode "inference") reports it instead.
    """
    for a in _serving(ctx):
        ns, name = a.pod.namespace, a.pod.name
        subject = f"{ns}/{name}"
        if _young(ctx, a):
            yield NoVerdict("inference_idle", subject, f"pod younger than {ctx.common.pod_grace_s}s")
            continue
        if ctx.window_s < settings.min_window_s:
            yield NoVerdict("inference_idle", subject, f"window shorter than {settings.min_window_s}s")
            continue
        evidence: list[Evidence] = []
        server = ""
        running = pod_gauge(ctx, ns, name, VLLM_RUNNING)
        if running is not None:
            server = "vLLM"
            if running[1].max > 0:  # serving: some engine ran a request (a data-parallel pod serves when any engine does)
                yield from _idle_engines(ctx, a, settings)
                continue
            evidence.append(pod_evidence(ctx, VLLM_RUNNING, running[1], unit="requests", threshold=0, comparison="max = 0"))
            waiting = pod_gauge(ctx, ns, name, VLLM_WAITING)
            if waiting is not None:
                if waiting[1].max > 0:
                    continue
                evidence.append(pod_evidence(ctx, VLLM_WAITING, waiting[1], unit="requests", threshold=0, comparison="max = 0"))
            busy_tokens = False
            for tok in VLLM_TOKENS:
                r = pod_rate(ctx, ns, name, tok)
                if r is None:
                    continue
                if r > settings.max_token_rate_per_s:
                    busy_tokens = True
                evidence.append(rate_evidence(ctx, tok, r, unit="per_s", threshold=settings.max_token_rate_per_s,
                                              comparison=f"≤ {settings.max_token_rate_per_s:g}/s (flat counter)"))
            if busy_tokens:
                continue
            coverage = ctx.telemetry.coverage(running[1])
        elif (batch := pod_gauge(ctx, ns, name, TGI_BATCH)) is not None:
            server = "TGI"
            queue = pod_gauge(ctx, ns, name, TGI_QUEUE)
            if batch[1].max > 0 or (queue is not None and queue[1].max > 0):
                continue
            evidence.append(pod_evidence(ctx, TGI_BATCH, batch[1], unit="requests", threshold=0, comparison="max = 0"))
            if queue is not None:
                evidence.append(pod_evidence(ctx, TGI_QUEUE, queue[1], unit="requests", threshold=0, comparison="max = 0"))
            coverage = ctx.telemetry.coverage(batch[1])
        else:
            ok = pod_rate(ctx, ns, name, TRITON_SUCCESS)
            if ok is None or ok > 0:
                continue
            server = "Triton"
            evidence.append(rate_evidence(ctx, TRITON_SUCCESS, ok, unit="per_s", threshold=0, comparison="= 0"))
            coverage = 1.0
        if coverage < ctx.common.min_coverage:
            yield NoVerdict("inference_idle", subject, f"serving-metric coverage {coverage:.0%} < {ctx.common.min_coverage:.0%}")
            continue
        act = ctx.activity(a.devices, a.pod) if a.devices else None
        if act is not None:
            evidence.append(act.evidence(ctx.window_s, comparison="context: GPU activity (not the criterion)"))
        fb = ctx.signal_evidence(a.devices, Signal.FB_USED, a.pod) if a.devices else None
        if fb is not None:
            evidence.append(fb.model_copy(update={"note": "pre-allocated by the server: not demand (B16)"}))
        yield Finding(
            kind=WasteKind.INFERENCE_IDLE,
            detector="inference_idle",
            subject=ctx.subject_for(a),
            title=f"{server} server {subject} holds {len(a.devices) or a.share} GPU(s) and served no request for {ctx.window_s // 60} min",
            recommendation="The model is loaded but nobody calls it: scale the deployment to zero (KEDA / KServe scale-to-zero) or consolidate models.",
            evidence=tuple(evidence),
            confidence=Confidence.HIGH if coverage >= 0.95 and len(evidence) >= 2 else Confidence.MEDIUM,
            idle_mode=IdleMode.INFERENCE,
            observed_at=ctx.eval_time,
            window_s=ctx.window_s,
            wasted_gpu_share=a.share,
            details={"server": server, "formula": "wasted GPUs = all GPUs held by the idle server"},
        )

"""Detector: idle GPUs judged from a cloud's own GPU metrics where no dcgm-exporter reports them (issue 21 §8).

GKE's system metric `kubernetes.io/container/accelerator/duty_cycle` (in Prometheus through Google Cloud Managed
Service for Prometheus as `kubernetes_io:container_accelerator_duty_cycle`: percent 0–100 of the sample period the
container's accelerator was busy, keyed by `namespace_name` / `pod_name`; `models.telemetry.GKE_DUTY_CYCLE`) is a
coarser signal than DCGM's profiling fields: one busy/not-busy duty cycle per sample period, no SM, tensor, memory
bandwidth or power. So it is read only for pods whose GPUs carry no DCGM series, and every finding it makes is LOW
confidence and says where its activity came from. Idle only when the metric is present, fresh (samples in the scan's
recent tail) and covers enough of the held span; missing or stale is never idle (a no-verdict, and `doctor`
recommends DCGM for the rest).

AKS and EKS have no such family in a Prometheus: AKS Container insights keeps its GPU metrics (`containerGpuDutyCycle`,
…) in Log Analytics' InsightsMetrics table; EKS's Enhanced Container Insights (Classic) publishes to CloudWatch, and its
OTel Container Insights preview keeps NVIDIA DCGM's own names (PromQL-queryable), which gpuwaste reads as DCGM.
"""

from __future__ import annotations

from pydantic import Field

from gpuwaste.detectors.allocation import allocation_details, idle_mode
from gpuwaste.detectors.episodes import episode, finish, minutes_text, span_seconds
from gpuwaste.detectors.readings import pod_evidence, pod_gauge
from gpuwaste.detectors.registry import DetectorOutput, NoVerdict, detector
from gpuwaste.join import ScanContext
from gpuwaste.models.base import SettingsModel
from gpuwaste.models.cluster import PodPhase
from gpuwaste.models.findings import Confidence, Finding, WasteKind
from gpuwaste.models.telemetry import GKE_DUTY_CYCLE

#: What every finding of this detector says about its signal.
SOURCE = "GKE system metrics (kubernetes_io:container_accelerator_duty_cycle): lower confidence than DCGM"


class ManagedGpuIdleSettings(SettingsModel):
    """Idle from a cloud's managed GPU metrics (GKE duty cycle).

    Attributes:
        max_duty_cycle_percent: percent 0–100 that the highest sample and every 10-minute average must stay under
            (the highest sample, not p95: the signal is coarse, so one busy sample is work).
        min_coverage: share 0–1 of the expected samples the window must hold.
    """

    max_duty_cycle_percent: float = Field(5.0, ge=0, le=100)
    min_coverage: float = Field(0.5, ge=0, le=1)


@detector("managed_gpu_idle", settings=ManagedGpuIdleSettings, needs_any=(GKE_DUTY_CYCLE,), superseded_by=("orphaned",))
def detect_managed_gpu_idle(ctx: ScanContext, settings: ManagedGpuIdleSettings) -> DetectorOutput:
    """Flag DCGM-less running pods whose GKE accelerator duty cycle stayed under the idle threshold (LOW confidence)."""
    for alloc in ctx.allocations:
        if alloc.devices or alloc.lost_devices or not alloc.holds_now or alloc.pod.phase is not PodPhase.RUNNING:
            continue  # DCGM judges the pods it reports; the managed metric is read only where it is all there is
        found = pod_gauge(ctx, alloc.pod.namespace, alloc.pod.name, GKE_DUTY_CYCLE)
        if found is None:
            continue  # missing is never idle
        name, st = found
        subject = f"{alloc.pod.namespace}/{alloc.pod.name}"
        if st.recent_count <= 0:
            yield NoVerdict("managed_gpu_idle", subject,
                            "GKE duty cycle stale: no sample in the recent part of the window")
            continue
        coverage = min(1.0, ctx.telemetry.coverage(st))
        if coverage < settings.min_coverage:
            yield NoVerdict("managed_gpu_idle", subject, f"GKE duty cycle covers {coverage:.0%} of the window")
            continue
        busiest = max(st.max, st.max_avg_10m if st.max_avg_10m is not None else st.max)
        if busiest >= settings.max_duty_cycle_percent:
            continue
        lo, hi = ctx.held_span(alloc)
        episodes = (episode(ctx, lo, hi, alloc.share),)
        comparison = (f"max < {settings.max_duty_cycle_percent:g} % "
                      f"and every 10-min avg < {settings.max_duty_cycle_percent:g} %")
        finding = Finding(
            kind=WasteKind.IDLE,
            detector="managed_gpu_idle",
            subject=ctx.subject_for(alloc),
            title=(f"{alloc.share.normalize():f} GPU(s) held by {subject} idle for {minutes_text(episodes)} "
                   "by GKE's accelerator duty cycle (no DCGM series; lower confidence)"),
            recommendation=("The GPU's duty cycle stayed at zero: scale the workload down or release the GPU. "
                            "GKE's duty cycle cannot tell a stalled kernel from a working one; enable GKE's managed "
                            "DCGM metrics (or dcgm-exporter) for a high-confidence verdict."),
            evidence=(pod_evidence(ctx, name, st, unit="percent", threshold=settings.max_duty_cycle_percent,
                                   comparison=comparison, note=SOURCE),),
            confidence=Confidence.LOW,
            idle_mode=idle_mode(ctx, alloc),
            observed_at=ctx.eval_time,
            window_s=ctx.window_s,
            wasted_gpu_share=alloc.share,
            details={"activity_signal": name, "activity_source": SOURCE, "attribution": alloc.attribution.value,
                     **allocation_details(alloc)},
        )
        yield finish(ctx, finding, episodes, span_seconds((lo, hi)) * coverage)

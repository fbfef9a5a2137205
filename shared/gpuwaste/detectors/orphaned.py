"""Detectors: orphaned GPU holders — owner gone, old bare pods, finished jobs, abandoned notebooks, stuck pending pods."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from pydantic import Field

from gpuwaste.detectors.allocation import IdleSettings, idle_mode, is_idle
from gpuwaste.detectors.registry import DetectorOutput, NoVerdict, detector
from gpuwaste.join import Allocation, ScanContext
from gpuwaste.models.base import SettingsModel
from gpuwaste.models.cluster import PodPhase
from gpuwaste.models.findings import Confidence, Evidence, Finding, IdleMode, WasteKind

NOTEBOOK_ACTIVITY_ANNOTATION = "notebooks.kubeflow.org/last-activity"


class OrphanedSettings(SettingsModel):
    """Orphaned workloads (cluster state only; no telemetry needed).

    Attributes:
        bare_pod_max_age_s: a pod without any controller older than this (seconds) is flagged.
        finished_grace_s: a Job pod whose main container finished this long ago (seconds) but still holds GPUs.
        notebook_idle_s: a notebook whose `notebooks.kubeflow.org/last-activity` is older than this (seconds).
        pending_max_s: a pod bound to a node but Pending (holding its GPUs) for longer than this (seconds).
        notebook_annotation: the annotation holding a notebook's last activity time (RFC 3339).
    """

    bare_pod_max_age_s: int = Field(3 * 86400, ge=0)
    finished_grace_s: int = Field(600, ge=0)
    notebook_idle_s: int = Field(86400, ge=0)
    pending_max_s: int = Field(900, ge=0)
    notebook_annotation: str = NOTEBOOK_ACTIVITY_ANNOTATION


def _age(ctx: ScanContext, t: datetime | None) -> float | None:
    return None if t is None else (ctx.eval_time - t).total_seconds()


def _parse(text: str) -> datetime | None:
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else None


def _ev(ctx: ScanContext, signal: str, value: float, threshold: float, note: str) -> Evidence:
    return Evidence(signal=signal, unit="s", window_s=ctx.window_s, avg=round(value, 1), samples=1, coverage=1.0,
                    threshold=float(threshold), comparison=f"> {threshold:g} s", note=note)


def _reason(ctx: ScanContext, a: Allocation, s: OrphanedSettings) -> tuple[str, str, str, IdleMode | None, Confidence, Evidence] | None:
    """(reason, title, advice, idle mode, confidence, evidence) of the first orphan rule the pod meets."""
    pod = a.pod
    w = pod.workload
    age = _age(ctx, pod.created_at)
    if w.exists is False:
        chain = " → ".join(w.chain) or f"{w.kind}/{w.name}"
        conf = Confidence.HIGH if w.resolution == "api" else Confidence.MEDIUM
        ev = Evidence(signal="ownerReferences", unit="owners", window_s=ctx.window_s, avg=0.0, samples=1, coverage=1.0,
                      threshold=1.0, comparison="owner objects found < 1", note=f"chain {chain}; {w.kind}/{w.name} not found ({w.resolution})")
        return ("owner_gone", f"{pod.namespace}/{pod.name} holds GPUs but its owner {w.kind}/{w.name} no longer exists",
                "Nobody owns this pod any more (its controller was deleted with --cascade=orphan or failed): delete the pod.",
                None, conf, ev)
    if pod.phase is PodPhase.PENDING and age is not None and age > s.pending_max_s:
        return ("pending_holding", f"{pod.namespace}/{pod.name} is Pending on {pod.node_name} for {age / 60:.0f} min, holding its GPUs",
                "The pod is bound to a node but never started (image pull, init container, volume): fix or delete it so the GPUs free up.",
                IdleMode.PROVISIONING, Confidence.HIGH, _ev(ctx, "pod_pending_s", age, s.pending_max_s, "bound to a node, phase Pending"))
    is_job = w.kind in ("Job", "CronJob") or any(r.kind == "Job" for r in pod.owner_refs)
    done = _age(ctx, pod.finished_at)
    if is_job and pod.phase is PodPhase.RUNNING and done is not None and done > s.finished_grace_s:
        return ("finished_job", f"Job pod {pod.namespace}/{pod.name} finished its work {done / 60:.0f} min ago but still holds GPUs",
                "A container of the Job finished but the pod keeps running (a sidecar or a hung exit): make sidecars exit "
                "(native sidecar containers) or set activeDeadlineSeconds / ttlSecondsAfterFinished.",
                IdleMode.BATCH, Confidence.HIGH, _ev(ctx, "container_finished_s", done, s.finished_grace_s, "a container terminated; pod still Running"))
    last = pod.annotations.get(s.notebook_annotation)
    if last is not None:
        t = _parse(last)
        idle = _age(ctx, t)
        if idle is not None and idle > s.notebook_idle_s:
            return ("notebook_idle", f"Notebook {pod.namespace}/{pod.name} unused for {idle / 3600:.0f} h while holding GPUs",
                    "The notebook has had no activity for a long time: stop it (Kubeflow culling) or move it to a shared GPU.",
                    IdleMode.IDLE_HELD, Confidence.HIGH, _ev(ctx, "notebook_last_activity_s", idle, s.notebook_idle_s, s.notebook_annotation))
    if w.kind == "Pod" and not pod.owner_refs and age is not None and age > s.bare_pod_max_age_s:
        return ("bare_pod", f"Bare pod {pod.namespace}/{pod.name} (no controller) has held GPUs for {age / 86400:.1f} days",
                "A pod without a controller is usually a forgotten experiment: delete it, or run it as a Job with a deadline.",
                None, Confidence.MEDIUM, _ev(ctx, "pod_age_s", age, s.bare_pod_max_age_s, "no ownerReferences"))
    return None


@detector("orphaned", settings=OrphanedSettings)
def detect_orphaned(ctx: ScanContext, settings: OrphanedSettings) -> DetectorOutput:
    """Flag pods holding GPUs that nobody owns or uses: owner gone, old bare pods, finished Job pods, idle notebooks, stuck Pending pods."""
    for a in ctx.allocations:
        pod = a.pod
        if not pod.holds_gpus or pod.deletion_requested:
            continue
        found = _reason(ctx, a, settings)
        if found is None:
            if pod.workload.exists is None and pod.workload.kind != "Pod" and pod.workload.resolution != "api":
                yield NoVerdict("orphaned", f"{pod.namespace}/{pod.name}", f"owner kind {pod.workload.kind} not listed: existence unknown")
            continue
        reason, title, advice, mode, conf, ev = found
        evidence = [ev]
        act = ctx.activity(a.devices, pod) if a.devices and pod.phase is PodPhase.RUNNING else None
        share, formula = a.share, "wasted GPUs = all GPUs the pod holds"
        if act is not None:
            evidence.append(act.evidence(ctx.window_s, comparison="context: GPU activity while orphaned"))
            if is_idle(act, IdleSettings()):
                if mode is None:
                    mode = idle_mode(ctx, a)  # an orphan that also computes nothing is idle: say which kind
            elif reason == "bare_pod":
                # a bare pod (no controller) whose GPUs compute is running work someone started by hand: only the share
                # its activity leaves unused is waste (training at 95 % is a governance problem, not 100 % waste). An
                # orphan whose owner is gone keeps the whole GPU: nothing will collect what it computes.
                share = (a.share * (Decimal(1) - Decimal(str(round(min(1.0, max(0.0, act.avg)), 4))))).quantize(Decimal("0.0001"))
                formula = f"wasted GPUs = GPUs held × (1 − average activity {act.avg:.1%}) — its GPUs compute"
        yield Finding(
            kind=WasteKind.ORPHANED,
            detector="orphaned",
            subject=ctx.subject_for(a),
            title=title,
            recommendation=advice,
            evidence=tuple(evidence),
            confidence=conf,
            idle_mode=mode,
            observed_at=ctx.eval_time,
            window_s=ctx.window_s,
            wasted_gpu_share=share,
            scope_key=reason,
            details={"reason": reason, "owner_chain": " → ".join(pod.workload.chain), "phase": pod.phase.value,
                     "formula": formula},
        )

"""Detectors: data quality — missing, stale, partial or contradictory telemetry, reported as such, never as idle."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from pydantic import Field

from gpuwaste.detectors.episodes import runs
from gpuwaste.detectors.registry import DetectorOutput, detector
from gpuwaste.join import Allocation, NodeInventory, ScanContext, gpu_ref
from gpuwaste.models.base import SettingsModel
from gpuwaste.models.cluster import PodPhase
from gpuwaste.models.findings import Attribution, Confidence, Evidence, Finding, Subject, WasteKind
from gpuwaste.models.telemetry import ACTIVITY_SIGNALS, GpuTelemetry, Signal

KNOWN_GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")


class DataQualitySettings(SettingsModel):
    """Data-quality checks.

    Attributes:
        stale_min_samples: samples a window needs before "no value changed" means a frozen exporter.
        report_single_instant: report recordings with one sample per series.
    """

    stale_min_samples: int = Field(20, ge=2)
    report_single_instant: bool = True


def _dq(ctx: ScanContext, subject: Subject, check: str, title: str, advice: str, scope: str, *,
        evidence: tuple[Evidence, ...] = (), confidence: Confidence = Confidence.HIGH,
        details: dict[str, str | float | int | bool | None] | None = None) -> Finding:
    return Finding(
        kind=WasteKind.DATA_QUALITY,
        detector="data_quality",
        subject=subject,
        title=title,
        recommendation=advice,
        evidence=evidence,
        confidence=confidence,
        observed_at=ctx.eval_time,
        window_s=ctx.window_s,
        wasted_gpu_share=Decimal(0),
        scope_key=f"{check}:{scope}",
        details={"check": check, **(details or {})},
    )


@detector("data_quality", settings=DataQualitySettings)
def detect_data_quality(ctx: ScanContext, settings: DataQualitySettings) -> DetectorOutput:
    """Report telemetry the other detectors could not judge, and why."""
    cluster = ctx.cluster.cluster
    if ctx.telemetry.single_instant and settings.report_single_instant and (ctx.telemetry.gpus or ctx.telemetry.other_gpus):
        physical = len({g.device.uuid for g in ctx.telemetry.gpus} | set(ctx.telemetry.other_gpus))
        mig = sum(1 for g in ctx.telemetry.gpus if g.device.gpu_i_id is not None)
        yield _dq(ctx, Subject(cluster=cluster, attribution=Attribution.NODE), "single_sample",
                  f"The telemetry holds one sample per series ({physical} GPU(s), {mig} MIG instance(s)): no verdict on sustained use",
                  "Record a window (gpuwaste record, or a Prometheus with history) to judge idleness.", "all",
                  confidence=Confidence.HIGH)
    yield from _activity_fields_missing(ctx)
    gpu_nodes = [inv for inv in ctx.nodes.values() if inv.expected_gpus() or (inv.node and (inv.node.capacity_gpu or inv.node.allocatable_gpu))]
    no_telemetry = not ctx.telemetry.gpus and not ctx.telemetry.other_gpus and bool(gpu_nodes)
    if no_telemetry:
        yield _dq(ctx, Subject(cluster=cluster, attribution=Attribution.NODE), "no_telemetry",
                  f"No DCGM series at all in the window ending {ctx.eval_time:%Y-%m-%d %H:%M}Z, "
                  f"while {len(gpu_nodes)} node(s) have GPUs",
                  "Check the evaluation time (--at), the Prometheus URL and that dcgm-exporter is scraped; "
                  "`gpuwaste doctor` lists what is missing. Nothing is judged idle without telemetry.", "all")
    for alloc in ctx.allocations:
        yield from _allocation_checks(ctx, alloc, settings)
    for inv in ctx.nodes.values():
        node = inv.node
        subject = _NodeSubject(cluster, inv)
        # GPUs no claim holds that the exporter hides are free capacity (unallocated_capacity), not unmonitored
        expected = None if (e := inv.expected_gpus()) is None else e - len(inv.hidden_unclaimed)
        seen = len(inv.physical_uuids)
        if expected and seen < expected and not no_telemetry:
            yield _dq(ctx, subject().model_copy(update={"gpu_share": Decimal(expected - seen)}), "unmonitored_gpus",
                      (f"Node {inv.name} has {expected} GPU(s) but DCGM reports {seen}" if not inv.hidden_unclaimed else
                       f"Node {inv.name}: {expected} GPU(s) held or reported, but DCGM reports {seen} "
                       f"({len(inv.hidden_unclaimed)} more that no claim holds are counted as free capacity)"),
                      "The missing GPUs are billed but unmonitored (broken GPU, crashed exporter): check nvidia-smi and the dcgm-exporter pod on the node.",
                      inv.name, details={"expected_gpus": expected, "observed_gpus": seen})
        if inv.ambiguous_pods:
            pods = ", ".join(f"{p.namespace}/{p.name}" for p in inv.ambiguous_pods)
            yield _dq(ctx, subject(), "attribution_missing",
                      f"dcgm-exporter pod mapping is not working on node {inv.name}: {len(inv.unattributed_devices)} GPU(s) carry no pod labels",
                      "Enable the exporter's Kubernetes mapping (DCGM_EXPORTER_KUBERNETES=true, pod-resources mounted; on GKE set DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE=device-name).",
                      inv.name, details={"candidate_pods": pods})
        if inv.devices and node is not None and not inv.gpus_known_otherwise and not any(
            r.startswith(KNOWN_GPU_RESOURCE_PREFIXES) for r in {**node.allocatable_gpu, **node.capacity_gpu}
        ):
            yield _dq(ctx, subject(), "unknown_gpu_resource",
                      f"Node {inv.name} has {seen} GPU(s) in DCGM but advertises no known GPU resource",
                      "Add the device plugin's resource name to gpu_resource_names in the configuration.",
                      inv.name, details={"resources": ",".join(sorted(node.allocatable_gpu)) or "none"})
        yield from _device_checks(ctx, inv.devices, subject, settings)
    if ctx.unmapped_devices and not ctx.cluster.nodes and not ctx.cluster.pods:
        physical = len({d.device.uuid for d in ctx.unmapped_devices})
        yield _dq(ctx, Subject(cluster=cluster, attribution=Attribution.UNKNOWN), "no_cluster_state",
                  f"No cluster state: {physical} GPU(s) in the telemetry cannot be tied to nodes or pods",
                  "Give the scan the cluster (a kubeconfig, kube-state-metrics in the same Prometheus, or "
                  "`kubectl get pods,nodes -A -o json` as cluster.json / --cluster-json); "
                  "without it only the inventory and data quality are reported.", "all", confidence=Confidence.HIGH,
                  details={"devices": len(ctx.unmapped_devices)})
        return
    by_host: dict[str | None, list[GpuTelemetry]] = {}
    for dev in ctx.unmapped_devices:  # one finding per exporter host, naming its GPUs (§10)
        by_host.setdefault(dev.hostname, []).append(dev)
    for host, devs in by_host.items():
        if len(devs) == 1:  # as before
            yield _dq(ctx, Subject(cluster=cluster, gpus=(), attribution=Attribution.UNKNOWN), "unmapped_device",
                      f"GPU {devs[0].device} (Hostname {host!r}) matches no node",
                      "Set NODE_NAME in dcgm-exporter (Helm chart does) or relabel the node name onto DCGM series.",
                      str(devs[0].device), confidence=Confidence.MEDIUM)
            continue
        named = ", ".join(str(d.device) for d in devs)
        yield _dq(ctx, Subject(cluster=cluster, gpus=tuple(gpu_ref(d) for d in devs), attribution=Attribution.UNKNOWN),
                  "unmapped_device", f"{len(devs)} GPUs ({named}) with Hostname {host!r} match no node",
                  "Set NODE_NAME in dcgm-exporter (Helm chart does) or relabel the node name onto DCGM series.",
                  f"host:{host}", confidence=Confidence.MEDIUM, details={"devices": named, "device_count": len(devs)})
    stray: dict[tuple[str, str, str], list[GpuTelemetry]] = {}
    for dev, ns, pod, reason in ctx.stray_labels:
        stray.setdefault((ns, pod, reason), []).append(dev)
    for (ns, pod, reason), devs in stray.items():  # one finding per labelled pod, naming its GPUs (§10)
        named = ", ".join(str(d.device) for d in devs)
        if len(devs) == 1:  # as before
            yield _dq(ctx, Subject(cluster=cluster, namespace=ns, pod=pod, attribution=Attribution.LABELS), "stale_pod_label",
                      f"GPU {named} is labelled with {ns}/{pod}, but {reason}",
                      "Trusting the cluster: the GPU's time after the pod ended counts as the node's.",
                      f"{named}:{ns}/{pod}", confidence=Confidence.MEDIUM)
            continue
        yield _dq(ctx, Subject(cluster=cluster, namespace=ns, pod=pod, gpus=tuple(gpu_ref(d) for d in devs),
                               attribution=Attribution.LABELS), "stale_pod_label",
                  f"{len(devs)} GPUs ({named}) are labelled with {ns}/{pod}, but {reason}",
                  "Trusting the cluster: the GPU's time after the pod ended counts as the node's.",
                  f"{ns}/{pod}", confidence=Confidence.MEDIUM, details={"devices": named, "device_count": len(devs)})


def _activity_fields_missing(ctx: ScanContext) -> DetectorOutput:
    """The telemetry shows GPUs but not one carries an activity field: say how many GPUs and which fields are missing
    (never "0 GPUs, no waste found"; issue 21 §9)."""
    tel = ctx.telemetry
    seen = {g.device.uuid for g in tel.gpus} | set(tel.other_gpus)
    if not seen or any(ctx.activity_signal(g) is not None for g in tel.gpus):
        return
    missing = [s.value for s in ACTIVITY_SIGNALS]
    present = sorted(m for m in tel.metrics_present if m.upper().startswith("DCGM_FI_"))
    yield _dq(ctx, Subject(cluster=ctx.cluster.cluster, attribution=Attribution.NODE), "no_activity_fields",
              f"{len(seen)} GPU(s) in the telemetry, none with an activity field ({', '.join(missing)} missing): "
              "activity unknown, not idle",
              "Add DCGM_FI_PROF_GR_ENGINE_ACTIVE (or at least DCGM_FI_DEV_GPU_UTIL) to dcgm-exporter's counters CSV "
              f"(fields present: {', '.join(present) or 'none'}).", "all",
              details={"gpus": len(seen), "missing_fields": ",".join(missing), "present_fields": ",".join(present)})


class _NodeSubject:
    """A node's data-quality subject, built when a finding needs it (most nodes get none)."""

    def __init__(self, cluster: str, inv: NodeInventory) -> None:
        self.cluster, self.inv = cluster, inv
        self.built: Subject | None = None

    def __call__(self) -> Subject:
        if self.built is None:
            node = self.inv.node
            self.built = Subject(cluster=self.cluster, node=self.inv.name, workload_kind="Node", workload_name=self.inv.name,
                                 instance_type=node.instance_type if node else None, attribution=Attribution.NODE)
        return self.built


def _lost_devices(ctx: ScanContext, alloc: Allocation) -> Finding:
    """A GPU of a running pod that went silent inside the window while the pod's other GPUs kept reporting: still held
    and billed, broken (the XID named where the telemetry holds it); its share is money at risk, not idle."""
    name = f"{alloc.pod.namespace}/{alloc.pod.name}"
    devs = alloc.lost_devices
    named = ", ".join(str(d.device) for d in devs)
    xids = {str(d.device): ctx.telemetry.xid_errors[d.device.uuid] for d in devs if d.device.uuid in ctx.telemetry.xid_errors}
    xid_text = "; XID " + ", ".join(f"{x}" + (" (fell off the bus)" if x == 79 else "") for x in sorted(set(xids.values()))) if xids else ""
    since = alloc.lost_since
    subject = ctx.subject_for(alloc).model_copy(update={"gpus": tuple(gpu_ref(d) for d in devs)})
    return _dq(ctx, subject, "lost_device",
               f"{'GPU ' + named if len(devs) == 1 else f'{len(devs)} GPUs ({named})'} of {name} went silent"
               + (f" at {since:%Y-%m-%d %H:%M}Z" if since else "") + f" while its other GPUs report{xid_text}: "
               "still held and billed, not judged",
               "A GPU that stops reporting while its neighbours report has usually failed (XID 79: fell off the bus; check "
               "`dmesg`/`nvidia-smi` on the node): drain the node and reset or replace the GPU; the pod pays for a GPU it "
               "cannot use, and its other GPUs are judged on their own.",
               f"{name}:{named}", confidence=Confidence.MEDIUM,
               details={"devices": named, "device_count": len(devs), "since": since.isoformat() if since else None,
                        "xid": ", ".join(f"{k}={v}" for k, v in sorted(xids.items())) or None,
                        "gpu_share_at_risk": float(alloc.lost_share)})


def _without_series(ctx: ScanContext, alloc: Allocation) -> Finding | None:
    """A running pod that holds GPUs now on a node whose GPUs have no DCGM series at all (while the scan has DCGM
    telemetry): allocated but unobserved — activity unknown, an idle suspect whose share is money at risk (issue 21 §12),
    never silently dropped. Young pods and pods on nodes with unlabelled series (attribution_missing) are left out."""
    if alloc.devices or alloc.lost_devices or not alloc.holds_now or alloc.pod.phase is not PodPhase.RUNNING:
        return None
    if not ctx.telemetry.gpus or ctx.telemetry.single_instant or alloc.held_share <= 0:
        return None
    inv = ctx.nodes.get(alloc.pod.node_name or "")
    if inv is None or inv.devices:
        return None
    started = alloc.pod.started_at or alloc.pod.created_at
    if started is not None and (ctx.eval_time - started).total_seconds() < ctx.common.pod_grace_s:
        return None
    name = f"{alloc.pod.namespace}/{alloc.pod.name}"
    return _dq(ctx, ctx.subject_for(alloc), "allocated_without_telemetry",
               f"{name} holds {_share_text(alloc.held_share)} GPU(s) ({alloc.mechanism}) on node {inv.name}, which has no DCGM "
               "series: activity unknown, an idle suspect",
               "Run dcgm-exporter on this node (its DaemonSet's node selector or tolerations may skip it) and check the "
               "scrape; until then the GPUs are billed and nobody can tell whether they work.",
               name, confidence=Confidence.MEDIUM,
               details={"mechanism": alloc.mechanism, "gpu_share_at_risk": float(alloc.held_share)})


def _share_text(share: Decimal) -> str:
    return f"{share.normalize():f}" if share == share.to_integral() else f"{share:.2f}"


def _allocation_checks(ctx: ScanContext, alloc: Allocation, settings: DataQualitySettings) -> DetectorOutput:
    if alloc.lost_devices and alloc.pod.phase is PodPhase.RUNNING:
        yield _lost_devices(ctx, alloc)
    unobserved = _without_series(ctx, alloc)
    if unobserved is not None:
        yield unobserved
    if alloc.pod.phase is not PodPhase.RUNNING or not alloc.devices:
        return
    name = f"{alloc.pod.namespace}/{alloc.pod.name}"
    missing = [d for d in alloc.devices if ctx.activity_signal(d) is None]
    if missing:
        mig = any(d.device.gpu_i_id for d in missing)
        yield _dq(ctx, ctx.subject_for(alloc), "no_activity_signal",
                  f"No activity signal for {len(missing)} GPU(s) of {name}: activity unknown, not idle",
                  ("MIG instances need DCGM_FI_PROF_GR_ENGINE_ACTIVE (GPU_UTIL is whole-GPU and reads 0 under MIG)."
                   if mig else "Enable DCGM_FI_PROF_GR_ENGINE_ACTIVE or DCGM_FI_DEV_GPU_UTIL in the dcgm-exporter counters CSV."),
                  name, details={"devices": ",".join(str(d.device) for d in missing)})
        return
    act = ctx.activity(alloc.devices, alloc.pod)
    started = alloc.pod.started_at or alloc.pod.created_at
    young = started is not None and (ctx.eval_time - started).total_seconds() < ctx.common.pod_grace_s
    if act is not None and act.coverage < ctx.common.min_coverage and not young and not ctx.telemetry.single_instant:
        yield _dq(ctx, ctx.subject_for(alloc), "partial_coverage",
                  f"Telemetry covers {act.coverage:.0%} of the window for {name}: no verdict",
                  "Gaps mean the exporter or scrape failed; missing samples are unknown, never idle. Check the dcgm-exporter pod and the scrape target.",
                  name, evidence=(act.evidence(ctx.window_s, threshold=ctx.common.min_coverage, comparison="coverage ≥ min_coverage"),),
                  details={"coverage": round(act.coverage, 4)})


#: The per-device problems reported by `_device_checks` (the others are an allocation's: `_allocation_checks`).
_DEVICE_PROBLEMS = ("stale_series", "frozen_exporter", "profiling_counter_broken", "activity_signals_disagree",
                    "unreadable_samples")


def _device_problem(ctx: ScanContext, dev: GpuTelemetry, settings: DataQualitySettings) -> tuple[str | None, datetime | None]:
    """A device's data problem (`ScanContext.device_problem`, or a contradiction for part of the window) and since when."""
    problem = ctx.device_problem(dev, settings.stale_min_samples)
    if problem is None and ctx.slots:
        # the same contradiction for part of the window only (a counter that broke at some point)
        broken = [b or None for b in ctx.contradicted_slots([dev])]
        stretches = [r for r in runs(ctx, broken, (ctx.window_start, ctx.eval_time)) if r.seconds >= ctx.common.min_episode_s
                     ] if any(broken) else []
        if stretches:
            return "activity_signals_disagree", stretches[0].start
    return problem, None


def _device_checks(ctx: ScanContext, devices: list[GpuTelemetry], node_subject: _NodeSubject,
                   settings: DataQualitySettings) -> DetectorOutput:
    """One finding per (problem, subject): the devices of one pod (or the unheld devices of one node) with the same
    problem make one finding naming them, whose subject carries those devices only (issue 21 §10: a per-GPU finding
    each carrying all of the pod's GPUs multiplies counts downstream)."""
    groups: dict[tuple[str, int], tuple[Allocation | None, list[tuple[GpuTelemetry, datetime | None]]]] = {}
    extra: dict[str, str | float | int | bool | None]
    for dev in devices:
        problem, since = _device_problem(ctx, dev, settings)
        if problem not in _DEVICE_PROBLEMS:
            continue
        assert problem is not None
        holder = ctx.holder_of(dev)
        if holder is not None and any(d is dev for d in holder.lost_devices):
            continue  # a GPU lost inside the window: its own finding (`_lost_devices`)
        groups.setdefault((problem, id(holder)), (holder, []))[1].append((dev, since))
    for (problem, _), (holder, found) in groups.items():
        devs = [d for d, _ in found]
        base = ctx.subject_for(holder) if holder is not None else node_subject()
        refs = tuple(gpu_ref(d) for d in devs)
        subject = base if base.gpus == refs or (holder is None and len(devs) == 1) else base.model_copy(update={"gpus": refs})
        where = f"{holder.pod.namespace}/{holder.pod.name} on {subject.node}" if holder else f"{subject.node}"
        named = ", ".join(str(d.device) for d in devs)
        # one device keeps its device scope (the finding as before); several are one finding scoped by their subject
        if len(devs) == 1:
            scope, gpus, extra = named, f"GPU {named}", {}
        else:
            scope = f"{holder.pod.namespace}/{holder.pod.name}" if holder is not None else (subject.node or "-")
            gpus, extra = f"{len(devs)} GPUs ({named})", {"devices": named, "device_count": len(devs)}
        if problem in ("profiling_counter_broken", "activity_signals_disagree"):
            starts = [s for _, s in found if s is not None]
            yield _contradiction(ctx, devs, subject, gpus, where, problem, scope, min(starts) if starts else None, extra)
        elif problem == "unreadable_samples":
            sigs = sorted({s.value for d in devs if (s := ctx.activity_signal(d)) is not None})
            unreadable = 0
            for d in devs:
                sig = ctx.activity_signal(d)
                st = d.merged(sig) if sig is not None else None
                unreadable += st.unreadable if st else 0
            yield _dq(ctx, subject, "unreadable_samples",
                      f"Every sample of {', '.join(sigs) or 'the activity signal'} for {gpus} ({where}) was unreadable "
                      "(non-numeric, NaN/Inf, a DCGM blank or out of range): state unknown, not idle",
                      "Check the dcgm-exporter version and the field's counters CSV; the scan report lists where the samples were.",
                      scope, details={"unreadable": unreadable, **extra})
        elif problem == "stale_series":
            yield _dq(ctx, subject, "stale_series",
                      f"{gpus} ({where}) stopped reporting before the end of the window: state unknown",
                      "The exporter or its scrape stopped: restart the dcgm-exporter pod; until then the GPU's state is unknown.",
                      scope, details=extra)
        else:
            samples = 0
            for d in devs:
                energy = ctx.device_stats(d, Signal.TOTAL_ENERGY)
                samples += energy.count if energy else 0
            yield _dq(ctx, subject, "frozen_exporter",
                      f"Every value of {gpus} ({where}), energy counter included, stayed bit-identical for the window",
                      "dcgm-exporter is serving stale values (hung host engine): restart it; the GPU's real state is unknown, not idle.",
                      scope, details={"samples": samples, **extra})


def _contradiction(ctx: ScanContext, devs: list[GpuTelemetry], subject: Subject, gpus: str, where: str, problem: str,
                   scope: str, since: datetime | None, extra: dict[str, str | float | int | bool | None]) -> Finding:
    """A profiling ratio that GPU_UTIL and power contradict on `devs` (for the window, or `since` a time): named, never
    turned into an idle verdict."""
    sig = ctx.activity_signal(devs[0])
    assert sig is not None
    evidence = tuple(e for e in (ctx.signal_evidence(devs, s) for s in (sig, Signal.GPU_UTIL, Signal.POWER_USAGE)) if e is not None)
    limits = [w for d in devs if (w := ctx.power_limit_w(d)) is not None]
    limit = max(limits) if limits else None
    name = sig.value.removeprefix("DCGM_FI_PROF_")
    if problem == "profiling_counter_broken":
        title = f"Profiling counter broken on {gpus} ({where}): {name} reads 0 while GPU_UTIL and power show work"
        advice = ("DCGM profiling fields read 0 while the GPU works (profiling module not loaded, another profiler such as Nsight "
                  "or DCGM on the host holding the counters, or an unsupported GPU/driver): restart dcgm-exporter, check "
                  "`dcgmi profile --list`; until then the GPU's activity is judged by no verdict, never as idle.")
    else:
        title = (f"Activity signals disagree on {gpus} ({where}): {name} reads idle while GPU_UTIL and power show work"
                 + (f" since {since:%Y-%m-%d %H:%M}Z" if since else ""))
        advice = ("Two signals say the GPU works and the profiling ratio says it does not: check the exporter's profiling "
                  "fields and the GPU's MIG/vGPU mode; no verdict until they agree.")
    return _dq(ctx, subject, problem, title, advice, scope, evidence=evidence,
               details={"signal": sig.value, "power_limit_w": limit, "since": since.isoformat() if since else None, **extra})

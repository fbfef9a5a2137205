"""Detectors: unallocated GPU capacity (GPUs on a node that no pod holds), over time; GPUs used without a request.

Capacity is judged over the window from the pods' holding spans (cluster state, no telemetry needed): a
node's free share at time t is its physical GPUs minus the shares held at t, minus the GPUs that are busy
although no pod requested them. Those busy GPUs are a governance finding ("GPU used without a request",
naming the node and, from the exporter's labels, the pod) that carries no waste money: they are used, not
wasted — never unallocated capacity.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from pydantic import Field

from gpuwaste.detectors.episodes import episode, finish, minutes_text, span_seconds
from gpuwaste.detectors.registry import DetectorOutput, NoVerdict, detector
from gpuwaste.join import NodeInventory, ScanContext
from gpuwaste.models.base import SettingsModel
from gpuwaste.models.cluster import Node, mig_total_slices
from gpuwaste.models.findings import Confidence, Episode, Evidence, Finding, IdleMode, WasteKind
from gpuwaste.models.telemetry import GpuTelemetry, Signal


class UnallocatedSettings(SettingsModel):
    """Unallocated capacity.

    Attributes:
        min_free_gpus: smallest free physical-GPU share reported (MIG slices are 1/7 ≈ 0.143).
        busy_ratio: activity ratio 0–1 (p95 over the window) at or above which a GPU no pod holds counts as used
            without a request (a governance finding, not free capacity).
    """

    min_free_gpus: Decimal = Field(Decimal("0.14"), gt=0)
    busy_ratio: float = Field(0.05, ge=0, le=1)


@detector("unallocated_capacity", settings=UnallocatedSettings, optional=(Signal.GR_ENGINE_ACTIVE.value, Signal.GPU_UTIL.value))
def detect_unallocated_capacity(ctx: ScanContext, settings: UnallocatedSettings) -> DetectorOutput:
    """Flag nodes whose physical GPUs exceed what scheduled, non-terminal pods held, over the window (episodes); report
    busy GPUs no pod requested as a governance finding (`WasteKind.UNREQUESTED_USE`), never as free capacity."""
    for inv in ctx.nodes.values():
        node = inv.node
        if node is not None and node.created_at is not None and (ctx.eval_time - node.created_at).total_seconds() < ctx.common.node_grace_s:
            yield NoVerdict("unallocated_capacity", inv.name, "node younger than grace period")
            continue
        capacity = inv.capacity_gpus()
        if capacity == 0:
            continue
        if node is not None and inv.devices and not inv.gpus_known_otherwise and not _known_gpu_resource(node.allocatable_gpu, node.capacity_gpu):
            # B20: the device plugin advertises a resource we do not know, so requests are unknown;
            # data quality warns (unknown_gpu_resource) instead of a made-up free share.
            yield NoVerdict("unallocated_capacity", inv.name, "node advertises no known GPU resource")
            continue
        busy = busy_unrequested(ctx, inv, settings)
        if busy:
            yield unrequested_use(ctx, inv, busy, settings)
        busy_share = sum((_device_share(d, inv) for d in busy), Decimal(0))
        # a GPU the device plugin withdrew from allocatable (unhealthy, XID) can be requested by nobody: not free capacity
        offered = allocatable_gpus(node)
        withheld = max(Decimal(0), Decimal(capacity) - offered) if offered is not None else Decimal(0)
        start = ctx.window_start if node is None or node.created_at is None else max(ctx.window_start, node.created_at)
        first = _first_observed(ctx, inv)
        if first is not None and first > start:
            start = first  # its GPUs' first series: free capacity before them is not observed (issue 21 §4, §9)
        if ctx.telemetry.single_instant:
            # one undated sample shows the node free now, never for how long: the capacity free at that instant, as
            # an episode of no length (its $/day now, 0 GPU-hours in the window; issue 21 §9)
            start = end = ctx.eval_time
            now = max(Decimal(0), Decimal(capacity) - busy_share - withheld - inv.requested_share)
            segments = [(start, start, now)]
            episodes: tuple[Episode, ...] = (episode(ctx, start, start, now),) if now >= settings.min_free_gpus else ()
        else:
            # a node exists from its first to its last series: one that left inside the window is free (or held) until
            # then, its last episode ended there ($0/day now, its GPU-hours in the window kept; issue 21 §4)
            end = ctx.eval_time if node is None or node.gone_at is None else max(start, min(ctx.eval_time, node.gone_at))
            segments = _free_segments(ctx, inv, Decimal(capacity) - busy_share - withheld, start, end)
            episodes = _episodes(ctx, segments, settings.min_free_gpus)
        if not episodes:
            continue
        ongoing = episodes[-1].ongoing
        free = segments[-1][2] if ongoing else _peak(segments, episodes[-1])
        devices = [d for d in inv.unheld_devices if d not in busy]
        evidence: list[Evidence] = [
            Evidence(signal="physical_gpus", unit="count", window_s=ctx.window_s, avg=float(capacity),
                     note=("distinct GPU UUIDs from DCGM and the node's DRA ResourceSlices" if inv.slice_uuids
                           else "distinct DCGM UUIDs" if inv.devices else "node capacity (no DCGM series)")),
            Evidence(signal="requested_gpus", unit="count", window_s=ctx.window_s, avg=float(inv.requested_share),
                     note="held at the evaluation time by pods scheduled on the node and not terminal, in physical-GPU equivalents"),
        ]
        if withheld:
            evidence.append(Evidence(signal="unallocatable_gpus", unit="count", window_s=ctx.window_s, avg=float(withheld),
                                     note="node capacity − allocatable: GPUs the device plugin does not offer, never free capacity"))
        if busy:
            evidence.append(Evidence(signal="busy_unrequested_gpus", unit="count", window_s=ctx.window_s, avg=float(busy_share),
                                     note="busy GPUs no pod requested: a governance finding, not free capacity"))
        if devices:
            act = ctx.activity(devices)
            if act is not None:
                evidence.append(act.evidence(ctx.window_s))
        whole = len(episodes) == 1 and episodes[0].start <= start and ongoing and not ctx.telemetry.single_instant
        finding = Finding(
            kind=WasteKind.UNALLOCATED,
            detector="unallocated_capacity",
            subject=ctx.node_subject(inv, devices, free),
            title=(f"{_fmt(free)} of {capacity} GPU{'' if capacity == 1 else 's'} on node {inv.name} requested by no pod"
                   + ("" if whole else " at the one sample (for how long is unknown)" if ctx.telemetry.single_instant
                      else f" for {minutes_text(episodes)}")),
            recommendation=(
                "Nobody requested this capacity: let the autoscaler remove the node, shrink the node group, "
                "or schedule pending GPU work here."
            ),
            evidence=tuple(evidence),
            confidence=Confidence.HIGH if inv.devices else Confidence.MEDIUM,
            idle_mode=IdleMode.PROVISIONING,
            observed_at=ctx.eval_time,
            window_s=ctx.window_s,
            wasted_gpu_share=free,
            scope_key=inv.name,
            details={"unheld_devices": len(devices), "busy_unrequested_gpus": float(busy_share),
                     "gpu_pods": gpu_pods_text(inv),
                     **({"unallocatable_gpus": float(withheld)} if withheld else {}),
                     "formula": "free GPUs = physical GPUs − GPUs held by pods at each moment − busy GPUs no pod requested"
                                + (" − GPUs not allocatable" if withheld else ""),
                     **({"stranded_by_fragmentation": True} if ctx.stranded_by_fragmentation(free) else {})},
        )
        yield finish(ctx, finding, episodes, span_seconds((start, end)))


def gpu_pods_text(inv: NodeInventory, limit: int = 4) -> str:
    """The pods holding GPUs on the node now, for people who would otherwise drain it ("research/a (2 GPUs),
    search/b (1 GPU)"; the first `limit`, then "and N more"); "" when none."""
    held = sorted(((a.pod.namespace, a.pod.name, a.share) for a in inv.allocations if a.holds_now),
                  key=lambda t: (-t[2], t[0], t[1]))
    parts = [f"{ns}/{name} ({_fmt(share)} GPU{'' if share == 1 else 's'})" for ns, name, share in held[:limit]]
    if len(held) > limit:
        parts.append(f"and {len(held) - limit} more")
    return ", ".join(parts)


def unrequested_use(ctx: ScanContext, inv: NodeInventory, busy: list[GpuTelemetry], settings: UnallocatedSettings) -> Finding:
    """The governance finding for busy GPUs that no pod requested (a privileged DaemonSet with
    NVIDIA_VISIBLE_DEVICES=all, a process on the host): no waste money."""
    ids = {id(d) for d in busy}
    pods = sorted({f"{ns}/{pod}" for dev, ns, pod, _ in ctx.stray_labels if id(dev) in ids})
    act = ctx.activity(busy)
    who = f" by {', '.join(pods)}" if pods else ""
    finding = Finding(
        kind=WasteKind.UNREQUESTED_USE,
        detector="unallocated_capacity",
        subject=ctx.node_subject(inv, busy, Decimal(0)),
        title=f"{len(busy)} GPU{'' if len(busy) == 1 else 's'} on node {inv.name} used without a request{who}",
        recommendation=("Something uses these GPUs outside Kubernetes' accounting (a privileged pod with "
                        "NVIDIA_VISIBLE_DEVICES=all, or a process on the host): make it request nvidia.com/gpu, or stop it, "
                        "so the scheduler does not hand the same GPUs to another pod."),
        evidence=(act.evidence(ctx.window_s, threshold=settings.busy_ratio, comparison=f"p95 ≥ {settings.busy_ratio:g}"),) if act else (),
        confidence=Confidence.HIGH if pods else Confidence.MEDIUM,
        observed_at=ctx.eval_time,
        window_s=ctx.window_s,
        wasted_gpu_share=Decimal(0),
        scope_key=inv.name,
        details={"pods": ", ".join(pods) or None, "devices": ", ".join(str(d.device) for d in busy),
                 "formula": "governance finding: the GPUs are used, not wasted (no money)"},
    )
    return finding.model_copy(update={"observed_s": int(ctx.window_s * (act.coverage if act else 1.0))})


def busy_unrequested(ctx: ScanContext, inv: NodeInventory, settings: UnallocatedSettings) -> list[GpuTelemetry]:
    """The devices of a node that no pod holds now but whose activity p95 reaches `busy_ratio` (trusted telemetry only),
    or whose GPU_UTIL and power show work that a broken profiling ratio denies."""
    out = []
    for dev in inv.unheld_devices:
        problem = ctx.device_problem(dev)
        if problem in ("profiling_counter_broken", "activity_signals_disagree"):
            out.append(dev)  # GPU_UTIL and power say it works: used, whatever the broken ratio reads
            continue
        if problem is not None:
            continue
        act = ctx.activity([dev])
        if act is not None and act.p95 >= settings.busy_ratio:
            out.append(dev)
    return out


def _first_observed(ctx: ScanContext, inv: NodeInventory) -> datetime | None:
    """The start of the first bucket in which any of the node's GPUs has a sample (its first series), or None when the
    telemetry does not resolve time or the node shows no GPU."""
    if not inv.devices or not ctx.slots or ctx.telemetry.bucket_s is None:
        return None
    first: datetime | None = None
    for d in inv.devices:
        for st in (*(x for g in d.groups for x in g.signals.values()), *d.parent_signals.values()):
            end = next((b[0] for b in st.buckets if b[1]), None)  # buckets are oldest first
            if end is not None and (first is None or end < first):
                first = end
    return None if first is None else first - timedelta(seconds=ctx.telemetry.bucket_s)


def allocatable_gpus(node: Node | None) -> Decimal | None:
    """Physical GPUs a node offers for scheduling when its device plugin withdrew some (allocatable below capacity:
    unhealthy, XID), from `nvidia.com/gpu` or `nvidia.com/gpu.shared` (÷ time-slicing replicas); None when allocatable
    is not below capacity (or unknown): nothing withdrawn."""
    if node is None:
        return None
    for res in ("nvidia.com/gpu", "nvidia.com/gpu.shared"):
        cap, alloc = node.capacity_gpu.get(res), node.allocatable_gpu.get(res)
        if cap is not None and alloc is not None and alloc < cap:
            return Decimal(alloc) / Decimal(max(1, node.gpu_replicas))
    return None


def _device_share(dev: GpuTelemetry, inv: NodeInventory) -> Decimal:
    """Physical-GPU equivalents of one device: 1, or a MIG instance's slices ÷ the GPU's compute slices."""
    if dev.device.gpu_i_id is None:
        return Decimal(1)
    head = (dev.mig_profile or "").partition("g.")[0]
    return Decimal(int(head)) / Decimal(mig_total_slices(inv.node)) if head.isdigit() else Decimal(0)


def _free_segments(ctx: ScanContext, inv: NodeInventory, capacity: Decimal, start: datetime, end: datetime | None = None
                   ) -> list[tuple[datetime, datetime, Decimal]]:
    """(from, to, free share) pieces of [start, end] (end: the evaluation time, or when the node left): the held shares
    change only where a holding starts or ends."""
    end = ctx.eval_time if end is None else end
    if end <= start:
        return []
    cuts = {start, end}
    for a in inv.allocations:
        for t in (a.held_from, a.held_until):
            if t is not None and start < t < end:
                cuts.add(t)
    edges = sorted(cuts)
    out = []
    for lo, hi in zip(edges, edges[1:], strict=False):
        mid = lo + (hi - lo) / 2
        out.append((lo, hi, max(Decimal(0), capacity - inv.requested_share_at(mid))))
    return out


def _episodes(ctx: ScanContext, segments: list[tuple[datetime, datetime, Decimal]], min_free: Decimal) -> tuple[Episode, ...]:
    """Consecutive pieces with at least `min_free` GPUs free, each piece's GPU-hours added up."""
    out: list[Episode] = []
    for lo, hi, free in segments:
        if free < min_free:
            continue
        piece = episode(ctx, lo, hi, free)
        if out and out[-1].end == lo:
            prev = out[-1]
            out[-1] = Episode(start=prev.start, end=hi, wasted_gpu_hours=prev.wasted_gpu_hours + piece.wasted_gpu_hours, ongoing=piece.ongoing)
        else:
            out.append(piece)
    whole = (segments[-1][1] - segments[0][0]).total_seconds() if segments else 0.0
    # a GPU free for a few minutes between two pods is scheduling, not waste: keep stretches of at least
    # `min_episode_s` (or one covering the whole judged span) that are going on now or add up to a sizeable share
    kept = [e for e in out if (e.end - e.start).total_seconds() >= min(ctx.common.min_episode_s, whole)]
    if kept and not kept[-1].ongoing and sum((e.end - e.start).total_seconds() for e in kept) < ctx.common.min_episode_share * whole:
        return ()
    return tuple(kept)


def _peak(segments: list[tuple[datetime, datetime, Decimal]], ep: Episode) -> Decimal:
    """The largest free share inside an episode."""
    return max((free for lo, hi, free in segments if ep.start <= lo and hi <= ep.end), default=Decimal(0))


def _known_gpu_resource(*resources: dict[str, int]) -> bool:
    from gpuwaste.detectors.data_quality import KNOWN_GPU_RESOURCE_PREFIXES

    return any(r.startswith(KNOWN_GPU_RESOURCE_PREFIXES) for res in resources for r in res)


def _fmt(value: Decimal) -> str:
    return f"{value.normalize():f}" if value == value.to_integral() else f"{value:.2f}"

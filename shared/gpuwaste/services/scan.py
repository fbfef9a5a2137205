"""Service: one scan of one cluster — read cluster state and telemetry, detect, price, enqueue."""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from gpuwaste.allocation import mix_text
from gpuwaste.allocation.physical import physical_gpu_count
from gpuwaste.detectors import DetectorSettings, NoVerdict, run_detectors
from gpuwaste.errors import ConfigError
from gpuwaste.join import ScanContext, join
from gpuwaste.models.cluster import ClusterState
from gpuwaste.models.collector import PAUSED_COLLECTOR
from gpuwaste.models.coverage import KindCoverage
from gpuwaste.models.findings import Episode, Finding
from gpuwaste.models.messages import FindingMessage, ScanCompleted
from gpuwaste.models.settings import DeliverySettings
from gpuwaste.models.spend import ScanAllocation
from gpuwaste.models.telemetry import ACTIVITY_SIGNALS, TelemetryWindow
from gpuwaste.ports import (
    ClusterStateSource,
    FindingQueue,
    GpuTelemetrySource,
    NodeScopedClusterSource,
    NodeScopedTelemetrySource,
)
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.pricing.cost import price_finding
from gpuwaste.pricing.power import power_limits_w
from gpuwaste.services.shards import hostnames, plan_shards, shard_state, shard_telemetry
from gpuwaste.services.showback import (
    ScanLedger,
    conservation_figures,
    funnel_figures,
    scan_ledger,
    unmet_by_resource,
    unmet_requests,
)
from gpuwaste.services.showback.spend import scan_allocation

logger = logging.getLogger(__name__)

#: The shortest window a scan accepts: every rule uses 10-minute averages, and stale/frozen checks need 20 samples.
MIN_WINDOW = timedelta(minutes=10)


@dataclass(frozen=True)
class Inventory:
    """What the scan saw, for an honest report.

    Attributes:
        physical_gpus: distinct DCGM UUIDs. mig_instances: devices with a GPU_I_ID.
        pods_holding_gpus: pods holding GPUs at the evaluation time (a Job that finished inside the window held its
            GPUs until it ended and is not counted).
        models: GPU model → physical GPUs. activity_signals: signal → devices using it.
        attribution: how allocations were tied to devices (labels / elimination / unknown).
        allocation: the allocation mix in words ("device plugin 212 GPUs (90 pods), MIG 2 GPUs (14 pods)").
        allocation_mix: mechanism → {"pods": n, "gpus": physical-GPU equivalents held}.
        allocation_notes: data-quality notes of the allocation resolvers and the physical GPU counts ("node n1
            advertises 40 nvidia.com/gpu, DCGM sees 4 GPUs: HAMi shares"; claims nobody uses; RBAC to grant).
        attribution_coverage: allocation kind → {"allocated_gpu_hours", "attributed_gpu_hours", "ratio"} (ratio 0–1:
            the share of allocated GPU-hours with attributable telemetry; `ScanContext.attribution_coverage`), plus
            "all" over every kind; empty when no pod holds a GPU.
        funnel: "cluster" / "gpu_model" → group → total → allocated → active → effective GPU-hours and GPUs over the
            window (`services.showback.FUNNEL_RULE`); the per-team funnel needs routing and is built by the surfaces.
        unmet_gpu_requests: GPU resource → {"pods", "requested", "longest_wait_s", "mean_wait_s"} of Pending pods no
            node took (`services.showback.unmet_requests`).
        conservation: the share-conservation check of the window's ledger (`services.showback.conservation_figures`).
    """

    nodes: int
    physical_gpus: int
    mig_instances: int
    pods_holding_gpus: int
    models: dict[str, int]
    activity_signals: dict[str, int]
    attribution: dict[str, int]
    metrics_present: tuple[str, ...]
    single_instant: bool
    allocation: str = ""
    allocation_mix: dict[str, dict[str, float | int]] = field(default_factory=dict)
    allocation_notes: tuple[str, ...] = ()
    attribution_coverage: dict[str, dict[str, float]] = field(default_factory=dict)
    funnel: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    unmet_gpu_requests: dict[str, dict[str, float | int | None]] = field(default_factory=dict)
    conservation: dict[str, object] = field(default_factory=dict)

    @property
    def attribution_ratio(self) -> float | None:
        """The share 0–1 of allocated GPU-hours with attributable telemetry over every kind; None when none allocated."""
        all_kinds = self.attribution_coverage.get("all")
        return None if all_kinds is None else all_kinds["ratio"]


def coverage_figures(ctx: ScanContext) -> dict[str, dict[str, float]]:
    """`Inventory.attribution_coverage` from the scan context."""
    per = ctx.attribution_coverage()
    out: dict[str, dict[str, float]] = {}
    total_a = total_b = Decimal(0)
    for kind, (allocated, attributed) in per.items():
        total_a += allocated
        total_b += attributed
        out[kind] = _figure(allocated, attributed)
    if per:
        out["all"] = _figure(total_a, total_b)
    return out


def coverage_of(ctx: ScanContext) -> tuple[KindCoverage, ...]:
    """The scan's attribution coverage per allocation kind as its completion carries it (`ScanCompleted.coverage`).

    Allocated and attributed GPU-hours in the window, kinds sorted; empty when no pod holds a GPU.
    """
    return tuple(KindCoverage(kind=kind, allocated_gpu_hours=float(allocated), attributed_gpu_hours=float(attributed))
                 for kind, (allocated, attributed) in sorted(ctx.attribution_coverage().items()))


def _figure(allocated: Decimal, attributed: Decimal) -> dict[str, float]:
    ratio = float(min(Decimal(1), attributed / allocated)) if allocated > 0 else 1.0
    return {"allocated_gpu_hours": float(allocated), "attributed_gpu_hours": float(attributed), "ratio": round(ratio, 4)}


@dataclass
class ScanReport:
    """The result of one scan.

    `timings_s` holds each part's own duration (cluster state and telemetry are read at the same time, so the
    parts add up to more than the scan); `duration_s` is the scan's wall time.
    """

    scan_id: str
    cluster: str
    eval_time: datetime
    window_s: int
    findings: list[Finding]
    no_verdict: list[NoVerdict]
    inventory: Inventory
    timings_s: dict[str, float] = field(default_factory=dict)
    duration_s: float = 0.0
    query_count: int = 0
    telemetry_source: str = ""
    cluster_source: str = ""
    telemetry_quality: dict[str, Any] = field(default_factory=dict)
    cluster_notes: tuple[str, ...] = ()
    #: the window's GPU-hours charged once to holders, unsold slices and unallocated capacity (`services.showback`)
    showback: ScanLedger | None = None


def telemetry_quality(telemetry: TelemetryWindow) -> dict[str, Any]:
    """How the telemetry was read, for the report: plan, sample spacing, bucket width, unreadable samples (with where)."""
    return {
        "plan": telemetry.plan,
        "sample_interval_s": telemetry.scrape_interval_s,
        "sample_interval_inferred": telemetry.scrape_interval_inferred,
        "bucket_s": telemetry.bucket_s,
        "unreadable_samples": telemetry.unreadable_samples,
        "problems": [p.model_dump() for p in telemetry.problems],
    }


def inventory_of(ctx: ScanContext, ledger: ScanLedger | None = None) -> Inventory:
    """Summarise what a scan context holds (with the funnel and the conservation check when `ledger` is given)."""
    gpus = [g for g in ctx.telemetry.gpus if not g.is_mig_parent]
    uuids = {g.device.uuid for g in ctx.telemetry.gpus} | set(ctx.telemetry.other_gpus)  # GPUs on unread fields count too
    uuids |= {u for inv in ctx.nodes.values() for u in inv.slice_uuids}  # and DRA devices the exporter does not show
    models: Counter[str] = Counter()
    seen: set[str] = set()
    for g in ctx.telemetry.gpus:
        if g.device.uuid not in seen:
            seen.add(g.device.uuid)
            models[g.model_name or "unknown"] += 1
    signals: Counter[str] = Counter()
    for g in gpus:
        sig = ctx.activity_signal(g)
        signals[sig.value if sig else "none"] += 1
    attribution = Counter(a.attribution.value for a in ctx.allocations)
    return Inventory(
        nodes=len(ctx.nodes),
        physical_gpus=len(uuids),
        mig_instances=sum(1 for g in gpus if g.device.gpu_i_id),
        pods_holding_gpus=sum(1 for a in ctx.allocations if a.holds_now),
        models=dict(models),
        activity_signals=dict(signals),
        attribution=dict(attribution),
        metrics_present=tuple(sorted(ctx.telemetry.metrics_present)),
        single_instant=ctx.telemetry.single_instant,
        allocation=mix_text(ctx.resolved.mix),
        allocation_mix={k: {"pods": v.pods, "gpus": float(v.share)} for k, v in ctx.resolved.mix.items()},
        allocation_notes=allocation_notes(ctx),
        attribution_coverage=coverage_figures(ctx),
        funnel={} if ledger is None else {by: funnel_figures(ledger, by) for by in ("cluster", "gpu_model")},
        unmet_gpu_requests=unmet_by_resource(ledger.unmet if ledger is not None else unmet_requests(ctx)),
        conservation={} if ledger is None else conservation_figures(ledger.ledger.conservation),
    )


def allocation_notes(ctx: ScanContext) -> tuple[str, ...]:
    """The resolvers' notes, then each node's physical-count disagreements (capacity is never a GPU count)."""
    notes: dict[str, None] = dict.fromkeys(ctx.resolved.notes)
    for inv in ctx.nodes.values():
        reason = "HAMi shares" if any(a.mechanism == "HAMi" for a in inv.allocations) else None
        hidden = len(inv.hidden_unclaimed)
        seen = len(inv.physical_uuids)
        count = physical_gpu_count(inv.node, seen + hidden if seen else 0, known_by_resolvers=inv.known_gpus,
                                   share_reason=reason)
        if hidden:
            notes[f"node {inv.name}: its ResourceSlices list {len(inv.slice_uuids)} GPUs, DCGM reports {seen}: {hidden} "
                  "that no claim holds are counted as free capacity from the slices"] = None
        notes.update(dict.fromkeys(count.notes))
    return tuple(notes)


def merge_replicas(findings: list[Finding]) -> list[Finding]:
    """One finding per identity: replicas of one workload with the same waste kind become one finding.

    A finding's fingerprint is cluster + namespace + workload + kind, so two idle replicas of a Deployment
    share it; kept apart, the lifecycle would take the second for a redelivery and drop its money. They
    are merged (wasted GPUs, held GPUs and devices added up; the lowest confidence kept; every pod named in
    `details["pods"]`) when their pricing inputs agree; replicas on differently priced nodes stay separate
    findings, told apart by the node's instance type, capacity type and region in the scope key.
    """
    groups: dict[str, list[Finding]] = {}
    for f in findings:
        groups.setdefault(f.fingerprint, []).append(f)
    out: list[Finding] = []
    renamed: dict[tuple[str, tuple[str | None, ...]], str] = {}  # (old fingerprint, price key) → new fingerprint
    for fp, items in groups.items():
        if len(items) == 1:
            out.append(items[0])
            continue
        by_price: dict[tuple[str | None, ...], list[Finding]] = {}
        for f in items:
            by_price.setdefault(_price_key(f), []).append(f)
        for key, group in by_price.items():
            merged = group[0] if len(group) == 1 else _merge(group)
            if len(by_price) > 1:
                merged = merged.model_copy(update={"scope_key": f"{merged.scope_key}@{'/'.join(k or '-' for k in key[:3])}"})
                renamed[(fp, key)] = merged.fingerprint
            out.append(merged)
    # a finding whose money another owns points to that owner's fingerprint as merged (same node, same price key)
    return [f.model_copy(update={"money_owner": renamed[(f.money_owner, _price_key(f))]})
            if f.money_owner and (f.money_owner, _price_key(f)) in renamed else f for f in out]


def _price_key(f: Finding) -> tuple[str | None, ...]:
    s = f.subject
    return (s.instance_type, s.capacity_type, s.region, s.accelerator, s.gpu_model, str(s.physical_gpus_on_node))


_CONFIDENCE_ORDER = {"low": 0, "medium": 1, "high": 2}


def _merge(group: list[Finding]) -> Finding:
    group = sorted(group, key=lambda f: f.subject.pod or "")
    first = group[0]
    pods = [f.subject.pod for f in group if f.subject.pod]
    subject = first.subject.model_copy(update={
        "gpus": tuple(g for f in group for g in f.subject.gpus),
        "gpu_share": sum((f.subject.gpu_share for f in group), Decimal(0)),
    })
    s = first.subject
    owners = {f.money_owner for f in group}
    pointed = [f.subject.pod or "" for f in group if f.money_owner]
    return first.model_copy(update={
        "subject": subject,
        "wasted_gpu_share": sum((f.wasted_gpu_share for f in group), Decimal(0)),
        "wasted_gpu_hours": sum((f.wasted_gpu_hours for f in group), Decimal(0)),
        "episodes": _union_episodes(group),
        "observed_s": min(f.observed_s for f in group),
        "money_owner": owners.pop() if len(owners) == 1 else None,
        "title": f"{len(group)} pods of {s.namespace}/{s.workload_name} ({s.workload_kind}): {first.title} — and {len(group) - 1} more",
        "confidence": min((f.confidence for f in group), key=lambda c: _CONFIDENCE_ORDER[c.value]),
        "details": {**first.details, "pods": ", ".join(pods), "replicas": len(group),
                    **({"money_owned_elsewhere_pods": ", ".join(pointed)} if pointed and len(pointed) < len(group) else {})},
    })


def _union_episodes(group: list[Finding]) -> tuple[Episode, ...]:
    """The replicas' episodes as one timeline: overlapping stretches joined, their GPU-hours added."""
    eps = sorted((e for f in group for e in f.episodes), key=lambda e: (e.start, e.end))
    out: list[Episode] = []
    for e in eps:
        if out and e.start <= out[-1].end:
            last = out[-1]
            out[-1] = Episode(start=last.start, end=max(last.end, e.end), ongoing=last.ongoing or e.ongoing,
                              wasted_gpu_hours=last.wasted_gpu_hours + e.wasted_gpu_hours)
        else:
            out.append(e)
    return tuple(out)


class ScanService:
    """Scan one cluster: cluster state + telemetry → joined context → detectors → (priced) findings.

    Args:
        price_book: when given, findings are priced in the scan (the local command); the pipeline
            prices in its own function instead.
        queue: when given, findings go on it as `FindingMessage`s, followed by a `ScanCompleted`.
        ledger_price_book: prices the share ledger (`ScanReport.showback`) when the findings are priced elsewhere
            (default: `price_book`; neither: the ledger has GPU-hours only).
        delivery: the routing that names the teams of the allocation ledger the completion carries (issue 24;
            default: namespaces as teams).
    """

    def __init__(
        self,
        *,
        cluster_source: ClusterStateSource,
        telemetry_source: GpuTelemetrySource,
        settings: DetectorSettings | None = None,
        window: timedelta = timedelta(hours=1),
        price_book: PriceBook | None = None,
        queue: FindingQueue | None = None,
        progress: Callable[[str], None] | None = None,
        ledger_price_book: PriceBook | None = None,
        delivery: DeliverySettings | None = None,
    ) -> None:
        self.cluster_source = cluster_source
        self.telemetry_source = telemetry_source
        self.settings = settings or DetectorSettings()
        if window < MIN_WINDOW:
            raise ConfigError(
                f"scan window {int(window.total_seconds())} s is too short: the detectors use 10-minute averages "
                f"and need at least {int(MIN_WINDOW.total_seconds())} s (e.g. --window 10m or more)"
            )
        self.window = window
        self.price_book = price_book
        self.ledger_price_book = ledger_price_book or price_book
        self.queue = queue
        self.delivery = delivery
        self._progress = progress or (lambda _msg: None)

    def scan(self, *, at: datetime, scan_id: str | None = None, shard: int = 0, shard_count: int = 1) -> ScanReport:
        """Run one scan (or shard `shard` of `shard_count` of it: `services.shards`) evaluated at `at`.

        `at` is the scheduled time; the cyclic garbage collector is paused meanwhile.

        Raises:
            ValueError: `shard` not in 0 … `shard_count` − 1.
            SourceUnavailableError, SourceAuthError, InputFormatError: from the sources.
            RetryableError: when the findings queue cannot take the findings.
        """
        if not 0 <= shard < shard_count:
            raise ValueError(f"shard {shard} of {shard_count}: out of range")
        with PAUSED_COLLECTOR:
            return self._scan(at=at, scan_id=scan_id, shard=shard, shard_count=shard_count)

    def _scan(self, *, at: datetime, scan_id: str | None, shard: int = 0, shard_count: int = 1) -> ScanReport:
        scan_id = scan_id or uuid.uuid4().hex
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        self._progress("reading cluster state and telemetry")
        if shard_count == 1:
            cluster, telemetry = self._read(at, timings)
        else:
            cluster, telemetry = self._read_shard(at, timings, shard, shard_count)
        t2 = time.perf_counter()
        self._progress("detecting")
        ctx = join(cluster, telemetry, self.settings.common,
                            power_limits_w=power_limits_w(g.model_name for g in telemetry.gpus))
        result = run_detectors(ctx, self.settings.by_name(), self.settings.enabled)
        findings = merge_replicas(list(result.findings))
        t3 = time.perf_counter()
        timings["detect"] = t3 - t2
        if self.price_book is not None:
            findings = [price_finding(f, self.price_book) for f in findings]
        timings["price"] = time.perf_counter() - t3
        ledger = scan_ledger(ctx, self.ledger_price_book)
        timings["showback"] = time.perf_counter() - t3 - timings["price"]
        findings.sort(key=lambda f: (-(f.usd_per_day or 0), f.kind.value, f.subject.namespace or "", f.subject.pod or f.subject.node or ""))
        if self.queue is not None:
            t4 = time.perf_counter()
            # a scan judges nothing when GPUs exist but no telemetry came (or one sample): never a "miss" then
            gpus_exist = bool(cluster.nodes) or any(p.holds_gpus for p in cluster.pods)
            judged = not telemetry.single_instant and (bool(telemetry.gpus) or not gpus_exist)
            unjudged = tuple(sorted({nv.subject for nv in result.no_verdict}))
            self.send(scan_id, cluster.cluster, at, findings, judged=judged, unjudged=unjudged,
                      coverage=coverage_of(ctx), shard=shard, shard_count=shard_count,
                      allocation=scan_allocation(ledger, self.delivery))
            timings["enqueue"] = time.perf_counter() - t4
        report = ScanReport(
            scan_id=scan_id,
            cluster=cluster.cluster,
            eval_time=at,
            window_s=telemetry.window_s,
            findings=findings,
            no_verdict=list(result.no_verdict),
            inventory=inventory_of(ctx, ledger),
            timings_s=timings,
            duration_s=time.perf_counter() - t0,
            query_count=telemetry.query_count + cluster.query_count,
            telemetry_source=telemetry.source,
            cluster_source=cluster.source,
            telemetry_quality=telemetry_quality(telemetry),
            cluster_notes=cluster.notes,
            showback=ledger,
        )
        logger.info(
            "scan finished",
            extra={"cluster": cluster.cluster, "scan_id": scan_id, "findings": len(findings), "gpus": report.inventory.physical_gpus},
        )
        return report

    def _read(self, at: datetime, timings: dict[str, float]) -> tuple[ClusterState, TelemetryWindow]:
        """Cluster state and telemetry, read at the same time (both wait on I/O: the API server and Prometheus).

        The cluster state is read on a second thread while this one reads the telemetry; each part's own
        duration goes to `timings` ("cluster_state", "telemetry"). When both fail, the cluster-state error
        is raised (as when they were read one after the other).
        """

        def cluster_state() -> ClusterState:
            c0 = time.perf_counter()
            try:
                return self.cluster_source.cluster_state(at=at)
            finally:
                timings["cluster_state"] = time.perf_counter() - c0

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cluster-state") as pool:
            pending = pool.submit(cluster_state)
            t0 = time.perf_counter()
            try:
                telemetry = self.telemetry_source.telemetry(at=at, window=self.window)
            except BaseException:
                pending.result()  # a cluster-state error wins, as when it was read first
                raise
            finally:
                timings["telemetry"] = time.perf_counter() - t0
            cluster = pending.result()
        return cluster, telemetry

    def _read_shard(self, at: datetime, timings: dict[str, float], shard: int, shard_count: int) -> tuple[ClusterState, TelemetryWindow]:
        """The cluster state, then the telemetry of shard `shard`'s nodes only (the plan needs the state first).

        A `NodeScopedTelemetrySource` is asked for those nodes' series; whatever comes is narrowed to them. A
        `NodeScopedClusterSource` (KSM) is read twice: what the plan needs, whole, then the shard's nodes only.
        """
        c0 = time.perf_counter()
        whole, mine = self._shard_states(at, shard, shard_count)
        timings["cluster_state"] = time.perf_counter() - c0
        plan = plan_shards(whole, shard_count)
        source: GpuTelemetrySource = self.telemetry_source
        if isinstance(source, NodeScopedTelemetrySource):
            values = hostnames(whole, plan.nodes(shard))
            try:
                source = source.for_hostnames(values) if values else source
            except ValueError as exc:  # too many for one matcher: read every series, keep this shard's
                logger.warning("shard read whole", extra={"shard": shard, "shard_count": shard_count, "reason": str(exc)})
        t0 = time.perf_counter()
        telemetry = source.telemetry(at=at, window=self.window)
        timings["telemetry"] = time.perf_counter() - t0
        return shard_state(mine or whole, plan, shard), shard_telemetry(telemetry, whole, plan, shard)

    def _shard_states(self, at: datetime, shard: int, shard_count: int) -> tuple[ClusterState, ClusterState | None]:
        """(the state the plan is made from, the shard's own read or None when that is the same one)."""
        source = self.cluster_source
        if not isinstance(source, NodeScopedClusterSource):
            return source.cluster_state(at=at), None
        planning = source.planning_state(at=at)
        nodes = plan_shards(planning, shard_count).nodes(shard)
        try:
            narrowed = source.for_nodes(sorted(nodes), first=shard == 0)
        except ValueError as exc:  # no node of its own, or too many for one matcher: read whole, keep its own
            logger.warning("shard cluster state read whole", extra={"shard": shard, "reason": str(exc)})
            return planning, source.cluster_state(at=at)
        return planning, narrowed.cluster_state(at=at)

    def send(self, scan_id: str, cluster: str, at: datetime, findings: Sequence[Finding], *, judged: bool = True,
             unjudged: tuple[str, ...] = (), coverage: tuple[KindCoverage, ...] = (), shard: int = 0,
             shard_count: int = 1, allocation: ScanAllocation | None = None) -> None:
        """Put the findings and the scan completion on the queue.

        The completion carries what the scan could not judge, its attribution coverage per allocation kind, its
        allocation ledger (funnel and allocated cost per team and namespace) and the shard it covers.
        """
        assert self.queue is not None
        total = len(findings)
        self.queue.send_findings(
            [FindingMessage(scan_id=scan_id, scan_seq=i, scan_total=total, finding=f) for i, f in enumerate(findings)]
        )
        self.queue.send_scan_completed(
            ScanCompleted(scan_id=scan_id, cluster=cluster, scheduled_time=at, fingerprints=tuple(f.fingerprint for f in findings),
                          judged=judged, unjudged=unjudged, coverage=coverage, shard=shard, shard_count=shard_count,
                          allocation=allocation)
        )


__all__ = ["ACTIVITY_SIGNALS", "Inventory", "ScanReport", "ScanService", "inventory_of"]

"""Service: the metrics gpuwaste exposes — open waste per workload, running totals, scan health.

Pure (no SDKs): it turns lifecycle records or scan findings into a `MetricsSnapshot`; the Prometheus adapter
(`sinks/prometheus_metrics.py`) renders it for `/metrics` and the textfile collector, the Lambda helper
(`bootstrap/cloudwatch.py`) for CloudWatch.

Rules (docs/metrics.md):

- Open waste is the lifecycle's open records (a finding stays open until `resolve_after_missed_scans` scans
  miss it), data-quality findings left out (they carry no money). A finding whose GPU-hours are priced by
  another finding of the same scan (`money_owner`) adds its count, not its money or GPUs.
- Label cardinality is bounded: per (cluster, namespace) the `top` workloads by USD/day (then wasted GPUs, then
  name) keep their own series; the rest are summed into workload "other". Node-level findings have namespace ""
  and the node as workload, bounded the same way. Counters carry no workload label at all.
- Counters grow per successful scan by the open waste × the time since the cluster's previous successful scan
  (the first scan of a process counts `first_span`), the lifecycle's own money model. Realised savings: a
  resolved finding credits its `saved_usd_per_day` for `savings_credit` after its resolution.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from gpuwaste.models.findings import Finding, WasteKind
from gpuwaste.models.lifecycle import FindingRecord, FindingState
from gpuwaste.models.metrics import (
    ERROR_SOURCES,
    OTHER_WORKLOADS,
    UNASSIGNED_TEAM,
    CounterSample,
    MetricsSnapshot,
    ScanHealth,
    WasteSeries,
)
from gpuwaste.models.settings import DeliverySettings
from gpuwaste.services.notify import finding_from_record
from gpuwaste.services.routing import route_for

HOUR_S = Decimal(3600)
DAY_S = Decimal(86400)


def team_of_finding(finding: Finding, settings: DeliverySettings) -> str:
    """The finding's team by the delivery routing (annotation, label, namespace map), else "unassigned"."""
    return route_for(finding, settings).team or UNASSIGNED_TEAM


def team_of_record(record: FindingRecord, settings: DeliverySettings) -> str:
    """The record's stored team, else routed from its stored finding, else "unassigned" (as the daily summary)."""
    if record.team:
        return record.team
    finding = finding_from_record(record)
    return team_of_finding(finding, settings) if finding is not None else UNASSIGNED_TEAM


def _started(finding: Finding) -> datetime:
    """When the finding's waste started: its ongoing episode's start, else the start of its evidence window."""
    ongoing = [e.start for e in finding.episodes if e.ongoing]
    return min(ongoing) if ongoing else finding.observed_at - timedelta(seconds=finding.window_s)


def _series(finding: Finding | None, *, cluster: str, namespace: str | None, workload: str | None, kind: str,
            team: str, usd_per_day: Decimal | None, since: datetime | None) -> WasteSeries:
    shared = finding is not None and finding.money_owner is not None  # priced by another finding: count only
    node = finding.subject.node if finding is not None else None
    return WasteSeries(
        cluster=cluster,
        namespace=namespace or "",
        workload=workload or (node if not namespace else None) or "",
        kind=kind,
        team=team,
        usd_per_day=Decimal(0) if shared or usd_per_day is None else usd_per_day,
        wasted_gpus=Decimal(0) if shared or finding is None else finding.wasted_gpu_share,
        findings=1,
        unpriced=1 if usd_per_day is None and not shared else 0,
        since=since,
    )


def waste_from_findings(findings: Iterable[Finding], settings: DeliverySettings) -> list[WasteSeries]:
    """One series per waste finding of a scan (data-quality findings left out), unbounded."""
    return [
        _series(f, cluster=f.subject.cluster, namespace=f.subject.namespace, workload=f.subject.workload_name,
                kind=f.kind.value, team=team_of_finding(f, settings), usd_per_day=f.usd_per_day, since=_started(f))
        for f in findings if f.kind.is_waste
    ]


def waste_from_records(records: Iterable[FindingRecord], settings: DeliverySettings) -> list[WasteSeries]:
    """One series per open waste record of the lifecycle store (data-quality records left out), unbounded."""
    out = []
    for r in records:
        if r.state is not FindingState.OPEN or r.kind == WasteKind.DATA_QUALITY.value:
            continue
        finding = finding_from_record(r)
        lead = timedelta(seconds=finding.window_s) if finding is not None else timedelta(0)
        out.append(_series(finding, cluster=r.cluster, namespace=r.namespace, workload=r.workload, kind=r.kind,
                           team=team_of_record(r, settings), usd_per_day=r.usd_per_day, since=r.first_seen - lead))
    return out


def _add(a: WasteSeries, b: WasteSeries) -> WasteSeries:
    since = min((t for t in (a.since, b.since) if t is not None), default=None)
    return a.model_copy(update={"usd_per_day": a.usd_per_day + b.usd_per_day, "wasted_gpus": a.wasted_gpus + b.wasted_gpus,
                                "findings": a.findings + b.findings, "unpriced": a.unpriced + b.unpriced, "since": since})


def budgets(waste: Iterable[WasteSeries], configured: dict[str, Decimal], default: Decimal | None) -> dict[str, Decimal]:
    """The waste budget (USD/day) of each configured team, and `default` for every other team with waste."""
    out = dict(configured)
    if default is not None:
        for s in waste:
            out.setdefault(s.team, default)
    return out


def bound_workloads(series: Iterable[WasteSeries], top: int) -> tuple[WasteSeries, ...]:
    """Merge series of the same labels, then keep the `top` workloads of each (cluster, namespace) by USD/day
    (then wasted GPUs, then name) and sum the rest into workload "other" (per kind and team).

    Every USD/day, GPU and finding of the input is still in the output: only labels are folded.
    """
    merged: dict[tuple[str, str, str, str, str], WasteSeries] = {}
    for s in series:
        key = (s.cluster, s.namespace, s.workload, s.kind, s.team)
        merged[key] = _add(merged[key], s) if key in merged else s
    by_ns: dict[tuple[str, str], dict[str, list[WasteSeries]]] = defaultdict(lambda: defaultdict(list))
    for s in merged.values():
        by_ns[(s.cluster, s.namespace)][s.workload].append(s)
    out: list[WasteSeries] = []
    for workloads in by_ns.values():
        ranked = sorted(workloads.items(), key=lambda item: (
            -sum(s.usd_per_day for s in item[1]), -sum(s.wasted_gpus for s in item[1]), item[0]))
        kept = {name for name, _ in ranked[:top]}
        folded: dict[tuple[str, str], WasteSeries] = {}
        for name, items in ranked:
            for s in items:
                if name in kept and name != OTHER_WORKLOADS:
                    out.append(s)
                    continue
                rest = (s.kind, s.team)
                other = s.model_copy(update={"workload": OTHER_WORKLOADS})
                folded[rest] = _add(folded[rest], other) if rest in folded else other
        out.extend(folded.values())
    return tuple(sorted(out, key=lambda s: (s.cluster, s.namespace, s.workload, s.kind, s.team)))


def health_of_scan(cluster: str, *, at: datetime, duration_s: float, window_s: int, gpus: int,
                   findings: Sequence[Finding], no_verdict_detectors: Iterable[str],
                   coverage: Mapping[str, Mapping[str, float]] | None = None,
                   showback: Mapping[str, dict[str, Any]] | None = None) -> ScanHealth:
    """The health of one successful scan (a one-shot `scan --output openmetrics`); `coverage`: the scan's
    `Inventory.attribution_coverage`; `showback`: `services.showback.health_figures` of the scan."""
    return _success(ScanHealth(cluster=cluster), at=at, duration_s=duration_s, window_s=window_s, gpus=gpus,
                    findings=findings, no_verdict_detectors=no_verdict_detectors, coverage=coverage, showback=showback)


def _success(health: ScanHealth, *, at: datetime, duration_s: float, window_s: int, gpus: int,
             findings: Sequence[Finding], no_verdict_detectors: Iterable[str],
             coverage: Mapping[str, Mapping[str, float]] | None = None,
             showback: Mapping[str, dict[str, Any]] | None = None) -> ScanHealth:
    kinds: dict[str, int] = defaultdict(int)
    quality: dict[str, int] = defaultdict(int)
    for f in findings:
        kinds[f.kind.value] += 1
        if f.kind is WasteKind.DATA_QUALITY:
            quality[(f.scope_key or "unknown").split(":", 1)[0]] += 1
    no_verdict: dict[str, int] = defaultdict(int)
    for detector in no_verdict_detectors:
        no_verdict[detector] += 1
    scans = dict(health.scans)
    scans["success"] = scans.get("success", 0) + 1
    return health.model_copy(update={
        "last_attempt": at, "last_success": at, "duration_s": duration_s, "window_s": window_s, "gpus": gpus,
        "findings_by_kind": dict(kinds), "data_quality": dict(quality), "no_verdict": dict(no_verdict), "scans": scans,
        "attribution": {k: float(v["ratio"]) for k, v in (coverage or {}).items()},
        "allocated_gpu_hours": {k: float(v["allocated_gpu_hours"]) for k, v in (coverage or {}).items()},
        **({k: dict(v) for k, v in showback.items()} if showback else {}),
    })


def snapshot_of_scan(findings: Sequence[Finding], health: ScanHealth, settings: DeliverySettings, *, top: int,
                     team_budgets: dict[str, Decimal] | None = None, default_budget: Decimal | None = None,
                     version: str = "") -> MetricsSnapshot:
    """The snapshot of one scan (`gpuwaste scan --output openmetrics`): its waste findings and health.

    The counter families stay empty: a one-shot has no running total (`gpuwaste serve` has).
    """
    waste = bound_workloads(waste_from_findings(findings, settings), top)
    return MetricsSnapshot(waste=waste, health=(health,), top_workloads=top,
                           budgets=budgets(waste, team_budgets or {}, default_budget), version=version)


@dataclass
class MetricsState:
    """What `gpuwaste serve` exposes, updated after each scan of each cluster (not thread-safe by itself: the
    caller swaps `snapshot()` results for the HTTP thread).

    Args:
        top: workloads kept per namespace. first_span: the span the first scan of a cluster counts (s).
        savings_credit: how long a resolution's saving is credited to realised savings.
    """

    settings: DeliverySettings
    top: int = 10
    first_span: timedelta = timedelta(minutes=10)
    savings_credit: timedelta = timedelta(days=30)
    team_budgets: dict[str, Decimal] = field(default_factory=dict)
    default_budget: Decimal | None = None
    version: str = ""
    _waste: dict[str, tuple[WasteSeries, ...]] = field(default_factory=dict)
    _health: dict[str, ScanHealth] = field(default_factory=dict)
    _previous: dict[str, datetime] = field(default_factory=dict)
    _gpu_hours: dict[tuple[str, str, str, str], Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    _savings: dict[tuple[str, str, str, str], Decimal] = field(default_factory=lambda: defaultdict(Decimal))

    def observe_success(self, cluster: str, *, at: datetime, duration_s: float, window_s: int, gpus: int,
                        findings: Sequence[Finding], no_verdict_detectors: Iterable[str],
                        open_records: Iterable[FindingRecord], resolved_records: Iterable[FindingRecord],
                        coverage: Mapping[str, Mapping[str, float]] | None = None,
                        showback: Mapping[str, dict[str, Any]] | None = None) -> None:
        """Record a successful scan of `cluster` at `at` (wall clock) and the store's state after it.

        Args:
            open_records: the cluster's open lifecycle records after the scan.
            resolved_records: records resolved within `savings_credit` before `at` (others are ignored).
            coverage: the scan's `Inventory.attribution_coverage` (allocation kind → allocated / attributed GPU-hours, ratio).
            showback: the scan's funnel, unmet requests and window cost (`services.showback.health_figures`).
        """
        start = self._previous.get(cluster, at - self.first_span)
        span_s = Decimal(max(0, int((at - start).total_seconds())))
        waste = waste_from_records(open_records, self.settings)
        for s in waste:
            self._gpu_hours[(s.cluster, s.namespace, s.kind, s.team)] += s.wasted_gpus * span_s / HOUR_S
        for r in resolved_records:
            if r.state is not FindingState.RESOLVED or r.resolved_at is None or not r.saved_usd_per_day:
                continue
            lo, hi = max(start, r.resolved_at), min(at, r.resolved_at + self.savings_credit)
            if hi > lo:
                days = Decimal(int((hi - lo).total_seconds())) / DAY_S
                key = (r.cluster, r.namespace or "", r.kind, team_of_record(r, self.settings))
                self._savings[key] += r.saved_usd_per_day * days
        self._previous[cluster] = at
        self._waste[cluster] = bound_workloads(waste, self.top)
        self._health[cluster] = _success(self._health.get(cluster, ScanHealth(cluster=cluster)), at=at,
                                         duration_s=duration_s, window_s=window_s, gpus=gpus, findings=findings,
                                         no_verdict_detectors=no_verdict_detectors, coverage=coverage,
                                         showback=showback)

    def observe_failure(self, cluster: str, *, at: datetime, duration_s: float, source: str) -> None:
        """Record a failed scan of `cluster`, blamed on `source` (one of `ERROR_SOURCES`); the waste of the last
        successful scan stays exposed (the alert rules watch the last success's age)."""
        health = self._health.get(cluster, ScanHealth(cluster=cluster))
        scans, errors = dict(health.scans), dict(health.errors)
        scans["failure"] = scans.get("failure", 0) + 1
        source = source if source in ERROR_SOURCES else "other"
        errors[source] = errors.get(source, 0) + 1
        self._health[cluster] = health.model_copy(update={"last_attempt": at, "duration_s": duration_s,
                                                          "scans": scans, "errors": errors})

    def snapshot(self) -> MetricsSnapshot:
        """The current exposition."""
        def samples(values: dict[tuple[str, str, str, str], Decimal]) -> tuple[CounterSample, ...]:
            return tuple(CounterSample(cluster=c, namespace=n, kind=k, team=t, value=v)
                         for (c, n, k, t), v in sorted(values.items()))

        waste = tuple(s for cluster in sorted(self._waste) for s in self._waste[cluster])
        return MetricsSnapshot(
            waste=waste,
            budgets=budgets(waste, self.team_budgets, self.default_budget),
            wasted_gpu_hours=samples(self._gpu_hours),
            realised_savings=samples(self._savings),
            health=tuple(self._health[c] for c in sorted(self._health)),
            top_workloads=self.top,
            version=self.version,
        )


__all__ = [
    "ERROR_SOURCES", "MetricsState", "bound_workloads", "budgets", "health_of_scan", "snapshot_of_scan", "team_of_finding",
    "team_of_record", "waste_from_findings", "waste_from_records",
]

"""Models: what gpuwaste exposes as metrics (Prometheus `/metrics`, the OpenMetrics textfile, CloudWatch EMF).

A `MetricsSnapshot` is everything one exposition holds: the open waste per workload (gauges), the running
totals (counters) and the health of the last scan of each cluster. The service layer builds it
(`services/metrics.py`); adapters only render it (`sinks/prometheus_metrics.py`).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from pydantic import Field

from gpuwaste.models.base import Frozen

#: The workload label of the series that sum the workloads left out by the top-N bound of a namespace.
OTHER_WORKLOADS = "other"
#: The sources a failed scan is blamed on (the `source` label of gpuwaste_scan_errors_total; each starts at 0).
ERROR_SOURCES = ("prometheus", "kubernetes", "store", "delivery", "config", "other")
#: The team label of waste whose owner is not known (no team annotation, label or routing entry).
UNASSIGNED_TEAM = "unassigned"


class WasteSeries(Frozen):
    """The open waste of one workload of one kind (one series of each waste gauge).

    Attributes:
        namespace: "" for node-level findings (unallocated capacity, hardware); `workload` is then the node.
        workload: the workload name, or `OTHER_WORKLOADS` for the folded rest of a namespace.
        usd_per_day: USD/day of the priced findings (0 when none is priced; `unpriced` counts those).
        wasted_gpus: physical-GPU equivalents wasted (MIG slice = N/7, time-slice replica = 1/replicas).
        findings: open findings summed into this series; unpriced: those of them without a price.
        since: when the earliest of them started wasting (first seen minus its evidence window; for a scan's
            finding, the start of its ongoing episode), None when unknown.
    """

    cluster: str
    namespace: str = ""
    workload: str = ""
    kind: str
    team: str = UNASSIGNED_TEAM
    usd_per_day: Decimal = Decimal(0)
    wasted_gpus: Decimal = Decimal(0)
    findings: int = Field(1, ge=0)
    unpriced: int = Field(0, ge=0)
    since: datetime | None = None


class CounterSample(Frozen):
    """One series of a running total (a Prometheus counter): labels and the value so far.

    Attributes:
        value: GPU-hours for `gpuwaste_wasted_gpu_hours_total`, USD for `gpuwaste_realised_savings_usd_total`.
    """

    cluster: str
    namespace: str = ""
    kind: str
    team: str = UNASSIGNED_TEAM
    value: Decimal = Decimal(0)


class ScanHealth(Frozen):
    """The health of one cluster's scans.

    Attributes:
        last_attempt: when the last scan ran (wall clock, UTC); last_success: when one last succeeded.
        duration_s: seconds the last scan (the whole chain: scan, price, dedupe, deliver) took.
        window_s: the look-back window of the last successful scan (s).
        gpus: physical GPUs (distinct DCGM UUIDs) the last successful scan saw.
        findings_by_kind: findings of the last successful scan by kind (data_quality included).
        data_quality: data-quality findings of the last successful scan by problem (stale_series, no_telemetry...).
        no_verdict: subjects a detector declined to judge in the last successful scan, by detector.
        scans: scans by outcome ("success", "failure") since the process started.
        errors: failed scans by the source that failed ("prometheus", "kubernetes", "store", "delivery", "config",
            "other") since the process started.
        attribution: allocation kind ("device plugin", "MIG", "time-slicing", "DRA", "HAMi", …, and "all") → the share 0–1
            of the GPU-hours allocated in the last successful scan's window that had attributable telemetry.
        allocated_gpu_hours: allocation kind (and "all") → GPU-hours allocated in that window.
        funnel_gpus: GPU model → stage ("total", "allocated", "active", "effective", "unobserved") → GPUs over that
            window (GPU-hours ÷ window hours; `services.showback.FUNNEL_RULE`).
        team_gpus: team → the same stages (no "total": a team holds GPUs, it does not own the fleet).
        unmet_gpu_requests: GPU resource → Pending pods asking for it that no node took; unmet_wait_s: resource → the
            longest such wait (s).
        window_cost_usd: ledger line ("holders", "unsold_slices", "unallocated") → USD of the window's physical GPUs.
        team_spend_usd_per_day: team → its allocated cost over that window at a day's rate (USD/day; issue 24).
    """

    cluster: str
    last_attempt: datetime | None = None
    last_success: datetime | None = None
    duration_s: float = 0.0
    window_s: int = 0
    gpus: int = 0
    findings_by_kind: dict[str, int] = Field(default_factory=dict)
    data_quality: dict[str, int] = Field(default_factory=dict)
    no_verdict: dict[str, int] = Field(default_factory=dict)
    scans: dict[str, int] = Field(default_factory=dict)
    errors: dict[str, int] = Field(default_factory=dict)
    attribution: dict[str, float] = Field(default_factory=dict)
    allocated_gpu_hours: dict[str, float] = Field(default_factory=dict)
    funnel_gpus: dict[str, dict[str, float]] = Field(default_factory=dict)
    team_gpus: dict[str, dict[str, float]] = Field(default_factory=dict)
    unmet_gpu_requests: dict[str, int] = Field(default_factory=dict)
    unmet_wait_s: dict[str, float] = Field(default_factory=dict)
    window_cost_usd: dict[str, float] = Field(default_factory=dict)
    team_spend_usd_per_day: dict[str, float] = Field(default_factory=dict)


class MetricsSnapshot(Frozen):
    """Everything one exposition holds.

    Attributes:
        waste: open waste per (cluster, namespace, workload, kind, team), workloads bounded per namespace.
        wasted_gpu_hours: running GPU-hours wasted, per (cluster, namespace, kind, team).
        realised_savings: running USD no longer wasted after resolutions, per (cluster, namespace, kind, team).
        health: per cluster.
        top_workloads: the bound used (workloads kept per namespace before the rest is folded into "other").
        budgets: waste budget per team (USD/day): the configured ones, and the default for other teams with waste.
    """

    waste: tuple[WasteSeries, ...] = ()
    wasted_gpu_hours: tuple[CounterSample, ...] = ()
    realised_savings: tuple[CounterSample, ...] = ()
    health: tuple[ScanHealth, ...] = ()
    top_workloads: int = 10
    budgets: dict[str, Decimal] = Field(default_factory=dict)
    version: str = ""


__all__ = ["ERROR_SOURCES", "OTHER_WORKLOADS", "UNASSIGNED_TEAM", "CounterSample", "MetricsSnapshot", "ScanHealth", "WasteSeries"]

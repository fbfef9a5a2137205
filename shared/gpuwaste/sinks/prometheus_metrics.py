"""Adapter: a `MetricsSnapshot` as Prometheus metric families (prometheus-client).

One builder, `families(snapshot)`, serves both `gpuwaste serve`'s `/metrics` (through `SnapshotCollector`) and
`gpuwaste scan --output openmetrics` (through `render_openmetrics`, for node-exporter's textfile collector), so
both expose the same names, labels and units. The names and labels are documented in docs/metrics.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client import generate_latest as generate_text
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector

from gpuwaste.models.metrics import ERROR_SOURCES, CounterSample, MetricsSnapshot
from gpuwaste.models.text import for_prometheus_label

WASTE_LABELS = ("cluster", "namespace", "workload", "kind", "team")
TOTAL_LABELS = ("cluster", "namespace", "kind", "team")

#: Every metric name gpuwaste exposes (counters without their `_total` suffix), for docs and tests.
FAMILIES = (
    "gpuwaste_waste_usd_per_day",
    "gpuwaste_wasted_gpus",
    "gpuwaste_open_findings",
    "gpuwaste_unpriced_findings",
    "gpuwaste_open_since_timestamp_seconds",
    "gpuwaste_team_budget_usd_per_day",
    "gpuwaste_wasted_gpu_hours",
    "gpuwaste_realised_savings_usd",
    "gpuwaste_scan_duration_seconds",
    "gpuwaste_last_scan_timestamp_seconds",
    "gpuwaste_last_success_timestamp_seconds",
    "gpuwaste_scan_window_seconds",
    "gpuwaste_gpus",
    "gpuwaste_scan_findings",
    "gpuwaste_data_quality_problems",
    "gpuwaste_no_verdict",
    "gpuwaste_attribution_coverage_ratio",
    "gpuwaste_allocated_gpu_hours",
    "gpuwaste_fleet_gpus",
    "gpuwaste_team_gpus",
    "gpuwaste_unmet_gpu_requests",
    "gpuwaste_unmet_gpu_request_wait_seconds",
    "gpuwaste_window_cost_usd",
    "gpuwaste_team_spend_usd_per_day",
    "gpuwaste_scans",
    "gpuwaste_scan_errors",
    "gpuwaste_workloads_per_namespace_limit",
    "gpuwaste_build",
)


def _counter(name: str, doc: str, samples: tuple[CounterSample, ...]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=TOTAL_LABELS)
    for s in samples:
        family.add_metric([s.cluster, s.namespace, s.kind, s.team], float(s.value))
    return family


def families(snapshot: MetricsSnapshot) -> list[Metric]:
    """The metric families of a snapshot (the one builder behind `/metrics` and the OpenMetrics textfile)."""
    usd = GaugeMetricFamily("gpuwaste_waste_usd_per_day", "Open GPU waste in USD/day, by workload (top-N per "
                            "namespace, the rest in workload other); unpriced findings add 0", labels=WASTE_LABELS)
    gpus = GaugeMetricFamily("gpuwaste_wasted_gpus", "Physical-GPU equivalents wasted by open findings (MIG slice "
                             "= N/7, time-slice replica = 1/replicas)", labels=WASTE_LABELS)
    count = GaugeMetricFamily("gpuwaste_open_findings", "Open waste findings", labels=WASTE_LABELS)
    unpriced = GaugeMetricFamily("gpuwaste_unpriced_findings", "Open waste findings without a price (their USD/day "
                                 "is not in gpuwaste_waste_usd_per_day)", labels=WASTE_LABELS)
    since = GaugeMetricFamily("gpuwaste_open_since_timestamp_seconds", "Unix time the earliest open finding of the "
                              "series started wasting (first seen minus its evidence window)", labels=WASTE_LABELS)
    for s in snapshot.waste:
        labels = [s.cluster, s.namespace, s.workload, s.kind, s.team]
        usd.add_metric(labels, float(s.usd_per_day))
        gpus.add_metric(labels, float(s.wasted_gpus))
        count.add_metric(labels, s.findings)
        if s.unpriced:
            unpriced.add_metric(labels, s.unpriced)
        if s.since is not None:
            since.add_metric(labels, s.since.timestamp())
    budget = GaugeMetricFamily("gpuwaste_team_budget_usd_per_day", "Waste budget of the team in USD/day "
                               "(serve.team_budgets_usd_per_day, else serve.default_team_budget_usd_per_day)",
                               labels=["team"])
    for team, value in sorted(snapshot.budgets.items()):
        budget.add_metric([team], float(value))
    out: list[Metric] = [usd, gpus, count, unpriced, since, budget,
                         _counter("gpuwaste_wasted_gpu_hours", "GPU-hours wasted by open findings, accumulated per "
                                  "scan over the time since the previous scan", snapshot.wasted_gpu_hours),
                         _counter("gpuwaste_realised_savings_usd", "USD no longer wasted after findings were "
                                  "resolved (saved USD/day, credited for the savings credit period after "
                                  "resolution)", snapshot.realised_savings)]
    duration = GaugeMetricFamily("gpuwaste_scan_duration_seconds", "Seconds the last scan of the cluster took "
                                 "(scan, price, dedupe, deliver)", labels=["cluster"])
    attempt = GaugeMetricFamily("gpuwaste_last_scan_timestamp_seconds", "Unix time of the last scan attempt",
                                labels=["cluster"])
    success = GaugeMetricFamily("gpuwaste_last_success_timestamp_seconds", "Unix time of the last successful scan",
                                labels=["cluster"])
    window = GaugeMetricFamily("gpuwaste_scan_window_seconds", "Look-back window of the last successful scan (s)",
                               labels=["cluster"])
    seen = GaugeMetricFamily("gpuwaste_gpus", "Physical GPUs (distinct DCGM UUIDs) the last successful scan saw",
                             labels=["cluster"])
    by_kind = GaugeMetricFamily("gpuwaste_scan_findings", "Findings of the last successful scan by kind "
                                "(data_quality included)", labels=["cluster", "kind"])
    quality = GaugeMetricFamily("gpuwaste_data_quality_problems", "Data-quality findings of the last successful "
                                "scan by problem (telemetry missing, stale or frozen: never counted as idle)",
                                labels=["cluster", "problem"])
    no_verdict = GaugeMetricFamily("gpuwaste_no_verdict", "Subjects a detector declined to judge in the last "
                                   "successful scan (not enough data)", labels=["cluster", "detector"])
    coverage = GaugeMetricFamily("gpuwaste_attribution_coverage_ratio", "Share 0-1 of the GPU-hours allocated in the "
                                 "last successful scan's window that had attributable telemetry, by allocation kind "
                                 "(kind=\"all\": every kind)", labels=["cluster", "kind"])
    allocated = GaugeMetricFamily("gpuwaste_allocated_gpu_hours", "GPU-hours allocated to pods in the last successful "
                                  "scan's window, by allocation kind (kind=\"all\": every kind)", labels=["cluster", "kind"])
    fleet = GaugeMetricFamily("gpuwaste_fleet_gpus", "The fleet funnel of the last successful scan's window: GPUs by "
                              "GPU model and stage (total, allocated, active, effective, unobserved; GPU-hours / window hours)",
                              labels=["cluster", "gpu_model", "stage"])
    team_gpus = GaugeMetricFamily("gpuwaste_team_gpus", "GPUs held per team in the last successful scan's window by stage "
                                  "(allocated, active, effective, unobserved)", labels=["cluster", "team", "stage"])
    unmet = GaugeMetricFamily("gpuwaste_unmet_gpu_requests", "Pending pods asking for GPUs that no node took, by GPU "
                              "resource, at the last successful scan", labels=["cluster", "resource"])
    unmet_wait = GaugeMetricFamily("gpuwaste_unmet_gpu_request_wait_seconds", "The longest wait of a pending pod asking "
                                   "for GPUs, by GPU resource (s)", labels=["cluster", "resource"])
    window_cost = GaugeMetricFamily("gpuwaste_window_cost_usd", "USD of the physical GPUs over the last successful scan's window, "
                             "charged once: line=holders, unsold_slices, unallocated (they add up to the GPUs' cost)",
                             labels=["cluster", "line"])
    team_spend = GaugeMetricFamily("gpuwaste_team_spend_usd_per_day", "Allocated cost per team over the last successful "
                                   "scan's window at a day's rate (USD/day; the share ledger's cents)",
                                   labels=["cluster", "team"])
    scans = CounterMetricFamily("gpuwaste_scans", "Scans since the process started, by outcome",
                                labels=["cluster", "outcome"])
    errors = CounterMetricFamily("gpuwaste_scan_errors", "Failed scans since the process started, by the source "
                                 "that failed", labels=["cluster", "source"])
    for h in snapshot.health:
        c = [h.cluster]
        duration.add_metric(c, h.duration_s)
        if h.last_attempt is not None:
            attempt.add_metric(c, h.last_attempt.timestamp())
        if h.last_success is not None:
            success.add_metric(c, h.last_success.timestamp())
            window.add_metric(c, h.window_s)
            seen.add_metric(c, h.gpus)
        for kind, n in sorted(h.findings_by_kind.items()):
            by_kind.add_metric([h.cluster, kind], n)
        for problem, n in sorted(h.data_quality.items()):
            quality.add_metric([h.cluster, problem], n)
        for detector, n in sorted(h.no_verdict.items()):
            no_verdict.add_metric([h.cluster, detector], n)
        for kind, ratio in sorted(h.attribution.items()):
            coverage.add_metric([h.cluster, kind], ratio)
        for kind, hours in sorted(h.allocated_gpu_hours.items()):
            allocated.add_metric([h.cluster, kind], hours)
        for model, stages in sorted(h.funnel_gpus.items()):
            for stage, v in stages.items():
                fleet.add_metric([h.cluster, model, stage], v)
        for team, stages in sorted(h.team_gpus.items()):
            for stage, v in stages.items():
                team_gpus.add_metric([h.cluster, team, stage], v)
        for resource, n in sorted(h.unmet_gpu_requests.items()):
            unmet.add_metric([h.cluster, resource], n)
            unmet_wait.add_metric([h.cluster, resource], h.unmet_wait_s.get(resource, 0.0))
        for line, amount in sorted(h.window_cost_usd.items()):
            window_cost.add_metric([h.cluster, line], amount)
        for team, usd_per_day in sorted(h.team_spend_usd_per_day.items()):
            team_spend.add_metric([h.cluster, team], usd_per_day)
        for outcome in ("success", "failure"):
            scans.add_metric([h.cluster, outcome], h.scans.get(outcome, 0))
        for source in sorted(set(ERROR_SOURCES) | set(h.errors)):  # every source from 0, so increase() works
            errors.add_metric([h.cluster, source], h.errors.get(source, 0))
    limit = GaugeMetricFamily("gpuwaste_workloads_per_namespace_limit", "Workloads per namespace with their own "
                              "series; the rest are summed into workload other", value=snapshot.top_workloads)
    info = InfoMetricFamily("gpuwaste_build", "gpuwaste version", value={"version": snapshot.version or "unknown"})
    return _sanitised([*out, duration, attempt, success, window, seen, by_kind, quality, no_verdict, coverage,
                       allocated, fleet, team_gpus, unmet, unmet_wait, window_cost, team_spend, scans, errors, limit, info])


def _sanitised(metrics: list[Metric]) -> list[Metric]:
    """`metrics` with every label value freed of control characters (`models.text.for_prometheus_label`): names
    and labels come from the cluster; the exposition writer then escapes backslash, quote and line feed.

    Two series whose label values differ only in what was stripped (`team: "a\x07"` and `team: "a"`) become one
    series — never two with the same labels, which would fail the whole scrape: their values add up (USD/day, GPUs,
    findings, counters), except `*_timestamp_seconds`, which keeps the earliest.
    """
    for metric in metrics:
        merged: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
        for sample in metric.samples:
            labels = {k: for_prometheus_label(v) for k, v in sample.labels.items()}
            key = (sample.name, tuple(sorted(labels.items())))
            seen = merged.get(key)
            if seen is None:
                merged[key] = sample._replace(labels=labels)
            elif sample.name.endswith("_timestamp_seconds"):
                merged[key] = seen._replace(value=min(seen.value, sample.value))
            else:
                merged[key] = seen._replace(value=seen.value + sample.value)
        metric.samples = list(merged.values())
    return metrics


class SnapshotCollector(Collector):
    """A prometheus-client collector exposing whatever snapshot `current()` returns at scrape time."""

    def __init__(self, current: Callable[[], MetricsSnapshot]) -> None:
        self.current = current

    def collect(self) -> Iterator[Metric]:
        yield from families(self.current())

    def describe(self) -> list[Metric]:
        return []  # dynamic: nothing is checked at registration


def registry_for(current: Callable[[], MetricsSnapshot]) -> CollectorRegistry:
    """A registry holding only gpuwaste's families (no process/platform collectors: stable output)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(current))
    return registry


def render_openmetrics(snapshot: MetricsSnapshot) -> bytes:
    """The snapshot in the OpenMetrics text format, ending with `# EOF` (node-exporter's textfile collector and
    `promtool tsdb create-blocks-from openmetrics` read it)."""
    text: bytes = generate_openmetrics(registry_for(lambda: snapshot))  # type: ignore[no-untyped-call]  # unannotated upstream
    return text


def render_text(snapshot: MetricsSnapshot) -> bytes:
    """The snapshot in the Prometheus text format 0.0.4: what node-exporter's textfile collector reads (it refuses
    OpenMetrics: measured with prometheus-node-exporter 1.5, docs/metrics.md)."""
    return generate_text(registry_for(lambda: snapshot))


__all__ = ["FAMILIES", "SnapshotCollector", "families", "registry_for", "render_openmetrics", "render_text"]

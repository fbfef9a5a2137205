"""Build the gpuwaste Grafana dashboard (deploy/grafana/gpuwaste.json) in code with grafana-foundation-sdk.

Regenerate after a change:   python deploy/grafana/generate.py > deploy/grafana/gpuwaste.json
A test (tests/unit/test_grafana_dashboard.py) fails when the committed JSON differs from this script's output, and
tests/integration/test_metrics_stack.py runs every panel's PromQL against a real Prometheus (demo fleet + scraped
`gpuwaste serve`) and fails when one returns nothing. Dev tooling: not part of the Lambda layer or the package.
"""

from __future__ import annotations

import sys

from grafana_foundation_sdk.builders import common, stat, table, timeseries
from grafana_foundation_sdk.builders.dashboard import Dashboard, DatasourceVariable, QueryVariable, Row
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import BigValueGraphMode, StackingMode
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh, VariableSort
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from gpuwaste.models.telemetry import Signal, exported_names

UID = "gpuwaste"
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
#: the waste kinds in which GPUs are held and not used at all (idle GPU-hours)
IDLE_KINDS = "idle_allocation|inference_idle|orphaned|unallocated_capacity"
SEL = 'cluster=~"$cluster", team=~"$team"'
WORKLOAD_SEL = 'cluster=~"$cluster", namespace=~"$namespace", workload=~"$workload"'


def _query(expr: str, legend: str = "", *, ref: str = "A", instant: bool = False) -> Dataquery:
    q = Dataquery().expr(expr).ref_id(ref)
    if legend:
        q = q.legend_format(legend)
    return q.instant().format(PromQueryFormat.TABLE) if instant else q.range()


def _stat(title: str, expr: str, unit: str, description: str) -> stat.Panel:
    return (stat.Panel().title(title).description(description).datasource(DS).unit(unit).height(5).span(6)
            .graph_mode(BigValueGraphMode.AREA).with_target(_query(expr, ref="A")))


def _series(title: str, description: str, unit: str, *targets: Dataquery, stacked: bool = False, span: int = 12) -> timeseries.Panel:
    panel = timeseries.Panel().title(title).description(description).datasource(DS).unit(unit).height(8).span(span)
    if stacked:
        panel = panel.stacking(common.StackingConfig().mode(StackingMode.NORMAL)).fill_opacity(30)
    for t in targets:
        panel = panel.with_target(t)
    return panel


def _variable(name: str, label: str, query: str) -> QueryVariable:
    return (QueryVariable(name).label(label).datasource(DS).query(query).refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(VariableSort.ALPHABETICAL_ASC).multi(True).include_all(True).all_value(".*"))


def dcgm_activity(namespace: str = "$namespace", workload: str = "$workload") -> str:
    """DCGM graphics-engine activity (ratio 0–1) of the workload's pods, whichever label style dcgm-exporter uses
    (pod/namespace with honorLabels, exported_pod/exported_namespace otherwise); GPU_UTIL (percent) ÷ 100 where the
    profiling field is not collected. Each field is read under every name it is exported under (DCGM 3.x and 4.x,
    lower-cased: `gpuwaste.models.telemetry.exported_names`); a GPU exporting both names at once is one line (the
    larger of the two copies). Pods are matched by name: `<workload>` or `<workload>-…`."""
    pods = f'"{workload}(-.+)?"'

    def by(signal: Signal, scale: str = "") -> str:
        names = "|".join(exported_names(signal))
        exported = (f'label_replace({{__name__=~"{names}", exported_namespace=~"{namespace}", exported_pod=~{pods}}}, '
                    f'"workload_pod", "$1", "exported_pod", "(.+)")')
        plain = (f'label_replace({{__name__=~"{names}", namespace=~"{namespace}", pod=~{pods}}}, '
                 f'"workload_pod", "$1", "pod", "(.+)")')
        return f"max by (workload_pod, gpu, Hostname) ({exported} or {plain}){scale}"

    return f'{by(Signal.GR_ENGINE_ACTIVE)}\nor\n{by(Signal.GPU_UTIL, " / 100")}'


def build() -> Dashboard:
    """The dashboard."""
    dashboard = (
        Dashboard("GPU waste (gpuwaste)").uid(UID).tags(["gpuwaste", "gpu", "cost"]).refresh("1m").time("now-24h", "now")
        .description("Open GPU waste found by gpuwaste (USD/day, wasted GPUs), its trend by team and kind, idle "
                     "GPU-hours, realised savings, scan health, and a workload's raw DCGM activity next to its waste.")
        .with_variable(DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
        .with_variable(_variable("cluster", "Cluster", "label_values(gpuwaste_last_success_timestamp_seconds, cluster)"))
        .with_variable(_variable("team", "Team", 'label_values(gpuwaste_waste_usd_per_day{cluster=~"$cluster"}, team)'))
        .with_variable(_variable("namespace", "Namespace",
                                 'label_values(gpuwaste_waste_usd_per_day{cluster=~"$cluster", team=~"$team"}, namespace)'))
        .with_variable(_variable("workload", "Workload",
                                 'label_values(gpuwaste_waste_usd_per_day{cluster=~"$cluster", namespace=~"$namespace"}, workload)'))
        .with_row(Row("Now"))
        .with_panel(_stat("Open waste", f"sum(gpuwaste_waste_usd_per_day{{{SEL}}})", "currencyUSD",
                          "USD/day of the open waste findings (priced ones; unpriced ones add 0)."))
        .with_panel(_stat("Wasted GPUs", f"sum(gpuwaste_wasted_gpus{{{SEL}}})", "none",
                          "Physical-GPU equivalents wasted by open findings (MIG slice = N/7)."))
        .with_panel(_stat("Idle GPU-hours in range", f'sum(increase(gpuwaste_wasted_gpu_hours_total{{{SEL}, kind=~"{IDLE_KINDS}"}}[$__range]))',
                          "none", "GPU-hours held and not used at all (idle, idle inference, orphaned, unallocated) "
                                  "over the dashboard's time range."))
        .with_panel(_stat("Realised savings in range", f"sum(increase(gpuwaste_realised_savings_usd_total{{{SEL}}}[$__range]))",
                          "currencyUSD", "USD no longer wasted after findings were resolved, over the time range."))
        .with_row(Row("Waste over time"))
        .with_panel(_series("Waste by team", "Open waste in USD/day per team.", "currencyUSD",
                            _query(f"sum by (team) (gpuwaste_waste_usd_per_day{{{SEL}}})", "{{team}}"), stacked=True))
        .with_panel(_series("Waste by kind", "Open waste in USD/day per waste kind.", "currencyUSD",
                            _query(f"sum by (kind) (gpuwaste_waste_usd_per_day{{{SEL}}})", "{{kind}}"), stacked=True))
        .with_panel(_series("Idle GPU-hours per hour, by team", "GPU-hours held and unused, accumulated per hour "
                            "(= GPUs idle on average).", "none",
                            _query(f'sum by (team) (rate(gpuwaste_wasted_gpu_hours_total{{{SEL}, kind=~"{IDLE_KINDS}"}}[$__rate_interval])) * 3600',
                                   "{{team}}"), stacked=True))
        .with_panel(_series("Realised savings", "USD/day saved by resolved findings, per team.", "currencyUSD",
                            _query(f"sum by (team) (rate(gpuwaste_realised_savings_usd_total{{{SEL}}}[$__rate_interval])) * 86400",
                                   "{{team}}"), stacked=True))
        .with_row(Row("Top workloads"))
        .with_panel(table.Panel().title("Top workloads by waste").datasource(DS).unit("currencyUSD").height(10).span(24)
                    .description("The 20 biggest open wastes (USD/day). Per namespace only the top-N workloads have "
                                 "their own series; the rest are summed as workload \"other\" (docs/metrics.md).")
                    .with_target(_query(f"topk(20, sum by (cluster, namespace, workload, kind, team) "
                                        f"(gpuwaste_waste_usd_per_day{{{SEL}}}))", instant=True)))
        .with_row(Row("Workload: $namespace / $workload"))
        .with_panel(_series("DCGM activity of the workload", "Raw dcgm-exporter activity of the workload's pods "
                            "(graphics engine active, ratio 0–1; GPU_UTIL ÷ 100 where profiling fields are off).",
                            "percentunit", _query(dcgm_activity(), "{{workload_pod}} GPU {{gpu}}")))
        .with_panel(_series("Waste of the workload", "The workload's open waste (USD/day) by kind, as gpuwaste "
                            "judged the activity on the left.", "currencyUSD",
                            _query(f"sum by (kind) (gpuwaste_waste_usd_per_day{{{WORKLOAD_SEL}}})", "{{kind}}")))
        .with_row(Row("Scan health"))
        .with_panel(_series("Time since the last successful scan", "Seconds since each cluster's last successful "
                            "scan (alert: GpuWasteScanStale).", "s",
                            _query('time() - max by (cluster) (gpuwaste_last_success_timestamp_seconds{cluster=~"$cluster"})',
                                   "{{cluster}}"), span=8))
        .with_panel(_series("Scan duration", "Seconds the last scan took (scan, price, dedupe, deliver).", "s",
                            _query('max by (cluster) (gpuwaste_scan_duration_seconds{cluster=~"$cluster"})', "{{cluster}}"),
                            span=8))
        .with_panel(_series("Scan errors by source", "Failed scans per hour by the source that failed.", "none",
                            _query('sum by (cluster, source) (increase(gpuwaste_scan_errors_total{cluster=~"$cluster"}[1h]))',
                                   "{{cluster}} {{source}}"), span=8))
        .with_panel(_series("Findings by kind (last scan)", "Findings of each cluster's last scan by kind.", "none",
                            _query('sum by (kind) (gpuwaste_scan_findings{cluster=~"$cluster"})', "{{kind}}"), span=8))
        .with_panel(_series("Data-quality problems", "GPUs gpuwaste could not judge, by problem (missing, stale or "
                            "frozen telemetry is never idle).", "none",
                            _query('sum by (problem) (gpuwaste_data_quality_problems{cluster=~"$cluster"})', "{{problem}}"),
                            span=8))
        .with_panel(_series("GPUs seen", "Physical GPUs (DCGM UUIDs) the last scan saw.", "none",
                            _query('sum by (cluster) (gpuwaste_gpus{cluster=~"$cluster"})', "{{cluster}}"), span=8))
    )
    return with_fleet_funnel(dashboard)


def with_fleet_funnel(dashboard: Dashboard) -> Dashboard:
    """The "Fleet funnel and showback" row (issue 24): total → allocated → active → effective GPUs per GPU model and
    team, unmet GPU requests, and the window's GPU cost charged once to holders, unsold slices and unallocated GPUs."""
    cl = 'cluster=~"$cluster"'
    return (
        dashboard.with_row(Row("Fleet funnel and showback"))
        .with_panel(_series("Fleet funnel", "GPUs by stage over each scan's window: total (physical), allocated (held by "
                            "pods), active (holders with any activity: some 10-min average ≥ 1 %), effective (allocated × "
                            "mean activity). docs/showback.md states the rule.", "none",
                            _query(f"sum by (stage) (gpuwaste_fleet_gpus{{{cl}}})", "{{stage}}"), span=12))
        .with_panel(_series("Effective share of allocated GPUs by model", "Effective ÷ allocated GPUs per GPU model.",
                            "percentunit",
                            _query(f'sum by (gpu_model) (gpuwaste_fleet_gpus{{{cl}, stage="effective"}}) / '
                                   f'sum by (gpu_model) (gpuwaste_fleet_gpus{{{cl}, stage="allocated"}})', "{{gpu_model}}"),
                            span=12))
        .with_panel(_series("Allocated GPUs by team", "GPUs held per team over each scan's window (teams as routing "
                            "sees them).", "none",
                            _query(f'sum by (team) (gpuwaste_team_gpus{{{cl}, team=~"$team", stage="allocated"}})', "{{team}}"),
                            stacked=True, span=8))
        .with_panel(_series("Unmet GPU requests", "Pending pods asking for GPUs that no node took, by GPU resource.", "none",
                            _query(f"sum by (resource) (gpuwaste_unmet_gpu_requests{{{cl}}})", "{{resource}}"), span=8))
        .with_panel(_series("GPU cost of the window, charged once", "USD of the physical GPUs over each scan's window: "
                            "holders + unsold slices (the unsold part of shared GPUs) + unallocated GPUs = the GPUs' cost.",
                            "currencyUSD", _query(f"sum by (line) (gpuwaste_window_cost_usd{{{cl}}})", "{{line}}"),
                            stacked=True, span=8))
    )


def render() -> str:
    """The dashboard JSON as committed (sorted keys, 2-space indent, trailing newline)."""
    return JSONEncoder(sort_keys=True, indent=2).encode(build().build()) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())

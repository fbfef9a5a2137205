"""Build the gpuwaste Grafana dashboard (deploy/grafana/gpuwaste.json) in code with grafana-foundation-sdk.

Regenerate after a change:   python deploy/grafana/generate.py > deploy/grafana/gpuwaste.json
Tests: tests/unit/test_grafana_dashboard.py fails when the committed JSON differs from this script's output and checks
the dashboard's conventions on the JSON (money panels say USD/day, explicit thresholds with savings never red, every
panel filtered by the variables its series carry, kinds and problems in people's words, budgets and unpriced findings
shown); tests/integration/test_metrics_stack.py runs every panel's PromQL against a real Prometheus (demo fleet +
scraped `gpuwaste serve`) and fails when one returns nothing; tests/integration/test_grafana_dcgm_query.py runs the
DCGM panel's query on series labelled `Hostname`, `hostname` and `exported_*`;
tests/integration/test_grafana_exported_labels.py runs every panel and variable on gpuwaste's series scraped with and
without `honor_labels` (`exported_namespace`, see `gw`) and compares the groups. Dev tooling: not part of the Lambda
layer or the package.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from grafana_foundation_sdk.builders import bargauge, common, stat, table, timeseries
from grafana_foundation_sdk.builders.dashboard import (
    Dashboard,
    DatasourceVariable,
    FieldColor,
    QueryVariable,
    Row,
    ThresholdsConfig,
)
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    BarGaugeDisplayMode,
    BigValueColorMode,
    BigValueGraphMode,
    GraphTresholdsStyleMode,
    StackingMode,
    VizOrientation,
)
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    DataTransformerConfig,
    DynamicConfigValue,
    FieldColorModeId,
    Threshold,
    ThresholdsMode,
    ValueMap,
    ValueMappingResult,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from gpuwaste.detectors.allocation import IdleSettings
from gpuwaste.models.findings import WasteKind
from gpuwaste.models.telemetry import Signal, exported_names
from gpuwaste.people import PROBLEM_LABELS, kind_heading, kind_label

UID = "gpuwaste"
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
#: the waste kinds in which GPUs are held and not used at all (idle GPU-hours)
IDLE_KINDS = "idle_allocation|inference_idle|orphaned|unallocated_capacity"
#: Selectors by the labels a family carries: every variable whose label the series has filters the panel.
#: gpuwaste_waste_usd_per_day, _wasted_gpus, _unpriced_findings: cluster, namespace, workload, kind, team (the
#: namespace filter is added by `gw`, which reads it under either name)
WASTE_SEL = 'cluster=~"$cluster", team=~"$team", workload=~"$workload"'
#: the counters (gpuwaste_wasted_gpu_hours_total, gpuwaste_realised_savings_usd_total): no workload label
TOTAL_SEL = 'cluster=~"$cluster", team=~"$team"'
#: the idle kinds of the GPU-hours counter
IDLE_SEL = f'{TOTAL_SEL}, kind=~"{IDLE_KINDS}"'
#: gpuwaste_team_budget_usd_per_day: team only
BUDGET_SEL = 'team=~"$team"'
#: the scan-health families: cluster only
CLUSTER_SEL = 'cluster=~"$cluster"'
#: Grafana's colours by meaning
GOOD, WATCH, BAD = "green", "orange", "red"

#: Data-quality problems (the `problem` label of gpuwaste_data_quality_problems) as people read them.
PROBLEM_NAMES: dict[str, str] = dict(PROBLEM_LABELS)
#: gpuwaste_scan_errors_total's `source` label as people read it
SOURCE_NAMES: dict[str, str] = {"prometheus": "Prometheus", "kubernetes": "Kubernetes API", "store": "state store",
                                "delivery": "delivery (Slack, Jira, Teams)", "config": "configuration", "other": "other"}


def gw(name: str, matchers: str, around: Callable[[str], str] = str) -> str:
    """A gpuwaste family by its matchers and the Namespace variable, its namespace in `namespace` however scraped.

    A Prometheus that scrapes gpuwaste with `honor_labels: false` (a plain scrape config; a ServiceMonitor without
    `honorLabels: true`) renames gpuwaste's `namespace` to `exported_namespace` and sets `namespace` to the target's
    (gpuwaste's own namespace). So each family is read twice — series without `exported_namespace` by `namespace`,
    series with it by `exported_namespace` — and `exported_namespace` is copied into `namespace`: grouping by
    namespace and the Namespace variable mean gpuwaste's namespace in both set-ups. `around` wraps each selector
    (`increase(…[$__range])`: a range function needs the selector itself).
    """
    plain = around(f'{name}{{{matchers}, namespace=~"$namespace", exported_namespace=""}}')
    exported = around(f'{name}{{{matchers}, exported_namespace=~"$namespace", exported_namespace!=""}}')
    return f'label_replace({plain} or {exported}, "namespace", "$1", "exported_namespace", "(.+)")'


def _over(window: str) -> Callable[[str], str]:
    return lambda selector: f"increase({selector}[{window}])"


def _rate(selector: str) -> str:
    return f"rate({selector}[$__rate_interval])"


def _query(expr: str, legend: str = "", *, ref: str = "A", instant: bool = False) -> Dataquery:
    q = Dataquery().expr(expr).ref_id(ref)
    if legend:
        q = q.legend_format(legend)
    return q.instant().format(PromQueryFormat.TABLE) if instant else q.range()


def _thresholds(base: str, *steps: tuple[float, str]) -> ThresholdsConfig:
    """Explicit absolute thresholds (Grafana's default, green with red at 80, is never left in place)."""
    return ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps(
        [Threshold(value=None, color=base), *(Threshold(value=v, color=c) for v, c in steps)])


def _renames(names: dict[str, str]) -> list[tuple[str, list[DynamicConfigValue]]]:
    """Overrides that show a label value (a legend's `{{kind}}`) by its people's name."""
    return [(raw, [DynamicConfigValue(id_val="displayName", value=shown)]) for raw, shown in sorted(names.items())]


def _with_overrides(panel: Any, overrides: list[tuple[str, list[DynamicConfigValue]]]) -> Any:
    for name, properties in overrides:
        panel = panel.override_by_name(name, properties)
    return panel


#: Legends of `{{kind}}` panels: the kind's heading ("Idle GPUs"), never its JSON value.
KIND_LEGENDS = {k.value: kind_heading(k) for k in WasteKind}


def _stat(title: str, expr: str, unit: str, description: str, thresholds: ThresholdsConfig, *,
          color: FieldColor | None = None) -> stat.Panel:
    panel = (stat.Panel().title(title).description(description).datasource(DS).unit(unit).height(5).span(4)
             .graph_mode(BigValueGraphMode.AREA).color_mode(BigValueColorMode.VALUE).thresholds(thresholds)
             .with_target(_query(expr, ref="A")))
    return panel.color_scheme(color) if color is not None else panel


def _series(title: str, description: str, unit: str, *targets: Dataquery, stacked: bool = False, span: int = 12,
            thresholds: ThresholdsConfig | None = None, legends: dict[str, str] | None = None,
            show_thresholds: bool = False, color: FieldColor | None = None) -> timeseries.Panel:
    panel = (timeseries.Panel().title(title).description(description).datasource(DS).unit(unit).height(8).span(span)
             .thresholds(thresholds or _thresholds(GOOD)))
    if show_thresholds:
        panel = panel.thresholds_style(common.GraphThresholdsStyleConfig().mode(GraphTresholdsStyleMode.DASHED))
    if stacked:
        panel = panel.stacking(common.StackingConfig().mode(StackingMode.NORMAL)).fill_opacity(30)
    if color is not None:
        panel = panel.color_scheme(color)
    for t in targets:
        panel = panel.with_target(t)
    return _with_overrides(panel, _renames(legends or {}))


def _variable(name: str, label: str, query: str) -> QueryVariable:
    variable = (QueryVariable(name).label(label).datasource(DS).query(query)
                .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC).multi(True)
                .include_all(True).all_value(".*"))
    return variable.regex(f'/{name}="([^"]+)"/') if query.startswith("query_result(") else variable


def _in_range(selector: str) -> str:
    """Every series seen in the dashboard's range (as `label_values` lists them), not only those at its end."""
    return f"last_over_time({selector}[$__range])"


def query_result_of(label: str, expr: str) -> str:
    """A variable query listing the values of `label` over `expr` (read by the variable's regex `/label="(…)"/`).

    Grafana's `query_result`: `label_values` takes a selector only, and gpuwaste's namespace may be under either
    name (see `gw`).
    """
    return f"query_result(count by ({label}) ({expr}))"


#: savings are good news: one fixed green, never a threshold colour
SAVINGS_COLOR = FieldColor().mode(FieldColorModeId.FIXED).fixed_color(GOOD)


def dcgm_activity(namespace: str = "$namespace", workload: str = "$workload") -> str:
    """DCGM graphics-engine activity (ratio 0–1) of the workload's pods, whichever label style dcgm-exporter uses
    (pod/namespace with honorLabels, exported_pod/exported_namespace otherwise); GPU_UTIL (percent) ÷ 100 where the
    profiling field is not collected. Each field is read under every name it is exported under (DCGM 3.x and 4.x,
    lower-cased: `gpuwaste.models.telemetry.exported_names`); a GPU exporting both names at once is one line (the
    larger of the two copies). The GPU's host is the `gpu_host` label, from dcgm-exporter's `Hostname` or a
    relabelled `hostname` (either works; series without either are still shown). Pods are matched by name:
    `<workload>` or `<workload>-…`.
    """
    pods = f'"{workload}(-.+)?"'

    def host(expr: str) -> str:
        with_upper = f'label_replace({expr}, "gpu_host", "$1", "Hostname", "(.+)")'
        return f'label_replace({with_upper}, "gpu_host", "$1", "hostname", "(.+)")'

    def by(signal: Signal, scale: str = "") -> str:
        names = "|".join(exported_names(signal))
        exported = (f'label_replace({{__name__=~"{names}", exported_namespace=~"{namespace}", exported_pod=~{pods}}}, '
                    f'"workload_pod", "$1", "exported_pod", "(.+)")')
        plain = (f'label_replace({{__name__=~"{names}", namespace=~"{namespace}", pod=~{pods}}}, '
                 f'"workload_pod", "$1", "pod", "(.+)")')
        return f"max by (workload_pod, gpu, gpu_host) ({host(exported)} or {host(plain)}){scale}"

    return f'{by(Signal.GR_ENGINE_ACTIVE)}\nor\n{by(Signal.GPU_UTIL, " / 100")}'


#: The top-workloads table: columns in people's words, the workload cell links to this dashboard's workload row.
TABLE_COLUMNS = {"cluster": "Cluster", "namespace": "Namespace", "workload": "Workload", "kind": "Kind",
                 "team": "Team", "Value": "Waste (USD/day)"}
WORKLOAD_LINK = ("/d/" + UID + "?${__url_time_range}&var-datasource=${datasource}&var-cluster=${__data.fields.cluster}"
                 "&var-namespace=${__data.fields.namespace}&var-workload=${__value.raw}")


def _top_workloads() -> table.Panel:
    panel = (table.Panel().title("Top workloads by waste (USD/day)").datasource(DS).unit("currencyUSD").height(10).span(24)
             .description("The 20 biggest open wastes in USD/day. Per namespace only the top-N workloads have their own "
                          "series; the rest are summed as workload \"other\" (docs/metrics.md). Click a workload to see "
                          "its DCGM activity next to its waste below.")
             .thresholds(_thresholds(GOOD))
             .with_transformation(DataTransformerConfig(id_val="organize", options={
                 "excludeByName": {"Time": True},
                 "indexByName": {name: i for i, name in enumerate(TABLE_COLUMNS)}}))
             .sort_by([common.TableSortByFieldState().display_name(TABLE_COLUMNS["Value"]).desc(True)])
             .with_target(_query(f"topk(20, sum by (cluster, namespace, workload, kind, team) "
                                 f"({gw('gpuwaste_waste_usd_per_day', WASTE_SEL)}))", instant=True)))
    kinds = ValueMap(options={k.value: ValueMappingResult(text=kind_label(k), index=i) for i, k in enumerate(WasteKind)})
    for raw, shown in TABLE_COLUMNS.items():
        properties = [DynamicConfigValue(id_val="displayName", value=shown)]
        if raw == "kind":
            properties.append(DynamicConfigValue(id_val="mappings", value=[kinds]))
        if raw == "workload":
            properties.append(DynamicConfigValue(id_val="links", value=[
                {"title": "Show ${__value.raw}'s DCGM activity and waste", "url": WORKLOAD_LINK}]))
        if raw == "team":
            properties.append(DynamicConfigValue(id_val="mappings", value=[ValueMap(options={
                "unassigned": ValueMappingResult(text="no owner", index=0)})]))
        panel = panel.override_by_name(raw, properties)
    return panel


def _budget_use() -> bargauge.Panel:
    panel = (bargauge.Panel().title("Waste against budget by team (% of its USD/day budget)").datasource(DS)
            .description("Each team's open waste in USD/day as a share of its waste budget (serve.team_budgets_usd_per_day, "
                         "else serve.default_team_budget_usd_per_day). Orange from 80 %, red over budget (alert: "
                         "GpuWasteTeamOverBudget). Teams without a budget are not shown.")
            .unit("percentunit").min(0).max(1.2).height(8).span(12).display_mode(BarGaugeDisplayMode.GRADIENT)
            .orientation(VizOrientation.HORIZONTAL).thresholds(_thresholds(GOOD, (0.8, WATCH), (1, BAD)))
            .with_target(_query(f"sum by (team) ({gw('gpuwaste_waste_usd_per_day', WASTE_SEL)})\n"
                                f"  / on (team) max by (team) (gpuwaste_team_budget_usd_per_day{{{BUDGET_SEL}}})",
                                "{{team}}")))
    return _with_overrides(panel, _renames({"unassigned": "no owner"}))


#: Weekday names of PromQL's day_of_week() (0 = Sunday), for the by-weekday bars.
WEEKDAY_NAMES = {str(i): d for i, d in enumerate(("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"))}


def wasted_gpu_hours_by(label: str, clock: str) -> str:
    """Wasted GPU-hours over the dashboard's range summed by a UTC clock value, as PromQL.

    All kinds; cluster, team and namespace filtered. `clock` is a PromQL expression (`hour()`, `day_of_week()`),
    its value becomes label `label`: the counter's increase over each `$__rate_interval` (GPU-hours, from
    gpuwaste_wasted_gpu_hours_total) tagged with the clock value at the interval's end (`count_values`), summed over
    the range in steps of that interval (a subquery: the windows tile the range, so the bars add up to the range's
    increase). Grafana's `$__rate_interval` grows with the range (at least 4 scrape intervals), so a long range stays
    cheap; up to one interval's GPU-hours land in the next hour.
    """
    step = f"sum({gw('gpuwaste_wasted_gpu_hours_total', TOTAL_SEL, _over('$__rate_interval'))})"
    return (f'sum by ({label}) (sum_over_time(({step}\n'
            f'  * on () group_left ({label}) count_values("{label}", {clock}))[$__range:$__rate_interval]))')


def _by_clock(title: str, description: str, label: str, clock: str, legend: str,
              names: dict[str, str] | None = None) -> bargauge.Panel:
    panel = (bargauge.Panel().title(title).description(description).datasource(DS).unit("none").min(0).height(8)
             .span(12).display_mode(BarGaugeDisplayMode.GRADIENT).orientation(VizOrientation.VERTICAL)
             .thresholds(_thresholds(GOOD))
             .with_target(Dataquery().expr(wasted_gpu_hours_by(label, clock)).ref_id("A").legend_format(legend)
                          .instant()))
    return _with_overrides(panel, _renames(names or {}))


def with_waste_hours(dashboard: Dashboard) -> Dashboard:
    """The "When the waste happens" row (issue 24 §6).

    Wasted GPU-hours over the range by hour of day and by weekday (UTC), from gpuwaste_wasted_gpu_hours_total with
    PromQL's hour() and day_of_week().
    """
    return (
        dashboard.with_row(Row("When the waste happens"))
        .with_panel(_by_clock("Wasted GPU-hours in range by hour of day (UTC)",
                              "GPU-hours wasted (all kinds) in each hour of the day, summed over the dashboard's time "
                              "range; high bars at night (20–08 UTC) are GPUs held while nobody works. The counter has "
                              "no workload label: the Workload variable does not filter it. `gpuwaste summary "
                              "--by-hour` shows the same per team as hour × weekday.", "hour", "hour()", "{{hour}}:00"))
        .with_panel(_by_clock("Wasted GPU-hours in range by weekday (UTC)",
                              "GPU-hours wasted (all kinds) on each day of the week, summed over the dashboard's time "
                              "range; high Saturday and Sunday bars are weekend waste. No workload label.",
                              "day", "day_of_week()", "{{day}}", WEEKDAY_NAMES))
    )


def build() -> Dashboard:
    """The dashboard."""
    dashboard = (
        Dashboard("GPU waste (gpuwaste)").uid(UID).tags(["gpuwaste", "gpu", "cost"]).refresh("1m").time("now-24h", "now")
        .description("Open GPU waste found by gpuwaste (USD/day, wasted GPUs), its trend by team and kind, budgets, "
                     "unpriced findings, idle GPU-hours, realised savings, scan health, and a workload's raw DCGM "
                     "activity next to its waste. Every panel is filtered by each variable whose label its series carry.")
        .with_variable(DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
        .with_variable(_variable("cluster", "Cluster", "label_values(gpuwaste_last_success_timestamp_seconds, cluster)"))
        .with_variable(_variable("team", "Team", 'label_values(gpuwaste_waste_usd_per_day{cluster=~"$cluster"}, team)'))
        .with_variable(_variable("namespace", "Namespace", query_result_of("namespace", gw(
            "gpuwaste_waste_usd_per_day", 'cluster=~"$cluster", team=~"$team"', _in_range).replace(
                '=~"$namespace"', '=~".*"'))))
        .with_variable(_variable("workload", "Workload", query_result_of(
            "workload", gw("gpuwaste_waste_usd_per_day", 'cluster=~"$cluster", team=~"$team"', _in_range))))
        .with_row(Row("Now"))
        .with_panel(_stat("Open waste (USD/day)", f"sum({gw('gpuwaste_waste_usd_per_day', WASTE_SEL)})", "currencyUSD",
                          "USD/day of the open waste findings (priced ones; unpriced ones are counted apart, on the "
                          "right). Orange from $1/day.", _thresholds(GOOD, (1, WATCH))))
        .with_panel(_stat("Wasted GPUs", f"sum({gw('gpuwaste_wasted_gpus', WASTE_SEL)})", "none",
                          "Physical-GPU equivalents wasted by open findings (MIG slice = N/7). Orange from 1 GPU.",
                          _thresholds(GOOD, (1, WATCH))))
        .with_panel(_stat("Unpriced findings", f"sum({gw('gpuwaste_unpriced_findings', WASTE_SEL)}) or vector(0)", "none",
                          "Open waste findings without a price: their USD/day is not in the totals. `gpuwaste explain "
                          "ID` says why (no price for the GPU model or the node's instance type).",
                          _thresholds(GOOD, (1, WATCH))))
        .with_panel(_stat("Idle GPU-hours in range", f"sum({gw('gpuwaste_wasted_gpu_hours_total', IDLE_SEL, _over('$__range'))})",
                          "none", "GPU-hours held and not used at all (idle, serving idle, orphaned, unallocated) "
                                  "over the dashboard's time range (the counter has no workload label: the Workload "
                                  "variable does not filter it). Orange from 1 GPU-hour.", _thresholds(GOOD, (1, WATCH))))
        .with_panel(_stat("Realised savings in range (USD)",
                          f"sum({gw('gpuwaste_realised_savings_usd_total', TOTAL_SEL, _over('$__range'))})", "currencyUSD",
                          "USD no longer wasted after findings were resolved, summed over the time range (not per "
                          "day; no workload label). Savings are always green.", _thresholds(GOOD), color=SAVINGS_COLOR))
        .with_panel(_stat("Budget headroom (USD/day)",
                          f"sum(max by (team) (gpuwaste_team_budget_usd_per_day{{{BUDGET_SEL}}}))\n"
                          f"  - (sum(sum by (team) ({gw('gpuwaste_waste_usd_per_day', WASTE_SEL)})\n"
                          f"      and on (team) max by (team) (gpuwaste_team_budget_usd_per_day{{{BUDGET_SEL}}})) or vector(0))",
                          "currencyUSD", "The selected teams' waste budgets minus their open waste, in USD/day (teams "
                                         "with a budget only). Red below $0: over budget.",
                          _thresholds(BAD, (0, GOOD))))
        .with_row(Row("Waste over time"))
        .with_panel(_series("Waste by team (USD/day)", "Open waste in USD/day per team.", "currencyUSD",
                            _query(f"sum by (team) ({gw('gpuwaste_waste_usd_per_day', WASTE_SEL)})", "{{team}}"),
                            stacked=True, legends={"unassigned": "no owner"}))
        .with_panel(_series("Waste by kind (USD/day)", "Open waste in USD/day per waste kind.", "currencyUSD",
                            _query(f"sum by (kind) ({gw('gpuwaste_waste_usd_per_day', WASTE_SEL)})", "{{kind}}"),
                            stacked=True, legends=KIND_LEGENDS))
        .with_panel(_budget_use())
        .with_panel(_series("Idle GPU-hours per hour, by team", "GPU-hours held and unused, accumulated per hour "
                            "(= GPUs idle on average; no workload label).", "none",
                            _query(f"sum by (team) ({gw('gpuwaste_wasted_gpu_hours_total', IDLE_SEL, _rate)}) * 3600",
                                   "{{team}}"), stacked=True, legends={"unassigned": "no owner"}))
        .with_panel(_series("Realised savings (USD/day)", "USD/day saved by resolved findings, per team (no workload "
                            "label). Savings are always green.", "currencyUSD",
                            _query(f"sum by (team) ({gw('gpuwaste_realised_savings_usd_total', TOTAL_SEL, _rate)}) * 86400",
                                   "{{team}}"), stacked=True, legends={"unassigned": "no owner"},
                            color=FieldColor().mode(FieldColorModeId.SHADES).fixed_color(GOOD)))
        .with_row(Row("Top workloads"))
        .with_panel(_top_workloads())
        .with_row(Row("Workload: $namespace / $workload"))
        .with_panel(_series("DCGM activity of the workload", "Raw dcgm-exporter activity of the workload's pods "
                            "(graphics engine active, ratio 0–1; GPU_UTIL ÷ 100 where profiling fields are off), per "
                            f"GPU and host. The dashed line is gpuwaste's idle threshold "
                            f"({IdleSettings().max_activity_ratio:.0%} by default).",
                            "percentunit", _query(dcgm_activity(), "{{workload_pod}} GPU {{gpu}} on {{gpu_host}}"),
                            thresholds=_thresholds(WATCH, (IdleSettings().max_activity_ratio, GOOD)),
                            show_thresholds=True))
        .with_panel(_series("Waste of the workload (USD/day)", "The workload's open waste in USD/day by kind, as "
                            "gpuwaste judged the activity on the left.", "currencyUSD",
                            _query(f"sum by (kind) ({gw('gpuwaste_waste_usd_per_day', WASTE_SEL)})", "{{kind}}"),
                            legends=KIND_LEGENDS))
        .with_row(Row("Scan health"))
        .with_panel(_series("Time since the last successful scan", "Seconds since each cluster's last successful "
                            "scan. Orange from 30 min, red from 1 h (alert: GpuWasteScanStale).", "s",
                            _query(f"time() - max by (cluster) (gpuwaste_last_success_timestamp_seconds{{{CLUSTER_SEL}}})",
                                   "{{cluster}}"), span=8, thresholds=_thresholds(GOOD, (1800, WATCH), (3600, BAD)),
                            show_thresholds=True))
        .with_panel(_series("Scan duration", "Seconds the last scan took (scan, price, dedupe, deliver).", "s",
                            _query(f"max by (cluster) (gpuwaste_scan_duration_seconds{{{CLUSTER_SEL}}})", "{{cluster}}"),
                            span=8))
        .with_panel(_series("Scan errors by source", "Failed scans per hour by the source that failed. Red from 1.",
                            "none", _query(f"sum by (source) (increase(gpuwaste_scan_errors_total{{{CLUSTER_SEL}}}[1h]))",
                                           "{{source}}"), span=8, thresholds=_thresholds(GOOD, (1, BAD)),
                            legends=SOURCE_NAMES))
        .with_panel(_series("Findings by kind (last scan)", "Findings of each cluster's last scan by kind.", "none",
                            _query(f"sum by (kind) (gpuwaste_scan_findings{{{CLUSTER_SEL}}})", "{{kind}}"), span=8,
                            legends=KIND_LEGENDS))
        .with_panel(_series("Data-quality problems", "GPUs gpuwaste could not judge, by problem (missing, stale or "
                            "frozen telemetry is never idle). Orange from 1 (alert: GpuWasteTelemetryMissing).", "none",
                            _query(f"sum by (problem) (gpuwaste_data_quality_problems{{{CLUSTER_SEL}}})", "{{problem}}"),
                            span=8, thresholds=_thresholds(GOOD, (1, WATCH)), legends=PROBLEM_NAMES))
        .with_panel(_series("GPUs seen", "Physical GPUs (DCGM UUIDs) the last scan saw.", "none",
                            _query(f"sum by (cluster) (gpuwaste_gpus{{{CLUSTER_SEL}}})", "{{cluster}}"), span=8))
    )
    return with_waste_hours(with_fleet_funnel(dashboard))


def with_fleet_funnel(dashboard: Dashboard) -> Dashboard:
    """The "Fleet funnel and showback" row (issue 24): total → allocated → active → effective GPUs per GPU model and
    team, unmet GPU requests, and the window's GPU cost charged once to holders, unsold slices and unallocated GPUs.
    """
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
                            stacked=True, span=8, legends={"unassigned": "no owner"}))
        .with_panel(_series("Unmet GPU requests", "Pending pods asking for GPUs that no node took, by GPU resource.", "none",
                            _query(f"sum by (resource) (gpuwaste_unmet_gpu_requests{{{cl}}}) or vector(0)", "{{resource}}"), span=8))
        .with_panel(_series("GPU cost of each scan window, charged once (USD per scan window)", "USD of the physical GPUs over each scan's window: "
                            "holders + unsold slices (the unsold part of shared GPUs) + unallocated GPUs = the GPUs' cost.",
                            "currencyUSD", _query(f"sum by (line) (gpuwaste_window_cost_usd{{{cl}}})", "{{line}}"),
                            stacked=True, span=8))
    )


def render() -> str:
    """The dashboard JSON as committed (sorted keys, 2-space indent, trailing newline)."""
    return JSONEncoder(sort_keys=True, indent=2).encode(build().build()) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())

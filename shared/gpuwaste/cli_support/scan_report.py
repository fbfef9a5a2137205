"""The scan report on the terminal, with the view that selects what is shown.

The table (header, inventory notes, no-verdict lines, findings, rollup), JSON, CSV and the metric families; the
view holds the filters, the order and the grouping.

`gpuwaste scan`, `demo` and `run` print their reports with `render` (`run_scan` scans and renders).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from rich.text import Text

from gpuwaste import __version__
from gpuwaste.cli_support import (
    SOURCE_ERRORS,
    Output,
    alert_budgets,
    escape_markup,
    fail,
    fail_source,
    out,
    plural,
)
from gpuwaste.errors import InputFormatError, PermanentError

if TYPE_CHECKING:  # imported where used: `gpuwaste --help` starts without pydantic models, boto3 or requests
    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.models.findings import Finding
    from gpuwaste.services.scan import Inventory, ScanReport


def coverage_text(coverage: dict[str, dict[str, float]]) -> str:
    """The share of allocated GPU-hours with attributable telemetry, in all and per allocation kind:
    "attribution coverage: 97% of 212.0 allocated GPU-h · device plugin 100% · MIG 80%"."""
    total = coverage.get("all", {})
    kinds = "".join(f" · {k} {v['ratio']:.0%}" for k, v in coverage.items() if k != "all")
    return (f"attribution coverage: {total.get('ratio', 1.0):.0%} of {total.get('allocated_gpu_hours', 0.0):.1f} "
            f"allocated GPU-h{kinds}")

def funnel_text(funnel: dict[str, dict[str, float]]) -> str:
    """The fleet funnel in one line: "funnel: 22 GPUs → allocated 12.4 → active 8.0 → effective 3.1 GPUs (56% of allocated)"."""
    total = {k: sum(row[k] for row in funnel.values()) for k in ("total_gpus", "allocated_gpus", "active_gpus", "effective_gpus",
                                                                  "unobserved_gpus")}
    share = f" ({total['effective_gpus'] / total['allocated_gpus']:.0%} of allocated)" if total["allocated_gpus"] else ""
    unobserved = f" · {total['unobserved_gpus']:.1f} allocated GPUs unobserved" if total["unobserved_gpus"] else ""
    return (f"funnel: {total['total_gpus']:.1f} GPUs → allocated {total['allocated_gpus']:.1f} → active {total['active_gpus']:.1f} "
            f"→ effective {total['effective_gpus']:.1f}{share}{unobserved}")


def unmet_text(unmet: dict[str, dict[str, float | int | None]]) -> str:
    """Pending pods asking for GPUs that no node took: "unmet GPU requests: nvidia.com/gpu 3 pods asking 5 (longest wait 2h)"."""
    from gpuwaste.people import duration

    parts = []
    for resource, row in unmet.items():
        wait = row.get("longest_wait_s")
        waited = f", longest wait {duration(int(wait))}" if isinstance(wait, (int, float)) else ""
        parts.append(f"{resource} {plural(int(row['pods'] or 0), 'pod')} asking {row['requested']}{waited}")
    return "unmet GPU requests: " + "; ".join(parts)


def telemetry_lines(report: ScanReport) -> None:
    """How the telemetry was read (plan, sample spacing, buckets) and any unreadable samples, with where they are."""
    from gpuwaste.sinks import terminal

    q = report.telemetry_quality
    if not q:
        return
    spacing = q.get("sample_interval_s")
    parts = [f"plan: {q['plan']}" if q.get("plan") else "", f"{report.query_count} queries" if report.query_count else "",
             f"a sample every {spacing:g} s ({'inferred from the data' if q.get('sample_interval_inferred') else 'configured'})" if spacing else "",
             f"{q['bucket_s'] // 60}-min buckets" if q.get("bucket_s") else ""]
    terminal.print_fitted(out, "telemetry: " + " · ".join(p for p in parts if p), style="dim")
    problems = q.get("problems") or []
    if problems:
        out.print(f"[yellow]{q['unreadable_samples']} unreadable sample(s) were left out (never read as idle):[/]", highlight=False)
        for p in problems[:5]:
            out.print(f"  {p['metric']} at {p['where']}: {p['reason']} ({p['count']} sample(s))", highlight=False, markup=False, soft_wrap=True)
        if len(problems) > 5:
            out.print(f"  … and {len(problems) - 5} more (--output json lists them all)", highlight=False, markup=False)


class SortKey(StrEnum):
    """Orders of the findings table."""

    usd = "usd"
    gpus = "gpus"
    owner = "owner"
    namespace = "namespace"
    kind = "kind"
    workload = "workload"


class GroupBy(StrEnum):
    """What the scan's rollup groups by."""

    team = "team"
    namespace = "namespace"
    kind = "kind"


@dataclass(frozen=True)
class View:
    """What of a scan report is shown, and how (filters, order, grouping, detail)."""

    namespaces: tuple[str, ...] = ()
    teams: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    sort: SortKey = SortKey.usd
    top: int | None = None
    group_by: GroupBy = GroupBy.team
    verbose: bool = False
    source: str | None = None  # what `gpuwaste explain ID` needs to find the finding again (`-r DIR`, `--state FILE`)


def team_function(config: GpuWasteConfig | None = None):  # type: ignore[no-untyped-def]
    """finding → its team: the routing rules (annotations, labels, team/namespace maps), else the namespace."""
    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.services.routing import route_for
    from gpuwaste.sinks import terminal

    settings = (config or GpuWasteConfig()).delivery

    def team(f):  # type: ignore[no-untyped-def]
        owner = route_for(f, settings).team or terminal.owner_of(f)
        return terminal.NODE_OWNER if owner.startswith("node ") else owner

    return team


def select(findings: Sequence[Finding], view: View, team: Callable[[Finding], str]) -> list[Finding]:
    """The findings `view` keeps (namespace, team and kind filters), in its order (sort), at most `top`."""
    from gpuwaste.people import kind_names, parse_kind

    kinds = set()
    for k in view.kinds:
        kind = parse_kind(k)
        if kind is None:
            from gpuwaste.models.findings import WasteKind

            fail(f"--kind {escape_markup(k)}: not a kind; use one of " + ", ".join(kind_names())
                 + " (the JSON values are accepted too: " + ", ".join(w.value for w in WasteKind) + ")")
        kinds.add(kind)
    kept = [f for f in findings
            if (not view.namespaces or (f.subject.namespace or "") in view.namespaces)
            and (not view.teams or team(f) in view.teams)
            and (not kinds or f.kind in kinds)]
    order = {
        SortKey.usd: lambda f: (-(f.usd_per_day if f.usd_per_day is not None else -1), f.fingerprint),
        SortKey.gpus: lambda f: (-f.wasted_gpu_share, f.fingerprint),
        SortKey.owner: lambda f: (team(f), f.fingerprint),
        SortKey.namespace: lambda f: (f.subject.namespace or "~", f.fingerprint),
        SortKey.kind: lambda f: (f.kind.value, f.fingerprint),
        SortKey.workload: lambda f: (f.subject.workload_name or f.subject.node or "", f.fingerprint),
    }[view.sort]
    return sorted(kept, key=order)


def _gpus_where(inv: Inventory) -> str:
    """Where the header's GPUs are: "on 8 nodes", or "in the telemetry, no node known" (never "3 GPUs on 0 nodes")."""
    if inv.nodes or not inv.physical_gpus:
        return f"on {plural(inv.nodes, 'node')}"
    return "in the telemetry, no node known"


def _no_waste_line(report: ScanReport, *, filtered: bool) -> Text:
    """The line for a scan without waste findings: "no waste found", or — when nothing could be judged for want of
    cluster state — what was missing and the three ways to give it (never "no waste")."""
    if any(f.details.get("check") == "no_cluster_state" for f in report.findings):
        return Text("nothing judged: no cluster state to tie the GPUs to pods and nodes; give the scan --kubeconfig, "
                    "or kube-state-metrics in this Prometheus (`gpuwaste doctor --prometheus URL` lists what is missing), "
                    "or --cluster-json FILE", style="yellow")
    return Text("no waste found" + (" with these filters" if filtered else ""), style="green")


def _print_json(report: ScanReport, findings: list[Finding], team: Callable[[Finding], str],
                config: GpuWasteConfig | None) -> None:
    """The JSON output of `render`: the findings, the inventory (with the per-team funnel when showback ran)."""
    from gpuwaste.sinks import terminal

    inv = report.inventory
    inventory = dict(inv.__dict__)
    if report.showback is not None:  # the per-team funnel: teams as routing sees them (the same teams as the findings)
        from gpuwaste.services.showback import funnel_figures

        inventory["funnel"] = {**inv.funnel, "team": funnel_figures(report.showback, "team", (config.delivery if config else None))}
    sys.stdout.write(terminal.to_json(
        findings,
        team=team,
        cluster=report.cluster,
        scan_id=report.scan_id,
        eval_time=report.eval_time.isoformat(),
        window_s=report.window_s,
        inventory=inventory,
        query_count=report.query_count,
        telemetry=report.telemetry_quality,
        no_verdict=[nv.__dict__ for nv in report.no_verdict],
    ) + "\n")


def _print_header(report: ScanReport, view: View, dated: str | None) -> None:
    """The table output's header line (cluster, span, GPUs, pods) and, with `view.verbose`, the inventory."""
    from gpuwaste.people import plain
    from gpuwaste.people import when as when_text
    from gpuwaste.sinks import terminal

    inv = report.inventory
    if inv.single_instant:
        span = dated or f"one scrape dated {when_text(report.eval_time)}"
    else:
        span = f"{report.window_s // 60} min to {when_text(report.eval_time)}"
    header = (f"{plain(report.cluster)} · {plain(span)} · {plural(inv.physical_gpus, 'GPU')} {_gpus_where(inv)} · "
              f"{inv.pods_holding_gpus} "
              f"{'pod holds' if inv.pods_holding_gpus == 1 else 'pods hold'} GPUs")
    for n, line in enumerate(terminal.fit_line(header, out.width)):  # broken at " · " only, never mid-phrase
        cluster = plain(report.cluster)
        out.print(Text.assemble((cluster, "bold"), line[len(cluster):]) if n == 0 and line.startswith(cluster) else Text(line),
                  soft_wrap=True)
    if view.verbose:
        models = ", ".join(f"{'unknown (no modelName label)' if k == 'unknown' else k}×{v}" for k, v in sorted(inv.models.items()))
        terminal.print_fitted(out, f"{plural(inv.mig_instances, 'MIG instance')} · models: {plain(models) or 'none'}",
                              style="dim")
        terminal.print_fitted(out, "activity signal per device: "
                              + ", ".join(f"{k.replace('DCGM_FI_', '')}×{v}" for k, v in sorted(inv.activity_signals.items()))
                              + " · attribution: " + (", ".join(f"{k}×{v}" for k, v in sorted(inv.attribution.items())) or "none")
                              + (f" · allocation: {plain(str(inv.allocation))}" if inv.allocation else ""), style="dim")
        if inv.metrics_present:
            dcgm = [m.removeprefix("DCGM_FI_") for m in inv.metrics_present if m.startswith("DCGM_FI_")]
            other = [m for m in inv.metrics_present if not m.startswith("DCGM_FI_")]
            terminal.print_fitted(out, f"signals present ({len(inv.metrics_present)}): " + ", ".join(dcgm + other), style="dim")
        if report.query_count:
            out.print(Text(f"{report.query_count} Prometheus queries", style="dim"))


def _print_inventory_notes(report: ScanReport, view: View) -> None:
    """Print the table output's lines under the header.

    Coverage, funnel, unmet requests, conservation, allocation notes, the cluster state's source and its data-quality
    notes.
    """
    from gpuwaste.people import plain
    from gpuwaste.sinks import terminal

    inv = report.inventory
    if inv.attribution_coverage:  # the share of allocated GPU-hours with attributable telemetry (issue 21 §12)
        terminal.print_fitted(out, coverage_text(inv.attribution_coverage), style="dim")
    if inv.funnel.get("cluster"):  # total → allocated → active → effective (issue 24 §1)
        terminal.print_fitted(out, funnel_text(inv.funnel["cluster"]), style="dim")
        if view.verbose:
            from gpuwaste.services.showback import FUNNEL_RULE

            terminal.print_fitted(out, f"funnel rule: {FUNNEL_RULE}", style="dim")
            for model, row in inv.funnel.get("gpu_model", {}).items():
                terminal.print_fitted(out, f"  {plain(model)}: " + funnel_text({model: row}).removeprefix("funnel: "), style="dim")
    if inv.unmet_gpu_requests:
        terminal.print_fitted(out, unmet_text(inv.unmet_gpu_requests), style="yellow")
    if inv.conservation and not inv.conservation.get("physical_gpus") and inv.physical_gpus:
        # no GPU node in the cluster state: nothing to charge; "holds: 0 physical GPUs" beside "1 GPU" contradicted the header
        terminal.print_fitted(out, f"share conservation: not checked — no GPU node in the cluster state, so the {inv.physical_gpus} "
                                   f"GPU(s) in the telemetry are neither charged nor priced", style="dim")
    elif inv.conservation:  # every physical GPU-hour charged once (issue 24 §3)
        text = str(inv.conservation.get("text", ""))
        terminal.print_fitted(out, text, style="dim" if inv.conservation.get("holds") else "red")
    for note in inv.allocation_notes:  # capacity that is not GPUs, claims nobody uses, RBAC to grant (issue 11)
        out.print(Text(f"allocation note: {plain(note)}", style="dim"))
    if report.cluster_source:
        out.print(Text(f"cluster state: {plain(report.cluster_source)}", style="dim"))
    for note in report.cluster_notes:
        out.print(Text(f"data quality: {plain(note)}", style="yellow"))


def _print_no_verdict(report: ScanReport, view: View) -> None:
    """Print the "no verdict" lines: a count of pods/nodes, or (`view.verbose`) the causes, most common first."""
    from gpuwaste.people import reason_words
    from gpuwaste.sinks import terminal

    inv = report.inventory
    subjects: dict[str, set[str]] = {}
    for nv in report.no_verdict:
        reason = reason_words(nv.reason)
        if inv.single_instant:  # one sample: a longer window cannot help, so no look-back hint
            reason = re.sub(r"\s*\((scan with --window|needs \d+ day)[^)]*\)", "", reason)
        subjects.setdefault(reason, set()).add(nv.subject)  # count subjects (pods, nodes), not detectors
    every = set().union(*subjects.values())
    if view.verbose:  # the reasons grouped by cause, the most common first, one per line
        what = "1 pod/node" if len(every) == 1 else f"{len(every)} pods/nodes"
        out.print(Text(f"no verdict on {what}, by cause:", style="dim"))
        for r, v in sorted(subjects.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            terminal.print_fitted(out, f"{len(v):3d}× {r}", first="  ", indent="        ", style="dim")
    else:
        out.print(Text(f"no verdict on {len(every)} pods/nodes (-v says why)" if len(every) != 1
                       else "no verdict on 1 pod/node (-v says why)", style="dim"))


def render(report: ScanReport, output: Output, *, min_usd: float = 0.0, quiet: bool = False, wide: bool = False,
           dated: str | None = None, view: View | None = None, config: GpuWasteConfig | None = None) -> None:
    """Print a scan report in the chosen format.

    The table format ends with what matters: one header line (`view.verbose`: the inventory too), data-quality
    problems, the findings (one line each), price caveats, the rollup by team (or `view.group_by`) and, last,
    the total per day and per month.

    Args:
        wide: the node, evidence and confidence columns whatever the width.
        dated: replaces "one scrape dated …" in the header (an undated scrape says where its time came from).
        view: filters, order, grouping and detail (default: everything, costliest first, by team).
    """
    from decimal import Decimal

    from gpuwaste.people import kind_label, namespace_label
    from gpuwaste.sinks import terminal

    view = view or View()
    team = team_function(config)
    chosen = select(report.findings, view, team)
    findings = [f for f in chosen if f.usd_per_day is None or f.usd_per_day >= Decimal(str(min_usd))]
    if output in (Output.openmetrics, Output.prometheus):
        from gpuwaste.config import GpuWasteConfig

        sys.stdout.buffer.write(_exposition(report, findings, config or GpuWasteConfig(),
                                            openmetrics=output is Output.openmetrics))
        sys.stdout.flush()
        return
    if output is Output.json:
        _print_json(report, findings, team, config)
        return
    if output is Output.csv:
        sys.stdout.write(terminal.to_csv(findings, team=team))
        return
    inv = report.inventory
    _print_header(report, view, dated)
    _print_inventory_notes(report, view)
    telemetry_lines(report)
    if inv.single_instant:
        out.print("[yellow]The telemetry holds ONE sample per series: it shows what is there, not sustained use; "
                  "no idle or under-used verdict is possible from one sample.[/]")
    if report.no_verdict and not quiet:
        _print_no_verdict(report, view)
    dq = terminal.data_quality_table(findings, width=out.width, verbose=view.verbose)
    if dq is not None:
        out.print(dq)
    if inv.single_instant and not any(f.kind.is_waste for f in findings):
        return
    waste = [f for f in findings if f.kind.is_waste]
    shown = waste[: view.top] if view.top else waste
    ids = terminal.short_ids(report.findings)
    if shown:
        title = "GPU waste findings" + (f" (top {len(shown)} of {len(waste)})" if len(shown) < len(waste) else "")
        out.print(terminal.findings_table(shown, width=out.width, wide=wide, ids=ids, owner=team, title=title))
    else:
        out.print(_no_waste_line(report, filtered=len(chosen) < len(report.findings)))
    for line in terminal.price_caveat_lines(shown):
        out.print(Text(line, style="yellow"))
    hidden = len(chosen) - len(findings)
    if hidden:
        out.print(Text(f"{hidden} finding(s) under ${min_usd:g}/day hidden by --min-usd", style="dim"))
    if shown and not quiet and view.source:  # one line, never folded: a command to copy
        out.print(Text(f"why: gpuwaste explain ID {view.source}", style="dim"), soft_wrap=True)
    key = {GroupBy.team: team, GroupBy.namespace: lambda f: namespace_label(f.subject.namespace),
           GroupBy.kind: lambda f: kind_label(f.kind)}[view.group_by]
    terminal.print_rollup(out, waste, key=key, by=view.group_by.value, window_s=report.window_s)


def _exposition(report: ScanReport, findings: list[Finding], config: GpuWasteConfig, *, openmetrics: bool) -> bytes:
    """The scan as gpuwaste's metric families (the builder `gpuwaste serve` uses): OpenMetrics, or the Prometheus
    text format that node-exporter's textfile collector reads (docs/metrics.md)."""
    from gpuwaste.services.metrics import health_of_scan, snapshot_of_scan
    from gpuwaste.services.showback import health_figures
    from gpuwaste.sinks.prometheus_metrics import render_openmetrics, render_text

    health = health_of_scan(report.cluster, at=datetime.now(tz=UTC).replace(microsecond=0),
                            duration_s=report.duration_s, window_s=report.window_s,
                            gpus=report.inventory.physical_gpus, findings=findings,
                            no_verdict_detectors=[nv.detector for nv in report.no_verdict],
                            coverage=report.inventory.attribution_coverage,
                            showback=None if report.showback is None else health_figures(report.showback, config.delivery))
    snapshot = snapshot_of_scan(findings, health, config.delivery, top=config.serve.top_workloads,
                                team_budgets=alert_budgets(config)[0],
                                default_budget=alert_budgets(config)[1], version=__version__)
    return render_openmetrics(snapshot) if openmetrics else render_text(snapshot)


def run_scan(service, at: datetime, output: Output, min_usd: float, quiet: bool, *, wide: bool = False,  # type: ignore[no-untyped-def]
              dated: str | None = None, view: View | None = None, config: GpuWasteConfig | None = None) -> ScanReport:
    try:
        report: ScanReport = service.scan(at=at)
    except InputFormatError as exc:
        fail(f"{escape_markup(str(exc))}\nThe recording is malformed at the place shown; fix or re-record it (gpuwaste record).")
    except SOURCE_ERRORS as exc:
        fail_source(exc)
    except PermanentError as exc:
        fail(escape_markup(str(exc)))
    render(report, output, min_usd=min_usd, quiet=quiet, wide=wide, dated=dated, view=view, config=config)
    return report

"""`gpuwaste doctor` for people: the verdict, signals, labels, detectors, what to do, KSM and recording rules.

Text fits the terminal, broken at spaces, and every URL stays whole on a line (a terminal wraps a long one itself).
"""

from __future__ import annotations

from datetime import datetime

from rich.text import Text

from gpuwaste.cli_support import out
from gpuwaste.commands.doctor.checks import NO_CLUSTER_STATE, NOT_SCRAPED
from gpuwaste.commands.doctor.ksm import KsmStatus
from gpuwaste.commands.doctor.report import DOCS, EXIT_CODES, CheckRow, DoctorReport, verdict_code, when_text

#: Indents of the doctor's notes under a detector and of the fix/docs lines under a to-do item.
NOTE = " " * 11
HINT_INDENT = " " * 7


def _heading(title: str, url: str) -> None:
    """A bold heading with its documentation URL: on one line when it fits, else the URL whole on its own line."""
    if len(title) + len(url) + 3 <= (out.width or 80):
        out.print(Text.assemble((title, "bold"), f" ({url})"), soft_wrap=True)
    else:
        out.print(Text(title, style="bold"), soft_wrap=True)
        out.print(Text(url), soft_wrap=True)


def render(report: DoctorReport, checks: list[CheckRow] | None = None) -> None:
    """Print the report for people: the verdict first (and again under "to do"), then the rest.

    Signals, labels, detectors and what to do, after the verdict line (`checks`: the rows of every check; default:
    the signal check's).
    """
    from gpuwaste.sinks.terminal import PROSE, print_fitted

    rows = checks if checks is not None else report.checks
    code = verdict_code(rows)
    problems = [c for c in rows if c.status != "ok"]
    headline = next((c for c in rows if c.check == NOT_SCRAPED), None) or next(
        (c for c in rows if c.check == NO_CLUSTER_STATE), None)
    not_scraped = headline if headline is not None and headline.check == NOT_SCRAPED else None
    verdict = f"verdict: exit {code}: {EXIT_CODES[code] if headline is None else headline.detail}"
    first = verdict
    if problems:
        first += f" ({len(problems)} thing{'s' if len(problems) != 1 else ''} to do, listed at the end)"
    print_fitted(out, first, style="bold " + ("green" if code == 0 else "red"), breaks=PROSE)
    _render_signals(report)
    _render_detectors(report)
    if report.csv_lines and not_scraped is None:  # with no exporter scraped, its CSV is not the fix
        _heading("add to the dcgm-exporter counters CSV", DOCS["dcgm-fields"])
        for line in report.csv_lines:
            out.print(f"  {line}", highlight=False, soft_wrap=True, markup=False)
        _heading("Helm values", DOCS["gpu-operator"])
        out.print(report.helm_values, highlight=False, soft_wrap=True, markup=False)
    if report.pod_fixes:
        out.print("[bold]pod-level series[/]")
        for line in report.pod_fixes:
            print_fitted(out, line, first="  ", indent="    ", breaks=PROSE)
    if problems:
        _render_todo(problems)
    print_fitted(out, verdict, style="bold " + ("green" if code == 0 else "red"), breaks=PROSE)


def _render_signals(report: DoctorReport) -> None:
    """The signals (present, stale with the newest sample, never exported) and the label counts."""
    from gpuwaste.sinks.terminal import PROSE, print_fitted

    out.print("[bold]signals[/] (series at the probe time)")
    for s in report.signals:
        if s.state == "present":
            mark, note = "[green]✓[/]", f"{s.series:6d}"
        elif s.state == "stale":
            newest = when_text(datetime.fromisoformat(s.newest)) if s.newest else "?"
            mark, note = "[yellow]~[/]", f"stale: newest sample at {newest}"
        else:
            mark, note = "[red]✗[/]", "never exported"
        if 4 + 45 + 1 + len(note) <= (out.width or 80):
            out.print(f"  {mark} ", Text(f"{s.name:45} {note}"), sep="", highlight=False, soft_wrap=True)
        else:  # the note under the name, so neither is folded
            out.print(f"  {mark} ", Text(s.name), sep="", highlight=False, soft_wrap=True)
            print_fitted(out, note, first=NOTE, indent=NOTE, breaks=PROSE)
    if report.labels:
        out.print("[bold]labels[/]")
        for k, v in report.labels.items():
            out.print(Text(f"  {k}: {v} series"), highlight=False)


def _render_detectors(report: DoctorReport) -> None:
    """Each detector's status (ok, degraded, stale, off) with its notes."""
    from gpuwaste.sinks.terminal import PROSE, print_fitted

    out.print("[bold]detectors[/]")
    for d in report.detectors:
        style = {"ok": "green", "degraded": "yellow", "stale": "yellow", "off": "red"}[d.status]
        out.print(f"  [{style}]{d.status:8}[/] {d.name}", highlight=False)
        for n in d.notes:
            print_fitted(out, n, first=NOTE, indent=NOTE, style="dim", breaks=PROSE)


def _render_todo(problems: list[CheckRow]) -> None:
    """The rows that are not ok: the verdict, what to do, where the documentation is."""
    from gpuwaste.sinks.terminal import PROSE, print_fitted

    out.print("[bold]to do[/]")
    for c in problems:
        style = "red" if c.status == "fail" else "yellow"
        print_fitted(out, f"{c.status:4} {c.check}: {c.detail}", first="  ", indent=NOTE, style=style, breaks=PROSE)
        if c.fix:
            print_fitted(out, f"fix: {c.fix}", first=HINT_INDENT, indent=HINT_INDENT + "  ", breaks=PROSE)
        if c.link:
            print_fitted(out, f"docs: {c.link}", first=HINT_INDENT, indent=HINT_INDENT, style="dim", breaks=PROSE)


def render_ksm(status: KsmStatus) -> None:
    """Print the kube-state-metrics section for people."""
    from gpuwaste.sinks.terminal import PROSE, print_fitted

    out.print("[bold]kube-state-metrics[/] (cluster state without Kubernetes access)")
    for name, count in status.series.items():
        mark = "[green]✓[/]" if count else ("[red]✗[/]" if name in status.missing else "[dim]–[/]")
        out.print(f"  {mark} {name:45} {count:6d}", highlight=False)
        if name in status.missing:
            print_fitted(out, status.missing[name], first=NOTE, indent=NOTE, style="dim", breaks=PROSE)
    verdict = ("a Prometheus-only scan can tie GPUs to pods" if status.usable
               else "a Prometheus-only scan cannot tie GPUs to pods")
    out.print(f"  {verdict}", highlight=False)
    if status.missing_keys:
        counted = f"({len(status.missing_keys)} of {len(status.keys)})"
        out.print(f"[bold]allow-listed labels/annotations missing[/] {counted}")
        for k in status.missing_keys:
            out.print(f"  ✗ {k}", highlight=False, markup=False)
    if status.helm_values:
        out.print("[bold]kube-state-metrics Helm values[/]")
        out.print(status.helm_values, highlight=False, soft_wrap=True, markup=False)


#: Where the shipped recording rules are, for either way of loading them.
_RULE_FILES = ("deploy/prometheus-rules.yaml (Prometheus Operator) or deploy/prometheus/gpuwaste-recording-rules.yml "
               "(rule_files)")


def render_rules(rules: dict[str, object]) -> None:
    """One line on the shipped recording rules (`PrometheusGpuMetricsSource.rules_status`)."""
    from gpuwaste.sinks.terminal import PROSE, print_fitted

    if rules["installed"] and rules.get("outdated"):
        print_fitted(out, f"recording rules ! version {rules['version']} installed, version {rules['current_version']} "
                     f"is current: scans still read their 5-minute buckets, at a larger read; update {_RULE_FILES}",
                     indent="  ", style="yellow", breaks=PROSE)
    elif rules["installed"]:
        print_fitted(out, f"recording rules ✓ installed (version {rules['version']}, {rules['evaluations_last_hour']}/"
                     f"{rules['expected_last_hour']} evaluations in the last hour): scans read their 5-minute buckets",
                     indent="  ", style="green", breaks=PROSE)
    else:
        print_fitted(out, "recording rules ✗ not installed: scans query the raw series (slower at fleet scale); "
                     f"install {_RULE_FILES}", indent="  ", style="yellow", breaks=PROSE)

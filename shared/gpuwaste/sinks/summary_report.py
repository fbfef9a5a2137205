"""Adapter: the daily summary as terminal tables (rich), Markdown, HTML and JSON."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from rich.console import Console
from rich.table import Table

from gpuwaste.models.notices import DailySummary, GroupTotal
from gpuwaste.models.text import for_terminal
from gpuwaste.sinks.slack_blocks import usd, when


def _trend(current: Decimal, previous: Decimal) -> str:
    if previous == 0:
        return "new" if current else "±0"
    delta = current - previous
    return f"{'+' if delta >= 0 else '-'}{usd(abs(delta))} ({delta / previous:+.0%})"


@dataclass(frozen=True)
class SummaryNotes:
    """What the report says beside the DailySummary.

    Attributes:
        data_quality: open data-quality problems in the period (telemetry problems: not waste, not counted as findings).
        last_scan: time of the last scan in the store, when the period ends after it; the "Open" line then shows
            `open_findings` / `open_usd_per_day` as of that scan instead of the period's (empty) end.
    """

    data_quality: int = 0
    last_scan: datetime | None = None
    open_findings: int = 0
    open_usd_per_day: Decimal = Decimal(0)


def period_date(s: DailySummary) -> str:
    """The date a report is titled with: the period's last day (`until` is exclusive)."""
    return f"{(s.until - timedelta(microseconds=1)).astimezone(UTC):%Y-%m-%d}"


def _headline(s: DailySummary, notes: SummaryNotes | None = None) -> list[tuple[str, str]]:
    notes = notes or SummaryNotes()
    if notes.last_scan is not None:
        open_line = ("Open at the last scan", f"{_findings(notes.open_findings)}, {usd(notes.open_usd_per_day)}/day "
                                              f"(last scan {when(notes.last_scan)}; nothing was scanned after it)")
    else:
        open_line = ("Open now", f"{_findings(s.open_findings)}, {usd(s.open_usd_per_day)}/day")
    rows = [
        ("Period", f"{when(s.since)} → {when(s.until)}"),
        ("Wasted", f"{usd(s.wasted_usd)} ({_trend(s.wasted_usd, s.previous_usd)} vs {usd(s.previous_usd)} the period before)"),
        open_line,
        ("Opened / resolved", f"{s.opened} / {s.resolved}"),
        ("Savings", f"{usd(s.saved_usd_per_day)}/day from resolutions, {usd(s.realised_savings_usd)} realised in the period"),
        ("Unpriced findings", str(s.unpriced)),
    ]
    if notes.data_quality:
        rows.append(("Data quality", f"{notes.data_quality} data-quality problem{'s' if notes.data_quality != 1 else ''} "
                                     "(telemetry that cannot be judged; not waste, not in the counts above)"))
    return rows


def _findings(n: int) -> str:
    return f"{n} finding" if n == 1 else f"{n} findings"


_SECTIONS = (("team", "by_team"), ("namespace", "by_namespace"), ("kind", "by_kind"), ("cluster", "by_cluster"))


def render_terminal(s: DailySummary, console: Console, notes: SummaryNotes | None = None) -> None:
    """Print the summary as rich tables."""
    head = Table(title=f"GPU waste summary {period_date(s)}", show_header=False)
    for k, v in _headline(s, notes):
        head.add_row(k, v)
    console.print(head)
    for label, attr in _SECTIONS:
        groups: tuple[GroupTotal, ...] = getattr(s, attr)
        t = Table(title=f"By {label}")
        for col in (label, "wasted", "before", "trend", "open"):
            t.add_column(col, justify="left" if col == label else "right")
        for g in groups:
            t.add_row(for_terminal(g.name), usd(g.wasted_usd), usd(g.previous_usd), _trend(g.wasted_usd, g.previous_usd), str(g.findings))
        console.print(t)
    t = Table(title="Top offenders")
    for col in ("#", "workload", "namespace", "kind", "team", "wasted", "USD/day", "state"):
        t.add_column(col)
    for n, o in enumerate(s.top, start=1):
        t.add_row(str(n), for_terminal(o.workload or "-"), for_terminal(o.namespace or "-"), o.kind, for_terminal(o.team), usd(o.wasted_usd), usd(o.usd_per_day),
                  "open" if o.open else "resolved")
    console.print(t)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(s: DailySummary, notes: SummaryNotes | None = None) -> str:
    """The summary as GitHub-flavoured Markdown."""
    out = [f"# GPU waste summary {period_date(s)}", ""]
    out += [f"- **{k}:** {_md_cell(v)}" for k, v in _headline(s, notes)]
    for label, attr in _SECTIONS:
        out += ["", f"## By {label}", "", f"| {label} | wasted | before | trend | open |", "|---|---:|---:|---:|---:|"]
        out += [
            f"| {_md_cell(g.name)} | {usd(g.wasted_usd)} | {usd(g.previous_usd)} | {_trend(g.wasted_usd, g.previous_usd)} | {g.findings} |"
            for g in getattr(s, attr)
        ]
    out += ["", "## Top offenders", "", "| # | workload | namespace | kind | team | wasted | USD/day | state |",
            "|---:|---|---|---|---|---:|---:|---|"]
    out += [
        f"| {n} | {_md_cell(o.workload or '-')} | {_md_cell(o.namespace or '-')} | {o.kind} | {_md_cell(o.team)} |"
        f" {usd(o.wasted_usd)} | {usd(o.usd_per_day)} | {'open' if o.open else 'resolved'} |"
        for n, o in enumerate(s.top, start=1)
    ]
    return "\n".join(out) + "\n"


def render_html(s: DailySummary, *, chart_png_name: str | None = None, notes: SummaryNotes | None = None) -> str:
    """The summary as a self-contained HTML page (names escaped)."""
    e = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>GPU waste summary {period_date(s)}</title>",
        "<style>body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px}"
        "td.n{text-align:right}</style></head><body>",
        f"<h1>GPU waste summary {period_date(s)}</h1><ul>",
    ]
    parts += [f"<li><b>{e(k)}:</b> {e(v)}</li>" for k, v in _headline(s, notes)]
    parts.append("</ul>")
    if chart_png_name:
        parts.append(f"<img src='{e(chart_png_name)}' alt='GPU waste per team by kind'>")
    for label, attr in _SECTIONS:
        parts.append(f"<h2>By {e(label)}</h2><table><tr><th>{e(label)}</th><th>wasted</th><th>before</th><th>trend</th><th>open</th></tr>")
        parts += [
            f"<tr><td>{e(g.name)}</td><td class=n>{usd(g.wasted_usd)}</td><td class=n>{usd(g.previous_usd)}</td>"
            f"<td class=n>{e(_trend(g.wasted_usd, g.previous_usd))}</td><td class=n>{g.findings}</td></tr>"
            for g in getattr(s, attr)
        ]
        parts.append("</table>")
    parts.append("<h2>Top offenders</h2><table><tr><th>#</th><th>workload</th><th>namespace</th><th>kind</th><th>team</th>"
                 "<th>wasted</th><th>USD/day</th><th>state</th></tr>")
    parts += [
        f"<tr><td>{n}</td><td>{e(o.workload or '-')}</td><td>{e(o.namespace or '-')}</td><td>{e(o.kind)}</td><td>{e(o.team)}</td>"
        f"<td class=n>{usd(o.wasted_usd)}</td><td class=n>{usd(o.usd_per_day)}</td><td>{'open' if o.open else 'resolved'}</td></tr>"
        for n, o in enumerate(s.top, start=1)
    ]
    parts.append("</table></body></html>")
    return "\n".join(parts) + "\n"


def render_json(s: DailySummary, notes: SummaryNotes | None = None) -> str:
    """The summary as JSON for machines (money as exact decimal strings, times in RFC 3339)."""
    notes = notes or SummaryNotes()
    doc = s.model_dump(mode="json")
    doc["data_quality_problems"] = notes.data_quality
    if notes.last_scan is not None:
        doc["last_scan"] = {"at": notes.last_scan.isoformat(), "open_findings": notes.open_findings,
                            "open_usd_per_day": str(notes.open_usd_per_day)}
    return json.dumps(doc, indent=1) + "\n"

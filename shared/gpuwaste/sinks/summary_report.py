"""Adapter: the daily summary as a trend report — terminal tables (rich), Markdown, a self-contained HTML page
(styles and the 7- and 30-day charts inline, as SVG) and JSON (money as decimal strings rounded to the cent).

Every date reads the same as on the other surfaces (`people.when`, `people.day`); every amount goes through
`people.usd` / `people.per_month`; names from the cluster are escaped for the format at hand.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuwaste.models.coverage import CoverageRow
from gpuwaste.models.notices import DailySummary, GroupTotal, Offender, TrendDay
from gpuwaste.models.text import for_html, for_json, for_markdown
from gpuwaste.people import (
    DAYS_PER_MONTH,
    age,
    elide,
    group_label,
    kind_label,
    money,
    namespace_label,
    offender_name,
    per_month,
    plain,
    trend_words,
    usd,
    versus_words,
    when,
)
from gpuwaste.people import period_date as _period_date
from gpuwaste.sinks.chart import NARROW, team_order, trend_svg
from gpuwaste.sinks.summary_spend import SPEND_COLUMNS, spend_cells, spend_headline
from gpuwaste.sinks.terminal import fit_widths, table_overhead


def _group_trend(g: GroupTotal) -> str:
    return trend_words(g.wasted_usd, g.previous_usd, new=g.new)


def _versus(s: DailySummary) -> str:
    """The period's waste against the period before, in words ("nothing wasted" rather than "new vs $0.00")."""
    return versus_words(s.wasted_usd, s.previous_usd)


def _savings(s: DailySummary) -> str:
    """One line on savings: only the figures that are not zero, and one short line when all are."""
    parts = []
    if s.saved_usd_per_day or s.realised_savings_usd:
        parts.append(f"{usd(s.saved_usd_per_day)}/day from resolutions in the period, {usd(s.realised_savings_usd)} "
                     "realised in the period")
    realised_all = sum((d.saved_usd for d in s.trend), Decimal(0))
    if realised_all and realised_all != s.realised_savings_usd:  # the same figure twice when the period is the trend's
        parts.append(f"resolutions of the last {len(s.trend)} days saved {usd(realised_all)} in all")
    return "; ".join(parts) or "no savings realised in this period"


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
    by_hour: tuple[HourGrid, ...] = ()


@dataclass(frozen=True)
class HourGrid:
    """One team's wasted GPU-hours by hour of day × day of week (UTC), for the HTML heat table (issue 24 §6).

    Attributes:
        team: the team (routing's name).
        gpu_hours: 168 cells, `gpu_hours[weekday * 24 + hour]`, Monday 00:00 UTC first (wasted GPU-hours).
        usd: the same 168 cells in wasted USD (the shading follows these: unpriced findings count too).
        night_share: share 0–1 of the wasted USD at night (20–08 UTC, Mon–Fri).
        weekend_share: share 0–1 of the wasted USD at weekends (Saturday and Sunday, UTC).
    """

    team: str
    gpu_hours: tuple[Decimal, ...]
    usd: tuple[Decimal, ...]
    night_share: float
    weekend_share: float


def period_date(s: DailySummary) -> str:
    """The date a report is titled with: the period's last day (`until` is exclusive)."""
    return _period_date(s.until)


def _open_now(s: DailySummary, notes: SummaryNotes) -> tuple[int, Decimal]:
    if notes.last_scan is not None:
        return notes.open_findings, notes.open_usd_per_day
    return s.open_findings, s.open_usd_per_day


def _headline(s: DailySummary, notes: SummaryNotes | None = None) -> list[tuple[str, str]]:
    notes = notes or SummaryNotes()
    n, rate = _open_now(s, notes)
    if notes.last_scan is not None:
        open_line = ("Open at the last scan", f"{_findings(n)}, {usd(rate)}/day ({per_month(rate)}; last scan "
                                              f"{when(notes.last_scan)}; nothing was scanned after it)")
    else:
        open_line = ("Open now", f"{_findings(n)}, {usd(rate)}/day ({per_month(rate)})")
    rows = [
        ("Period", f"{when(s.since)} → {when(s.until)}"),
        ("Wasted", f"{usd(s.wasted_usd)} ({_versus(s)})"),
        open_line,
        ("Opened / resolved", f"{s.opened} / {s.resolved}"),
        ("Savings", _savings(s)),
        ("Unpriced findings", str(s.unpriced)),
    ]
    if notes.last_scan is not None and notes.last_scan < s.since:
        rows.append(("Note", f"the state's last scan ({when(notes.last_scan)}) is before this period, so nothing in it was "
                             "scanned; `--until latest` (the default) reports the period that ends with that scan"))
    alls = [c for c in s.coverage if c.kind == "all"]
    if alls:
        rows.append(("Attribution coverage", "; ".join(f"{c.cluster}: {_ratio(c.ratio)} of {c.allocated_gpu_hours:,.1f} "
                                                      f"allocated GPU-h ({c.scans} scan{'' if c.scans == 1 else 's'})" for c in alls)))
    rows += spend_headline(s)  # the fleet funnel and the allocated cost (issue 24), when the store holds them
    if notes.data_quality:
        rows.append(("Data quality", f"{notes.data_quality} data-quality problem{'s' if notes.data_quality != 1 else ''} "
                                     "(telemetry that cannot be judged; not waste, not in the counts above)"))
    return rows


def _ratio(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.1%}"


#: The attribution coverage table's columns (issue 21 §12): cluster, allocation kind, the share of allocated GPU-hours
#: with attributable telemetry, the GPU-hours summed over the period's scans, and the scans.
COVERAGE_COLUMNS = ("cluster", "kind", "coverage", "allocated GPU-h", "attributed GPU-h", "scans")


def _coverage_cells(c: CoverageRow) -> tuple[str, str, str, str, str, str]:
    return (c.cluster, c.kind, _ratio(c.ratio), f"{c.allocated_gpu_hours:,.1f}", f"{c.attributed_gpu_hours:,.1f}",
            str(c.scans))


def _findings(n: int) -> str:
    return f"{n} finding" if n == 1 else f"{n} findings"


_SECTIONS = (("team", "by_team"), ("namespace", "by_namespace"), ("kind", "by_kind"), ("cluster", "by_cluster"))


def _open_for(o: Offender, until: datetime) -> str:
    """How long an offender has been wasting (from when the waste began, to its resolution or the period's end)."""
    start = o.waste_since or o.first_seen
    if start is None:
        return "-"
    end = o.resolved_at if (not o.open and o.resolved_at is not None) else until
    return age(start, end)


def _state(o: Offender) -> str:
    return "open" if o.open else "resolved"


def _last(days: tuple[TrendDay, ...], n: int) -> tuple[TrendDay, ...]:
    return days[-n:] if days else ()


def _table(title: str) -> Table:
    return Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold",
                 title_justify="left", title_style="bold")


def render_terminal(s: DailySummary, console: Console, notes: SummaryNotes | None = None) -> None:
    """Print the summary as compact tables that fit the console (one line per row, names elided in the middle):
    headline, the last 7 days, groups, top offenders with how long they have been open."""
    width = console.width or 80
    head = Table(title=f"GPU waste summary {period_date(s)}", show_header=False, box=box.SIMPLE, show_edge=False,
                 pad_edge=False, title_justify="left", title_style="bold")
    head.add_column(style="bold", no_wrap=True)
    head.add_column(overflow="fold")
    for k, v in _headline(s, notes):
        head.add_row(k, Text(v))
    console.print(head)
    week = _last(s.trend, 7)
    if week:
        t = _table("Last 7 days (UTC)")
        for col in ("day", "wasted", "saved", "costliest team"):
            t.add_column(col, justify="left" if col in ("day", "costliest team") else "right", no_wrap=True)
        for d in week:
            top = f"{d.by_team[0][0]} {usd(d.by_team[0][1])}" if d.by_team else "-"
            t.add_row(f"{d.day:%Y-%m-%d}", usd(d.wasted_usd), usd(d.saved_usd), Text(elide(plain(top), max(10, width - 40))))
        console.print(t)
    quiet = [label for label, attr in _SECTIONS if not getattr(s, attr)]
    if quiet:  # empty breakdowns as one line, not empty tables
        console.print(Text(f"By {', '.join(quiet)}: no waste in this period", style="bold"))
    for label, attr in _SECTIONS:
        groups: tuple[GroupTotal, ...] = getattr(s, attr)
        if not groups:
            continue
        t = _table(f"By {label}")
        names = [plain(group_label(label, g.name)) for g in groups]
        name_w = max(4, min(max([len(label), *(len(n) for n in names)]), width - 52))
        t.add_column(label, no_wrap=True, width=name_w)
        for col in ("wasted", "before", "trend", "open"):
            t.add_column(col, justify="right", no_wrap=True)
        for g, name in zip(groups, names, strict=True):
            t.add_row(Text(elide(name, name_w)), usd(g.wasted_usd), usd(g.previous_usd), _group_trend(g),
                      str(g.findings))
        console.print(t)
    if s.justified:
        t = _table("Justified (Expected / Snooze, active at the end)")
        for col in ("team", "findings", "USD/day", "first ends"):
            t.add_column(col, justify="left" if col in ("team", "first ends") else "right", no_wrap=True)
        for j in s.justified:
            t.add_row(Text(elide(plain(group_label("team", j.team)), max(10, width - 40))), str(j.findings),
                      usd(j.usd_per_day), f"{j.next_end:%Y-%m-%d}")
        console.print(t)
    if s.coverage:
        t = _table("Attribution coverage (share of allocated GPU-hours with attributable telemetry)")
        for col in COVERAGE_COLUMNS:
            t.add_column(col, justify="left" if col in ("cluster", "kind") else "right", no_wrap=True)
        for c in s.coverage:
            figures = _coverage_cells(c)
            t.add_row(Text(elide(plain(figures[0]), max(8, width - 70))), Text(plain(figures[1])), *figures[2:])
        console.print(t)
    if s.spend is not None:
        t = _table("Spend per team (allocated cost) and the month (UTC) at the current rate")
        for col in SPEND_COLUMNS:  # headers wrap: seven columns fit 80 characters
            t.add_column(col, justify="left" if col == "team" else "right", overflow="fold",
                         min_width=12 if col == "team" else None)
        for spend_row in spend_cells(s):
            t.add_row(Text(plain(spend_row[0])), *spend_row[1:])
        console.print(t)
    if not s.top:
        console.print(Text("Top offenders: none in this period", style="bold"))
        return
    t = _table("Top offenders (by wasted in the period)")
    wide = width >= 110  # the team only when it fits; the period's wasted amount (the order) always
    cells = [(offender_name(o.workload, o.namespace) if o.workload else namespace_label(o.namespace), kind_label(o.kind), group_label("team", o.team)) for o in s.top]
    money = {"wasted": [usd(o.wasted_usd) for o in s.top], "USD/day": [usd(o.usd_per_day) for o in s.top]}
    tail = {**money, "open for": [_open_for(o, s.until) for o in s.top], "state": [_state(o) for o in s.top]}
    columns = {"workload": [c[0] for c in cells], "kind": [c[1] for c in cells]}
    if wide:
        columns["team"] = [c[2] for c in cells]
    fixed = (len(str(len(s.top))) + sum(max(len(k), *(len(v) for v in vs)) for k, vs in tail.items())
             + table_overhead(1 + len(columns) + len(tail)))
    text_w = fit_widths(columns, width - fixed, {"workload": 12, "kind": 8, "team": 6})
    t.add_column("#", justify="right", no_wrap=True)
    for col in columns:
        t.add_column(col, no_wrap=True, width=text_w[col])
    for col in tail:
        t.add_column(col, justify="right" if col in money else "left", no_wrap=True)
    for n, (o, (work, kind, team)) in enumerate(zip(s.top, cells, strict=True), start=1):
        row: list[str | Text] = [str(n), Text(elide(plain(work), text_w["workload"])), Text(elide(kind, text_w["kind"]))]
        if wide:
            row.append(Text(elide(plain(team), text_w["team"])))
        row += [tail["wasted"][n - 1], tail["USD/day"][n - 1], tail["open for"][n - 1],
                Text(_state(o), style="red" if o.open else "green")]
        t.add_row(*row)
    console.print(t)


def _md_cell(text: str) -> str:
    return for_markdown(text)  # no link, image, emphasis, HTML or cell break from a name


def render_markdown(s: DailySummary, notes: SummaryNotes | None = None) -> str:
    """The summary as GitHub-flavoured Markdown (the 7-day trend as a table)."""
    out = [f"# GPU waste summary {period_date(s)}", ""]
    out += [f"- **{k}:** {_md_cell(v)}" for k, v in _headline(s, notes)]
    week = _last(s.trend, 7)
    if week:
        out += ["", "## Last 7 days (UTC)", "", "| day | wasted | saved | costliest team |", "|---|---:|---:|---|"]
        out += [f"| {d.day:%Y-%m-%d} | {usd(d.wasted_usd)} | {usd(d.saved_usd)} | "
                f"{_md_cell(d.by_team[0][0]) if d.by_team else '-'} |" for d in week]
    for label, attr in _SECTIONS:
        out += ["", f"## By {label}", "", f"| {label} | wasted | before | trend | open |", "|---|---:|---:|---:|---:|"]
        out += [
            f"| {_md_cell(group_label(label, g.name))} | {usd(g.wasted_usd)} | {usd(g.previous_usd)} | {_group_trend(g)} | {g.findings} |"
            for g in getattr(s, attr)
        ]
    if s.justified:
        out += ["", "## Justified (Expected / Snooze, active at the end)", "", "| team | findings | USD/day | first ends |",
                "|---|---:|---:|---|"]
        out += [f"| {_md_cell(group_label('team', j.team))} | {j.findings} | {usd(j.usd_per_day)} | {j.next_end:%Y-%m-%d} |"
                for j in s.justified]
    if s.coverage:
        out += ["", "## Attribution coverage", "", "| " + " | ".join(COVERAGE_COLUMNS) + " |", "|---|---|---:|---:|---:|---:|"]
        out += ["| " + " | ".join(_md_cell(x) for x in _coverage_cells(c)) + " |" for c in s.coverage]
    if s.spend is not None:
        out += ["", "## Spend per team", "", "| " + " | ".join(SPEND_COLUMNS) + " |", "|---" + "|---:" * 6 + "|"]
        out += ["| " + " | ".join(_md_cell(x) for x in spend_row) + " |" for spend_row in spend_cells(s)]
    out += ["", "## Top offenders", "", "| # | workload | namespace | kind | team | wasted | USD/day | open for | state |",
            "|---:|---|---|---|---|---:|---:|---|---|"]
    out += [
        f"| {n} | {_md_cell(offender_name(o.workload, o.namespace))} | {_md_cell(namespace_label(o.namespace))} | {kind_label(o.kind)} | {_md_cell(group_label('team', o.team))} |"
        f" {usd(o.wasted_usd)} | {usd(o.usd_per_day)} | {_open_for(o, s.until)} | {_state(o)} |"
        for n, o in enumerate(s.top, start=1)
    ]
    return "\n".join(out) + "\n"


#: The report's stylesheet (inline: the page is one file that works wherever it is written or mailed).
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:960px;color:#222;
padding:0 16px;line-height:1.4}
h1{font-size:24px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sub{color:#666;margin:0 0 16px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}
.card{flex:1 1 160px;border:1px solid #e3e3e3;border-radius:8px;padding:10px 14px;background:#fafafa}
.card b{display:block;font-size:20px}.card span{color:#666;font-size:13px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid #eee;padding:5px 8px;text-align:left;vertical-align:top}
th{background:rgba(0,0,0,.047)}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
ul.head{padding-left:18px;font-size:14px}.chart{margin:8px 0}
.chart svg,.chart img{max-width:100%;height:auto;display:block}
.chart .narrow{display:none}.chart .narrow svg{width:100%;max-width:480px}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch}.scroll table{min-width:520px}
.scroll{background:linear-gradient(to right,#fff 40%,rgba(255,255,255,0)) left/28px 100% no-repeat local,
linear-gradient(to left,#fff 40%,rgba(255,255,255,0)) right/28px 100% no-repeat local,
linear-gradient(to right,rgba(0,0,0,.2),rgba(0,0,0,0)) left/12px 100% no-repeat scroll,
linear-gradient(to left,rgba(0,0,0,.2),rgba(0,0,0,0)) right/12px 100% no-repeat scroll #fff}
@media (max-width:800px){.chart .wide{display:none}.chart .narrow{display:block}}
@media (max-width:600px){body{margin:12px auto;padding:0 10px}h1{font-size:20px}.card{flex:1 1 130px}
.card b{font-size:17px}th,td{padding:4px 6px}}
.state-open{color:#b00020}.state-resolved{color:#1b7f3b}
footer{color:#777;font-size:12px;margin-top:28px}
table.heat{width:auto;border-collapse:separate;border-spacing:1px;font-size:10px;margin:0 0 12px}
table.heat th{background:none;border:0;padding:0 2px;font-weight:normal;color:#666;text-align:left}
table.heat td{border:1px solid #eee;padding:0;width:9px;min-width:9px;height:12px}
.heat-head{font-size:13px;margin:10px 0 4px}
"""


_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def _heat_table(g: HourGrid) -> str:
    """A team's week as a compact heat table: 7 rows × 24 one-hour cells (about 300 px wide, for a 390 px screen),
    shaded by the share of the team's busiest hour; each cell's title gives its GPU-hours and USD."""
    e = for_html
    peak = max(g.usd, default=Decimal(0)) or Decimal(1)
    rows = ["<table class='heat'><tr><th></th>"
            + "".join(f"<th colspan=3>{h}</th>" for h in range(0, 24, 3)) + "</tr>"]
    for d, name in enumerate(_WEEKDAYS):
        cells = []
        for h in range(24):
            v, gh = g.usd[d * 24 + h], g.gpu_hours[d * 24 + h]
            alpha = f"{float(v / peak):.2f}" if v else "0"
            cells.append(f"<td style='background:rgba(192,40,24,{alpha})' "
                         f"title='{name} {h:02d}:00 UTC: {gh:.1f} GPU-h, {e(usd(v))}'></td>")
        rows.append(f"<tr><th>{name}</th>{''.join(cells)}</tr>")
    total_h = sum(g.gpu_hours, Decimal(0))
    head = (f"<p class='heat-head'><b>{e(plain(group_label('team', g.team)))}</b>: {total_h:.1f} wasted GPU-h, "
            f"{e(usd(sum(g.usd, Decimal(0))))} · nights (20–08 UTC, Mon–Fri) {g.night_share:.0%} · "
            f"weekends {g.weekend_share:.0%}</p>")
    return head + "".join(rows) + "</table>"


def _chart(days: tuple[TrendDay, ...], *, title: str, order: list[str]) -> str:
    """A trend chart in two layouts, the page's CSS showing one: wide (760 units, for a desktop) and narrow
    (`chart.NARROW`, for a phone: its text stays 12 px where the wide one's would shrink to 5)."""
    wide = trend_svg(days, title=title, order=order)
    narrow = trend_svg(days, title=title, order=order, tooltips=False, width=NARROW["width"],
                       height=NARROW["height"], font=NARROW["font"])
    return f"<div class='chart'><div class='wide'>{wide}</div><div class='narrow'>{narrow}</div></div>"


def render_html(s: DailySummary, *, chart_png_name: str | None = None, notes: SummaryNotes | None = None,
                chart_png: bytes | None = None) -> str:
    """The summary as one self-contained HTML page: inline styles, the 7- and 30-day trend charts as inline SVG
    (a PNG, when given as bytes, as a data URI); every name escaped."""
    e = for_html  # controls stripped, HTML escaped
    notes = notes or SummaryNotes()
    # offenders named as on every surface ("node ip-10-0-1-17" for a node finding: `offender_name`), for this page
    s = s.model_copy(update={"top": tuple(o.model_copy(update={"workload": offender_name(o.workload, o.namespace)})
                                          if o.workload else o for o in s.top)})
    n_open, rate = _open_now(s, notes)
    # one meaning per card: the period's waste, the open rate per day, the same rate per month, the period's savings
    open_words = "open at the last scan" if notes.last_scan is not None else "open now"
    cards = [
        (usd(s.wasted_usd), f"wasted {when(s.since)} → {when(s.until)}"),
        (f"{usd(rate)}/day", f"{_findings(n_open)} {open_words}"),
        (per_month(rate), "the open rate for a month (30 days)"),
        (usd(s.realised_savings_usd), "realised savings in this period" if s.realised_savings_usd
         else "no savings realised in this period"),
    ]
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>GPU waste summary {period_date(s)}</title><style>{CSS}</style></head><body>",
        f"<h1>GPU waste summary {period_date(s)}</h1>",
        f"<p class='sub'>{e(when(s.since))} → {e(when(s.until))} · {e(_versus(s))}</p>",
        "<div class='cards'>" + "".join(f"<div class='card'><b>{e(v)}</b><span>{e(k)}</span></div>" for v, k in cards)
        + "</div>",
        "<ul class='head'>" + "".join(f"<li><b>{e(k)}:</b> {e(v)}</li>" for k, v in _headline(s, notes)) + "</ul>",
    ]
    if s.trend:
        order = team_order(s.trend)  # the same colour for a team in both charts
        parts.append("<h2>Trend</h2>")
        for days in (_last(s.trend, 7), s.trend):
            parts.append(_chart(days, title=f"USD wasted per day and team, last {len(days)} days", order=order))
    if chart_png is not None:
        data = base64.b64encode(chart_png).decode()
        parts.append(f"<div class='chart'><img alt='GPU waste per team by kind' src='data:image/png;base64,{data}'></div>")
    elif chart_png_name:
        parts.append(f"<p><img src='{e(chart_png_name)}' alt='GPU waste per team by kind'></p>")
    for label, attr in _SECTIONS:
        parts.append(f"<h2>By {e(label)}</h2><div class='scroll'><table><tr><th>{e(label)}</th><th class=n>wasted</th><th class=n>before</th>"
                     "<th class=n>trend</th><th class=n>open</th></tr>")
        parts += [
            f"<tr><td>{e(plain(group_label(label, g.name)))}</td><td class=n>{usd(g.wasted_usd)}</td><td class=n>{usd(g.previous_usd)}</td>"
            f"<td class=n>{e(_group_trend(g))}</td><td class=n>{g.findings}</td></tr>"
            for g in getattr(s, attr)
        ]
        parts.append("</table></div>")
    if s.justified:
        parts.append("<h2>Justified (Expected / Snooze, active at the end)</h2><div class='scroll'><table><tr><th>team</th>"
                     "<th class=n>findings</th><th class=n>USD/day</th><th>first ends</th></tr>")
        parts += [f"<tr><td>{e(plain(group_label('team', j.team)))}</td><td class=n>{j.findings}</td>"
                  f"<td class=n>{e(usd(j.usd_per_day))}</td><td>{j.next_end:%Y-%m-%d}</td></tr>" for j in s.justified]
        parts.append("</table></div>")
    if s.coverage:
        parts.append("<h2>Attribution coverage</h2><div class='scroll'><table><tr>"
                     + "".join(f"<th{'' if col in ('cluster', 'kind') else ' class=n'}>{e(col)}</th>" for col in COVERAGE_COLUMNS)
                     + "</tr>")
        parts += ["<tr>" + "".join(f"<td{'' if i < 2 else ' class=n'}>{e(plain(x))}</td>" for i, x in enumerate(_coverage_cells(c)))
                  + "</tr>" for c in s.coverage]
        parts.append("</table></div>")
    if s.spend is not None:  # the allocated cost per team next to the waste and the budget (issue 24)
        parts.append("<h2>Spend per team</h2><div class='scroll'><table><tr>"
                     + "".join(f"<th{'' if col == 'team' else ' class=n'}>{e(col)}</th>" for col in SPEND_COLUMNS) + "</tr>")
        parts += ["<tr>" + "".join(f"<td{'' if i == 0 else ' class=n'}>{e(plain(x))}</td>" for i, x in enumerate(row))
                  + "</tr>" for row in spend_cells(s)]
        parts.append("</table></div>")
    if notes.by_hour:
        parts.append("<h2>When the waste happens</h2><p class='sub'>Wasted GPU-hours per team by hour of day (UTC) "
                     "and weekday; darker = more (relative to the team's busiest hour).</p>")
        parts += [_heat_table(g) for g in notes.by_hour]
    # the money right after the name: on a 390 px phone the table scrolls and only its first columns are on screen
    parts.append("<h2>Top offenders</h2><div class='scroll'><table><tr><th class=n>#</th><th>workload</th>"
                 "<th class=n>wasted</th><th class=n>USD/day</th><th>kind</th><th>team</th><th>namespace</th>"
                 "<th>open for</th><th>state</th></tr>")
    parts += [
        f"<tr><td class=n>{n}</td><td>{e(plain(o.workload or '-'))}</td><td class=n>{usd(o.wasted_usd)}</td>"
        f"<td class=n>{usd(o.usd_per_day)}</td><td>{e(kind_label(o.kind))}</td>"
        f"<td>{e(plain(group_label('team', o.team)))}</td><td>{e(plain(namespace_label(o.namespace)))}</td>"
        f"<td>{e(_open_for(o, s.until))}</td><td class='state-{_state(o)}'>{_state(o)}</td></tr>"
        for n, o in enumerate(s.top, start=1)
    ]
    parts.append("</table></div><footer>Generated by gpuwaste. Money: USD, rounded to the cent (the JSON report has the "
                 "same rounding; per month = per day × 30). Days are UTC.</footer></body></html>")
    return "\n".join(parts) + "\n"


def _rounded(value: Any) -> Any:
    """Every Decimal in a dumped document as a decimal string rounded to the cent."""
    if isinstance(value, Decimal):
        return money(value)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def render_json(s: DailySummary, notes: SummaryNotes | None = None) -> str:
    """The summary as JSON for machines: money as decimal strings rounded to the cent ("76.77"), times in RFC 3339."""
    notes = notes or SummaryNotes()
    doc = _rounded(s.model_dump(mode="python"))
    doc["data_quality_problems"] = notes.data_quality
    doc["open_usd_per_month"] = money(s.open_usd_per_day * DAYS_PER_MONTH)
    if notes.last_scan is not None:
        doc["last_scan"] = {"at": notes.last_scan.isoformat(), "open_findings": notes.open_findings,
                            "open_usd_per_day": money(notes.open_usd_per_day)}
    return json.dumps(for_json(doc), indent=1) + "\n"

"""`gpuwaste summary`: the daily cost summary of a local state file, in the terminal, Markdown, HTML or JSON.

As in every other command, `-o/--output` chooses the output format (`--format/-f` is the same option under its
older name); `--out-file PATH` writes the report to a file (`--out` is its old name).
"""

from __future__ import annotations

import dataclasses
import io
import os
import sys
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gpuwaste.cli_support import (
    DEFAULT_STATE,
    app,
    check_state_path,
    config_or_exit,
    err,
    fail,
    out,
    parse_positive,
    parse_time,
)
from gpuwaste.errors import GpuWasteError


class SummaryFormat(StrEnum):
    """Output formats of the summary."""

    table = "table"
    markdown = "markdown"
    html = "html"
    json = "json"
    terminal = "terminal"  # the old name of `table` (every other command says `-o table`)


def print_month_end(service, cfg, *, until) -> None:  # type: ignore[no-untyped-def]
    """The month-end view (`services.month_end`) of the store at `until`: waste, and spend where the store holds it."""
    from datetime import timedelta

    from gpuwaste.models.spend import spend_of
    from gpuwaste.services.month_end import month_bounds, month_end

    start, _ = month_bounds(until)
    spend = spend_of(service.store.allocation(since=start, until=until))
    last_day = spend_of(service.store.allocation(since=until - timedelta(days=1), until=until))
    rows = month_end(service.store.history(since=start, until=until), until=until, team_of=service.team_of,
                     budgets_per_day=dict(cfg.serve.team_budgets_usd_per_day),
                     default_per_day=cfg.serve.default_team_budget_usd_per_day,
                     budgets_per_month=dict(cfg.serve.team_budgets_usd_per_month),
                     default_per_month=cfg.serve.default_team_budget_usd_per_month,
                     spend=None if spend.empty else spend, spend_last_day=None if spend.empty else last_day)
    what = "spend (allocated cost) and wasted USD" if not spend.empty else "wasted USD"
    out.print(f"Month to date · {start:%Y-%m} up to {until:%Y-%m-%d %H:%M} UTC · {what}, month-end at the current rate",
              style="bold", highlight=False, markup=False)
    for m in rows:
        budget = "no budget" if m.budget_usd is None else f"budget ${m.budget_usd:,.2f}" + (" — OVER" if m.over_budget else "")
        spent = ("" if m.spend_to_date_usd is None else
                 f"spend ${m.spend_to_date_usd:,.2f} so far, month-end ${m.spend_month_end_usd or 0:,.2f} · ")
        out.print(f"  {m.team}: {spent}wasted ${m.to_date_usd:,.2f} so far · ${m.open_usd_per_day:,.2f}/day open now · month-end "
                  f"${m.month_end_usd:,.2f} · {budget}", style="red" if m.over_budget else None, highlight=False, markup=False)
    if spend.empty:
        out.print("  (no allocation ledger in the state yet: spend appears once `gpuwaste run` has recorded scans)",
                  style="dim", highlight=False, markup=False)


def print_waste_hours(service, *, since, until) -> None:  # type: ignore[no-untyped-def]
    """When the waste happens (`services.waste_hours`): one grid per team, from the store's money ledger."""
    from gpuwaste.services.waste_hours import grid_lines, waste_by_hour_of_week

    grids, unpriced = waste_by_hour_of_week(service.store.history(since=since, until=until), since=since, until=until,
                                            team_of=service.team_of)
    out.print(f"When the waste happens · {since:%Y-%m-%d %H:%M} – {until:%Y-%m-%d %H:%M} UTC · wasted GPU-hours by hour "
              "(UTC) and weekday; darker = more", style="bold", highlight=False, markup=False)
    for team, grid in grids.items():
        for line in grid_lines(team, grid):
            out.print(line, highlight=False, markup=False, soft_wrap=True)
    if unpriced:
        out.print(f"{unpriced} unpriced findings left out (no USD per GPU-hour)", style="dim", highlight=False, markup=False)


def with_hour_grids(notes, service, result, *, by_hour: bool):  # type: ignore[no-untyped-def]
    """The HTML report's notes, with when the waste happens when `by_hour` is set.

    One `sinks.summary_report.HourGrid` per team, over the summary's period; else the notes as they are.
    """
    if not by_hour:
        return notes
    from gpuwaste.services.waste_hours import NIGHTS, WEEKENDS, waste_by_hour_of_week
    from gpuwaste.sinks.summary_report import HourGrid

    since, until = result.since, result.until
    grids, _ = waste_by_hour_of_week(service.store.history(since=since, until=until), since=since, until=until,
                                     team_of=service.team_of)
    return dataclasses.replace(notes, by_hour=tuple(
        HourGrid(team, tuple(g.cells), tuple(g.usd), g.share(NIGHTS), g.share(WEEKENDS)) for team, g in grids.items()))


@app.command("summary")
def summary_cmd(
    state: Annotated[Path, typer.Option("--state", help=f"SQLite state file written by `gpuwaste run` (the same default: {DEFAULT_STATE}).")] = DEFAULT_STATE,
    since: Annotated[str, typer.Option("--since", help="Period length before --until, e.g. 1d, 12h, 7d.")] = "1d",
    until: Annotated[str, typer.Option("--until", help="End of the period: 'latest' (newest activity in the state), 'now', or a time.")] = "latest",
    output: Annotated[SummaryFormat | None, typer.Option("--output", "-o", help="Output format: table, markdown, html or json (as in every command; 'terminal' is the old name of table).")] = None,
    fmt: Annotated[SummaryFormat | None, typer.Option("--format", "-f", help="Same as --output (the format).")] = None,
    out_path: Annotated[Path | None, typer.Option("--out-file", help="Write the report to this file instead of stdout (default format there: markdown).")] = None,
    old_out: Annotated[Path | None, typer.Option("--out", hidden=True, help="Old name of --out-file.")] = None,
    chart: Annotated[Path | None, typer.Option("--chart", help="Also draw the stacked-bar chart to this PNG (needs the 'charts' extra); the HTML report embeds it.")] = None,
    open_it: Annotated[bool, typer.Option("--open", help="Write the HTML report (to --out-file, else a temporary file) and open it in the browser.")] = False,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Configuration file (routing decides teams).")] = None,
    month: Annotated[bool, typer.Option("--month", help="Also show per team: spend (allocated cost) and wasted USD month to date, the month-end at the current rate and the month's waste budget (the monthly team budget in the config, else the per-day budget × days; table output).")] = False,
    by_hour: Annotated[bool, typer.Option("--by-hour", help="Also show when the waste happens: wasted GPU-hours per team by hour of day × day of week (UTC), with the night and weekend shares (table output; in -o html as a heat table).")] = False,
) -> None:
    """Summarise the waste in a state file: totals by team, namespace, kind and cluster, trend, top offenders, savings."""
    from gpuwaste.bootstrap import summary as bootstrap
    from gpuwaste.sinks.chart import MatplotlibChartRenderer
    from gpuwaste.sinks.summary_report import SummaryNotes, render_html, render_json, render_markdown, render_terminal

    if old_out is not None and out_path is not None and old_out != out_path:
        fail("--out and --out-file disagree: give --out-file (the file to write)")
    out_path = out_path or old_out
    if output is SummaryFormat.terminal:
        output = SummaryFormat.table
    if fmt is SummaryFormat.terminal:
        fmt = SummaryFormat.table
    if output is not None and fmt is not None and output is not fmt:
        fail(f"--output {output.value} and --format {fmt.value} disagree: give one of them (both choose the format)")
    if open_it and (output or fmt) not in (None, SummaryFormat.html):
        fail("--open shows the HTML report: leave -o out or use -o html")
    chosen = SummaryFormat.html if open_it else (
        output or fmt or (SummaryFormat.markdown if out_path is not None else SummaryFormat.table))
    cfg = config_or_exit(config)
    check_state_path(state)
    span = timedelta(seconds=parse_positive(since, "--since"))
    if until not in ("latest", "now"):
        parse_time(until)  # a malformed time fails here, before the store is opened
    try:
        service = bootstrap.local_summary_service(cfg, state)
        last_scan = service.last_activity()
        if until == "latest":
            end = last_scan or datetime.now(UTC)
        elif until == "now":
            end = datetime.now(UTC)
        else:
            end = parse_time(until) or datetime.now(UTC)
        stop = end + timedelta(seconds=1)
        result = service.build(since=end - span, until=stop)
        notes = SummaryNotes(data_quality=service.data_quality_problems(since=end - span, until=stop))
        if last_scan is not None and last_scan < end:
            # the period ends after the last scan: say what was open then, not "0 open" (nothing was scanned since)
            then = service.build(since=last_scan - span, until=last_scan + timedelta(seconds=1))
            notes = SummaryNotes(data_quality=notes.data_quality, last_scan=last_scan, open_findings=then.open_findings,
                                 open_usd_per_day=then.open_usd_per_day)
    except GpuWasteError as exc:
        fail(str(exc))
    png: bytes | None = None
    if chart is not None and not result.by_kind_and_team:
        err.print("no chart: no priced waste in the period")
    elif chart is not None:
        png = MatplotlibChartRenderer().waste_by_team_and_kind(result)
        if png is None:
            err.print("chart left out: matplotlib is not installed (pip install 'gpuwaste[charts]')")
        else:
            chart.write_bytes(png)
            err.print(f"wrote the chart to {chart}", highlight=False, markup=False, soft_wrap=True)
    if chosen is SummaryFormat.table:
        if out_path is None:
            render_terminal(result, out, notes)
            if month:
                print_month_end(service, cfg, until=result.until)
            if by_hour:
                print_waste_hours(service, since=result.since, until=result.until)
            return
        buffer = Console(file=io.StringIO(), width=120, color_system=None)
        render_terminal(result, buffer, notes)
        text = buffer.file.getvalue()  # type: ignore[attr-defined]
    elif chosen is SummaryFormat.markdown:
        text = render_markdown(result, notes)
    elif chosen is SummaryFormat.json:
        text = render_json(result, notes)
    else:
        notes = with_hour_grids(notes, service, result, by_hour=by_hour)
        text = render_html(result, chart_png=png, notes=notes)
    if open_it:
        import tempfile
        import webbrowser

        if out_path is None:
            handle, name = tempfile.mkstemp(prefix="gpuwaste-summary-", suffix=".html")
            os.close(handle)
            out_path = Path(name)
        out_path.write_text(text)
        err.print(f"wrote the html summary to {out_path}; opening it", highlight=False, markup=False, soft_wrap=True)
        if not webbrowser.open(out_path.resolve().as_uri()):
            err.print("no browser found: open the file yourself", highlight=False, markup=False)
        return
    if out_path is None:
        if chosen is SummaryFormat.json:
            sys.stdout.write(text)
        else:
            out.print(text, markup=False, highlight=False, soft_wrap=True)
        return
    out_path.write_text(text)
    err.print(f"wrote the {chosen.value} summary to {out_path}", highlight=False, markup=False, soft_wrap=True)

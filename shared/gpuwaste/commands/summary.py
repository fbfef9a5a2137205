"""`gpuwaste summary`: the daily cost summary of a local state file, in the terminal, Markdown or HTML."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from gpuwaste.bootstrap import summary as bootstrap
from gpuwaste.cli import _config, app, err, fail, out, parse_duration, parse_time
from gpuwaste.errors import GpuWasteError
from gpuwaste.sinks.chart import MatplotlibChartRenderer
from gpuwaste.sinks.summary_report import render_html, render_markdown, render_terminal


class SummaryFormat(StrEnum):
    """Output formats of the summary."""

    terminal = "terminal"
    markdown = "markdown"
    html = "html"


@app.command("summary")
def summary_cmd(
    state: Annotated[Path, typer.Option("--state", help="SQLite state file written by `gpuwaste run --state`.")],
    since: Annotated[str, typer.Option("--since", help="Period length before --until, e.g. 1d, 12h, 7d.")] = "1d",
    until: Annotated[str, typer.Option("--until", help="End of the period: 'latest' (newest activity in the state), 'now', or a time.")] = "latest",
    fmt: Annotated[SummaryFormat, typer.Option("--format", "-f", help="terminal, markdown or html.")] = SummaryFormat.terminal,
    chart: Annotated[Path | None, typer.Option("--chart", help="Also draw the stacked-bar chart to this PNG (needs the 'charts' extra).")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write Markdown/HTML here instead of stdout.")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Configuration file (routing decides teams).")] = None,
) -> None:
    """Summarise the waste in a state file: totals by team, namespace, kind and cluster, trend, top offenders, savings."""
    cfg = _config(config)
    span = timedelta(seconds=parse_duration(since))
    try:
        service = bootstrap.local_summary_service(cfg, state)
        if until == "latest":
            records = service.store.history(since=datetime(1970, 1, 1, tzinfo=UTC), until=datetime.now(UTC) + timedelta(days=3650))
            end = max((max(r.last_seen, r.resolved_at or r.last_seen) for r in records), default=datetime.now(UTC))
        elif until == "now":
            end = datetime.now(UTC)
        else:
            end = parse_time(until) or datetime.now(UTC)
        result = service.build(since=end - span, until=end + timedelta(seconds=1))
    except GpuWasteError as exc:
        fail(str(exc))
    png_name: str | None = None
    if chart is not None and not result.by_kind_and_team:
        err.print("no chart: no priced waste in the period")
    elif chart is not None:
        png = MatplotlibChartRenderer().waste_by_team_and_kind(result)
        if png is None:
            err.print("chart left out: matplotlib is not installed (pip install 'gpuwaste[charts]')")
        else:
            chart.write_bytes(png)
            png_name = chart.name
    if fmt is SummaryFormat.terminal:
        render_terminal(result, out)
        return
    text = render_markdown(result) if fmt is SummaryFormat.markdown else render_html(result, chart_png_name=png_name)
    if output is not None:
        output.write_text(text)
    else:
        out.print(text, markup=False, highlight=False, soft_wrap=True)

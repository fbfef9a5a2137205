"""The daily summary as people read it: thirty days of waste per team with realised savings, a self-contained HTML
report with two dated charts and budgets, JSON money rounded to the cent, the demo's multi-day trend, and the
Slack summary's header dated by the report."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.fleet.history import demo_history
from gpuwaste.models.lifecycle import FindingState
from gpuwaste.services.summary import summarize, trend
from gpuwaste.sinks.summary_report import render_html, render_json


def invoke(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args), env=env)


def _demo_summary(end: datetime):  # type: ignore[no-untyped-def]
    records = demo_history(end=end)
    summary = summarize(records, since=end - timedelta(days=1), until=end, team_of=lambda r: r.team or "-")
    return summary.model_copy(update={"trend": trend(records, until=end, team_of=lambda r: r.team or "-")}), records


def test_trend_has_thirty_days_of_waste_per_team_and_realised_savings() -> None:
    # GIVEN the demo's 30 days of history
    end = datetime(2024, 1, 1, 1, 20, tzinfo=UTC)
    summary, records = _demo_summary(end)
    # WHEN the trend is built
    days = summary.trend
    # THEN 30 UTC days, oldest first, the last one today; waste per team adds up to each record's money
    assert len(days) == 30 and days[-1].day == datetime(2024, 1, 1, tzinfo=UTC) and days[0].day < days[-1].day
    total = sum((d.wasted_usd for d in days), Decimal(0))
    from gpuwaste.services.summary import waste_in
    expected = sum((waste_in(r, days[0].day, end) for r in records), Decimal(0))
    assert total == expected and total > 0
    assert len({t for d in days for t, _ in d.by_team}) >= 4
    # AND savings are realised after resolutions, growing as more findings resolve
    resolved = [r for r in records if r.state is FindingState.RESOLVED]
    assert resolved and sum((d.saved_usd for d in days), Decimal(0)) > 0


def test_html_summary_is_self_contained_with_two_dated_charts_and_budgets() -> None:
    # GIVEN the demo history summarised
    summary, _ = _demo_summary(datetime(2024, 1, 1, 1, 20, tzinfo=UTC))
    # WHEN rendered as HTML
    page = render_html(summary)
    # THEN one file: inline styles, two inline SVG charts (7 and 30 days; each in a wide and a narrow layout, the CSS
    # shows one), no external resource or script
    assert page.count("<div class='wide'><svg") == 2 and page.count("<div class='narrow'><svg") == 2
    assert page.count("<svg") == 4 and "<style>" in page
    assert not re.search(r"""(src|href)=['"]?https?:""", page) and "<script" not in page and "<link" not in page
    assert "last 7 days" in page and "last 30 days" in page
    # AND the charts have a time axis (dates) and values over the bars; top offenders say how long they are open
    assert "12-26" in page and "01-01" in page and "day (UTC)" in page
    assert re.search(r">\$[\d,]+</text>", page)
    assert "open for" in page and re.search(r"<td>\d+d \d+h</td>", page)
    # AND it stays small: under 100 kB, and no chart wider than 800 px
    assert len(page.encode()) < 100_000
    assert all(int(w) <= 800 for w in re.findall(r'<svg[^>]* width="(\d+)"', page))


def test_summary_json_money_is_rounded_to_the_cent() -> None:
    # GIVEN the demo history summarised
    summary, _ = _demo_summary(datetime(2024, 1, 1, 1, 20, tzinfo=UTC))
    # WHEN written as JSON
    doc = render_json(summary)
    # THEN no amount has more than two decimals, and the trend is there
    assert not re.search(r'"-?\d+\.\d{3,}"', doc)
    parsed = json.loads(doc)
    assert re.fullmatch(r"\d+\.\d\d", parsed["wasted_usd"]) and len(parsed["trend"]) == 30


def test_demo_summary_shows_a_multi_day_trend(tmp_path: Path) -> None:
    # GIVEN the demo, keeping its state
    state = tmp_path / "demo.db"
    ran = invoke("demo", "-q", "--state", str(state))
    assert ran.exit_code == 0, ran.output
    # WHEN its summary is written as HTML
    out = tmp_path / "s.html"
    result = invoke("summary", "--state", str(state), "-o", "html", "--out", str(out))
    # THEN the report shows resolutions and savings from the generated history, and the demo's findings
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert page.count("<div class='wide'><svg") == 2 and "realised savings" in page
    assert "llama-70b-vllm" in page and "resolved" in page


def test_slack_summary_header_date_is_the_report_date() -> None:
    # GIVEN a summary of the day ending at midnight
    from gpuwaste.sinks.slack_blocks import render_summary
    summary, _ = _demo_summary(datetime(2024, 1, 2, tzinfo=UTC))
    # WHEN rendered for Slack and as HTML
    header = render_summary(summary).blocks[0]["text"]["text"]
    # THEN both carry the period's last day
    assert header == "GPU waste summary 2024-01-01" and "<title>GPU waste summary 2024-01-01</title>" in render_html(summary)


def test_every_summary_format_names_kinds_and_the_ownerless_group_as_people_read_them() -> None:
    # GIVEN the demo history summarised, one team's findings without a team (nobody labelled them)
    end = datetime(2024, 1, 1, 1, 20, tzinfo=UTC)
    records = [r.model_copy(update={"team": None}) if r.team == "vision" else r for r in demo_history(end=end)]
    summary = summarize(records, since=end - timedelta(days=1), until=end, team_of=lambda r: r.team or "unassigned")
    assert "unassigned" in {g.name for g in summary.by_team} and "idle_allocation" in {g.name for g in summary.by_kind}
    # WHEN rendered as HTML, Markdown and on an 80-column terminal
    from rich.console import Console

    from gpuwaste.people import kind_label
    from gpuwaste.sinks.summary_report import render_markdown, render_terminal

    page, markdown = render_html(summary), render_markdown(summary)
    console = Console(width=80, record=True, color_system=None)
    render_terminal(summary, console)
    text = console.export_text()
    by_kind_html = page[page.index("<h2>By kind</h2>"):page.index("</table>", page.index("<h2>By kind</h2>"))]
    by_kind_md = markdown[markdown.index("## By kind"):markdown.index("## By cluster")]
    by_kind_text = text[text.index("By kind"):text.index("By cluster")]
    # THEN "By kind" uses the kind labels of the scan table ("idle", "serving idle"), never the JSON values
    for g in summary.by_kind:
        assert f"<td>{kind_label(g.name)}</td>" in by_kind_html and f"| {kind_label(g.name)} |" in by_kind_md
        assert kind_label(g.name) in by_kind_text
    assert "idle_allocation" not in by_kind_html + by_kind_md + by_kind_text
    # AND in "By team" the group without a team reads "no owner" (as in the scan's rollup and in Slack)
    by_team = (page[page.index("<h2>By team</h2>"):page.index("<h2>By namespace</h2>")],
               markdown[markdown.index("## By team"):markdown.index("## By namespace")],
               text[text.index("By team"):text.index("By namespace")])
    for section in by_team:
        assert "no owner" in section and "unassigned" not in section
    # AND the JSON keeps its machine values
    doc = json.loads(render_json(summary))
    assert "unassigned" in {g["name"] for g in doc["by_team"]} and "idle_allocation" in {g["name"] for g in doc["by_kind"]}


def test_terminal_top_offenders_show_the_wasted_amount_they_are_ranked_by(tmp_path: Path) -> None:
    # GIVEN the demo's state (30 days of history and the demo scan)
    state = tmp_path / "demo.db"
    assert invoke("demo", "-q", "--state", str(state)).exit_code == 0
    for width in (80, 100, 200):
        # WHEN its summary is printed on a terminal of WIDTH columns
        result = invoke("summary", "--state", str(state), env={"COLUMNS": str(width)})
        assert result.exit_code == 0, result.output
        text = result.stdout[result.stdout.index("Top offenders"):]
        lines = text.splitlines()
        # THEN the table has the period's wasted amount next to USD/day, and the rows are in its order
        assert re.search(r"\bwasted\s+USD/day\b", lines[1]), (width, lines[1])
        rows = [line for line in lines[3:] if re.match(r"^\s*\d+ ", line)]
        wasted = [Decimal(m[1].replace(",", "")) for r in rows if (m := re.search(r"\$([\d,]+\.\d\d)\s+\$[\d,]+\.\d\d", r))]
        assert len(wasted) == len(rows) >= 5 and wasted == sorted(wasted, reverse=True), (width, rows)
        # AND every line fits the width
        assert max(len(line) for line in result.stdout.splitlines()) <= width, width


def test_attribution_coverage_line_counts_one_scan_in_the_singular() -> None:
    # GIVEN a summary whose period holds one scan of the cluster, and one with three
    from gpuwaste.models.coverage import CoverageRow

    summary, _ = _demo_summary(datetime(2024, 1, 1, 1, 20, tzinfo=UTC))

    def page(scans: int) -> str:
        row = CoverageRow(cluster="demo", kind="all", allocated_gpu_hours=37.6, attributed_gpu_hours=37.1,
                          ratio=0.987, scans=scans)
        return render_html(summary.model_copy(update={"coverage": (row,)}))

    # WHEN rendered, THEN the coverage line counts "(1 scan)" and "(3 scans)"
    assert "allocated GPU-h (1 scan)" in page(1) and "(1 scans)" not in page(1)
    assert "allocated GPU-h (3 scans)" in page(3)

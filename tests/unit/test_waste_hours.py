"""When the waste happens (issue 24 §6): wasted GPU-hours and USD per team by hour of day × day of week, from the
store's money ledger — the same numbers the daily summary adds up, on the demo's 30 days of history in a real SQLite
state file."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import summary as summary_root
from gpuwaste.cli import app, seed_history
from gpuwaste.config import GpuWasteConfig
from gpuwaste.services.waste_hours import NIGHTS, WEEKENDS, WeekGrid, grid_lines, waste_by_hour_of_week

END = datetime(2024, 1, 1, 1, 20, tzinfo=UTC)


def test_grid_per_team_adds_up_to_the_summarys_team_totals(tmp_path: Path) -> None:
    # GIVEN the demo's 30 days of history in a state file
    state = tmp_path / "state.db"
    assert seed_history(state, END, cluster="demo") > 0
    service = summary_root.local_summary_service(GpuWasteConfig(), state)
    since, until = END - timedelta(days=30), END + timedelta(seconds=1)
    # WHEN the hour-of-week view and the summary are built over the same period
    grids, _ = waste_by_hour_of_week(
        service.store.history(since=since, until=until), since=since, until=until, team_of=service.team_of
    )
    summary = service.build(since=since, until=until)
    # THEN each team's cells add up to its summary total (one money ledger), and GPU-hours are there where priced
    expected = {g.name: g.wasted_usd for g in summary.by_team}
    got = {team: sum(g.usd, Decimal(0)) for team, g in grids.items() if sum(g.usd, Decimal(0))}
    assert set(got) == set(expected)
    for team, usd in expected.items():
        assert got[team] == pytest.approx(usd, abs=Decimal("1e-6")), team
    for g in grids.values():  # the seeded records store no price: their USD is there, their GPU-hours are not
        assert g.unconverted_usd == pytest.approx(sum(g.usd, Decimal(0)), abs=Decimal("1e-9")) and g.total == 0


def test_nights_and_weekends_are_named() -> None:
    # GIVEN waste only on Saturday 03:00 and Tuesday 22:00
    g = WeekGrid()
    g.usd[5 * 24 + 3] = Decimal(3)
    g.usd[1 * 24 + 22] = Decimal(1)
    # THEN the shares say so, and the text shades those cells only
    assert g.share(WEEKENDS) == 0.75 and g.share(NIGHTS) == 0.25
    lines = grid_lines("ml", g)
    assert "weekends 75%" in lines[0] and "nights (20–08 UTC, Mon–Fri) 25%" in lines[0]
    assert lines[2 + 5][5 + 3] == "█" and lines[2 + 1][5 + 22] != "·" and lines[2 + 0][5:].strip("·") == ""


def test_summary_by_hour_prints_the_view_with_gpu_hours_of_priced_findings(tmp_path: Path) -> None:
    # GIVEN the demo's state file: 30 days of history and the last scan's priced findings
    state = tmp_path / "state.db"
    assert CliRunner().invoke(app, ["demo", "-q", "--state", str(state)]).exit_code == 0
    result = CliRunner().invoke(
        app, ["summary", "--state", str(state), "--since", "30d", "--by-hour"], env={"COLUMNS": "160"}
    )
    assert result.exit_code == 0, result.output
    assert "When the waste happens" in result.output and "weekends" in result.output and "Sat  " in result.output
    hours = [float(m) for m in re.findall(r"(\d+\.\d) wasted GPU-h", result.output)]
    assert hours and max(hours) > 0  # the priced findings' USD is turned into GPU-hours


def test_html_summary_by_hour_has_a_heat_table_per_team_shaded_where_the_waste_is(tmp_path: Path) -> None:
    # GIVEN the demo's state file
    state = tmp_path / "state.db"
    assert CliRunner().invoke(app, ["demo", "-q", "--state", str(state)]).exit_code == 0
    out = tmp_path / "summary.html"
    # WHEN the HTML summary is written with --by-hour (and without)
    args = ["summary", "--state", str(state), "--since", "30d", "-o", "html", "--out-file"]
    assert CliRunner().invoke(app, [*args, str(out), "--by-hour"]).exit_code == 0
    page = out.read_text()
    assert CliRunner().invoke(app, [*args, str(tmp_path / "plain.html")]).exit_code == 0
    # THEN one heat table per team of the terminal view: 7 weekday rows of 24 hour cells, each titled with its numbers
    teams = re.findall(r"<p class='heat-head'><b>([^<]+)</b>: (\d+\.\d) wasted GPU-h", page)
    tables = page.split("<table class='heat'>")[1:]
    assert teams and len(tables) == len(teams)
    for table in tables:
        table = table.split("</table>")[0]
        assert len(re.findall(r"<tr><th>[A-Z][a-z]{2}</th>", table)) == 7 and table.count("<td ") == 7 * 24
        alphas = [float(a) for a in re.findall(r"rgba\(192,40,24,([\d.]+)\)", table)]
        assert max(alphas) == 1.0 and min(alphas) >= 0  # the busiest hour is the darkest
    assert re.search(r"title='Sat \d\d:00 UTC: \d+\.\d GPU-h, \$[\d,]+\.\d\d'", page)
    assert any(float(h) > 0 for _, h in teams)
    assert "heat" not in (tmp_path / "plain.html").read_text().split("<style>")[1].split("</style>")[1]


def test_heat_table_cells_follow_the_grid() -> None:
    from gpuwaste.models.notices import DailySummary
    from gpuwaste.sinks.summary_report import HourGrid, SummaryNotes, render_html

    usd = [Decimal(0)] * 168
    usd[5 * 24 + 3], usd[1 * 24 + 22] = Decimal(4), Decimal(1)
    hours = [u / 2 for u in usd]
    grid = HourGrid("ml", tuple(hours), tuple(usd), 0.2, 0.8)
    s = DailySummary(since=END - timedelta(days=1), until=END, wasted_usd=Decimal(5), previous_usd=Decimal(0),
                     open_usd_per_day=Decimal(0), open_findings=0, opened=0, resolved=0,
                     saved_usd_per_day=Decimal(0), realised_savings_usd=Decimal(0))
    page = render_html(s, notes=SummaryNotes(by_hour=(grid,)))
    table = page.split("<table class='heat'>")[1].split("</table>")[0]
    cells = re.findall(r"<td style='background:rgba\(192,40,24,([\d.]+)\)' title='(\w+) (\d\d):00", table)
    shaded = {(d, h): float(a) for a, d, h in cells if float(a)}
    assert shaded == {("Sat", "03"): 1.0, ("Tue", "22"): 0.25}
    assert "Sat 03:00 UTC: 2.0 GPU-h, $4.00" in table
    assert "nights (20–08 UTC, Mon–Fri) 20% · weekends 80%" in page

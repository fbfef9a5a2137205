"""The month-end view (issue 24 §7, waste part): wasted USD month to date per team from the store's money ledger,
month-end at the open findings' current rate, against the configured waste budget × the days of the month."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuwaste.bootstrap import summary as summary_root
from gpuwaste.cli import app, seed_history
from gpuwaste.config import GpuWasteConfig
from gpuwaste.models.ledger import LedgerSpan
from gpuwaste.models.lifecycle import FindingRecord
from gpuwaste.services.month_end import alert_budgets_per_day, month_bounds, month_end

END = datetime(2024, 1, 20, 12, tzinfo=UTC)


def test_month_to_date_matches_the_summary_and_projects_the_open_rate(tmp_path: Path) -> None:
    # GIVEN the demo's history up to 20 January noon
    state = tmp_path / "state.db"
    seed_history(state, END, cluster="demo")
    service = summary_root.local_summary_service(GpuWasteConfig(), state)
    start, stop = month_bounds(END)
    assert (start, stop) == (datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 2, 1, tzinfo=UTC))
    open_now = FindingRecord(
        fingerprint="f" * 16,
        cluster="demo",
        namespace="ml",
        workload="w",
        kind="idle_allocation",
        detector="idle_allocation",
        first_seen=END - timedelta(hours=2),
        last_seen=END,
        usd_per_day=Decimal(48),
        team="crafted",
        ledger=(LedgerSpan(start=END - timedelta(hours=2), end=END, usd_per_day=Decimal(48)),),
    )
    records = [*service.store.history(since=start, until=END), open_now]
    # WHEN the month-end view is built with a $10/day waste budget for every team
    rows = month_end(records, until=END, team_of=service.team_of, budgets_per_day={}, default_per_day=Decimal(10))
    # THEN month to date is the summary's per-team waste since the 1st, and month-end adds the open rate × 11.5 days
    summary = service.build(since=start, until=END)
    expected = {g.name: g.wasted_usd for g in summary.by_team} | {"crafted": Decimal(4)}
    assert {m.team: m.to_date_usd for m in rows if m.to_date_usd} == pytest.approx(expected)
    for m in rows:
        assert m.month_end_usd == pytest.approx(m.to_date_usd + m.open_usd_per_day * Decimal("11.5"))
        assert m.budget_usd == Decimal(310)
        assert m.over_budget == (m.month_end_usd > 310)
    crafted = next(m for m in rows if m.team == "crafted")
    assert (crafted.open_usd_per_day, crafted.month_end_usd) == (
        Decimal(48),
        Decimal(4) + Decimal(48) * Decimal("11.5"),
    )
    assert crafted.over_budget  # $556 > $310


def test_summary_month_prints_the_view_with_the_budget(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    seed_history(state, END, cluster="demo")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"serve": {"team_budgets_usd_per_day": {"research": 1}}}))
    result = CliRunner().invoke(
        app, ["summary", "--state", str(state), "--month", "-c", str(cfg)], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "Month to date · 2024-01" in result.output
    line = next(x for x in result.output.splitlines() if x.strip().startswith("research:"))
    assert "budget $31.00" in line and "OVER" in line


def test_month_bounds_in_december() -> None:
    assert month_bounds(datetime(2024, 12, 31, 23, tzinfo=UTC) + timedelta(0)) == (
        datetime(2024, 12, 1, tzinfo=UTC),
        datetime(2025, 1, 1, tzinfo=UTC),
    )


def test_a_monthly_budget_wins_over_the_per_day_budget_and_over_budget_follows_the_month_end(tmp_path: Path) -> None:
    # GIVEN the demo's history and a config with a $1/day budget for research but $5,000 for research's month,
    # and a $20/month default for every other team
    state = tmp_path / "state.db"
    seed_history(state, END, cluster="demo")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"serve": {"team_budgets_usd_per_day": {"research": 1},
                                             "team_budgets_usd_per_month": {"research": 5000},
                                             "default_team_budget_usd_per_month": 20}}))
    # WHEN the summary's month view is printed
    result = CliRunner().invoke(
        app, ["summary", "--state", str(state), "--month", "-c", str(cfg)], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    lines = {x.strip().split(":")[0]: x for x in result.output.splitlines()
             if x.startswith("  ") and not x.startswith("  (")}  # "  (…)": a note under the teams, not a team
    # THEN research's budget is the monthly one (not $1 × 31) and it is under it; every other team has the default
    assert "budget $5,000.00" in lines["research"] and "OVER" not in lines["research"]
    others = [line for team, line in lines.items() if team != "research"]
    assert others and all("budget $20.00" in line for line in others)
    for line in others:  # OVER exactly where the printed month-end exceeds $20
        month_end_usd = Decimal(re.search(r"month-end \$([\d,.]+)", line).group(1).replace(",", ""))  # type: ignore[union-attr]
        assert ("OVER" in line) == (month_end_usd > 20), line


def test_alert_budgets_turn_monthly_budgets_into_usd_per_day_and_keep_the_stricter() -> None:
    # GIVEN per-day and monthly budgets in February 2024 (29 days)
    at = datetime(2024, 2, 10, tzinfo=UTC)
    per_team, default = alert_budgets_per_day(
        at,
        budgets_per_day={"a": Decimal(10), "b": Decimal(100)},
        default_per_day=Decimal(50),
        budgets_per_month={"b": Decimal(290), "c": Decimal(2900)},
        default_per_month=Decimal(580),
    )
    # THEN monthly ÷ 29 days; a team with both gets the smaller; a team with one uses the other's default
    assert per_team == {"a": Decimal(10), "b": Decimal(10), "c": Decimal(50)}
    assert default == Decimal(20)  # min($50/day, $580 / 29 days)
    assert alert_budgets_per_day(at, budgets_per_day={}, default_per_day=None, budgets_per_month={},
                                 default_per_month=None) == ({}, None)


def test_serve_metrics_expose_the_monthly_budget_as_usd_per_day(tmp_path: Path) -> None:
    # GIVEN a config with only a monthly budget WHEN the alert's budgets are composed for /metrics
    from gpuwaste.cli_support import alert_budgets

    cfg = GpuWasteConfig.model_validate({"serve": {"team_budgets_usd_per_month": {"research": 3100}}})
    per_team, default = alert_budgets(cfg)
    start, end = month_bounds(datetime.now(UTC))
    # THEN the research budget is $3,100 ÷ the days of this month, in USD/day
    assert per_team == {"research": Decimal(3100) / Decimal((end - start).days)} and default is None


def test_negative_monthly_budget_is_a_config_error() -> None:
    from gpuwaste.config import parse_config

    with pytest.raises(Exception, match="team_budgets_usd_per_month"):
        parse_config(yaml.safe_dump({"serve": {"team_budgets_usd_per_month": {"research": -1}}}))

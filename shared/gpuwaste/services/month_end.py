"""Service (pure): the month-end view of the waste.

Per team: wasted USD month to date, the month-end at the current rate, and the team's budget for the month
(issue 24 §7, waste part).

Month to date comes from the store's money ledger (`services.summary.waste_in`, the number the daily summary adds
up). The current rate is the USD/day of the team's findings still open at `until`; month-end = month to date + that
rate × the days left in the UTC month. The budget is the team's monthly waste budget
(`serve.team_budgets_usd_per_month`, else `serve.default_team_budget_usd_per_month`), else its per-day waste budget
(`serve.team_budgets_usd_per_day`, else `serve.default_team_budget_usd_per_day`) × the days of the month.
`alert_budgets_per_day` turns the monthly budgets into the USD/day the `GpuWasteTeamOverBudget` alert compares the
open waste with (budget ÷ days of the month; the stricter of that and a per-day budget).
Spend (allocated cost, not only waste) needs the allocation ledger in
the store, which it does not hold yet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gpuwaste.models.lifecycle import FindingRecord, FindingState
from gpuwaste.services.summary import waste_in

ZERO = Decimal(0)


@dataclass(frozen=True)
class MonthEnd:
    """One team's month: wasted USD so far, open USD/day now, month-end at that rate, budget (None: none set)."""

    team: str
    to_date_usd: Decimal
    open_usd_per_day: Decimal
    month_end_usd: Decimal
    budget_usd: Decimal | None

    @property
    def over_budget(self) -> bool:
        """True when the month-end at the current rate exceeds the budget."""
        return self.budget_usd is not None and self.month_end_usd > self.budget_usd


def month_bounds(t: datetime) -> tuple[datetime, datetime]:
    """The UTC calendar month holding `t`: [first day 00:00, first day of the next month 00:00)."""
    t = t.astimezone(UTC)
    first = datetime(t.year, t.month, 1, tzinfo=UTC)
    return first, datetime(t.year + (t.month == 12), t.month % 12 + 1, 1, tzinfo=UTC)


def month_end(
    records: Iterable[FindingRecord],
    *,
    until: datetime,
    team_of: Callable[[FindingRecord], str],
    budgets_per_day: dict[str, Decimal],
    default_per_day: Decimal | None = None,
    budgets_per_month: dict[str, Decimal] | None = None,
    default_per_month: Decimal | None = None,
) -> list[MonthEnd]:
    """Per team with waste this month (or a budget): the month-end view at `until`, costliest month-end first.

    A team's monthly budget (`budgets_per_month`, else `default_per_month`) wins over its per-day budget
    (`budgets_per_day`, else `default_per_day`) × the days of the month; USD throughout.
    """
    budgets_per_month = budgets_per_month or {}
    start, end = month_bounds(until)
    days_in_month = Decimal((end - start).days)
    left_days = Decimal(str(max(0.0, (end - until).total_seconds()) / 86400))
    to_date: dict[str, Decimal] = {}
    rate: dict[str, Decimal] = {}
    for r in records:
        usd = waste_in(r, start, until)
        team = None
        if usd:
            team = team_of(r)
            to_date[team] = to_date.get(team, ZERO) + usd
        if (
            r.state is FindingState.OPEN
            and r.usd_per_day
            and r.last_seen <= until
            and r.last_seen >= until - timedelta(days=1)
        ):
            team = team or team_of(r)
            rate[team] = rate.get(team, ZERO) + r.usd_per_day
    teams = set(to_date) | set(rate) | set(budgets_per_day) | set(budgets_per_month)
    out = []
    for team in teams:
        per_day = budgets_per_day.get(team, default_per_day)
        budget = budgets_per_month.get(team, default_per_month)
        if budget is None and per_day is not None:
            budget = per_day * days_in_month
        so_far, now = to_date.get(team, ZERO), rate.get(team, ZERO)
        out.append(MonthEnd(team, so_far, now, so_far + now * left_days, budget))
    return sorted(out, key=lambda m: (-m.month_end_usd, m.team))


def alert_budgets_per_day(
    at: datetime,
    *,
    budgets_per_day: dict[str, Decimal],
    default_per_day: Decimal | None,
    budgets_per_month: dict[str, Decimal],
    default_per_month: Decimal | None,
) -> tuple[dict[str, Decimal], Decimal | None]:
    """The waste budgets in USD/day for `gpuwaste_team_budget_usd_per_day` (the `GpuWasteTeamOverBudget` alert).

    A monthly budget (USD) counts as budget ÷ the days of the UTC month holding `at`: the alert fires when the open
    waste, kept up all month, would exceed it. Where a team (or the default) has both, the stricter (smaller) wins.
    Returns (budget per team, default for every other team with waste or None).
    """
    start, end = month_bounds(at)
    days = Decimal((end - start).days)

    def stricter(a: Decimal | None, b: Decimal | None) -> Decimal | None:
        return a if b is None else b if a is None else min(a, b)

    monthly = {team: usd / days for team, usd in budgets_per_month.items()}
    default_monthly = None if default_per_month is None else default_per_month / days
    per_team = {}
    for team in sorted(set(budgets_per_day) | set(monthly)):
        value = stricter(budgets_per_day.get(team, default_per_day), monthly.get(team, default_monthly))
        if value is not None:
            per_team[team] = value
    return per_team, stricter(default_per_day, default_monthly)


__all__ = ["MonthEnd", "alert_budgets_per_day", "month_bounds", "month_end"]

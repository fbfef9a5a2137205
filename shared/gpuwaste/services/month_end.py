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
Spend (allocated cost, not only waste) comes from the allocation ledger the store keeps per cluster and hour
(`FindingStore.allocation`, `models.spend.spend_of`): month to date, and month-end = month to date + the team's
allocated USD/day over the 24 hours before `until` × the days left; that rate is the day's cost ÷ the hours of it the
store observed × 24 (`SpendOfPeriod.per_day`: a store an hour old projects its hour), as the waste's rate is the open
findings' USD/day (`team_months`: the daily summary's month view).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gpuwaste.models.lifecycle import FindingRecord, FindingState
from gpuwaste.models.notices import TeamMonth
from gpuwaste.models.spend import UNHELD, SpendOfPeriod
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
    #: allocated cost month to date and at month-end at the last 24 hours' rate (None: no allocation ledger stored)
    spend_to_date_usd: Decimal | None = None
    spend_month_end_usd: Decimal | None = None

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
    spend: SpendOfPeriod | None = None,
    spend_last_day: SpendOfPeriod | None = None,
) -> list[MonthEnd]:
    """Per team with waste or spend this month (or a budget): the month-end view at `until`, costliest first.

    A team's monthly budget (`budgets_per_month`, else `default_per_month`) wins over its per-day budget
    (`budgets_per_day`, else `default_per_day`) × the days of the month; USD throughout. `spend` (the month's
    allocation ledger from the store) and `spend_last_day` (the 24 hours before `until`) give each team's spend to
    date and its month-end at that day's rate (`SpendOfPeriod.per_day`); without them the spend fields are None.
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
    spent = {g.name: g.usd for g in spend.by_team if g.name not in UNHELD} if spend is not None else {}
    spent_day = ({g.name: spend_last_day.per_day(g.cents) for g in spend_last_day.by_team if g.name not in UNHELD}
                 if spend_last_day is not None else {})
    teams = set(to_date) | set(rate) | set(budgets_per_day) | set(budgets_per_month) | set(spent)
    out = []
    for team in teams:
        per_day = budgets_per_day.get(team, default_per_day)
        budget = budgets_per_month.get(team, default_per_month)
        if budget is None and per_day is not None:
            budget = per_day * days_in_month
        so_far, now = to_date.get(team, ZERO), rate.get(team, ZERO)
        spend_now = None if spend is None else spent.get(team, ZERO)
        spend_end = None if spend_now is None else spend_now + spent_day.get(team, ZERO) * left_days
        out.append(MonthEnd(team, so_far, now, so_far + now * left_days, budget, spend_now, spend_end))
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


def team_months(rows: Iterable[MonthEnd]) -> tuple[TeamMonth, ...]:
    """The summary's month view (`models.notices.TeamMonth`) of `month_end` rows that carry spend."""
    return tuple(TeamMonth(team=m.team, spend_to_date_usd=m.spend_to_date_usd or ZERO,
                           spend_month_end_usd=m.spend_month_end_usd or ZERO, wasted_to_date_usd=m.to_date_usd,
                           wasted_month_end_usd=m.month_end_usd, budget_usd=m.budget_usd)
                 for m in sorted(rows, key=lambda m: (-(m.spend_month_end_usd or ZERO), -m.month_end_usd, m.team)))


__all__ = ["MonthEnd", "alert_budgets_per_day", "month_bounds", "month_end", "team_months"]

"""Adapter: the daily summary's spend part (issue 24), as the report (terminal, Markdown, HTML) and Slack show it.

The fleet funnel and the allocated cost per team, month to date and at month-end next to the waste and the budget.
The figures come from `DailySummary.spend` (the period's stored allocation ledger) and `DailySummary.month`; nothing
here computes money. Names are escaped by the caller's format (`plain` for the terminal, `for_html`, `for_markdown`).
"""

from __future__ import annotations

from decimal import Decimal

from gpuwaste.models.notices import DailySummary, TeamMonth
from gpuwaste.models.spend import UNHELD, FunnelFigures
from gpuwaste.people import group_label, usd, usd_whole

#: The spend table's columns: the period's allocated cost, then the month (UTC) so far and at month-end at the current
#: rate (whole dollars: a projection), spend beside waste, and the team's monthly budget.
SPEND_COLUMNS = ("team", "spend", "spend this month", "spend month-end", "wasted this month", "wasted month-end",
                 "budget")


def _hours(v: Decimal) -> str:
    return f"{v:,.1f}"


def _share(part: Decimal, whole: Decimal) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def funnel_text(f: FunnelFigures) -> str:
    """The funnel in one line: "96.0 GPU-h total → 72.0 allocated (75%) → 60.0 active → 31.2 effective; …"."""
    text = (f"{_hours(f.total_gpu_hours)} GPU-h total → {_hours(f.allocated_gpu_hours)} allocated "
            f"({_share(f.allocated_gpu_hours, f.total_gpu_hours)}) → {_hours(f.active_gpu_hours)} active → "
            f"{_hours(f.effective_gpu_hours)} effective")
    if f.unobserved_gpu_hours:
        text += f" ({_hours(f.unobserved_gpu_hours)} allocated GPU-h without activity telemetry)"
    if f.unmet_pods:
        wait = "" if not f.unmet_longest_wait_s else f", the longest waiting {_wait(f.unmet_longest_wait_s)}"
        text += f"; unmet requests: up to {f.unmet_pods} pending pods asking for {f.unmet_gpus} GPUs{wait}"
    return text


def _wait(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    return f"{days}d {hours}h" if days else f"{hours}h {rest // 60}m" if hours else f"{rest // 60}m"


def spend_headline(s: DailySummary) -> list[tuple[str, str]]:
    """The headline rows of the spend part: the fleet funnel, each cluster's when there are several, and the spend."""
    if s.spend is None:
        return []
    rows = [("Fleet funnel", funnel_text(s.spend.fleet))]
    if len(s.spend.funnel) > 1:
        rows += [(f"Funnel {cluster}", funnel_text(f)) for cluster, f in s.spend.funnel]
    held = sum((g.usd for g in s.spend.by_team if g.name not in UNHELD), Decimal(0))
    rows.append(("Spend (allocated cost)",
                 f"{usd(Decimal(s.spend.cents) / 100)} in the period, {usd(held)} of it charged to teams "
                 f"({s.spend.scans} scans, {s.spend.observed_hours:,.1f} of {s.spend.hours} cluster-hours observed)"))
    return rows


def _month_of(s: DailySummary) -> dict[str, TeamMonth]:
    return {m.team: m for m in s.month}


def spend_cells(s: DailySummary) -> list[tuple[str, ...]]:
    """One row per team (`SPEND_COLUMNS`): the period's spend, then its month; costliest month-end first."""
    if s.spend is None:
        return []
    month = _month_of(s)
    period = {g.name: g for g in s.spend.by_team}
    order = [m.team for m in s.month] + [n for n in period if n not in month]
    rows: list[tuple[str, ...]] = []
    for team in order:
        g, m = period.get(team), month.get(team)
        budget = "-"
        if m is not None and m.budget_usd is not None:
            budget = usd_whole(m.budget_usd) + (" OVER" if m.over_budget else "")
        rows.append((
            group_label("team", team),
            usd(g.usd) if g is not None else "-",
            usd(m.spend_to_date_usd) if m is not None else "-",
            usd_whole(m.spend_month_end_usd) if m is not None else "-",
            usd(m.wasted_to_date_usd) if m is not None else "-",
            usd_whole(m.wasted_month_end_usd) if m is not None else "-",
            budget,
        ))
    return rows


def slack_lines(s: DailySummary, limit: int = 8) -> str:
    """The Slack section: the funnel, then per team the spend and the month next to waste and budget (mrkdwn-free)."""
    if s.spend is None:
        return ""
    lines = [funnel_text(s.spend.fleet)]
    for cells in spend_cells(s)[:limit]:
        team, spend, to_date, end, wasted, waste_end, budget = cells
        line = f"• {team}: {spend} in the period"
        if to_date != "-":  # a team (the unheld lines have no month of their own)
            line += f" · month {to_date} so far, {end} at month-end · wasted {wasted} (month-end {waste_end})"
        lines.append(line + (f" · budget {budget}" if budget != "-" else ""))
    if len(spend_cells(s)) > limit:
        lines.append(f"… and {len(spend_cells(s)) - limit} more")
    return "\n".join(lines)


__all__ = ["SPEND_COLUMNS", "funnel_text", "slack_lines", "spend_cells", "spend_headline"]

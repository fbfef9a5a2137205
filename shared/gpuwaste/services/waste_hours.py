"""Service (pure): when the waste happens — wasted GPU-hours by hour of day × day of week, per team (issue 24 §6).

Read from the lifecycle records' money ledger (`models.lifecycle.money_spans`: the stretches of time the evidence
covered, each at its USD/day), the same numbers the daily summary adds up: each span's USD inside [since, until) is
cut at hour boundaries (UTC). GPU-hours = that USD ÷ the record's own USD per GPU-hour (its stored finding's price);
a record whose stored finding carries no price counts in USD only (`WeekGrid.unconverted_usd` says how much).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from gpuwaste.models.findings import WasteKind
from gpuwaste.models.lifecycle import FindingRecord, money_spans
from gpuwaste.services.notify import finding_from_record

HOURS_OF_WEEK = 7 * 24
DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_DAY_S = Decimal(86400)
ZERO = Decimal(0)


@dataclass
class WeekGrid:
    """Wasted GPU-hours per hour of the week: `cells[weekday * 24 + hour]` (Monday 00:00 UTC first)."""

    cells: list[Decimal] = field(default_factory=lambda: [ZERO] * HOURS_OF_WEEK)
    usd: list[Decimal] = field(default_factory=lambda: [ZERO] * HOURS_OF_WEEK)
    unconverted_usd: Decimal = ZERO

    @property
    def total(self) -> Decimal:
        """All wasted GPU-hours of the grid."""
        return sum(self.cells, ZERO)

    def share(self, hours: Iterable[int]) -> float:
        """The share 0–1 of the grid's wasted USD in the given hours of the week (0 when the grid is empty)."""
        total = sum(self.usd, ZERO)
        return float(sum((self.usd[h] for h in hours), ZERO) / total) if total else 0.0


#: Hours of the week that are nights (20:00–08:00 UTC on weekdays) and weekends (all of Saturday and Sunday).
NIGHTS = tuple(d * 24 + h for d in range(5) for h in (*range(20, 24), *range(8)))
WEEKENDS = tuple(range(5 * 24, 7 * 24))


def waste_by_hour_of_week(
    records: Iterable[FindingRecord], *, since: datetime, until: datetime, team_of: Callable[[FindingRecord], str]
) -> tuple[dict[str, WeekGrid], int]:
    """Team → wasted GPU-hours (and USD) per hour of the week in [since, until), and how many records had no stored
    price (their USD is in the grid, not their GPU-hours).
    """
    grids: dict[str, WeekGrid] = {}
    unpriced = 0
    for r in records:
        spans = money_spans(r)
        if not spans or r.kind == WasteKind.DATA_QUALITY.value:
            continue
        finding = finding_from_record(r)
        rate = finding.cost.usd_per_gpu_hour if finding is not None and finding.cost is not None else None
        unpriced += 0 if rate else 1
        grid: WeekGrid | None = None
        for span in spans:
            lo, hi = max(span.start, since), min(span.end, until)
            cur = lo
            while cur < hi:
                nxt = min(hi, cur.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1))
                usd = span.usd_per_day * Decimal(str((nxt - cur).total_seconds())) / _DAY_S
                grid = grid or grids.setdefault(team_of(r), WeekGrid())
                slot = cur.weekday() * 24 + cur.hour
                grid.usd[slot] += usd
                if rate:
                    grid.cells[slot] += usd / rate
                else:
                    grid.unconverted_usd += usd
                cur = nxt
    return dict(sorted(grids.items())), unpriced


_SHADES = " ░▒▓█"


def grid_lines(team: str, grid: WeekGrid) -> list[str]:
    """The grid as text: a header of hours, one row per weekday shaded by the team's busiest hour, then the share of
    wasted GPU-hours at night (20–08 UTC, weekdays) and at weekends.
    """
    peak = max(grid.usd) or Decimal(1)
    usd = sum(grid.usd, ZERO)
    unconverted = f" (+ ${grid.unconverted_usd:,.2f} without a stored price)" if grid.unconverted_usd else ""
    lines = [
        f"{team}: {grid.total:.1f} wasted GPU-h{unconverted}, ${usd:,.2f} · nights (20–08 UTC, Mon–Fri) "
        f"{grid.share(NIGHTS):.0%} · weekends {grid.share(WEEKENDS):.0%}",
        "     " + "".join(f"{h:<3d}" if h % 3 == 0 else "" for h in range(24)),
    ]
    for d, name in enumerate(DAY_NAMES):
        row = grid.usd[d * 24 : (d + 1) * 24]
        lines.append(
            f"{name}  " + "".join(_SHADES[min(4, int(4 * v / peak + Decimal("0.999")))] if v else "·" for v in row)
        )
    return lines


__all__ = ["DAY_NAMES", "HOURS_OF_WEEK", "NIGHTS", "WEEKENDS", "WeekGrid", "grid_lines", "waste_by_hour_of_week"]

"""Adapter: the summary charts — the Slack PNG (stacked bars of USD wasted per team, by kind; matplotlib's Agg
backend) and the report's trend (stacked bars per team per day, as inline SVG with no dependency).

matplotlib is optional (`pip install 'gpuwaste[charts]'`); without it `waste_by_team_and_kind` returns None.
"""

from __future__ import annotations

import importlib.util
import io
import math
from collections.abc import Sequence
from decimal import Decimal

from gpuwaste.models.notices import DailySummary, TrendDay
from gpuwaste.models.text import for_html
from gpuwaste.people import group_label, kind_label


def matplotlib_available() -> bool:
    """True when matplotlib can be imported."""
    return importlib.util.find_spec("matplotlib") is not None


class MatplotlibChartRenderer:
    """ChartRenderer drawing PNGs with matplotlib (Agg, no display needed)."""

    def __init__(self, *, dpi: int = 110) -> None:
        self.dpi = dpi

    def waste_by_team_and_kind(self, summary: DailySummary) -> bytes | None:
        """Stacked bars: x = team, stacks = waste kind, height = USD wasted in the period; None without matplotlib."""
        if not matplotlib_available():
            return None
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib.figure import Figure

        teams = sorted({t for t, _, _ in summary.by_kind_and_team})
        kinds = sorted({k for _, k, _ in summary.by_kind_and_team})
        values = {(t, k): v for t, k, v in summary.by_kind_and_team}
        fig = Figure(figsize=(max(6.0, 1.2 * len(teams) + 3), 4.5))
        ax = fig.add_subplot()
        bottom = [0.0] * len(teams)
        for kind in kinds:
            heights = [float(values.get((t, kind), Decimal(0))) for t in teams]
            ax.bar([group_label("team", t) for t in teams], heights, bottom=bottom, label=kind_label(kind))
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        top = max(bottom, default=0.0)
        ax.set_ylim(0, top * 1.15 if top > 0 else 1)  # headroom: the tallest bar and the legend never touch the frame
        ax.set_ylabel("USD wasted")
        ax.set_title(f"GPU waste per team, {summary.since:%Y-%m-%d %H:%M} → {summary.until:%Y-%m-%d %H:%M} UTC")
        ax.legend(fontsize="small", loc="upper right")
        ax.tick_params(axis="x", labelrotation=30)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=self.dpi)
        return buf.getvalue()


# -- the trend chart as inline SVG (no dependency: the HTML report embeds it) ----------------------------------

#: Team colours of the stacked bars (colour-blind safe Okabe–Ito order), then grey for the rest.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
OTHER_COLOUR = "#999999"
SAVED_COLOUR = "#009E73"


def _esc(text: str) -> str:
    return for_html(text)  # controls stripped (invalid in XML), & < > " ' escaped


def _nice_max(value: float) -> float:
    """The smallest 1/2/2.5/5 × 10^n at or above `value` (axis top)."""
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * exp >= value:
            return float(step * exp)
    return float(10 * exp)


def _dollars(v: float) -> str:
    return f"${v:,.0f}" if v >= 10 else f"${v:,.2f}"


def team_order(days: Sequence[TrendDay]) -> list[str]:
    """Teams by USD wasted over `days`, costliest first (pass the same order to every chart: same colours)."""
    totals: dict[str, float] = {}
    for d in days:
        for team, usd in d.by_team:
            totals[team] = totals.get(team, 0.0) + float(usd)
    return sorted(totals, key=lambda t: (-totals[t], t))


def trend_svg(days: Sequence[TrendDay], *, title: str, width: int = 760, height: int = 320, max_teams: int = 7,
              order: Sequence[str] | None = None) -> str:
    """Stacked bars of USD wasted per team per UTC day (value above each bar), a dated time axis, and the
    realised savings per day as a green line; an inline `<svg>` element (escaped names, no script).

    Args:
        order: the teams' order (colours); default: by USD over `days` (see `team_order`).
    """
    present = set(team_order(days))
    ranked = [t for t in (order or team_order(days)) if t in present] + sorted(present - set(order or ()))
    shown = ranked[:max_teams]
    colours = {t: PALETTE[i % len(PALETTE)] for i, t in enumerate(shown)}
    left, right, top, bottom = 64, 16, 40, 64
    plot_w, plot_h = width - left - right, height - top - bottom
    per_day = [sum(float(v) for _, v in d.by_team) for d in days]
    saved = [float(d.saved_usd) for d in days]
    ymax = _nice_max(max([*per_day, *saved, 0.0]) * 1.1)
    n = max(1, len(days))
    slot = plot_w / n
    bar_w = max(2.0, slot * 0.7)

    def y(v: float) -> float:
        return top + plot_h - (v / ymax) * plot_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'role="img" aria-label="{_esc(title)}" font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="20" font-size="14" font-weight="bold">{_esc(title)}</text>']
    for k in range(5):
        v = ymax * k / 4
        yy = y(v)
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end" fill="#555">{_esc(_dollars(v))}</text>')
    label_every = 1 if n <= 10 else 5
    for i, d in enumerate(days):
        x = left + i * slot + (slot - bar_w) / 2
        base = 0.0
        other = 0.0
        for team, usd in reversed(d.by_team):
            if team not in colours:
                other += float(usd)
        stack = [(t, float(v)) for t, v in d.by_team if t in colours]
        stack.sort(key=lambda tv: shown.index(tv[0]))
        if other:
            stack.append(("other teams", other))
        for team, v in stack:
            h = (v / ymax) * plot_h
            out.append(f'<rect x="{x:.1f}" y="{y(base + v):.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                       f'fill="{colours.get(team, OTHER_COLOUR)}"><title>{_esc(group_label("team", team))}: {_esc(_dollars(v))}</title></rect>')
            base += v
        if base > 0 and (n <= 10 or i % label_every == label_every - 1 or i == n - 1):
            out.append(f'<text x="{x + bar_w / 2:.1f}" y="{y(base) - 4:.1f}" text-anchor="middle" fill="#222">'
                       f'{_esc(_dollars(base))}</text>')
        if i % label_every == 0 or i == n - 1:
            out.append(f'<text x="{x + bar_w / 2:.1f}" y="{top + plot_h + 16}" text-anchor="middle" fill="#555">'
                       f'{d.day:%m-%d}</text>')
    if any(saved):
        pts = " ".join(f"{left + i * slot + slot / 2:.1f},{y(v):.1f}" for i, v in enumerate(saved))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{SAVED_COLOUR}" stroke-width="2" stroke-dasharray="5,3"/>')
    out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="#333"/>')
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{top + plot_h + 32}" text-anchor="middle" fill="#333">'
               'day (UTC)</text>')
    lx, ly = left, height - 14
    legend = [(t, colours[t]) for t in shown] + ([("other teams", OTHER_COLOUR)] if len(ranked) > len(shown) else [])
    for team, colour in legend:
        out.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{lx + 14}" y="{ly}" fill="#333">{_esc(group_label("team", team))}</text>')
        lx += 24 + 7 * len(group_label("team", team))
    if any(saved):
        out.append(f'<line x1="{lx}" x2="{lx + 18}" y1="{ly - 4}" y2="{ly - 4}" stroke="{SAVED_COLOUR}" stroke-width="2" '
                   f'stroke-dasharray="5,3"/><text x="{lx + 22}" y="{ly}" fill="#333">realised savings</text>')
    out.append("</svg>")
    return "".join(out)

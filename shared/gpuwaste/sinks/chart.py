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
    """The smallest 1/1.2/1.6/2/2.4/3/4/5/6/8 × 10^n at or above `value` (axis top; a quarter of each is a round
    tick, and the top stays within 25 % of the value).
    """
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 1.2, 1.6, 2, 2.4, 3, 4, 5, 6, 8, 10):
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


#: Average advance of a sans-serif character, in em (digits and lower case; for laying labels out without a font).
CHAR_EM = 0.62
#: The narrow layout of the trend chart: drawn 360 units wide with 12 px text, so a 390 px phone shows it at about
#: 1:1 and its text at 12 px (the wide 760-unit chart would be scaled to half, its 11 px text to 5 px).
NARROW = {"width": 360, "height": 300, "font": 12}


def _text_w(text: str, font: float) -> float:
    return len(text) * CHAR_EM * font


def _every(label_w: float, slot: float) -> int:
    """Label every k-th bar so labels `label_w` wide never touch (k in 1, 2, 5, 7, 10, 15, ...)."""
    need = math.ceil((label_w + 4) / slot) if slot > 0 else 1
    return next((k for k in (1, 2, 5, 7, 10, 15, 30) if k >= need), need)


def _placed(x: float, text: str, font: float, width: float) -> str:
    """`x` and `text-anchor` of a label centred on `x`, moved inside [2, width - 2] when it would stick out."""
    half = _text_w(text, font) / 2
    if x + half > width - 2:
        return f'x="{width - 2:.1f}" text-anchor="end"'
    if x - half < 2:
        return 'x="2" text-anchor="start"'
    return f'x="{x:.1f}" text-anchor="middle"'


def _title_lines(title: str, font: float, width: float) -> list[str]:
    """The title on one line, or split after its last comma when it is wider than the chart (bold: 10 % wider)."""
    if _text_w(title, font) * 1.1 <= width - 8 or ", " not in title:
        return [title]
    head, tail = title.rsplit(", ", 1)
    return [head + ",", tail]


def _legend(entries: Sequence[tuple[str, str, bool]], *, x0: float, x1: float, font: float) -> list[tuple[float, int]]:
    """(x, row) of each legend entry (label, colour, is_line), wrapped into rows inside [x0, x1]."""
    out: list[tuple[float, int]] = []
    x, row = x0, 0
    for label, _, line in entries:
        w = (22 if line else 14) + _text_w(label, font) + 10
        if x > x0 and x + w > x1:
            x, row = x0, row + 1
        out.append((x, row))
        x += w
    return out


def trend_svg(days: Sequence[TrendDay], *, title: str, width: int = 760, height: int = 320, max_teams: int = 7,
              order: Sequence[str] | None = None, font: int = 11, tooltips: bool = True) -> str:
    """Stacked bars of USD wasted per team per UTC day (values above the bars), a dated time axis, and the
    realised savings per day as a green line; an inline `<svg>` element (escaped names, no script).

    The layout follows the size: the y axis is as wide as its labels, dates and values are thinned so they never
    touch, and the legend wraps into rows (the chart grows to hold them); `NARROW` is the layout for phones.

    Args:
        order: the teams' order (colours); default: by USD over `days` (see `team_order`).
        font: the text size in SVG units (the title 2 px larger).
        tooltips: a `<title>` per bar segment (hover); left out of a second copy of the same chart.
    """
    present = set(team_order(days))
    ranked = [t for t in (order or team_order(days)) if t in present] + sorted(present - set(order or ()))
    shown = ranked[:max_teams]
    colours = {t: PALETTE[i % len(PALETTE)] for i, t in enumerate(shown)}
    per_day = [sum(float(v) for _, v in d.by_team) for d in days]
    saved = [float(d.saved_usd) for d in days]
    ymax = _nice_max(max([*per_day, *saved, 0.0]) * 1.1)
    ticks = [ymax * k / 4 for k in range(5)]
    left = round(max(_text_w(_dollars(v), font) for v in ticks)) + 14
    titles = _title_lines(title, font + 2, width)
    right, top = 12, 24 + 2 * font + (len(titles) - 1) * (font + 6)
    height += (len(titles) - 1) * (font + 6)
    legend = [(group_label("team", t), colours[t], False) for t in shown]
    legend += [("other teams", OTHER_COLOUR, False)] if len(ranked) > len(shown) else []
    legend += [("realised savings", SAVED_COLOUR, True)] if any(saved) else []
    places = _legend(legend, x0=left, x1=width - right, font=font)
    rows = 1 + max((r for _, r in places), default=0)
    line_h = font + 6
    height += (rows - 1) * line_h
    bottom = 3 * font + 16 + rows * line_h
    plot_w, plot_h = width - left - right, height - top - bottom
    n = max(1, len(days))
    slot = plot_w / n
    bar_w = max(2.0, slot * 0.7)
    label_every = _every(_text_w("12-31", font), slot)
    value_every = _every(max((_text_w(_dollars(v), font) for v in per_day), default=0.0), slot)

    def y(v: float) -> float:
        return top + plot_h - (v / ymax) * plot_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'role="img" aria-label="{_esc(title)}" font-family="sans-serif" font-size="{font}">',
           *(f'<text x="4" y="{font + 9 + k * (font + 6)}" font-size="{font + 2}" font-weight="bold">{_esc(line)}</text>'
             for k, line in enumerate(titles))]
    for v in ticks:
        yy = y(v)
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{yy + font * 0.35:.1f}" text-anchor="end" fill="#555">{_esc(_dollars(v))}</text>')
    values: list[str] = []  # the values over the bars, drawn after the savings line (their halo masks it)
    for i, d in enumerate(days):
        x = left + i * slot + (slot - bar_w) / 2
        base = 0.0
        other = sum(float(v) for t, v in d.by_team if t not in colours)
        stack = sorted(((t, float(v)) for t, v in d.by_team if t in colours), key=lambda tv: shown.index(tv[0]))
        if other:
            stack.append(("other teams", other))
        for team, v in stack:
            h = (v / ymax) * plot_h
            tip = f"<title>{_esc(group_label('team', team))}: {_esc(_dollars(v))}</title>" if tooltips else ""
            out.append(f'<rect x="{x:.1f}" y="{y(base + v):.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                       f'fill="{colours.get(team, OTHER_COLOUR)}">{tip}</rect>')
            base += v
        if base > 0 and ((n - 1 - i) % value_every == 0):
            value = _dollars(base)
            values.append(f'<text {_placed(x + bar_w / 2, value, font, width)} y="{y(base) - 4:.1f}" fill="#222" '
                        'stroke="#fff" stroke-width="3" paint-order="stroke">'
                        f'{_esc(value)}</text>')
        if (n - 1 - i) % label_every == 0:
            date = f"{d.day:%m-%d}"
            out.append(f'<text {_placed(x + bar_w / 2, date, font, width)} y="{top + plot_h + font + 5}" fill="#555">'
                       f'{date}</text>')
    if any(saved):
        pts = " ".join(f"{left + i * slot + slot / 2:.1f},{y(v):.1f}" for i, v in enumerate(saved))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{SAVED_COLOUR}" stroke-width="2" stroke-dasharray="5,3"/>')
    out += values
    out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="#333"/>')
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{top + plot_h + 2 * font + 10}" text-anchor="middle" fill="#333">'
               'day (UTC)</text>')
    base_y = top + plot_h + 3 * font + 12
    for (label, colour, line), (lx, row) in zip(legend, places, strict=True):
        ly = base_y + (row + 1) * line_h - 4
        mark = (f'<line x1="{lx:.0f}" x2="{lx + 18:.0f}" y1="{ly - font * 0.35:.1f}" y2="{ly - font * 0.35:.1f}" '
                f'stroke="{colour}" stroke-width="2" stroke-dasharray="5,3"/>' if line else
                f'<rect x="{lx:.0f}" y="{ly - font + 1:.1f}" width="10" height="10" fill="{colour}"/>')
        out.append(f'{mark}<text x="{lx + (22 if line else 14):.0f}" y="{ly:.1f}" fill="#333">{_esc(label)}</text>')
    out.append("</svg>")
    return "".join(out)

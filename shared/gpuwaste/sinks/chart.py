"""Adapter: the summary chart (stacked bars of USD wasted per team, by kind) drawn with matplotlib's Agg backend.

matplotlib is optional (`pip install 'gpuwaste[charts]'`); without it `waste_by_team_and_kind` returns None.
"""

from __future__ import annotations

import importlib.util
import io
from decimal import Decimal

from gpuwaste.models.notices import DailySummary


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
            ax.bar(teams, heights, bottom=bottom, label=kind.replace("_", " "))
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

"""Adapter helper: window statistics of recorded samples, computed exactly as the PromQL plan does.

Mirrors Prometheus 2.x range selection (a range `[r]` evaluated at `t` selects samples with timestamps in
`[t - r, t]`, both ends included) so that a recording scanned offline and the same recording
backfilled into Prometheus give the same numbers:

- count/sum/max/min: `count_over_time`, `sum_over_time`, `max_over_time`, `min_over_time`
- p95: `quantile_over_time(0.95, …)` (rank q·(n−1), linear interpolation)
- changes: `changes(…)`
- recent_count: `count_over_time(…[recent])`
- max_avg_10m: `max_over_time(avg_over_time(…[10m])[window:10m])` — subquery steps aligned to
  multiples of 10 minutes since the epoch, the first at or after `t − window`.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from gpuwaste.models.telemetry import WindowStats

AVG_STEP_MS = 600_000


def quantile(q: float, values: Sequence[float]) -> float:
    """Prometheus `quantile_over_time` on already-selected values (NaN for an empty input)."""
    n = len(values)
    if n == 0:
        return math.nan
    ordered = sorted(values)
    rank = q * (n - 1)
    lower = max(0, int(math.floor(rank)))
    upper = min(n - 1, lower + 1)
    weight = rank - math.floor(rank)
    return ordered[lower] * (1 - weight) + ordered[upper] * weight


def window_stats(
    timestamps_ms: Sequence[int],
    values: Sequence[float],
    *,
    eval_ms: int,
    window_ms: int,
    recent_ms: int,
    avg_step_ms: int = AVG_STEP_MS,
) -> WindowStats | None:
    """Summarise one series (timestamps ascending, ms) over `[eval − window, eval]`.

    Returns:
        The window summary, or None when the window holds no sample.
    """
    lo = bisect.bisect_left(timestamps_ms, eval_ms - window_ms)
    hi = bisect.bisect_right(timestamps_ms, eval_ms)
    if hi <= lo:
        return None
    vals = values[lo:hi]
    changes = sum(1 for a, b in zip(vals, vals[1:], strict=False) if a != b)
    recent_lo = bisect.bisect_left(timestamps_ms, eval_ms - recent_ms)
    recent = hi - max(lo, recent_lo)
    return WindowStats(
        count=len(vals),
        total=math.fsum(vals),
        max=max(vals),
        min=min(vals),
        p95=quantile(0.95, vals),
        max_avg_10m=_max_step_avg(timestamps_ms, values, eval_ms, window_ms, avg_step_ms),
        recent_count=max(0, recent),
        changes=changes,
    )


def _max_step_avg(ts: Sequence[int], vals: Sequence[float], eval_ms: int, window_ms: int, step_ms: int) -> float | None:
    start = eval_ms - window_ms
    first = (start // step_ms) * step_ms
    if first < start:
        first += step_ms
    best: float | None = None
    t = first
    while t <= eval_ms:
        lo = bisect.bisect_left(ts, t - step_ms)
        hi = bisect.bisect_right(ts, t)
        if hi > lo:
            avg = math.fsum(vals[lo:hi]) / (hi - lo)
            best = avg if best is None else max(best, avg)
        t += step_ms
    return best


def counter_rate(timestamps_ms: Sequence[int], values: Sequence[float], *, eval_ms: int, window_ms: int) -> float | None:
    """PromQL `rate(x[window])` evaluated at `eval_ms`: Prometheus 2.x `extrapolatedRate`, per second.

    Counter resets add the value before the reset; the increase is extrapolated to the window edges when
    the first/last sample lies within 1.1 average sample intervals of them (else by half an interval),
    and never extrapolated below a zero counter value. The arithmetic follows Prometheus' order of
    operations so both paths give the same float.

    Returns:
        The per-second rate, or None when the window holds fewer than 2 samples (PromQL drops the series).
    """
    lo = bisect.bisect_left(timestamps_ms, eval_ms - window_ms)
    hi = bisect.bisect_right(timestamps_ms, eval_ms)
    if hi - lo < 2:
        return None
    ts = timestamps_ms[lo:hi]
    vals = values[lo:hi]
    result = vals[-1] - vals[0]
    prev = vals[0]
    for v in vals[1:]:
        if v < prev:
            result += prev
        prev = v
    range_start = eval_ms - window_ms
    duration_to_start = (ts[0] - range_start) / 1000
    duration_to_end = (eval_ms - ts[-1]) / 1000
    sampled = (ts[-1] - ts[0]) / 1000
    avg_between = sampled / (len(vals) - 1)
    if result > 0 and vals[0] >= 0:
        duration_to_zero = sampled * (vals[0] / result)
        if duration_to_zero < duration_to_start:
            duration_to_start = duration_to_zero
    threshold = avg_between * 1.1
    interval = sampled
    interval += duration_to_start if duration_to_start < threshold else avg_between / 2
    interval += duration_to_end if duration_to_end < threshold else avg_between / 2
    factor = interval / sampled
    factor /= window_ms / 1000
    return result * factor


def counter_resets(values: Sequence[float]) -> int:
    """PromQL `resets(…)` on already-selected values: how often a value is lower than the one before."""
    return sum(1 for a, b in zip(values, values[1:], strict=False) if b < a)

"""Adapter helper: window and bucket statistics of recorded samples, computed exactly as the PromQL plan does.

Streaming: every sample goes once through an accumulator (`BucketAccumulator`, `WindowAccumulator`,
`RateAccumulator`) and is then dropped, so a recording's memory is its series count × the buckets, never
its sample count.

Selection mirrors the PromQL plan (`sources.promql`):

- buckets (time-resolved signals, `models.telemetry.Bucket`): bucket k holds the samples with timestamps
  in `(end_k − bucket, end_k]`, as `count_over_time`/`sum_over_time`/`max_over_time` over `[bucket − 1 ms]`
  at `end_k` (the same in Prometheus 2.x, whose ranges include both ends, and 3.x, left-open);
- window statistics of the other signals: samples in `(eval − window, eval]` (`[window − 1 ms]`);
- counter rates (pod counters): PromQL `rate(x[window])` of Prometheus 2.x, samples in `[eval − window, eval]`.

A sample that cannot be read (non-numeric, NaN/Inf, out of range for its unit, see
`models.telemetry.readable`) makes its bucket unreadable as a whole: the bucket's count becomes 0 and its
samples are counted in `WindowStats.unreadable`. Prometheus cannot drop one sample from a
`sum_over_time`, so the live path drops the bucket too (`bucket_problem`), and both paths agree.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Sequence

from gpuwaste.models.telemetry import READABLE_RANGE, Bucket, BucketGrid, WindowStats, readable, stats_from_buckets

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


def bucket_problem(unit: str | None, count: float, total: float, mx: float) -> str | None:
    """Why a bucket's statistics (as Prometheus returns them) cannot be used, or None.

    Catches what a bucket of raw samples can show: NaN (a NaN sample makes the sum NaN), ±Inf, a maximum
    above the unit's range (ratio > 1.01, percent > 101, a DCGM blank sentinel) and a negative sum.
    """
    if count <= 0:
        return None
    lo, hi = READABLE_RANGE.get(unit or "", _ANY)
    if lo <= mx <= hi and total >= 0 and total - total == 0.0:
        return None  # the common case: finite, in range (NaN fails every comparison)
    for v in (total, mx):
        if v != v or v in (math.inf, -math.inf):
            return "NaN or infinite sample"
    if unit is not None and not readable(unit, mx):
        return f"sample out of range for a {unit} field (max {mx:g})"
    if total < 0:
        return "negative sample"
    return None


_ANY = (-math.inf, math.inf)


class BucketAccumulator:
    """Count, sum and max per bucket of one series, fed one sample at a time (see the module docstring).

    Args:
        grid: the window's buckets. unit: the field's unit for the range check (None: finite only).
    """

    __slots__ = ("bad", "comps", "counts", "first_bad", "grid", "maxes", "start_ms", "step_ms", "totals", "unit")

    def __init__(self, grid: BucketGrid, unit: str | None) -> None:
        n = len(grid.ends)
        self.grid = grid
        self.unit = unit
        self.step_ms = grid.bucket_s * 1000
        self.start_ms = round(grid.eval_time.timestamp() * 1000) - n * self.step_ms
        self.counts = array("l", bytes(8 * n))
        self.totals = array("d", bytes(8 * n))
        self.comps = array("d", bytes(8 * n))  # Neumaier compensation of each total (sums as exact as Prometheus's Kahan sum)
        self.maxes = array("d", bytes(8 * n))
        self.bad: array[int] | None = None
        self.first_bad: tuple[int, str] | None = None  # (line of the recording or 0, reason)

    def index(self, ts_ms: int) -> int | None:
        """The bucket holding a sample time, or None outside the window."""
        off = ts_ms - self.start_ms
        if off <= 0:
            return None
        k = (off - 1) // self.step_ms
        return k if k < len(self.counts) else None

    def add(self, ts_ms: int, value: float, line: int = 0) -> None:
        """Add one readable-looking sample (range-checked here; `line`: where it was read, 0 when unknown)."""
        k = self.index(ts_ms)
        if k is None:
            return
        if (self.unit is not None and not readable(self.unit, value)) or value != value or value in (math.inf, -math.inf):
            self.mark_bad(k, line, f"sample out of range for a {self.unit} field ({value:g})" if self.unit else "NaN or infinite sample")
            return
        c = self.counts[k]
        self.counts[k] = c + 1
        t = self.totals[k]
        s = t + value
        self.comps[k] += (t - s) + value if abs(t) >= abs(value) else (value - s) + t
        self.totals[k] = s
        if not c or value > self.maxes[k]:
            self.maxes[k] = value

    def add_unreadable(self, ts_ms: int | None, line: int, reason: str) -> None:
        """Count a sample that could not be read at all (non-numeric, NaN) in the bucket of its time."""
        k = self.index(ts_ms) if ts_ms is not None else None
        if k is not None:
            self.mark_bad(k, line, reason)

    def mark_bad(self, k: int, line: int, reason: str) -> None:
        """Make bucket k unreadable (see the module docstring)."""
        if self.bad is None:
            self.bad = array("l", bytes(8 * len(self.counts)))
        self.bad[k] += 1
        if self.first_bad is None:
            self.first_bad = (line, reason)

    def buckets(self) -> tuple[tuple[Bucket, ...], int]:
        """(buckets, unreadable samples): a bucket with an unreadable sample is emptied and its samples counted."""
        out = []
        unreadable = 0
        bad = self.bad
        for k, end in enumerate(self.grid.ends):
            c = self.counts[k]
            if bad is not None and bad[k]:
                unreadable += c + bad[k]
                out.append(Bucket(end, 0, 0.0, 0.0))
            else:
                out.append(Bucket(end, c, self.totals[k] + self.comps[k], self.maxes[k]))
        return tuple(out), unreadable

    def samples(self) -> int:
        """Samples seen in the window, readable or not."""
        return sum(self.counts) + (sum(self.bad) if self.bad is not None else 0)

    def stats(self) -> WindowStats | None:
        """The window statistics derived from the buckets (None when the window holds no sample at all)."""
        if not self.samples():
            return None
        buckets, unreadable = self.buckets()
        return stats_from_buckets(buckets, self.grid, unreadable=unreadable)


class WindowAccumulator:
    """Count, sum, max and changes of one series over `(eval − window, eval]` (signals without buckets)."""

    __slots__ = ("bad", "changes", "comp", "count", "end_ms", "first_bad", "last", "max", "start_ms", "sum", "unit")

    def __init__(self, eval_ms: int, window_ms: int, unit: str | None) -> None:
        self.start_ms = eval_ms - window_ms
        self.end_ms = eval_ms
        self.unit = unit
        self.count = 0
        self.sum = 0.0
        self.comp = 0.0
        self.max = 0.0
        self.changes = 0
        self.last: float | None = None
        self.bad = 0
        self.first_bad: tuple[int, str] | None = None

    def add(self, ts_ms: int, value: float, line: int = 0) -> None:
        """Add one sample of `(eval − window, eval]` (range-checked here)."""
        if not self.start_ms < ts_ms <= self.end_ms:
            return
        if (self.unit is not None and not readable(self.unit, value)) or value != value or value in (math.inf, -math.inf):
            self.add_unreadable(ts_ms, line, f"sample out of range for a {self.unit} field ({value:g})" if self.unit else "NaN or infinite sample")
            return
        if not self.count or value > self.max:
            self.max = value
        self.count += 1
        t = self.sum
        s = t + value
        self.comp += (t - s) + value if abs(t) >= abs(value) else (value - s) + t
        self.sum = s
        if self.last is not None and value != self.last:
            self.changes += 1
        self.last = value

    def add_unreadable(self, ts_ms: int | None, line: int, reason: str) -> None:
        """Count an unreadable sample of the window."""
        if ts_ms is None or not self.start_ms < ts_ms <= self.end_ms:
            return
        self.bad += 1
        if self.first_bad is None:
            self.first_bad = (line, reason)

    @property
    def total(self) -> float:
        """The compensated sum of the readable samples."""
        return self.sum + self.comp

    def samples(self) -> int:
        """Samples seen in the window, readable or not."""
        return self.count + self.bad


class RateAccumulator:
    """PromQL `rate(x[window])` (Prometheus 2.x, both range ends included) of a counter, fed sample by sample."""

    __slots__ = ("correction", "count", "end_ms", "first_ts", "first_v", "last_ts", "last_v", "recent", "recent_ms", "resets", "start_ms")

    def __init__(self, eval_ms: int, window_ms: int, recent_ms: int) -> None:
        self.start_ms = eval_ms - window_ms
        self.end_ms = eval_ms
        self.recent_ms = eval_ms - recent_ms
        self.count = 0
        self.resets = 0
        self.recent = 0
        self.correction = 0.0
        self.first_ts = self.last_ts = 0
        self.first_v = self.last_v = 0.0

    def add(self, ts_ms: int, value: float, line: int = 0) -> None:
        """Add one counter sample of `[eval − window, eval]`."""
        if not self.start_ms <= ts_ms <= self.end_ms or value != value:
            return
        if self.count == 0:
            self.first_ts, self.first_v = ts_ms, value
        elif value < self.last_v:
            self.correction += self.last_v
            self.resets += 1
        self.last_ts, self.last_v = ts_ms, value
        self.count += 1
        if ts_ms >= self.recent_ms:
            self.recent += 1

    def rate(self) -> float | None:
        """The per-second rate, or None with fewer than 2 samples (PromQL drops the series)."""
        if self.count < 2:
            return None
        return extrapolated_rate(self.first_ts, self.first_v, self.last_ts, self.count, start_ms=self.start_ms, end_ms=self.end_ms,
                                 increase=self.last_v - self.first_v + self.correction)


def extrapolated_rate(first_ts: int, first_v: float, last_ts: int, n: int, *, start_ms: int, end_ms: int, increase: float) -> float:
    """Prometheus 2.x `extrapolatedRate` for a counter: `increase` over the samples, extrapolated to the range edges."""
    result = increase
    duration_to_start = (first_ts - start_ms) / 1000
    duration_to_end = (end_ms - last_ts) / 1000
    sampled = (last_ts - first_ts) / 1000
    avg_between = sampled / (n - 1)
    if result > 0 and first_v >= 0:
        duration_to_zero = sampled * (first_v / result)
        if duration_to_zero < duration_to_start:
            duration_to_start = duration_to_zero
    threshold = avg_between * 1.1
    interval = sampled
    interval += duration_to_start if duration_to_start < threshold else avg_between / 2
    interval += duration_to_end if duration_to_end < threshold else avg_between / 2
    factor = interval / sampled
    factor /= (end_ms - start_ms) / 1000
    return result * factor


def window_stats(
    timestamps_ms: Sequence[int],
    values: Sequence[float],
    *,
    eval_ms: int,
    window_ms: int,
    recent_ms: int,
    grid: BucketGrid | None = None,
    unit: str | None = None,
) -> WindowStats | None:
    """Summarise one in-memory series over `(eval − window, eval]` (timestamps ascending, ms).

    With a `grid`, the statistics are derived from its buckets (as for the time-resolved signals);
    without, count/sum/max/min/p95/changes/recent count are taken from the samples themselves (sources
    that hold a short series in memory, e.g. the Alibaba trace replay) and `max_avg_10m` is None.

    Returns:
        The window summary, or None when the window holds no sample.
    """
    if grid is not None:
        acc = BucketAccumulator(grid, unit)
        lo = bisect.bisect_right(timestamps_ms, eval_ms - window_ms)
        hi = bisect.bisect_right(timestamps_ms, eval_ms)
        for i in range(lo, hi):
            acc.add(timestamps_ms[i], values[i])
        return acc.stats()
    lo = bisect.bisect_right(timestamps_ms, eval_ms - window_ms)
    hi = bisect.bisect_right(timestamps_ms, eval_ms)
    if hi <= lo:
        return None
    vals = values[lo:hi]
    changes = sum(1 for a, b in zip(vals, vals[1:], strict=False) if a != b)
    recent_lo = bisect.bisect_right(timestamps_ms, eval_ms - recent_ms)
    recent = hi - max(lo, recent_lo)
    return WindowStats(
        count=len(vals),
        total=math.fsum(vals),
        max=max(vals),
        min=min(vals),
        p95=quantile(0.95, vals),
        max_avg_10m=None,
        recent_count=max(0, recent),
        changes=changes,
    )


def counter_rate(timestamps_ms: Sequence[int], values: Sequence[float], *, eval_ms: int, window_ms: int) -> float | None:
    """PromQL `rate(x[window])` evaluated at `eval_ms`: Prometheus 2.x `extrapolatedRate`, per second.

    Counter resets add the value before the reset; the increase is extrapolated to the window edges when
    the first/last sample lies within 1.1 average sample intervals of them (else by half an interval),
    and never extrapolated below a zero counter value.

    Returns:
        The per-second rate, or None when the window holds fewer than 2 samples (PromQL drops the series).
    """
    acc = RateAccumulator(eval_ms, window_ms, window_ms)
    lo = bisect.bisect_left(timestamps_ms, eval_ms - window_ms)
    hi = bisect.bisect_right(timestamps_ms, eval_ms)
    for i in range(lo, hi):
        acc.add(timestamps_ms[i], values[i])
    return acc.rate()


def counter_resets(values: Sequence[float]) -> int:
    """PromQL `resets(…)` on already-selected values: how often a value is lower than the one before."""
    return sum(1 for a, b in zip(values, values[1:], strict=False) if b < a)

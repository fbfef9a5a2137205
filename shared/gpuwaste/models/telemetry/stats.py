"""Window statistics: `WindowStats`, derived from a signal's buckets or columns, and the problems met reading them.

`stats_from_buckets` and `stats_from_columns` fill `WindowStats` the same way on both telemetry paths;
`window_stats` builds one without validation (the hot path), `merge_buckets` joins two series' buckets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import Field, model_validator

from gpuwaste.models.base import Frozen
from gpuwaste.models.telemetry.buckets import Bucket, BucketGrid


def stats_from_buckets(buckets: Sequence[Bucket], grid: BucketGrid, *, series: int = 1, unreadable: int = 0) -> WindowStats:
    """Window statistics derived from a signal's buckets (how both telemetry paths fill `WindowStats`).

    count/total/max: over all buckets. p95: 95th percentile (Prometheus interpolation) of the bucket
    maxima — an upper estimate of the samples' p95 (the plan no longer asks Prometheus for
    `quantile_over_time`): short bursts keep it high, as they kept the samples' p95 high.
    min: 0.0 (not summarised: a lower bound). max_avg_10m: the highest average over `grid.avg_run`
    consecutive buckets (10 minutes when buckets are finer, else one bucket), eval-aligned, never
    reaching outside the window. recent_count: samples in the last `grid.recent_buckets` buckets.
    changes: 0 when every sample of the window has the same value (each bucket's avg equals its max and
    all maxima are equal), else the number of buckets whose values vary plus the number of adjacent
    bucket pairs whose maxima differ (a lower bound of PromQL `changes`; only "0 or not" is meaningful).
    """
    count = 0
    total = 0.0
    mx: float | None = None
    maxima: list[float] = []
    varying = 0
    steps = 0
    prev_max: float | None = None
    isclose = math.isclose
    for _end, c, t, m in buckets:
        if not c:
            continue
        count += c
        total += t
        if mx is None or m > mx:
            mx = m
        maxima.append(m)
        if t != m * c and not isclose(t, m * c, rel_tol=1e-9, abs_tol=1e-12):
            varying += 1
        if prev_max is not None and m != prev_max:
            steps += 1
        prev_max = m
    return _derived(buckets, grid, count, total, mx, maxima, varying + steps, series, unreadable)


def stats_from_columns(grid: BucketGrid, counts: Sequence[float], totals: Sequence[float], maxes: Sequence[float]) -> WindowStats:
    """`stats_from_buckets` of readable bucket columns in one pass (the Prometheus reader's hot path, same numbers).

    Column k holds bucket k of `grid` (count, sum, max); a count ≤ 0 is an empty bucket. Every non-empty bucket must be
    readable (`readable` for its unit: the caller checks and takes `stats_from_buckets` otherwise). Builds the same
    buckets and adds up the same floats in the same order as `stats_from_buckets` over them, without a second pass.
    """
    new = tuple.__new__
    isclose = math.isclose
    buckets: list[Bucket] = []
    append = buckets.append
    count = 0
    total = 0.0
    mx: float | None = None
    maxima: list[float] = []
    changes = 0
    prev_max: float | None = None
    for e, c, t, m in zip(grid.ends, counts, totals, maxes, strict=True):
        if c <= 0:
            append(new(Bucket, (e, 0, 0.0, 0.0)))
            continue
        n = int(c)
        append(new(Bucket, (e, n, t, m)))
        count += n
        total += t
        if mx is None or m > mx:
            mx = m
        maxima.append(m)
        if t != m * n and not isclose(t, m * n, rel_tol=1e-9, abs_tol=1e-12):
            changes += 1
        if prev_max is not None and m != prev_max:
            changes += 1
        prev_max = m
    return _derived(buckets, grid, count, total, mx, maxima, changes, 1, 0)


def _derived(buckets: Sequence[Bucket], grid: BucketGrid, count: int, total: float, mx: float | None, maxima: list[float], changes: int,
             series: int, unreadable: int) -> WindowStats:
    """The rest of `stats_from_buckets` once the buckets' sums are taken: the 10-minute peak, the recent tail, p95."""
    run = grid.avg_run
    best: float | None = None
    if count:
        if run == 1:
            best = max(t / c for _e, c, t, _m in buckets if c)
        else:
            for i in range(len(buckets) - run + 1):
                c = 0
                t = 0.0
                for b in buckets[i : i + run]:
                    c += b[1]
                    t += b[2]
                if c:
                    v = t / c
                    best = v if best is None or v > best else best
    recent = 0
    for b in buckets[len(buckets) - grid.recent_buckets :]:
        recent += b[1]
    return window_stats(
        count=count,
        total=total,
        max=mx if mx is not None else 0.0,
        p95=_quantile(0.95, maxima) if maxima else 0.0,
        max_avg_10m=best,
        recent_count=recent,
        changes=changes,
        series=series,
        live_series=1 if recent else 0,
        buckets=tuple(buckets),
        unreadable=unreadable,
    )


#: One shared "fields set" for the WindowStats a source builds without validation (tens of thousands per scan:
#: a set per instance would cost ~350 bytes each). Every field is given, and frozen models never change it.
STATS_FIELDS_SET: Any = frozenset(
    ("count", "total", "max", "min", "p95", "max_avg_10m", "recent_count", "changes", "series", "live_series", "buckets", "unreadable")
)
_new_object = object.__new__
_set_attr = object.__setattr__


def window_stats(*, count: int, total: float, max: float, p95: float, max_avg_10m: float | None, recent_count: int,  # noqa: A002 - the field's name
                 changes: int, series: int, live_series: int, buckets: tuple[Bucket, ...], unreadable: int, min: float = 0.0) -> WindowStats:  # noqa: A002
    """A `WindowStats` built without validation from values a source computed (every field given, `min` 0.0 by default).

    The object `WindowStats.model_construct(_fields_set=STATS_FIELDS_SET, ...)` builds (equal, same dump), at a ninth of
    its cost: a 10,000-GPU scan builds about 100,000 of them.
    """
    obj = _new_object(WindowStats)
    _set_attr(obj, "__dict__", {"count": count, "total": total, "max": max, "min": min, "p95": p95, "max_avg_10m": max_avg_10m,
                                "recent_count": recent_count, "changes": changes, "series": series, "live_series": live_series,
                                "buckets": buckets, "unreadable": unreadable})
    _set_attr(obj, "__pydantic_fields_set__", STATS_FIELDS_SET)
    _set_attr(obj, "__pydantic_extra__", None)
    _set_attr(obj, "__pydantic_private__", None)
    return obj


def _quantile(q: float, values: Sequence[float]) -> float:
    """Prometheus `quantile_over_time` interpolation (rank q·(n−1)) on already-selected values."""
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    lower = max(0, int(math.floor(rank)))
    upper = min(len(ordered) - 1, lower + 1)
    weight = rank - math.floor(rank)
    return ordered[lower] * (1 - weight) + ordered[upper] * weight


class TelemetryProblem(Frozen):
    """A sample or series the source could not use (non-numeric, out of range for its unit, …).

    Attributes:
        metric: the metric name. where: `file:line` for recordings, the series' label set for live data.
        reason: what was wrong, in users' words. count: how many samples share this problem.
    """

    metric: str
    where: str
    reason: str
    count: int = Field(1, ge=1)


class WindowStats(Frozen):
    """Summary of one signal's samples over the scan window `(eval_time − window, eval_time]`, in the signal's unit.

    The same numbers come from PromQL and from a recording computed in Python. For a time-resolved
    signal (`buckets` non-empty, see `sources.metrics_plan`) every field is derived from the buckets
    (`stats_from_buckets`): p95 is then the 95th percentile of the bucket maxima, `min` is 0.0 (not
    summarised), `max_avg_10m` the highest eval-aligned 10-minute average, `changes` 0 exactly when
    every sample has the same value. Other signals carry count/total/max (and `changes` for the energy
    counter) with neutral values for the rest (`sources.metrics_plan.neutral_stats`).

    Attributes:
        count: samples in the window.
        total: sum of sample values.
        max: largest sample. min: smallest sample.
        p95: 95th percentile (Prometheus `quantile_over_time` interpolation); when several series are
            merged it is the largest per-series p95 (an upper bound).
        max_avg_10m: the highest 10-minute average inside the window (10-minute steps aligned to the
            epoch), None when not computed.
        recent_count: samples in the last `recent_s` seconds of the window (staleness check).
        changes: number of value changes in the window (PromQL `changes`).
        series: raw series merged into this summary (duplicate exporters, B17).
        live_series: merged series that still have samples in the recent tail: 2 or more means copies ran
            side by side (duplicate exporters), 1 means they followed each other (exporter restart, B12).
        buckets: the time-resolved view (see `Bucket`; `TelemetryWindow.bucket_s` wide, oldest first);
            empty when the source did not resolve time.
        unreadable: samples the source could not use (non-numeric, NaN/Inf, out of range for the unit;
            see `TelemetryWindow.problems`). A bucket holding one is unreadable as a whole (its count is
            0 and its samples are counted here), so a bad sample never silently moves a statistic; a
            signal whose samples were all unreadable is still present (count 0, unreadable > 0) and must
            not be replaced by another activity signal.
    """

    count: int = Field(ge=0)
    total: float
    max: float
    min: float
    p95: float
    max_avg_10m: float | None = None
    recent_count: int = Field(0, ge=0)
    changes: int = Field(0, ge=0)
    series: int = Field(1, ge=1)
    live_series: int = Field(0, ge=0)
    buckets: tuple[Bucket, ...] = ()
    unreadable: int = Field(0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _live(cls, data: Any) -> Any:
        """A single series is "live" when it has samples in the recent tail (defaulted from `recent_count`)."""
        if isinstance(data, dict) and "live_series" not in data:
            data = {**data, "live_series": 1 if data.get("recent_count", 0) else 0}
        return data

    @property
    def avg(self) -> float:
        """Mean of the samples (total ÷ count); 0.0 when there are none."""
        return self.total / self.count if self.count else 0.0

    def merge(self, other: WindowStats) -> WindowStats:
        """Combine two summaries of the same GPU signal (instance change B12, duplicate exporters B17)."""
        mx = [v for v in (self.max_avg_10m, other.max_avg_10m) if v is not None]
        return WindowStats(
            count=self.count + other.count,
            total=self.total + other.total,
            max=max(self.max, other.max),
            min=min(self.min, other.min),
            p95=max(self.p95, other.p95),
            max_avg_10m=max(mx) if mx else None,
            recent_count=self.recent_count + other.recent_count,
            changes=self.changes + other.changes,
            series=self.series + other.series,
            live_series=self.live_series + other.live_series,
            buckets=merge_buckets(self.buckets, other.buckets),
            unreadable=self.unreadable + other.unreadable,
        )


def merge_buckets(a: tuple[Bucket, ...], b: tuple[Bucket, ...]) -> tuple[Bucket, ...]:
    """Bucket-wise union of two series of the same GPU signal (counts and totals add, max of maxima)."""
    if not a or not b:
        return a or b
    by_end: dict[datetime, Bucket] = {x.end: x for x in a}
    for y in b:
        x = by_end.get(y.end)
        by_end[y.end] = y if x is None else Bucket(
            y.end, x.count + y.count, x.total + y.total, max(x.max, y.max) if x.count and y.count else (x.max if x.count else y.max)
        )
    return tuple(by_end[k] for k in sorted(by_end))

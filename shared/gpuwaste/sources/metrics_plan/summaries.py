"""How a series is summarised over the window, identically on both telemetry paths.

Neutral values for the statistics a spec does not compute, merging the series that differ only in dropped labels,
counter rates, the recording path's accumulators (`summarise_samples`) and the inferred sample spacing.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from gpuwaste.models.settings import TelemetryLabels
from gpuwaste.models.telemetry import (
    Bucket,
    BucketGrid,
    WindowStats,
    merge_buckets,
    stats_from_buckets,
    window_stats,
)
from gpuwaste.sources.metrics_plan.plan import DROPPED_LABELS, MetricSpec, SeriesSummary, clean_labels
from gpuwaste.sources.window import BucketAccumulator, RateAccumulator, WindowAccumulator


def droppable_labels(labels: TelemetryLabels | None = None) -> tuple[str, ...]:
    """`DROPPED_LABELS` minus every label the telemetry label settings read (so a custom setting wins)."""
    settings = labels or TelemetryLabels()
    read = {*settings.uuid_labels, *settings.hostname_labels, *settings.gpu_instance_labels,
            *settings.mig_profile_labels, *settings.model_labels}
    return tuple(n for n in DROPPED_LABELS if n not in read)


def neutral_stats(spec: MetricSpec, values: Mapping[str, float], *, series: int = 1) -> WindowStats:
    """A `WindowStats` from the instant statistics `spec` computes, neutral values for the others.

    Args:
        spec: the plan entry (its `computed` statistics are read from `values`).
        values: statistic name (`ALL_STATS`) → value; must hold `count` and every computed statistic.
        series: raw series merged into this summary.

    Returns:
        The summary; statistics outside `spec.computed` get: sum → 0.0, max → 0.0, p95 → max, min → 0.0,
        max_avg_10m → None, recent_count → count, changes → 0 (see the module docstring).
    """
    computed = spec.computed
    count = int(values["count"])
    mx = values.get("max", 0.0) if "max" in computed and count else 0.0
    return window_stats(
        count=count,
        total=values.get("sum", 0.0) if "sum" in computed and count else 0.0,
        max=mx,
        p95=mx,
        max_avg_10m=None,
        recent_count=count,
        changes=int(values.get("changes", 0)) if "changes" in computed else 0,
        series=series,
        live_series=1 if count else 0,
        buckets=(),
        unreadable=int(values.get("unreadable", 0)),
    )


def bucketed_stats(buckets: Sequence[Bucket], grid: BucketGrid, *, series: int = 1, unreadable: int = 0) -> WindowStats:
    """The `WindowStats` of a time-resolved series (see `models.telemetry.stats_from_buckets`)."""
    return stats_from_buckets(buckets, grid, series=series, unreadable=unreadable)


def _merge_aggregated(a: WindowStats, b: WindowStats, grid: BucketGrid | None) -> WindowStats:
    """Two summaries merged as `sum/max without (…)` merges them in PromQL (one result series).

    Time-resolved: the buckets are merged (counts and sums add, max of maxima) and every statistic is
    derived again from the merged buckets, exactly what the aggregated PromQL answer gives.
    """
    if a.buckets and grid is not None:
        return stats_from_buckets(merge_buckets(a.buckets, b.buckets), grid, series=1, unreadable=a.unreadable + b.unreadable)
    count = a.count + b.count
    return window_stats(
        count=count, total=a.total + b.total, max=max(a.max, b.max) if a.count and b.count else (a.max if a.count else b.max),
        p95=max(a.p95, b.p95), max_avg_10m=None, recent_count=a.recent_count + b.recent_count,
        changes=a.changes + b.changes, series=1, live_series=1 if count else 0, buckets=(), unreadable=a.unreadable + b.unreadable,
    )


def merge_dropped(summaries: Iterable[SeriesSummary], drop: Sequence[str], grid: BucketGrid | None = None) -> list[SeriesSummary]:
    """GPU summaries without the `drop` labels, merged when that makes their labels equal (PromQL `without`).

    Pod summaries pass unchanged. Merging follows the plan's aggregation operators: sum of count, sum and
    changes, max of max; buckets bucket by bucket (see `_merge_aggregated`).
    """
    if not drop:
        return list(summaries)
    dropped = frozenset(drop)
    out: list[SeriesSummary] = []
    merged: dict[tuple[str, tuple[tuple[str, str], ...]], SeriesSummary] = {}
    for s in sorted(summaries, key=_order):
        if s.spec.scope != "gpu" or s.spec.summary == "rate" or s.stats is None:
            out.append(s)
            continue
        labels = {k: v for k, v in s.labels.items() if k not in dropped}
        key = (s.spec.name, tuple(sorted(labels.items())))
        prev = merged.get(key)
        if prev is None:
            merged[key] = SeriesSummary(s.spec, labels, s.samples, s.stats, s.problem)
        else:
            assert prev.stats is not None
            merged[key] = SeriesSummary(s.spec, labels, prev.samples + s.samples, _merge_aggregated(prev.stats, s.stats, grid),
                                        prev.problem or s.problem)
    out.extend(merged.values())
    return out


def rate_stats(rate: float, *, count: int, resets: int, recent_count: int) -> WindowStats:
    """The `WindowStats` of one counter series summarised as a rate (see the module docstring)."""
    return WindowStats(count=count, total=rate, max=rate, min=rate, p95=rate, recent_count=recent_count, changes=resets)


def _merge_rates(a: WindowStats, b: WindowStats) -> WindowStats:
    total = a.total + b.total
    return WindowStats(
        count=a.count + b.count,
        total=total,
        max=total,
        min=total,
        p95=total,
        recent_count=a.recent_count + b.recent_count,
        changes=a.changes + b.changes,
        series=a.series + b.series,
        live_series=a.live_series + b.live_series,
    )


def accumulator_for(spec: MetricSpec, grid: BucketGrid) -> BucketAccumulator | WindowAccumulator | RateAccumulator:
    """The streaming accumulator of one series of `spec` over the grid's window (see `sources.window`)."""
    eval_ms = round(grid.eval_time.timestamp() * 1000)
    window_ms = grid.window_s * 1000
    if spec.summary == "buckets":
        return BucketAccumulator(grid, spec.unit)
    if spec.summary == "rate":
        return RateAccumulator(eval_ms, window_ms, min(grid.recent_s, grid.window_s) * 1000)
    return WindowAccumulator(eval_ms, window_ms, spec.unit)


def summary_from(spec: MetricSpec, labels: Mapping[str, str], acc: BucketAccumulator | WindowAccumulator | RateAccumulator,
                 file: str = "") -> SeriesSummary | None:
    """The summary of one accumulated series (None when the window holds none of its samples).

    A window statistic (not time-resolved) with an unreadable sample is unreadable as a whole (count 0),
    as Prometheus's sum over it would show; a time-resolved one loses only the bucket (see `sources.window`).
    `file` names the recording in a problem's `where` (with the line of the first unreadable sample).
    """
    samples = acc.count if isinstance(acc, RateAccumulator) else acc.samples()
    if not samples:
        return None
    bad = None if isinstance(acc, RateAccumulator) else acc.first_bad  # a rate keeps no unreadable sample
    problem = (f"{file}:{bad[0]}" if file and bad[0] else "", bad[1]) if bad else None
    stats: WindowStats | None
    if isinstance(acc, BucketAccumulator):
        stats = acc.stats()
    elif isinstance(acc, RateAccumulator):
        rate = acc.rate()
        stats = None if rate is None else rate_stats(rate, count=acc.count, resets=acc.resets, recent_count=acc.recent)
    elif acc.bad:
        stats = neutral_stats(spec, {"count": 0, "unreadable": acc.count + acc.bad})
    else:
        stats = neutral_stats(spec, {"count": acc.count, "sum": acc.total, "max": acc.max, "changes": acc.changes})
    return SeriesSummary(spec, clean_labels(labels), samples, stats, problem)


def summarise_samples(
    spec: MetricSpec,
    labels: Mapping[str, str],
    timestamps_ms: Sequence[int],
    values: Sequence[float],
    *,
    eval_ms: int,
    window_ms: int,
    recent_ms: int | None = None,
    grid: BucketGrid | None = None,
) -> SeriesSummary | None:
    """Summarise one in-memory series exactly as the PromQL plan does; None when the window holds no sample.

    `recent_ms` is kept for callers of the earlier signature: the recent tail follows the grid.
    """
    grid = grid or BucketGrid(datetime.fromtimestamp(eval_ms / 1000, tz=UTC), window_ms // 1000)
    acc = accumulator_for(spec, grid)
    for t, v in zip(timestamps_ms, values, strict=True):
        acc.add(t, v)
    return summary_from(spec, labels, acc)


#: Sample spacings (seconds) an inferred spacing snaps to when within 5 % of one.
COMMON_SPACINGS_S: tuple[float, ...] = (1, 5, 10, 15, 20, 30, 60, 120, 180, 300, 600, 900, 1800, 3600)


def infer_spacing(summaries: Iterable[SeriesSummary], grid: BucketGrid) -> float | None:
    """The sample spacing (seconds) the data shows, from the buckets both telemetry paths produce identically.

    Dense data (most buckets hold 2 samples or more): the bucket width ÷ the most common sample count of a
    non-empty bucket over every time-resolved GPU series (partly filled buckets at a series' start, end or
    gap are rare next to the full ones). Sparse data (e.g. a 5-minute export in 1-minute buckets): the
    median over series of the time between their first and last non-empty bucket ÷ (samples − 1).
    Snapped to a common scrape interval within 10 %; None when no series tells.
    """
    counts: Counter[int] = Counter()
    sparse: list[float] = []
    for s in summaries:
        st = s.stats
        if st is None or not st.buckets or s.spec.scope != "gpu" or st.count < 2:
            continue
        filled = [k for k, b in enumerate(st.buckets) if b.count]
        counts.update(st.buckets[k].count for k in filled)
        if len(filled) >= 2:
            sparse.append((filled[-1] - filled[0]) * grid.bucket_s / (st.count - 1))
    if not counts:
        return None
    typical = max(counts.items(), key=lambda kv: (kv[1], kv[0]))[0]
    if typical >= 2:
        raw = grid.bucket_s / typical
    elif sparse:
        raw = statistics.median(sparse)
    else:
        return None
    for common in COMMON_SPACINGS_S:
        if abs(raw - common) <= 0.1 * common:
            return float(common)
    return round(raw, 1)


def _order(s: SeriesSummary) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (s.spec.name, tuple(sorted(s.labels.items())))

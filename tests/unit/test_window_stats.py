"""sources/window.py against hand-computed values (Prometheus 2.x range semantics), WindowStats.merge, coverage."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta

import pydantic
import pytest

from gpuwaste.join import join
from gpuwaste.models.cluster import ClusterState, Pod, PodPhase, Workload
from gpuwaste.models.telemetry import (
    STATS_FIELDS_SET,
    Bucket,
    BucketGrid,
    TelemetryWindow,
    WindowStats,
    bucket_seconds,
    stats_from_buckets,
    stats_from_columns,
)
from gpuwaste.models.telemetry import window_stats as unvalidated_stats
from gpuwaste.sources.window import quantile, window_stats

BASE_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z, a multiple of 10 minutes
MIN = 60_000


def test_window_stats_window_is_left_open_and_right_closed():
    # GIVEN samples every minute from 0 to 10 minutes, values = minute index
    ts = [BASE_MS + i * MIN for i in range(11)]
    vals = [float(i) for i in range(11)]
    # WHEN summarised over (10m − 5m, 10m]
    st = window_stats(ts, vals, eval_ms=BASE_MS + 10 * MIN, window_ms=5 * MIN, recent_ms=5 * MIN)
    # THEN minutes 6..10 are selected (5 samples): the sample exactly at t − window is outside, as `[5m − 1ms]` selects
    assert st is not None
    assert (st.count, st.total, st.min, st.max) == (5, 40.0, 6.0, 10.0)


def test_window_stats_empty_window_is_none():
    # GIVEN samples only before the window
    ts = [BASE_MS, BASE_MS + MIN]
    # WHEN the window starts after them
    st = window_stats(ts, [1.0, 2.0], eval_ms=BASE_MS + 10 * MIN, window_ms=5 * MIN, recent_ms=MIN)
    # THEN no summary (missing is unknown, never 0)
    assert st is None


def test_window_stats_quantile_interpolates_like_prometheus():
    # GIVEN five values 1..5 and q = 0.95 → rank 0.95 × 4 = 3.8
    # WHEN the quantile is taken
    q = quantile(0.95, [5.0, 1.0, 3.0, 2.0, 4.0])
    # THEN 4 × 0.2 + 5 × 0.8 = 4.8; one value → itself; none → NaN; q = 0 / 1 → min / max
    assert math.isclose(q, 4.8)
    assert quantile(0.95, [7.0]) == 7.0
    assert math.isnan(quantile(0.95, []))
    assert (quantile(0.0, [3.0, 1.0, 2.0]), quantile(1.0, [3.0, 1.0, 2.0])) == (1.0, 3.0)


def test_window_stats_changes_and_recent_count():
    # GIVEN values 1,1,2,2,1,1,1 every 30 s
    ts = [BASE_MS + i * 30_000 for i in range(7)]
    vals = [1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 1.0]
    # WHEN summarised with a 60 s recent tail
    st = window_stats(ts, vals, eval_ms=ts[-1], window_ms=10 * MIN, recent_ms=60_000)
    # THEN changes = 2 (1→2, 2→1) and the last 60 s (left-open) hold 2 samples
    assert st is not None and (st.changes, st.recent_count) == (2, 2)


def _grid(eval_ms: int, window_min: int) -> BucketGrid:
    return BucketGrid(datetime.fromtimestamp(eval_ms / 1000, tz=UTC), window_min * 60)


def test_buckets_tile_the_window_back_from_the_evaluation_time_off_the_clock_grid():
    # GIVEN samples every minute and an evaluation time 3.5 minutes past a 5-minute boundary, 1 h window (5-min buckets)
    eval_ms = BASE_MS + 63 * MIN + 30_000
    ts = [BASE_MS + i * MIN for i in range(0, 70)]
    vals = [float(i) for i in range(0, 70)]
    # WHEN the series is summarised time-resolved
    st = window_stats(ts, vals, eval_ms=eval_ms, window_ms=60 * MIN, recent_ms=10 * MIN, grid=_grid(eval_ms, 60))
    # THEN 12 buckets end at T, T − 5 min, …; the first starts exactly at the window start (3.5 min past the hour)
    assert st is not None and len(st.buckets) == 12
    assert st.buckets[-1].end == datetime.fromtimestamp(eval_ms / 1000, tz=UTC)
    assert [b.end - a.end for a, b in zip(st.buckets, st.buckets[1:], strict=False)] == [timedelta(minutes=5)] * 11
    # (3.5, 8.5] holds minutes 4..8; the last bucket (58.5, 63.5] minutes 59..63; nothing before the window start
    assert (st.buckets[0].count, st.buckets[0].total, st.buckets[0].max) == (5, 30.0, 8.0)
    assert (st.buckets[-1].count, st.buckets[-1].max) == (5, 63.0)
    assert st.count == 60 and st.total == sum(range(4, 64))


def test_highest_10_minute_average_never_reaches_before_the_window_start():
    # GIVEN a burst in the 10 minutes before a 20-minute window (1-minute buckets), zeros inside it
    ts = [BASE_MS + i * MIN for i in range(-20, 21)]
    vals = [100.0 if -10 <= i <= 0 else 0.0 for i in range(-20, 21)]
    eval_ms = BASE_MS + 20 * MIN
    # WHEN summarised time-resolved
    st = window_stats(ts, vals, eval_ms=eval_ms, window_ms=20 * MIN, recent_ms=MIN, grid=_grid(eval_ms, 20))
    # THEN the burst (and the sample exactly at the window start) is outside: every 10-minute average is 0
    assert st is not None and st.max_avg_10m == 0.0 and st.max == 0.0 and st.count == 20


def test_highest_10_minute_average_is_eval_aligned_over_consecutive_buckets():
    # GIVEN a 1 h window (5-minute buckets) with 10 minutes at 100 % starting 2.5 minutes into a bucket
    eval_ms = BASE_MS + 60 * MIN
    ts = [BASE_MS + i * 30_000 for i in range(1, 121)]
    vals = [100.0 if 25 * 2 < i <= 35 * 2 else 0.0 for i in range(1, 121)]
    # WHEN summarised time-resolved
    st = window_stats(ts, vals, eval_ms=eval_ms, window_ms=60 * MIN, recent_ms=10 * MIN, grid=_grid(eval_ms, 60))
    # THEN the best pair of consecutive 5-minute buckets (25, 35] holds the whole burst: 100
    assert st is not None and st.max_avg_10m == 100.0 and st.p95 == 100.0
    # AND a steady series shows no change; this one does
    assert st.changes > 0


def test_unreadable_sample_empties_its_bucket_and_is_counted():
    # GIVEN a ratio field with one out-of-range sample (1.7) in the second bucket of a 10-minute window (1-minute buckets)
    eval_ms = BASE_MS + 10 * MIN
    ts = [BASE_MS + i * 30_000 for i in range(1, 21)]
    vals = [0.5] * 20
    vals[2] = 1.7
    # WHEN summarised time-resolved with the ratio unit
    st = window_stats(ts, vals, eval_ms=eval_ms, window_ms=10 * MIN, recent_ms=MIN, grid=_grid(eval_ms, 10), unit="ratio")
    # THEN the whole bucket (2 samples) is unreadable, the others are intact and nothing moved the average
    assert st is not None and st.unreadable == 2 and st.count == 18
    assert st.buckets[1].count == 0 and st.avg == 0.5 and st.max == 0.5


def test_bucket_width_adapts_to_the_window():
    # GIVEN windows from 10 minutes to 7 days
    # WHEN the bucket width is chosen
    widths = {w: bucket_seconds(w) for w in (600, 3600, 4 * 3600, 86400, 7 * 86400)}
    # THEN minutes for short windows, hours for a week, 12–48 buckets, always tiling the window exactly
    assert widths == {600: 60, 3600: 300, 14400: 600, 86400: 3600, 604800: 14400}
    for w, b in widths.items():
        assert w % b == 0 and 10 <= w // b <= 48


def test_window_stats_merge_combines_two_summaries():
    # GIVEN two summaries of one GPU signal (before and after an exporter restart)
    a = WindowStats(count=10, total=20.0, max=5.0, min=1.0, p95=4.5, max_avg_10m=3.0, recent_count=0, changes=2)
    b = WindowStats(count=5, total=50.0, max=12.0, min=8.0, p95=11.8, max_avg_10m=None, recent_count=5, changes=1)
    # WHEN merged
    m = a.merge(b)
    # THEN counts, totals and changes add; extremes and p95 / 10-min peak take the larger; None is ignored
    assert (m.count, m.total, m.max, m.min, m.p95, m.max_avg_10m, m.recent_count, m.changes, m.series) == (
        15, 70.0, 12.0, 1.0, 11.8, 3.0, 5, 3, 2)
    assert math.isclose(m.avg, 70 / 15)
    assert WindowStats(count=0, total=0.0, max=0.0, min=0.0, p95=0.0).avg == 0.0


def _ctx(started: datetime | None):
    eval_time = datetime(2024, 1, 1, 2, 0, tzinfo=UTC)
    pod = Pod(namespace="ml", name="p", phase=PodPhase.RUNNING, node_name="n", gpu_requests={"nvidia.com/gpu": 1},
              workload=Workload(kind="Pod", name="p", namespace="ml"), started_at=started)
    cluster = ClusterState(cluster="c", observed_at=eval_time, pods=(pod,))
    tel = TelemetryWindow(cluster="c", eval_time=eval_time, window_s=3600, scrape_interval_s=30.0)
    return join(cluster, tel), pod


def test_window_coverage_is_shortened_to_the_pod_lifetime():
    # GIVEN a 1 h window at 30 s and a pod started 30 min before the evaluation time
    ctx, pod = _ctx(datetime(2024, 1, 1, 1, 30, tzinfo=UTC))
    sixty = WindowStats(count=60, total=0.0, max=0.0, min=0.0, p95=0.0)
    thirty = WindowStats(count=30, total=0.0, max=0.0, min=0.0, p95=0.0)
    # WHEN coverage is computed
    # THEN 60 samples are expected from its lifetime (not 120): 60 → 1.0, 30 → 0.5; the whole window expects 120
    assert ctx.expected_samples(pod) == 60.0
    assert (ctx.coverage(sixty, pod), ctx.coverage(thirty, pod)) == (1.0, 0.5)
    assert ctx.expected_samples() == 120.0 and ctx.coverage(sixty) == 0.5
    assert ctx.coverage(None, pod) == 0.0


def test_window_coverage_of_pod_started_before_the_window_uses_the_whole_window():
    # GIVEN a pod started 3 h before the evaluation time
    ctx, pod = _ctx(datetime(2024, 1, 1, 1, 0, tzinfo=UTC) - timedelta(hours=2))
    many = WindowStats(count=240, total=0.0, max=0.0, min=0.0, p95=0.0)
    # WHEN coverage is computed
    # THEN 120 samples are expected and duplicates cannot push coverage above 1
    assert ctx.expected_samples(pod) == 120.0
    assert ctx.coverage(many, pod) == 1.0


def test_one_pass_column_statistics_equal_the_bucket_statistics_for_every_window_shape():
    # GIVEN random readable bucket columns (gaps, constant runs, repeated maxima) over windows of 10 min to 7 days
    rng = random.Random(13)
    at = datetime(2024, 1, 1, 1, 20, tzinfo=UTC)
    for window_s in (600, 3600, 4 * 3600, 86400, 7 * 86400):
        grid = BucketGrid(at, window_s)
        for _ in range(200):
            counts = [float(rng.choice((0, 0, 1, 2, 10))) for _ in grid.ends]
            flat = rng.random() < 0.3
            maxes = [rng.choice((0.5, 0.25)) if flat else rng.random() for _ in grid.ends]
            totals = [m * c if flat or rng.random() < 0.2 else m * c * rng.random() for m, c in zip(maxes, counts, strict=True)]
            totals = [t if c else 0.0 for t, c in zip(totals, counts, strict=True)]
            buckets = tuple(Bucket(e, int(c), t if c else 0.0, m if c else 0.0)
                            for e, c, t, m in zip(grid.ends, counts, totals, maxes, strict=True))
            # WHEN both summarise them
            one_pass = stats_from_columns(grid, counts, totals, maxes)
            # THEN every statistic, bucket and dump is the same (the same floats added in the same order)
            assert one_pass == stats_from_buckets(buckets, grid)
            assert one_pass.model_dump() == stats_from_buckets(buckets, grid).model_dump()


def test_unvalidated_window_stats_equal_the_pydantic_construct():
    # GIVEN the values of a summary
    values = {"count": 3, "total": 1.5, "max": 0.75, "min": 0.0, "p95": 0.7, "max_avg_10m": 0.6, "recent_count": 2, "changes": 1,
              "series": 1, "live_series": 1, "buckets": (), "unreadable": 0}
    # WHEN built without validation and by pydantic's model_construct
    fast = unvalidated_stats(**values)
    slow = WindowStats.model_construct(_fields_set=STATS_FIELDS_SET, **values)
    # THEN they are equal, dump alike, and the frozen model still refuses changes
    assert fast == slow and fast.model_dump() == slow.model_dump() and fast.avg == 0.5
    assert fast.model_fields_set == slow.model_fields_set
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        fast.count = 4  # type: ignore[misc]

"""sources/window.py against hand-computed values (Prometheus 2.x range semantics), WindowStats.merge, coverage."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from gpuwaste.detectors.context import build_context
from gpuwaste.models.cluster import ClusterState, Pod, PodPhase, Workload
from gpuwaste.models.telemetry import TelemetryWindow, WindowStats
from gpuwaste.sources.window import quantile, window_stats

BASE_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z, a multiple of 10 minutes
MIN = 60_000


def test_window_stats_window_ends_are_both_inclusive():
    # GIVEN samples every minute from 0 to 10 minutes, values = minute index
    ts = [BASE_MS + i * MIN for i in range(11)]
    vals = [float(i) for i in range(11)]
    # WHEN summarised over [10m − 5m, 10m]
    st = window_stats(ts, vals, eval_ms=BASE_MS + 10 * MIN, window_ms=5 * MIN, recent_ms=5 * MIN)
    # THEN minutes 5..10 are selected (6 samples): the sample exactly at t − window is inside
    assert st is not None
    assert (st.count, st.total, st.min, st.max) == (6, 45.0, 5.0, 10.0)


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


def test_window_stats_p95_of_twenty_samples_with_one_spike():
    # GIVEN 20 samples: 19 zeros and one 100 → rank 0.95 × 19 = 18.05 → 0 × 0.95 + 100 × 0.05
    ts = [BASE_MS + i * 30_000 for i in range(20)]
    vals = [0.0] * 19 + [100.0]
    # WHEN summarised
    st = window_stats(ts, vals, eval_ms=ts[-1], window_ms=20 * MIN, recent_ms=MIN)
    # THEN p95 = 5.0 (one stray sample does not make the window busy)
    assert st is not None and math.isclose(st.p95, 5.0)


def test_window_stats_changes_and_recent_count():
    # GIVEN values 1,1,2,2,1,1,1 every 30 s
    ts = [BASE_MS + i * 30_000 for i in range(7)]
    vals = [1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 1.0]
    # WHEN summarised with a 60 s recent tail
    st = window_stats(ts, vals, eval_ms=ts[-1], window_ms=10 * MIN, recent_ms=60_000)
    # THEN changes = 2 (1→2, 2→1) and the last 60 s (inclusive) hold 3 samples
    assert st is not None and (st.changes, st.recent_count) == (2, 3)


def test_window_stats_ten_minute_steps_are_aligned_to_the_epoch():
    # GIVEN samples every minute from −30 min to +25 min around BASE (aligned), all 0 except 10 at +20 min and 50 at +24 min
    ts = [BASE_MS + i * MIN for i in range(-30, 26)]
    vals = [10.0 if i == 20 else 50.0 if i == 24 else 0.0 for i in range(-30, 26)]
    # WHEN summarised over a 30-minute window ending at +25 min
    st = window_stats(ts, vals, eval_ms=BASE_MS + 25 * MIN, window_ms=30 * MIN, recent_ms=10 * MIN)
    # THEN the steps are at +0, +10, +20 (first multiple of 10 min ≥ −5 min); the +20 step averages [+10, +20]
    # inclusive = 11 samples holding the 10 → 10/11; the spike at +24 lies after the last step and is not in any
    assert st is not None and math.isclose(st.max_avg_10m, 10 / 11)
    assert st.max == 50.0


def test_window_stats_ten_minute_step_at_window_start_when_aligned():
    # GIVEN a window that starts exactly on a 10-minute boundary, with a burst in the 10 minutes before it
    ts = [BASE_MS + i * MIN for i in range(-20, 21)]
    vals = [100.0 if -10 <= i < 0 else 0.0 for i in range(-20, 21)]
    # WHEN summarised over [0, +20]
    st = window_stats(ts, vals, eval_ms=BASE_MS + 20 * MIN, window_ms=20 * MIN, recent_ms=MIN)
    # THEN the step at 0 is evaluated and reaches back 10 min (as the PromQL subquery does): 10 of 11 samples at 100
    assert st is not None and math.isclose(st.max_avg_10m, 1000 / 11)
    assert st.count == 21 and st.max == 0.0  # the window's own samples are all 0


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
    return build_context(cluster, tel), pod


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

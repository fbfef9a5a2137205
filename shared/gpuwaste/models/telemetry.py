"""Models: GPU telemetry summarised over a scan window, per physical GPU or MIG instance.

Every value keeps its DCGM unit as exported; `Signal.to_ratio` converts activity fields to a 0–1 ratio
(`DCGM_FI_DEV_*_UTIL` are percent 0–100, `DCGM_FI_PROF_*` are ratios 0–1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from pydantic import Field, model_validator

from gpuwaste.models.base import Frozen
from gpuwaste.models.dra import DraDeviceLabels
from gpuwaste.models.signals import Signal as Signal  # re-exported: callers read the signal names here too

#: Every other name an exporter may publish a `Signal` under, with the value in the same unit (one table, read by the
#: plan, the recording path, the recording rules, `doctor` and the Grafana dashboard). Sources:
#: * DCGM 4.x field names (DCGM 4.6.0 `dcgmlib/dcgm_fields.h`, its block of deprecated aliases, e.g.
#:   `#define DCGM_FI_PROF_SM_ACTIVE DCGM_FI_PROF_SM_UTIL_RATIO // 1002`; go-dcgm 4.6.1 `pkg/dcgm/const_fields.go`): the
#:   same field id, so the same type and unit. `DCGM_FI_DEV_GPU_UTIL_RATIO` is field 203, INT64 **percent** 0–100
#:   (`dcgm_fields.cpp` declares it `DCGM_FT_INT64`), despite its name; the `_RATIO` profiling fields are the
#:   0–1 ratios they always were. A dcgm-exporter CSV row names the metric, so a CSV written with the new names
#:   exports them (the shipped `default-counters.csv` still uses the old ones).
#: * dcgm-exporter 1.x compatibility names (`dcgm_gpu_utilization`, …; go-dcgm's lower-case legacy map).
#: Lower-cased spellings of each (Azure Managed Prometheus) are added by the plan.
DCGM_ALIASES: dict[Signal, tuple[str, ...]] = {
    Signal.SM_ACTIVE: ("DCGM_FI_PROF_SM_UTIL_RATIO",),
    Signal.GR_ENGINE_ACTIVE: ("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",),
    Signal.GPU_UTIL: ("DCGM_FI_DEV_GPU_UTIL_RATIO", "dcgm_gpu_utilization"),
    Signal.TENSOR_ACTIVE: ("DCGM_FI_PROF_TENSOR_UTIL_RATIO",),
    Signal.DRAM_ACTIVE: ("DCGM_FI_PROF_DRAM_UTIL_RATIO",),
    Signal.MEM_COPY_UTIL: ("dcgm_mem_copy_utilization",),
    Signal.FB_USED: ("dcgm_fb_used",),
    Signal.FB_FREE: ("dcgm_fb_free",),
    Signal.POWER_USAGE: ("DCGM_FI_DEV_BOARD_POWER_WATTS", "dcgm_power_usage"),
    Signal.POWER_LIMIT: ("DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS",),
    Signal.POWER_MGMT_LIMIT: ("DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS",),
    Signal.TOTAL_ENERGY: ("dcgm_total_energy_consumption",),
}


def exported_names(signal: Signal) -> tuple[str, ...]:
    """Every metric name `signal` may be exported under: its name, the `DCGM_ALIASES`, and each lower-cased, without repeats."""
    names: list[str] = []
    for n in (signal.value, *DCGM_ALIASES.get(signal, ())):
        names.extend((n, n.lower()))
    return tuple(dict.fromkeys(names))


#: Readable values per unit (inclusive; a small tolerance above the nominal maximum): ratio 0–1 (DCGM PROF
#: ratios can read a hair above 1), percent 0–100, plausible physical ceilings for MiB and W, and below
#: the DCGM double blank (2**47) for the energy counter. Outside: the sample is unreadable.
READABLE_RANGE: dict[str, tuple[float, float]] = {
    "ratio": (0.0, 1.01),
    "percent": (0.0, 101.0),
    "MiB": (0.0, 16_777_216.0),
    "W": (0.0, 10_000.0),
    "mJ": (0.0, 140737488355328.0),
}


def readable(unit: str, value: float) -> bool:
    """True when `value` is a usable sample of a field in `unit` (finite and inside `READABLE_RANGE`)."""
    if value != value or value in (math.inf, -math.inf):
        return False
    lo, hi = READABLE_RANGE.get(unit, (-math.inf, math.inf))
    return lo <= value <= hi


#: DCGM fields read time-resolved (`WindowStats.buckets`): the activity signals and what tells work from a
#: stall (tensor, DRAM, power). Their window statistics are derived from the buckets.
TIME_RESOLVED: frozenset[Signal] = frozenset(
    {Signal.SM_ACTIVE, Signal.GR_ENGINE_ACTIVE, Signal.GPU_UTIL, Signal.TENSOR_ACTIVE, Signal.DRAM_ACTIVE, Signal.POWER_USAGE}
)
_RESOLVED_STATS = ("count", "sum", "max", "p95", "max_avg_10m", "recent", "changes")

#: The window statistics summarised per DCGM field. The Prometheus plan and the recording path compute
#: exactly these; evidence shows only these (a statistic not summarised is shown as unknown, never as a
#: made-up number). `min` is summarised for none (the plan asks for count, sum and max only).
SUMMARY_STATS: dict[Signal, tuple[str, ...]] = {
    **dict.fromkeys(TIME_RESOLVED, _RESOLVED_STATS),
    Signal.MEM_COPY_UTIL: ("count", "sum", "max"),
    Signal.FB_USED: ("count", "sum", "max"),
    Signal.FB_FREE: ("count", "sum", "max"),
    Signal.POWER_LIMIT: ("count", "sum", "max"),
    Signal.POWER_MGMT_LIMIT: ("count", "sum", "max"),
    Signal.TOTAL_ENERGY: ("count", "changes"),
}


def summarises(signal: Signal, stat: str) -> bool:
    """True when `stat` ("p95", "min", …) is computed for `signal` (see `SUMMARY_STATS`)."""
    stats = SUMMARY_STATS.get(signal)
    return stats is None or stat in stats


#: Activity signals in order of preference (field guide B04, B15): SM_ACTIVE, GR_ENGINE_ACTIVE, GPU_UTIL.
ACTIVITY_SIGNALS: tuple[Signal, ...] = (Signal.SM_ACTIVE, Signal.GR_ENGINE_ACTIVE, Signal.GPU_UTIL)


class Bucket(NamedTuple):
    """Statistics of one signal's samples inside one bucket of the window, in the signal's exported unit.

    Buckets tile the window backwards from the evaluation time: bucket k covers
    `(eval_time - window + k*bucket_s, eval_time - window + (k+1)*bucket_s]` (left-open, right-closed,
    as a PromQL range `[bucket_s - 1ms]` evaluated at the bucket's end), so no bucket reaches outside the
    window. The same numbers come from PromQL (`count_over_time`/`sum_over_time`/`max_over_time` over
    the bucket, or the shipped recording rules) and from a recording computed in Python.

    A compact named tuple (not a model): a scan holds one per signal, device and bucket (10,000 GPUs ×
    6 signals × 12 buckets), so its size matters. Build it with keywords or positionally.

    Attributes:
        end: the bucket's right edge (UTC); the bucket is `(end - bucket_s, end]`.
        count: readable samples in the bucket (0: no data — never "idle").
        total: sum of sample values (avg = total ÷ count).
        max: largest sample (0.0 when count is 0).
    """

    end: datetime
    count: int  # type: ignore[assignment]  # the field shadows tuple.count on purpose (the Bucket vocabulary)
    total: float = 0.0
    max: float = 0.0

    @property
    def avg(self) -> float | None:
        """Mean of the bucket's samples; None when the bucket holds none."""
        return self.total / self.count if self.count else None


#: Bucket widths (seconds) a window is cut into, finest first (see `bucket_seconds`).
BUCKET_WIDTHS_S: tuple[int, ...] = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 14400, 21600, 43200, 86400)
#: Windows the scan accepts (seconds): 10 minutes to 7 days.
MIN_WINDOW_S = 600
MAX_WINDOW_S = 7 * 86400


def bucket_seconds(window_s: int) -> int:
    """The bucket width (seconds) for a window: minutes for an hour, hours for a week.

    The smallest width of `BUCKET_WIDTHS_S` that divides the window into at most 24 buckets (at most 48
    for windows over a day), e.g. 60 s for 10 min, 300 s for 1 h, 900 s for 4 h, 3600 s for 1 d, 14400 s
    (4 h) for 7 d. A window no listed width divides gets the smallest divisor of its length that keeps
    the bucket count within the limit, so buckets always tile the window exactly.
    """
    window_s = int(window_s)
    if window_s <= 0:
        raise ValueError("window_s must be positive")
    most = 48 if window_s > 86400 else 24
    for width in BUCKET_WIDTHS_S:
        if window_s % width == 0 and window_s // width <= most:
            return width
    for width in range(max(1, -(-window_s // most)), window_s + 1):
        if window_s % width == 0:
            return width
    return window_s


class BucketGrid:
    """The bucket ends of one window: `n` buckets of `bucket_s` ending at `eval_time` (see `Bucket`).

    Attributes:
        eval_time: end of the window. window_s: its length. bucket_s: bucket width (`bucket_seconds`).
        ends: the buckets' right edges, oldest first (shared by every series of a scan).
        recent_buckets: how many of the newest buckets make the "recent" tail (at least 10 minutes).
        avg_run: how many consecutive buckets make one "10-minute average" (1 when buckets are ≥ 10 min).
    """

    __slots__ = ("avg_run", "bucket_s", "ends", "eval_time", "recent_buckets", "window_s")

    def __init__(self, eval_time: datetime, window_s: int, bucket_s: int | None = None) -> None:
        self.eval_time = eval_time
        self.window_s = int(window_s)
        self.bucket_s = int(bucket_s or bucket_seconds(self.window_s))
        n = max(1, self.window_s // self.bucket_s)
        self.ends: tuple[datetime, ...] = tuple(eval_time - timedelta(seconds=(n - 1 - k) * self.bucket_s) for k in range(n))
        self.recent_buckets = min(n, -(-RECENT_TAIL_S // self.bucket_s))
        self.avg_run = min(n, max(1, AVG_SPAN_S // self.bucket_s))

    @property
    def recent_s(self) -> int:
        """Length of the recent tail (seconds): whole buckets covering at least 10 minutes."""
        return self.recent_buckets * self.bucket_s

    def empty(self) -> tuple[Bucket, ...]:
        """One empty bucket per end."""
        return tuple(Bucket(e, 0, 0.0, 0.0) for e in self.ends)


#: The staleness tail (seconds) and the span of the "highest 10-minute average" (seconds).
RECENT_TAIL_S = 600
AVG_SPAN_S = 600


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


class DeviceId(Frozen):
    """A physical GPU (UUID) or a MIG GPU instance on it (UUID + GPU_I_ID)."""

    uuid: str
    gpu_i_id: str | None = None

    def __str__(self) -> str:
        return f"{self.uuid}/{self.gpu_i_id}" if self.gpu_i_id else self.uuid


class AttributedSeries(Frozen):
    """The signals of one device while one workload label set was attached to it.

    Attributes:
        pod, namespace, container: workload labels the exporter attached (None when absent or empty).
        label_family: "pod" or "exported_pod" — which labels carried the workload (field guide B02).
        signals: DCGM field name → window summary.
    """

    pod: str | None = None
    namespace: str | None = None
    container: str | None = None
    label_family: str | None = None
    signals: dict[str, WindowStats] = Field(default_factory=dict)


class GpuTelemetry(Frozen):
    """Everything the window shows about one device (physical GPU or MIG instance).

    Attributes:
        hostname: the exporter's `Hostname`/`hostname` label (a node name, an exporter pod name or
            an EC2 instance id; field guide B03).
        parent_signals: on a MIG instance, the whole-GPU signals of its physical GPU.
        is_mig_parent: True for the whole-GPU entity of a GPU split into MIG instances (not allocatable).
        groups: one entry per distinct workload label set seen on the device in the window (B10).
        dra: the distinct `dra_*` label sets seen on the device (claim, driver, pool, device; field guide B25);
            empty when the exporter runs without DRA attribution.
    """

    device: DeviceId
    gpu_index: str | None = None
    model_name: str | None = None
    mig_profile: str | None = None
    hostname: str | None = None
    instances: tuple[str, ...] = ()
    groups: tuple[AttributedSeries, ...] = ()
    parent_signals: dict[str, WindowStats] = Field(default_factory=dict)
    is_mig_parent: bool = False
    dra: tuple[DraDeviceLabels, ...] = ()

    def merged(self, signal: Signal | str) -> WindowStats | None:
        """The signal over the whole window, all label groups merged; None when never sampled.

        On a MIG instance, whole-GPU signals (power, energy) come from the parent GPU, counted once (B06).
        """
        own = _merge_all(g.signals.get(str(signal)) for g in self.groups)
        return own if own is not None else self.parent_signals.get(str(signal))

    def for_workload(self, namespace: str, pod: str, signal: Signal | str) -> WindowStats | None:
        """The signal restricted to samples labelled with this pod; None when none."""
        return _merge_all(
            g.signals.get(str(signal)) for g in self.groups if g.pod == pod and g.namespace == namespace
        )

    @property
    def workloads(self) -> tuple[tuple[str, str], ...]:
        """(namespace, pod) pairs that appear in the labels of this device's series."""
        seen: dict[tuple[str, str], None] = {}
        for g in self.groups:
            if g.pod and g.namespace:
                seen[(g.namespace, g.pod)] = None
        return tuple(seen)


def _merge_all(items: object) -> WindowStats | None:
    out: WindowStats | None = None
    for s in items:  # type: ignore[attr-defined]
        if s is None:
            continue
        out = s if out is None else out.merge(s)
    return out


#: GKE system metric `kubernetes.io/container/accelerator/duty_cycle` as Google Cloud Managed Service for Prometheus names
#: it (the first "/" becomes ":", the others "_"): percent (0–100) of the sample period the container's accelerator was
#: busy, one series per container and accelerator, keyed by the monitored resource's `namespace_name` / `pod_name`
#: (https://cloud.google.com/monitoring/api/metrics_kubernetes, https://cloud.google.com/monitoring/promql/promql-mapping).
#: Read where no dcgm-exporter runs, as a lower-confidence activity signal (`detectors.managed`).
GKE_DUTY_CYCLE = "kubernetes_io:container_accelerator_duty_cycle"
#: The pod labels of a GKE system metric's monitored resource (k8s_container), read where `namespace`/`pod` are absent.
MANAGED_POD_LABELS = ("namespace_name", "pod_name")


class PodTelemetry(Frozen):
    """Pod-level series (container CPU, inference-server metrics) summarised over the window.

    Attributes:
        signals: metric name (e.g. `container_cpu_cfs_throttled_periods_total:rate`,
            `vllm:num_requests_running`) → window summary, every series of the pod merged (a data-parallel server's
            engines together: it serves when any engine serves).
        engines: for a server that exports one series per engine or rank (vLLM's `engine`, SGLang's `dp` / `dp_rank`
            label: `sources.metrics_plan.ENGINE_LABELS`), `"<label>=<value>"` → that engine's own summaries, keyed as
            `signals`; empty when the pod's series carry no such label.
    """

    namespace: str
    pod: str
    signals: dict[str, WindowStats] = Field(default_factory=dict)
    engines: dict[str, dict[str, WindowStats]] = Field(default_factory=dict)


class TelemetryWindow(Frozen):
    """The telemetry of one cluster over one window ending at the evaluation time.

    Attributes:
        eval_time: end of the window (the scheduled event's time, never the wall clock).
        window_s: window length (seconds). recent_s: the tail used for staleness (seconds).
        scrape_interval_s: seconds between samples, used for coverage: inferred from the data when
            `scrape_interval_inferred` (the median spacing of the time-resolved series, see
            `sources.metrics_plan.infer_spacing`), else the configured value.
        metrics_present: metric names that returned any data.
        query_count: PromQL queries issued (0 for recordings).
        single_instant: True when the source holds one sample per series (a bare /metrics scrape).
        bucket_s: width of `WindowStats.buckets` (seconds); None when the source did not resolve time.
        problems: samples or series the source could not use (counted, with where they are).
        plan: how the statistics were read: "recording rules" (the shipped rules' 5-minute series),
            "raw" (PromQL over the raw DCGM series) or "recording" (a file, in Python).
        other_gpus: UUIDs of GPUs seen only on DCGM fields the scan does not read (clocks, temperatures: no
            activity, memory or power field), sorted; counted in the inventory and reported, never judged.
        other_gpu_hosts: UUID of `other_gpus` → the exporter's hostname label on its series, where it carries one (a
            sharded scan counts each such GPU in the shard of its node: `services.shards.shard_telemetry`).
        xid_errors: GPU UUID → the XID error code `DCGM_FI_DEV_XID_ERRORS` last reported in the window (non-zero
            only; 79: the GPU fell off the bus), where the source reads it (recordings).
    """

    cluster: str
    eval_time: datetime
    window_s: int = Field(gt=0)
    recent_s: int = Field(600, gt=0)
    scrape_interval_s: float = Field(30.0, gt=0)
    scrape_interval_inferred: bool = False
    gpus: tuple[GpuTelemetry, ...] = ()
    pods: tuple[PodTelemetry, ...] = ()
    metrics_present: frozenset[str] = frozenset()
    query_count: int = 0
    source: str = ""
    single_instant: bool = False
    bucket_s: int | None = Field(None, gt=0)
    problems: tuple[TelemetryProblem, ...] = ()
    plan: str = ""
    other_gpus: tuple[str, ...] = ()
    other_gpu_hosts: dict[str, str] = Field(default_factory=dict)
    xid_errors: dict[str, int] = Field(default_factory=dict)

    @property
    def unreadable_samples(self) -> int:
        """Samples (or, live, buckets' samples) the source could not use, over every problem."""
        return sum(p.count for p in self.problems)

    @property
    def expected_samples(self) -> float:
        """Samples a fully covered window holds (window ÷ scrape interval)."""
        return self.window_s / self.scrape_interval_s

    def coverage(self, stats: WindowStats | None) -> float:
        """Share 0–1 of the window covered by samples (capped at 1; duplicates can exceed it)."""
        if stats is None:
            return 0.0
        return min(1.0, stats.count / self.expected_samples) if self.expected_samples else 0.0

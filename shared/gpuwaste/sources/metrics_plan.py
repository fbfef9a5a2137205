"""Adapter helper: the declarative list of metrics a scan reads, and how each is summarised over the window.

Both telemetry adapters use this plan — the Prometheus adapter turns it into PromQL (`sources/promql.py`),
the recording adapter computes the same numbers in Python (`sources/window.py`) — so a recording and the
same recording backfilled into Prometheus give identical `TelemetryWindow.gpus` and `.pods`.

Contract (for detectors and for whoever extends the plan):

* **GPU metrics** (`scope="gpu"`): the DCGM fields of `models.telemetry.Signal`, each with the other names
  an exporter may use for it (`models.telemetry.DCGM_ALIASES`: the DCGM 4.x names such as
  `DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO`, the dcgm-exporter 1.x compatibility names such as `dcgm_gpu_utilization`,
  and the lower-cased Azure spellings). Every alias is stored under the canonical name; a series read under an
  alias carries `ALIAS_LABEL` (its lower-cased name) in both telemetry paths, so one field exported under two
  names in one window is two series of the device, merged like two exporters' copies (never one label set twice
  in PromQL, never a doubled scrape rate).

  - **Time-resolved** fields (`models.telemetry.TIME_RESOLVED`: SM, GR engine, GPU_UTIL, tensor, DRAM,
    power) are read as buckets (`WindowStats.buckets`: count, sum and max per bucket of
    `TelemetryWindow.bucket_s`, aligned with the evaluation time, see `models.telemetry.BucketGrid`);
    every window statistic of theirs is derived from the buckets (`models.telemetry.stats_from_buckets`),
    so Prometheus is asked for three statistics per bucket and nothing else (no `quantile_over_time`, no
    subquery, no `min`).
  - The **other** fields get window statistics only: `count`, `sum`, `max` (framebuffer, copy
    utilisation, power limits) or `count`, `changes` (the energy counter: the frozen-exporter check). A
    statistic not computed gets a **neutral value** in `WindowStats` (both adapters fill it identically,
    see `neutral_stats`): `p95` → `max` (an upper bound), `min` → 0.0 (a lower bound), `max_avg_10m` →
    None (unknown; readers fall back to avg or max), `recent_count` → `count` (never looks stale),
    `changes` → 0; for the energy counter `sum` and `max` → 0.0 (never read its avg).

  Rows are grouped into devices by `sources.dcgm.build_gpu_telemetry`.
* **Dropped labels** (GPU metrics only): labels nobody reads (`DROPPED_LABELS`: `pci_bus_id`, `device`,
  `DCGM_FI_DRIVER_VERSION`, `job`, `endpoint`, `service`, …, minus any label the `TelemetryLabels`
  settings name) are removed before merging. The PromQL plan aggregates them away
  (`sum/max/min without (…)`, the same operators as `WindowStats.merge`); the recording path merges
  series that differ only in those labels with `merge_dropped`, the same way (`series` stays 1, as
  Prometheus cannot tell how many raw series it merged).
* **Pod metrics** (`scope="pod"`): cAdvisor container CPU and inference-server series, attributed by
  their `namespace` and `pod` labels (series without both are ignored; cAdvisor's pod-level cgroup
  series, `container=""` or `container="POD"`, are excluded so containers are not counted twice).
  They land in `TelemetryWindow.pods[*].signals` keyed by `MetricSpec.key`:

  - a **gauge** is keyed by its name and read time-resolved like a GPU activity field (buckets, window
    statistics derived from them); several series of one pod are merged with `WindowStats.merge`;
  - a **counter** is keyed by `<name>:rate` and summarised as a per-second rate defined exactly like
    PromQL `rate(x[W])` evaluated once at the window end (Prometheus 2.x `extrapolatedRate`, counter
    resets handled). In that `WindowStats`, `total`, `max`, `min` and `p95` all hold the rate (per
    second) summed over the pod's series (e.g. CPU cores used by all containers), `count` is the raw
    samples in the window, `changes` the counter resets, `recent_count` the samples in the last 10 min,
    `series` the series summed. **Read `.max` (or `.total`), never `.avg`**, for a rate. A counter
    series with fewer than 2 samples in the window has no rate (PromQL drops it) but still counts in
    `metrics_present`.

To add a metric, append a `MetricSpec` to `POD_METRICS` (or `GPU_METRICS`): the PromQL plan, the query
count (one query per spec) and the recording path follow automatically.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, NamedTuple

from gpuwaste.models.settings import TelemetryLabels
from gpuwaste.models.telemetry import (
    SUMMARY_STATS,
    TIME_RESOLVED,
    Bucket,
    BucketGrid,
    GpuTelemetry,
    PodTelemetry,
    Signal,
    TelemetryProblem,
    WindowStats,
    exported_names,
    merge_buckets,
    stats_from_buckets,
    window_stats,
)
from gpuwaste.sources.dcgm import build_gpu_telemetry
from gpuwaste.sources.window import BucketAccumulator, RateAccumulator, WindowAccumulator

MetricKind = Literal["gauge", "counter"]
MetricScope = Literal["gpu", "pod"]

RATE_SUFFIX = ":rate"
POD_SELF_CONTAINERS = ("", "POD")

#: Every window statistic an instant (not time-resolved) summary can compute (PromQL branch names).
ALL_STATS: tuple[str, ...] = ("count", "sum", "max", "changes")
#: The statistics of one bucket (PromQL branch names of the time-resolved queries and recorded rules).
BUCKET_STATS: tuple[str, ...] = ("count", "sum", "max")

#: The label a series read under one of a field's other exported names carries (its lower-cased name), in both
#: telemetry paths: the same GPU's field under two names (an exporter upgraded inside the window, or a second counters
#: CSV exporting the DCGM 4.x names beside the 3.x ones) stays two series, merged per device like two exporters'
#: copies (`WindowStats.merge`: `series` 2, `live_series` says whether they ran side by side), so a sample exported
#: twice is never taken for twice the scrape rate. Series of the canonical name (or its lower-cased form) carry none.
ALIAS_LABEL = "gpuwaste_name"


#: The DCGM 4.x name of GPU_UTIL. DCGM 4.6 gives it to field 203 (INT64 **percent**: `dcgm_fields.cpp`), so its values are
#: whole numbers 0–100; a later DCGM is said to give the name to a DOUBLE 0–1 ratio of the same measurement. Series read
#: under it whose buckets hold fractional sums while no sample exceeds 1 are that ratio (whole-number percent cannot sum
#: to a fraction) and are read ×100 (`_as_percent`), so a busy GPU is never read as 1 % busy.
_GPU_UTIL_RATIO = "dcgm_fi_dev_gpu_util_ratio"


def _as_percent(s: SeriesSummary) -> SeriesSummary:
    """A GPU_UTIL series read under `_GPU_UTIL_RATIO` in percent: as it is when its samples are whole percents, ×100
    when they are a 0–1 ratio (see `_GPU_UTIL_RATIO`). The same test and arithmetic in both telemetry paths."""
    st = s.stats
    if st is None or not st.buckets or st.max > 1.01 or all(float(b.total).is_integer() for b in st.buckets):
        return s
    buckets = tuple(b._replace(total=b.total * 100.0, max=b.max * 100.0) for b in st.buckets)
    scaled = window_stats(
        count=st.count, total=st.total * 100.0, max=st.max * 100.0, min=st.min * 100.0, p95=st.p95 * 100.0,
        max_avg_10m=None if st.max_avg_10m is None else st.max_avg_10m * 100.0, recent_count=st.recent_count,
        changes=st.changes, series=st.series, live_series=st.live_series, buckets=buckets, unreadable=st.unreadable)
    return SeriesSummary(s.spec, s.labels, s.samples, scaled, s.problem)


def alias_tag(spec: MetricSpec, name: str) -> str | None:
    """The `ALIAS_LABEL` value of a series of `spec` read under `name`: its lower-cased name, None for the canonical one."""
    key = name.lower()
    return None if key == spec.name.lower() else key


#: Labels of DCGM series nothing reads; aggregated away before merging (see the module docstring).
DROPPED_LABELS: tuple[str, ...] = (
    "pci_bus_id", "device", "DCGM_FI_DRIVER_VERSION", "DCGM_FI_PROCESS_NAME", "job", "endpoint", "service",
    "err_code", "err_msg",
)


@dataclass(frozen=True)
class MetricSpec:
    """One metric of the plan.

    Attributes:
        name: canonical metric name (the key detectors read).
        kind: "gauge" or "counter" (as the exporter declares it).
        scope: "gpu" (grouped into devices by UUID) or "pod" (grouped by namespace + pod).
        aliases: other names of the same metric; their series are stored under `name`.
        exclude: (label, value) pairs whose series are ignored (an absent label counts as "").
        stats: the window statistics of an instant summary (subset of `ALL_STATS`, always with `count`);
            ignored for a time-resolved metric.
        resolved: read time-resolved (buckets).
        unit: the exported unit for the readable-range check (`models.telemetry.READABLE_RANGE`); None:
            only NaN/Inf are unreadable.
    """

    name: str
    kind: MetricKind
    scope: MetricScope
    aliases: tuple[str, ...] = ()
    exclude: tuple[tuple[str, str], ...] = ()
    stats: tuple[str, ...] = ("count", "sum", "max")
    resolved: bool = False
    unit: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The canonical name followed by every alias."""
        return (self.name, *self.aliases)

    @property
    def computed(self) -> tuple[str, ...]:
        """The statistics this metric's instant summary computes, in `ALL_STATS` order."""
        return tuple(k for k in ALL_STATS if k in self.stats)

    @property
    def summary(self) -> Literal["buckets", "stats", "rate"]:
        """How the window is summarised: "rate" for pod counters, "buckets" when time-resolved, else "stats"."""
        if self.scope == "pod" and self.kind == "counter":
            return "rate"
        return "buckets" if self.resolved else "stats"

    @property
    def key(self) -> str:
        """The key of the summary in `PodTelemetry.signals` / `AttributedSeries.signals`."""
        return self.name + RATE_SUFFIX if self.summary == "rate" else self.name

    def keeps(self, labels: Mapping[str, str]) -> bool:
        """False when the series matches one of the `exclude` pairs."""
        return not any(labels.get(k, "") == v for k, v in self.exclude)


#: The statistics each DCGM field's readers need (detectors and their evidence), see `models.telemetry`.
GPU_STATS: dict[Signal, tuple[str, ...]] = SUMMARY_STATS


def _gpu(signal: Signal) -> MetricSpec:
    kind: MetricKind = "counter" if signal is Signal.TOTAL_ENERGY else "gauge"
    aliases = exported_names(signal)[1:]
    stats = tuple(k for k in ALL_STATS if k in GPU_STATS.get(signal, ALL_STATS))
    return MetricSpec(signal.value, kind, "gpu", aliases, stats=stats, resolved=signal in TIME_RESOLVED, unit=signal.unit)


#: DCGM fields the detectors read, each with every other name it is exported under (`models.telemetry.DCGM_ALIASES`).
GPU_METRICS: tuple[MetricSpec, ...] = tuple(_gpu(s) for s in (
    Signal.SM_ACTIVE, Signal.GR_ENGINE_ACTIVE, Signal.GPU_UTIL, Signal.TENSOR_ACTIVE, Signal.DRAM_ACTIVE, Signal.MEM_COPY_UTIL,
    Signal.FB_USED, Signal.FB_FREE, Signal.POWER_USAGE, Signal.POWER_LIMIT, Signal.POWER_MGMT_LIMIT, Signal.TOTAL_ENERGY,
))

_CADVISOR_EXCLUDE = tuple(("container", c) for c in POD_SELF_CONTAINERS)


def _pod_gauge(name: str) -> MetricSpec:
    return MetricSpec(name, "gauge", "pod", resolved=True)


#: Pod-level series: cAdvisor CPU (starvation) and vLLM / TGI / Triton serving metrics.
POD_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("container_cpu_usage_seconds_total", "counter", "pod", exclude=_CADVISOR_EXCLUDE),
    MetricSpec("container_cpu_cfs_throttled_periods_total", "counter", "pod", exclude=_CADVISOR_EXCLUDE),
    MetricSpec("container_cpu_cfs_periods_total", "counter", "pod", exclude=_CADVISOR_EXCLUDE),
    _pod_gauge("vllm:num_requests_running"),
    _pod_gauge("vllm:num_requests_waiting"),
    _pod_gauge("vllm:kv_cache_usage_perc"),
    _pod_gauge("vllm:gpu_cache_usage_perc"),
    MetricSpec("vllm:num_preemptions_total", "counter", "pod"),
    MetricSpec("vllm:generation_tokens_total", "counter", "pod"),
    MetricSpec("vllm:prompt_tokens_total", "counter", "pod"),
    _pod_gauge("tgi_queue_size"),
    _pod_gauge("tgi_batch_current_size"),
    MetricSpec("nv_inference_queue_duration_us", "counter", "pod"),
    MetricSpec("nv_inference_request_success", "counter", "pod"),
)

#: Labels by which an inference server tells its engines or ranks apart (vLLM data parallel: `engine`; SGLang: `dp`,
#: `dp_rank`): a pod's series are merged into `PodTelemetry.signals` and also kept per engine (`PodTelemetry.engines`).
ENGINE_LABELS: tuple[str, ...] = ("engine", "dp_rank", "dp")

#: The whole plan, in query order.
PLAN: tuple[MetricSpec, ...] = GPU_METRICS + POD_METRICS


def _index(plan: Sequence[MetricSpec]) -> dict[str, MetricSpec]:
    out: dict[str, MetricSpec] = {}
    for spec in plan:
        for n in spec.names:
            if n in out and out[n] is not spec:
                raise ValueError(f"metric name {n!r} appears twice in the plan")
            out[n] = spec
    return out


_BY_NAME = _index(PLAN)


def spec_for(name: str, plan: Sequence[MetricSpec] = PLAN) -> MetricSpec | None:
    """The plan entry a metric name (canonical or alias) belongs to, or None."""
    if plan is PLAN:
        return _BY_NAME.get(name)
    return _index(plan).get(name)


def clean_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Labels without `__name__` and without empty values (Prometheus stores no empty label)."""
    return {k: v for k, v in labels.items() if v and k != "__name__"}


def format_labels(labels: Mapping[str, str]) -> str:
    """`{a="1",b="2"}`: a series' labels as users read them (where a live problem was seen)."""
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


class SeriesSummary(NamedTuple):
    """One series (after the dropped labels are aggregated away) summarised over the window.

    Attributes:
        spec: the plan entry. labels: the series' labels (cleaned, see `clean_labels`).
        samples: samples in the window (readable or not). stats: the summary (None for a counter without
            a rate). problem: (where, reason) of its first unreadable sample, when it had any.
    """

    spec: MetricSpec
    labels: dict[str, str]
    samples: int
    stats: WindowStats | None
    problem: tuple[str, str] | None = None


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


@dataclass(frozen=True)
class WindowParts:
    """What a window's series summaries assemble into (the parts of a `TelemetryWindow`)."""

    gpus: tuple[GpuTelemetry, ...]
    pods: tuple[PodTelemetry, ...]
    metrics_present: frozenset[str]
    single_instant: bool
    problems: tuple[TelemetryProblem, ...] = ()
    spacing_s: float | None = None


def _order(s: SeriesSummary) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (s.spec.name, tuple(sorted(s.labels.items())))


def assemble(
    summaries: Iterable[SeriesSummary], labels: TelemetryLabels | None = None, *, drop: bool = True, grid: BucketGrid | None = None,
    extra_problems: Iterable[TelemetryProblem] = (),
) -> WindowParts:
    """Group series summaries into devices and pods, in a fixed order so both adapters sum floats alike.

    Args:
        summaries: per-series summaries. labels: label-name settings. grid: the window's buckets.
        drop: merge GPU series that differ only in `droppable_labels` first (`merge_dropped`); the
            Prometheus adapter passes False, its queries already aggregated those labels away.
        extra_problems: problems found outside the summaries (e.g. unparseable lines of a recording).
    """
    summaries = list(summaries)
    problems: list[TelemetryProblem] = list(extra_problems)
    for s in summaries:
        if s.stats is not None and s.stats.unreadable and s.problem is not None:
            problems.append(TelemetryProblem(metric=s.spec.name, where=s.problem[0] or format_labels(s.labels), reason=s.problem[1],
                                             count=s.stats.unreadable))
    if drop:
        summaries = merge_dropped(summaries, droppable_labels(labels), grid)
    sorted_labels: dict[int, tuple[tuple[str, str], ...]] = {}  # a live read shares one labels dict between its fields

    def order(s: SeriesSummary) -> tuple[str, tuple[tuple[str, str], ...]]:
        items = sorted_labels.get(id(s.labels))
        if items is None:
            items = sorted_labels[id(s.labels)] = tuple(sorted(s.labels.items()))
        return (s.spec.name, items)

    summaries = [_as_percent(s) if s.labels.get(ALIAS_LABEL) == _GPU_UTIL_RATIO else s for s in summaries]
    ordered = sorted(summaries, key=order)
    rows: list[tuple[str, dict[str, str], WindowStats]] = []
    pods: dict[tuple[str, str], dict[str, WindowStats]] = {}
    engines: dict[tuple[str, str], dict[str, dict[str, WindowStats]]] = {}
    present: set[str] = set()
    single = True
    for s in ordered:
        if s.samples == 0:
            continue
        present.add(s.spec.name)
        if s.samples > 1:
            single = False
        if s.stats is None:
            continue
        if s.spec.scope == "gpu":
            rows.append((s.spec.name, s.labels, s.stats))
            continue
        ns, pod = s.labels.get("namespace"), s.labels.get("pod")
        if not (ns and pod) or not s.spec.keeps(s.labels):
            continue
        sig = pods.setdefault((ns, pod), {})
        targets = [sig]
        engine = next((f"{k}={s.labels[k]}" for k in ENGINE_LABELS if s.labels.get(k)), None)
        if engine is not None:
            targets.append(engines.setdefault((ns, pod), {}).setdefault(engine, {}))
        for target in targets:
            prev = target.get(s.spec.key)
            if prev is None:
                target[s.spec.key] = s.stats
            else:
                target[s.spec.key] = _merge_rates(prev, s.stats) if s.spec.summary == "rate" else prev.merge(s.stats)
    return WindowParts(
        gpus=tuple(build_gpu_telemetry(rows, labels)),
        pods=tuple(PodTelemetry(namespace=ns, pod=p, signals=sig, engines=engines.get((ns, p), {})) for (ns, p), sig in sorted(pods.items())),
        metrics_present=frozenset(present),
        single_instant=single and bool(rows),
        problems=tuple(sorted(problems, key=lambda p: (p.metric, p.where))),
        spacing_s=infer_spacing(ordered, grid) if grid is not None and not single else None,
    )


__all__ = [
    "ALL_STATS",
    "BUCKET_STATS",
    "DROPPED_LABELS",
    "ENGINE_LABELS",
    "GPU_METRICS",
    "GPU_STATS",
    "PLAN",
    "POD_METRICS",
    "MetricSpec",
    "SeriesSummary",
    "WindowParts",
    "assemble",
    "bucketed_stats",
    "ALIAS_LABEL",
    "alias_tag",
    "clean_labels",
    "droppable_labels",
    "format_labels",
    "infer_spacing",
    "merge_dropped",
    "neutral_stats",
    "rate_stats",
    "spec_for",
    "summarise_samples",
    "summary_from",
    "accumulator_for",
]

"""Models: GPU telemetry summarised over a scan window, per physical GPU or MIG instance.

Every value keeps its DCGM unit as exported; `Signal.to_ratio` converts activity fields to a 0–1 ratio
(`DCGM_FI_DEV_*_UTIL` are percent 0–100, `DCGM_FI_PROF_*` are ratios 0–1).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field, model_validator

from gpuwaste.models.base import Frozen
from gpuwaste.models.dra import DraDeviceLabels


class Signal(StrEnum):
    """DCGM fields (dcgm-exporter metric names) the detectors read."""

    SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
    GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
    TENSOR_ACTIVE = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
    DRAM_ACTIVE = "DCGM_FI_PROF_DRAM_ACTIVE"
    MEM_COPY_UTIL = "DCGM_FI_DEV_MEM_COPY_UTIL"
    FB_USED = "DCGM_FI_DEV_FB_USED"
    FB_FREE = "DCGM_FI_DEV_FB_FREE"
    POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
    POWER_LIMIT = "DCGM_FI_DEV_ENFORCED_POWER_LIMIT"
    POWER_MGMT_LIMIT = "DCGM_FI_DEV_POWER_MGMT_LIMIT"
    TOTAL_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"

    @property
    def unit(self) -> str:
        """Unit of the exported value: "ratio", "percent", "MiB", "W" or "mJ"."""
        return _UNITS[self]

    def to_ratio(self, value: float) -> float:
        """Convert an activity value to a 0–1 ratio (percent fields ÷ 100, PROF ratios as-is)."""
        return value / 100.0 if self.unit == "percent" else value

    @property
    def per_gpu_instance(self) -> bool:
        """True when DCGM reports the field per MIG instance (FE_GPU_I/FE_GPU_CI), False for whole-GPU fields."""
        return self in _PER_INSTANCE


_UNITS: dict[Signal, str] = {
    Signal.SM_ACTIVE: "ratio",
    Signal.GR_ENGINE_ACTIVE: "ratio",
    Signal.GPU_UTIL: "percent",
    Signal.TENSOR_ACTIVE: "ratio",
    Signal.DRAM_ACTIVE: "ratio",
    Signal.MEM_COPY_UTIL: "percent",
    Signal.FB_USED: "MiB",
    Signal.FB_FREE: "MiB",
    Signal.POWER_USAGE: "W",
    Signal.POWER_LIMIT: "W",
    Signal.POWER_MGMT_LIMIT: "W",
    Signal.TOTAL_ENERGY: "mJ",
}
_PER_INSTANCE = frozenset(
    {Signal.SM_ACTIVE, Signal.GR_ENGINE_ACTIVE, Signal.TENSOR_ACTIVE, Signal.DRAM_ACTIVE, Signal.FB_USED, Signal.FB_FREE}
)

#: The window statistics summarised per DCGM field (signals not listed get all of them). The Prometheus plan
#: and the recording path compute exactly these; evidence shows only these (a statistic not summarised is
#: shown as unknown, never as a made-up number).
SUMMARY_STATS: dict[Signal, tuple[str, ...]] = {
    Signal.TENSOR_ACTIVE: ("count", "sum", "max", "max_avg_10m"),
    Signal.DRAM_ACTIVE: ("count", "sum", "max", "max_avg_10m"),
    Signal.MEM_COPY_UTIL: ("count", "sum", "max"),
    Signal.FB_USED: ("count", "sum", "max", "max_avg_10m"),
    Signal.FB_FREE: ("count", "sum", "max"),
    Signal.POWER_USAGE: ("count", "sum", "max", "p95", "max_avg_10m"),
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


class Bucket(Frozen):
    """Statistics of one signal's samples inside one bucket of the window, in the signal's exported unit.

    Buckets tile the window backwards from the evaluation time: bucket k covers
    `(eval_time - window + k*bucket_s, eval_time - window + (k+1)*bucket_s]` (left-open, right-closed,
    as a PromQL range `[bucket_s]` evaluated at the bucket's end), so no bucket reaches outside the window.
    The same numbers come from PromQL (`avg_over_time`/`max_over_time`/`count_over_time` over
    `[bucket]`, or the shipped recording rules) and from a recording computed in Python.

    Attributes:
        end: the bucket's right edge (UTC); the bucket is `(end - bucket_s, end]`.
        count: samples in the bucket (0: no data — never "idle").
        total: sum of sample values (avg = total ÷ count).
        max: largest sample (NaN-free; 0.0 when count is 0).
    """

    end: datetime
    count: int = Field(ge=0)
    total: float = 0.0
    max: float = 0.0

    @property
    def avg(self) -> float | None:
        """Mean of the bucket's samples; None when the bucket holds none."""
        return self.total / self.count if self.count else None


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
    """Summary of one signal's samples over the scan window, in the signal's exported unit.

    The same numbers come from PromQL (`sum_over_time`, `count_over_time`, `max_over_time`,
    `min_over_time`, `quantile_over_time(0.95, …)`, `changes`, and the highest of the tumbling
    10-minute `avg_over_time` values) and from a recording computed in Python.

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
        )


def merge_buckets(a: tuple[Bucket, ...], b: tuple[Bucket, ...]) -> tuple[Bucket, ...]:
    """Bucket-wise union of two series of the same GPU signal (counts and totals add, max of maxima)."""
    if not a or not b:
        return a or b
    by_end: dict[datetime, Bucket] = {x.end: x for x in a}
    for y in b:
        x = by_end.get(y.end)
        by_end[y.end] = y if x is None else Bucket(
            end=y.end, count=x.count + y.count, total=x.total + y.total, max=max(x.max, y.max) if x.count and y.count else (x.max if x.count else y.max)
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


class PodTelemetry(Frozen):
    """Pod-level series (container CPU, inference-server metrics) summarised over the window.

    Attributes:
        signals: metric name (e.g. `container_cpu_cfs_throttled_periods_total:rate`,
            `vllm:num_requests_running`) → window summary.
    """

    namespace: str
    pod: str
    signals: dict[str, WindowStats] = Field(default_factory=dict)


class TelemetryWindow(Frozen):
    """The telemetry of one cluster over one window ending at the evaluation time.

    Attributes:
        eval_time: end of the window (the scheduled event's time, never the wall clock).
        window_s: window length (seconds). recent_s: the tail used for staleness (seconds).
        scrape_interval_s: expected seconds between samples, used for coverage.
        metrics_present: metric names that returned any data.
        query_count: PromQL queries issued (0 for recordings).
        single_instant: True when the source holds one sample per series (a bare /metrics scrape).
        bucket_s: width of `WindowStats.buckets` (seconds); None when the source did not resolve time.
        problems: samples or series the source could not use (counted, with where they are).
    """

    cluster: str
    eval_time: datetime
    window_s: int = Field(gt=0)
    recent_s: int = Field(600, gt=0)
    scrape_interval_s: float = Field(30.0, gt=0)
    gpus: tuple[GpuTelemetry, ...] = ()
    pods: tuple[PodTelemetry, ...] = ()
    metrics_present: frozenset[str] = frozenset()
    query_count: int = 0
    source: str = ""
    single_instant: bool = False
    bucket_s: int | None = Field(None, gt=0)
    problems: tuple[TelemetryProblem, ...] = ()

    @property
    def expected_samples(self) -> float:
        """Samples a fully covered window holds (window ÷ scrape interval)."""
        return self.window_s / self.scrape_interval_s

    def coverage(self, stats: WindowStats | None) -> float:
        """Share 0–1 of the window covered by samples (capped at 1; duplicates can exceed it)."""
        if stats is None:
            return 0.0
        return min(1.0, stats.count / self.expected_samples) if self.expected_samples else 0.0

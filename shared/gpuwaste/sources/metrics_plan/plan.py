"""The plan itself: one `MetricSpec` per metric a scan reads, GPU and pod metrics, and the labels dropped.

Also the names a spec is found under (`spec_for`), the label helpers and `SeriesSummary` (one series summarised
over the window), which both telemetry paths produce.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from gpuwaste.models.telemetry import (
    GKE_DUTY_CYCLE,
    SUMMARY_STATS,
    TIME_RESOLVED,
    Signal,
    WindowStats,
    exported_names,
    window_stats,
)

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
    _pod_gauge(GKE_DUTY_CYCLE),
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

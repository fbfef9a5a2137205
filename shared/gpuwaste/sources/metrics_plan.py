"""Adapter helper: the declarative list of metrics a scan reads, and how each is summarised over the window.

Both telemetry adapters use this plan — the Prometheus adapter turns it into PromQL (`sources/promql.py`),
the recording adapter computes the same numbers in Python (`sources/window.py`) — so a recording and the
same recording backfilled into Prometheus give identical `TelemetryWindow.gpus` and `.pods`.

Contract (for detectors and for whoever extends the plan):

* **GPU metrics** (`scope="gpu"`): the DCGM fields of `models.telemetry.Signal`, each with the other names
  an exporter may use for it (lower-cased Azure spellings, the dcgm-exporter 1.x compatibility names
  such as `dcgm_gpu_utilization`, DCGM 4.6 renamed fields such as `DCGM_FI_DEV_GPU_UTIL_RATIO`). Every
  alias is stored under the canonical name. Each is summarised with only the window statistics the
  detectors read (`MetricSpec.stats`, see `GPU_STATS` below): the activity signals (SM, GR engine,
  GPU_UTIL) get all eight (count, sum, max, min, p95, changes, recent count, highest 10-minute average);
  the others get `count`, `sum`, `max` plus what their readers need (e.g. `changes` of the energy
  counter for the frozen-exporter check, `max_avg_10m` of power, tensor and DRAM). A statistic not
  computed gets a **neutral value** in `WindowStats` (both adapters fill it identically, see
  `neutral_stats`): `p95` → `max` (an upper bound), `min` → 0.0 (a lower bound; every such metric is a
  non-negative gauge), `max_avg_10m` → None (unknown; readers fall back to avg or max), `recent_count` →
  `count` (never looks stale), `changes` → 0; and for the energy counter, which only its sample count and
  `changes` are read of, `sum` and `max` → 0.0 (so `avg` reads 0.0: never read it). Rows are grouped into devices by
  `sources.dcgm.build_gpu_telemetry`.
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

  - a **gauge** is keyed by its name and summarised with `WindowStats` like a GPU metric; several
    series of one pod are merged with `WindowStats.merge`;
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

import bisect
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from gpuwaste.models.telemetry import SUMMARY_STATS, GpuTelemetry, PodTelemetry, Signal, WindowStats
from gpuwaste.settings import TelemetryLabels
from gpuwaste.sources.dcgm import build_gpu_telemetry
from gpuwaste.sources.window import counter_rate, counter_resets, window_stats

MetricKind = Literal["gauge", "counter"]
MetricScope = Literal["gpu", "pod"]

RATE_SUFFIX = ":rate"
POD_SELF_CONTAINERS = ("", "POD")

#: Every window statistic a `stats` summary can compute (PromQL branch names, see `sources.promql`).
ALL_STATS: tuple[str, ...] = ("count", "sum", "max", "min", "p95", "changes", "recent", "max_avg_10m")
_BASE_STATS = ("count", "sum", "max")

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
        stats: the window statistics computed for a `stats` summary (subset of `ALL_STATS`, always with
            `count`); empty means all of them.
    """

    name: str
    kind: MetricKind
    scope: MetricScope
    aliases: tuple[str, ...] = ()
    exclude: tuple[tuple[str, str], ...] = ()
    stats: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The canonical name followed by every alias."""
        return (self.name, *self.aliases)

    @property
    def computed(self) -> tuple[str, ...]:
        """The statistics this metric's summary computes, in `ALL_STATS` order."""
        return _computed(self.stats)

    @property
    def summary(self) -> Literal["stats", "rate"]:
        """How the window is summarised: "rate" for pod counters, "stats" otherwise."""
        return "rate" if self.scope == "pod" and self.kind == "counter" else "stats"

    @property
    def key(self) -> str:
        """The key of the summary in `PodTelemetry.signals` / `AttributedSeries.signals`."""
        return self.name + RATE_SUFFIX if self.summary == "rate" else self.name

    def keeps(self, labels: Mapping[str, str]) -> bool:
        """False when the series matches one of the `exclude` pairs."""
        return not any(labels.get(k, "") == v for k, v in self.exclude)


#: The statistics each DCGM field's readers need (detectors and their evidence); absent: all of them.
#: Activity signals: every statistic (idle/under-used verdicts, staleness, frozen exporter). Tensor and
#: DRAM: averages and the highest 10-minute average (stalled, low bandwidth). Framebuffer: average and peak
#: (held memory, right-sizing). Power: average, p95/peak evidence, 10-minute average (power ratio).
#: Limits: the highest value. Energy counter: sample count and `changes` (frozen exporter).
GPU_STATS: dict[Signal, tuple[str, ...]] = SUMMARY_STATS


@functools.cache
def _computed(stats: tuple[str, ...]) -> tuple[str, ...]:
    return ALL_STATS if not stats else tuple(k for k in ALL_STATS if k in stats)


def _gpu(signal: Signal, *aliases: str) -> MetricSpec:
    kind: MetricKind = "counter" if signal is Signal.TOTAL_ENERGY else "gauge"
    names = [signal.value.lower()]
    for a in aliases:
        names.extend((a, a.lower()) if a != a.lower() else (a,))
    uniq = tuple(dict.fromkeys(n for n in names if n != signal.value))
    return MetricSpec(signal.value, kind, "gpu", uniq, stats=GPU_STATS.get(signal, ()))


#: DCGM fields the detectors read, with their 1.x-compatibility and DCGM 4.6 names.
GPU_METRICS: tuple[MetricSpec, ...] = (
    _gpu(Signal.SM_ACTIVE),
    _gpu(Signal.GR_ENGINE_ACTIVE),
    _gpu(Signal.GPU_UTIL, "dcgm_gpu_utilization", "DCGM_FI_DEV_GPU_UTIL_RATIO"),
    _gpu(Signal.TENSOR_ACTIVE),
    _gpu(Signal.DRAM_ACTIVE),
    _gpu(Signal.MEM_COPY_UTIL, "dcgm_mem_copy_utilization"),
    _gpu(Signal.FB_USED, "dcgm_fb_used"),
    _gpu(Signal.FB_FREE, "dcgm_fb_free"),
    _gpu(Signal.POWER_USAGE, "dcgm_power_usage", "DCGM_FI_DEV_BOARD_POWER_WATTS"),
    _gpu(Signal.POWER_LIMIT),
    _gpu(Signal.POWER_MGMT_LIMIT),
    _gpu(Signal.TOTAL_ENERGY, "dcgm_total_energy_consumption"),
)

_CADVISOR_EXCLUDE = tuple(("container", c) for c in POD_SELF_CONTAINERS)

#: Pod-level series: cAdvisor CPU (starvation) and vLLM / TGI / Triton serving metrics.
POD_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("container_cpu_usage_seconds_total", "counter", "pod", exclude=_CADVISOR_EXCLUDE),
    MetricSpec("container_cpu_cfs_throttled_periods_total", "counter", "pod", exclude=_CADVISOR_EXCLUDE),
    MetricSpec("container_cpu_cfs_periods_total", "counter", "pod", exclude=_CADVISOR_EXCLUDE),
    MetricSpec("vllm:num_requests_running", "gauge", "pod"),
    MetricSpec("vllm:num_requests_waiting", "gauge", "pod"),
    MetricSpec("vllm:kv_cache_usage_perc", "gauge", "pod"),
    MetricSpec("vllm:gpu_cache_usage_perc", "gauge", "pod"),
    MetricSpec("vllm:num_preemptions_total", "counter", "pod"),
    MetricSpec("vllm:generation_tokens_total", "counter", "pod"),
    MetricSpec("vllm:prompt_tokens_total", "counter", "pod"),
    MetricSpec("tgi_queue_size", "gauge", "pod"),
    MetricSpec("tgi_batch_current_size", "gauge", "pod"),
    MetricSpec("nv_inference_queue_duration_us", "counter", "pod"),
    MetricSpec("nv_inference_request_success", "counter", "pod"),
)

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


class SeriesSummary(NamedTuple):
    """One raw series summarised over the window (the unit both adapters produce).

    Attributes:
        spec: the plan entry. labels: the series' labels (cleaned, see `clean_labels`).
        samples: samples in the window. stats: the summary (None for a counter without a rate).
    """

    spec: MetricSpec
    labels: dict[str, str]
    samples: int
    stats: WindowStats | None


def droppable_labels(labels: TelemetryLabels | None = None) -> tuple[str, ...]:
    """`DROPPED_LABELS` minus every label the telemetry label settings read (so a custom setting wins)."""
    settings = labels or TelemetryLabels()
    read = {*settings.uuid_labels, *settings.hostname_labels, *settings.gpu_instance_labels,
            *settings.mig_profile_labels, *settings.model_labels}
    return tuple(n for n in DROPPED_LABELS if n not in read)


def neutral_stats(spec: MetricSpec, values: Mapping[str, float], *, series: int = 1) -> WindowStats:
    """A `WindowStats` from the statistics `spec` computes, neutral values for the others.

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
    mx = values["max"] if "max" in computed else 0.0
    m10 = values.get("max_avg_10m") if "max_avg_10m" in computed else None
    return WindowStats(
        count=count,
        total=values["sum"] if "sum" in computed else 0.0,
        max=mx,
        min=values["min"] if "min" in computed else 0.0,
        p95=values["p95"] if "p95" in computed else mx,
        max_avg_10m=m10,
        recent_count=int(values.get("recent", 0)) if "recent" in computed else count,
        changes=int(values.get("changes", 0)) if "changes" in computed else 0,
        series=series,
    )


def _restrict(spec: MetricSpec, stats: WindowStats) -> WindowStats:
    """A full Python summary reduced to what the spec computes (exactly what the PromQL plan returns)."""
    if not spec.stats:
        return stats
    values: dict[str, float] = {"count": stats.count, "sum": stats.total, "max": stats.max, "min": stats.min,
                                "p95": stats.p95, "changes": stats.changes, "recent": stats.recent_count}
    if stats.max_avg_10m is not None:
        values["max_avg_10m"] = stats.max_avg_10m
    return neutral_stats(spec, values, series=stats.series)


def _merge_aggregated(a: WindowStats, b: WindowStats) -> WindowStats:
    """Two summaries merged as `sum/max/min without (…)` merges them in PromQL (one result series)."""
    return a.merge(b).model_copy(update={"series": 1})


def merge_dropped(summaries: Iterable[SeriesSummary], drop: Sequence[str]) -> list[SeriesSummary]:
    """GPU summaries without the `drop` labels, merged when that makes their labels equal (PromQL `without`).

    Pod summaries pass unchanged. Merging follows the plan's aggregation operators: sum of count, sum,
    changes and recent count, max of max, p95 and max_avg_10m, min of min (`WindowStats.merge`).
    """
    if not drop:
        return list(summaries)
    dropped = frozenset(drop)
    out: list[SeriesSummary] = []
    merged: dict[tuple[str, tuple[tuple[str, str], ...]], SeriesSummary] = {}
    for s in sorted(summaries, key=_order):
        if s.spec.scope != "gpu" or s.spec.summary != "stats" or s.stats is None:
            out.append(s)
            continue
        labels = {k: v for k, v in s.labels.items() if k not in dropped}
        key = (s.spec.name, tuple(sorted(labels.items())))
        prev = merged.get(key)
        if prev is None:
            merged[key] = SeriesSummary(s.spec, labels, s.samples, s.stats)
        else:
            assert prev.stats is not None
            merged[key] = SeriesSummary(s.spec, labels, prev.samples + s.samples, _merge_aggregated(prev.stats, s.stats))
    out.extend(merged.values())
    return out


def rate_stats(rate: float, *, count: int, resets: int, recent_count: int) -> WindowStats:
    """The `WindowStats` of one counter series summarised as a rate (see the module docstring)."""
    return WindowStats(count=count, total=rate, max=rate, min=rate, p95=rate, recent_count=recent_count, changes=resets)


def summarise_samples(
    spec: MetricSpec,
    labels: Mapping[str, str],
    timestamps_ms: Sequence[int],
    values: Sequence[float],
    *,
    eval_ms: int,
    window_ms: int,
    recent_ms: int,
) -> SeriesSummary | None:
    """Summarise one recorded series exactly as the PromQL plan does; None when the window holds no sample."""
    if spec.summary == "stats":
        stats = window_stats(timestamps_ms, values, eval_ms=eval_ms, window_ms=window_ms, recent_ms=recent_ms)
        return None if stats is None else SeriesSummary(spec, clean_labels(labels), stats.count, _restrict(spec, stats))
    lo = bisect.bisect_left(timestamps_ms, eval_ms - window_ms)
    hi = bisect.bisect_right(timestamps_ms, eval_ms)
    if hi <= lo:
        return None
    rate = counter_rate(timestamps_ms, values, eval_ms=eval_ms, window_ms=window_ms)
    rstats = None
    if rate is not None:
        recent = hi - max(lo, bisect.bisect_left(timestamps_ms, eval_ms - recent_ms))
        rstats = rate_stats(rate, count=hi - lo, resets=counter_resets(values[lo:hi]), recent_count=max(0, recent))
    return SeriesSummary(spec, clean_labels(labels), hi - lo, rstats)


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


@dataclass(frozen=True)
class WindowParts:
    """What a window's series summaries assemble into (the parts of a `TelemetryWindow`)."""

    gpus: tuple[GpuTelemetry, ...]
    pods: tuple[PodTelemetry, ...]
    metrics_present: frozenset[str]
    single_instant: bool


def _order(s: SeriesSummary) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (s.spec.name, tuple(sorted(s.labels.items())))


def assemble(summaries: Iterable[SeriesSummary], labels: TelemetryLabels | None = None, *, drop: bool = True) -> WindowParts:
    """Group series summaries into devices and pods, in a fixed order so both adapters sum floats alike.

    Args:
        summaries: per-series summaries. labels: label-name settings.
        drop: merge GPU series that differ only in `droppable_labels` first (`merge_dropped`); the
            Prometheus adapter passes False, its queries already aggregated those labels away.
    """
    if drop:
        summaries = merge_dropped(summaries, droppable_labels(labels))
    ordered = sorted(summaries, key=_order)
    rows: list[tuple[str, dict[str, str], WindowStats]] = []
    pods: dict[tuple[str, str], dict[str, WindowStats]] = {}
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
        prev = sig.get(s.spec.key)
        if prev is None:
            sig[s.spec.key] = s.stats
        else:
            sig[s.spec.key] = _merge_rates(prev, s.stats) if s.spec.summary == "rate" else prev.merge(s.stats)
    return WindowParts(
        gpus=tuple(build_gpu_telemetry(rows, labels)),
        pods=tuple(PodTelemetry(namespace=ns, pod=p, signals=sig) for (ns, p), sig in sorted(pods.items())),
        metrics_present=frozenset(present),
        single_instant=single and bool(rows),
    )


__all__ = [
    "ALL_STATS",
    "DROPPED_LABELS",
    "GPU_METRICS",
    "GPU_STATS",
    "PLAN",
    "POD_METRICS",
    "MetricSpec",
    "SeriesSummary",
    "WindowParts",
    "assemble",
    "clean_labels",
    "droppable_labels",
    "merge_dropped",
    "neutral_stats",
    "rate_stats",
    "spec_for",
    "summarise_samples",
]

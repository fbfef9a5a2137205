"""Adapter helper: the declarative list of metrics a scan reads, and how each is summarised over the window.

Both telemetry adapters use this plan — the Prometheus adapter turns it into PromQL (`sources/promql.py`),
the recording adapter computes the same numbers in Python (`sources/window.py`) — so a recording and the
same recording backfilled into Prometheus give identical `TelemetryWindow.gpus` and `.pods`.

Contract (for detectors and for whoever extends the plan):

* **GPU metrics** (`scope="gpu"`): the DCGM fields of `models.telemetry.Signal`, each with the other names
  an exporter may use for it (lower-cased Azure spellings, the dcgm-exporter 1.x compatibility names
  such as `dcgm_gpu_utilization`, DCGM 4.6 renamed fields such as `DCGM_FI_DEV_GPU_UTIL_RATIO`). Every
  alias is stored under the canonical name. They are summarised with the full `WindowStats` (count, sum,
  max, min, p95, changes, recent count, highest 10-minute average), counters included (the data-quality
  detector reads `changes` of the energy counter). Rows are grouped into devices by
  `sources.dcgm.build_gpu_telemetry`.
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from gpuwaste.models.telemetry import GpuTelemetry, PodTelemetry, Signal, WindowStats
from gpuwaste.settings import TelemetryLabels
from gpuwaste.sources.dcgm import build_gpu_telemetry
from gpuwaste.sources.window import counter_rate, counter_resets, window_stats

MetricKind = Literal["gauge", "counter"]
MetricScope = Literal["gpu", "pod"]

RATE_SUFFIX = ":rate"
POD_SELF_CONTAINERS = ("", "POD")


@dataclass(frozen=True)
class MetricSpec:
    """One metric of the plan.

    Attributes:
        name: canonical metric name (the key detectors read).
        kind: "gauge" or "counter" (as the exporter declares it).
        scope: "gpu" (grouped into devices by UUID) or "pod" (grouped by namespace + pod).
        aliases: other names of the same metric; their series are stored under `name`.
        exclude: (label, value) pairs whose series are ignored (an absent label counts as "").
    """

    name: str
    kind: MetricKind
    scope: MetricScope
    aliases: tuple[str, ...] = ()
    exclude: tuple[tuple[str, str], ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The canonical name followed by every alias."""
        return (self.name, *self.aliases)

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


def _gpu(signal: Signal, *aliases: str) -> MetricSpec:
    kind: MetricKind = "counter" if signal is Signal.TOTAL_ENERGY else "gauge"
    names = [signal.value.lower()]
    for a in aliases:
        names.extend((a, a.lower()) if a != a.lower() else (a,))
    uniq = tuple(dict.fromkeys(n for n in names if n != signal.value))
    return MetricSpec(signal.value, kind, "gpu", uniq)


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
        return None if stats is None else SeriesSummary(spec, clean_labels(labels), stats.count, stats)
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


def assemble(summaries: Iterable[SeriesSummary], labels: TelemetryLabels | None = None) -> WindowParts:
    """Group series summaries into devices and pods, in a fixed order so both adapters sum floats alike."""
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
    "GPU_METRICS",
    "PLAN",
    "POD_METRICS",
    "MetricSpec",
    "SeriesSummary",
    "WindowParts",
    "assemble",
    "clean_labels",
    "rate_stats",
    "spec_for",
    "summarise_samples",
]

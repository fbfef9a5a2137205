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

The package, by concern: `plan` (the `MetricSpec` list, the dropped labels, `SeriesSummary`), `summaries`
(neutral statistics, merging, rates, the recording path's accumulators, the sample spacing) and `window` (series
summaries → `WindowParts`). The names other modules use are re-exported here.
"""

from gpuwaste.sources.metrics_plan.plan import (
    ALIAS_LABEL,
    ALL_STATS,
    BUCKET_STATS,
    DROPPED_LABELS,
    ENGINE_LABELS,
    GPU_METRICS,
    GPU_STATS,
    PLAN,
    POD_METRICS,
    MetricSpec,
    SeriesSummary,
    alias_tag,
    clean_labels,
    format_labels,
    spec_for,
)
from gpuwaste.sources.metrics_plan.summaries import (
    accumulator_for,
    bucketed_stats,
    droppable_labels,
    infer_spacing,
    merge_dropped,
    neutral_stats,
    rate_stats,
    summarise_samples,
    summary_from,
)
from gpuwaste.sources.metrics_plan.window import WindowParts, assemble

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

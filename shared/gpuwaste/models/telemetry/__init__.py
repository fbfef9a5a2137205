"""Models: GPU telemetry summarised over a scan window, per physical GPU or MIG instance.

Every value keeps its DCGM unit as exported; `Signal.to_ratio` converts activity fields to a 0–1 ratio
(`DCGM_FI_DEV_*_UTIL` are percent 0–100, `DCGM_FI_PROF_*` are ratios 0–1).

The package, by concern: `names` (the names a signal is exported under, the statistics kept of it), `buckets`
(the window's bucket grid), `stats` (`WindowStats` and how it is derived) and `window` (`GpuTelemetry`,
`PodTelemetry`, `TelemetryWindow`). The names other modules use are re-exported here.
"""

from gpuwaste.models.signals import Signal as Signal  # re-exported: callers read the signal names here too
from gpuwaste.models.telemetry.buckets import (
    AVG_SPAN_S,
    BUCKET_WIDTHS_S,
    MAX_WINDOW_S,
    MIN_WINDOW_S,
    RECENT_TAIL_S,
    Bucket,
    BucketGrid,
    bucket_seconds,
)
from gpuwaste.models.telemetry.names import (
    ACTIVITY_SIGNALS,
    DCGM_ALIASES,
    READABLE_RANGE,
    SUMMARY_STATS,
    TIME_RESOLVED,
    exported_names,
    readable,
    summarises,
)
from gpuwaste.models.telemetry.stats import (
    STATS_FIELDS_SET,
    TelemetryProblem,
    WindowStats,
    merge_buckets,
    stats_from_buckets,
    stats_from_columns,
    window_stats,
)
from gpuwaste.models.telemetry.window import (
    GKE_DUTY_CYCLE,
    MANAGED_POD_LABELS,
    AttributedSeries,
    DeviceId,
    GpuTelemetry,
    PodTelemetry,
    TelemetryWindow,
)

__all__ = [
    "ACTIVITY_SIGNALS",
    "AVG_SPAN_S",
    "BUCKET_WIDTHS_S",
    "DCGM_ALIASES",
    "GKE_DUTY_CYCLE",
    "MANAGED_POD_LABELS",
    "MAX_WINDOW_S",
    "MIN_WINDOW_S",
    "READABLE_RANGE",
    "RECENT_TAIL_S",
    "STATS_FIELDS_SET",
    "SUMMARY_STATS",
    "TIME_RESOLVED",
    "AttributedSeries",
    "Bucket",
    "BucketGrid",
    "DeviceId",
    "GpuTelemetry",
    "PodTelemetry",
    "Signal",
    "TelemetryProblem",
    "TelemetryWindow",
    "WindowStats",
    "bucket_seconds",
    "exported_names",
    "merge_buckets",
    "readable",
    "stats_from_buckets",
    "stats_from_columns",
    "summarises",
    "window_stats",
]

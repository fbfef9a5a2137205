"""Adapter helper: every PromQL expression gpuwaste sends (PromQL lives only here).

The per-scan plan is fixed: one instant query per metric of `sources.metrics_plan.PLAN`, evaluated at
the window end, whatever the number of nodes or pods (26 queries with the bundled plan: 12 GPU, 14
pod). Each query returns all the window statistics of its metric as separate result series told apart
by the label `gpuwaste_stat` (`label_replace(…) or label_replace(…)`), keeping every original label
except `__name__`; series are merged in Python (`sources.dcgm.build_gpu_telemetry`) exactly as the
recording path merges them.

For a `stats` metric (GPU metrics, pod gauges), `gpuwaste_stat` is one of:
`count` (`count_over_time(x[W])`), `sum`, `max`, `min`, `p95` (`quantile_over_time(0.95, …)`),
`changes`, `recent` (`count_over_time(x[R])`, R = min(10 min, W)) and `max_avg_10m`
(`max_over_time(avg_over_time(x[10m])[W:10m])`). For a pod counter (`rate` metric): `rate`
(`rate(x[W])`), `count`, `resets` and `recent`.

A GPU metric asks only for the statistics its `MetricSpec.stats` lists (all eight for the activity
signals, three to five for the others; the rest get neutral values, see `sources.metrics_plan`), and
each branch is aggregated `without` the labels nobody reads (`metrics_plan.droppable_labels`) with the
operator `WindowStats.merge` uses for that statistic (`sum` for count, sum, changes and recent; `max`
for max, p95 and max_avg_10m; `min` for min). The `max_avg_10m` branch is then restricted (`and`) to
series with samples in the window, so a series that ended just before the window cannot lend its
10-minute average to a sibling. Fewer statistics and smaller label sets make the result about a third
of the series and well under half of the bytes at fleet scale (bench/RESULTS.md).

Label values that come from configuration are escaped with `escape_label_value`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from gpuwaste.sources.metrics_plan import ALL_STATS, PLAN, MetricSpec

STAT_LABEL = "gpuwaste_stat"
AVG_STEP_S = 600
RECENT_S = 600

STATS_BRANCHES: tuple[str, ...] = ALL_STATS
#: How each statistic of series that differ only in dropped labels is merged (as `WindowStats.merge`).
MERGE_OPS: dict[str, str] = {"count": "sum", "sum": "sum", "max": "max", "min": "min", "p95": "max", "changes": "sum",
                             "recent": "sum", "max_avg_10m": "max"}
RATE_BRANCHES: tuple[str, ...] = ("rate", "count", "resets", "recent")

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def escape_label_value(value: str) -> str:
    """Escape a value for a double-quoted PromQL string: backslash, double quote and newline.

    Args:
        value: any text (from configuration, never trusted).

    Returns:
        The text to put between double quotes in a PromQL selector.
    """
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _regex_escape(name: str) -> str:
    """Escape a literal for a RE2 regex (metric names only hold `[a-zA-Z0-9_:]`, escaped anyway)."""
    return re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", name)


def selector(names: Sequence[str], matchers: Mapping[str, str] | None = None) -> str:
    """An instant-vector selector for the metric names (aliases via an anchored `__name__` regex).

    Args:
        names: metric names (canonical first). matchers: extra equality matchers `label="value"`
            (values escaped; e.g. a `cluster` label on a shared Prometheus).

    Raises:
        ValueError: a metric or label name that is not a valid Prometheus name.
    """
    for n in names:
        if not _METRIC_NAME.match(n):
            raise ValueError(f"invalid metric name {n!r}")
    parts: list[str] = []
    if len(names) > 1:
        regex = "|".join(_regex_escape(n) for n in names)
        parts.append(f'__name__=~"{escape_label_value(regex)}"')
    for label, value in sorted((matchers or {}).items()):
        if not _LABEL_NAME.match(label):
            raise ValueError(f"invalid label name {label!r}")
        parts.append(f'{label}="{escape_label_value(value)}"')
    head = names[0] if len(names) == 1 else ""
    return f"{head}{{{','.join(parts)}}}" if parts else head


def _tag(expr: str, stat: str) -> str:
    return f'label_replace({expr}, "{STAT_LABEL}", "{stat}", "", "")'


def _label_list(drop: Sequence[str]) -> str:
    for label in drop:
        if not _LABEL_NAME.match(label):
            raise ValueError(f"invalid label name {label!r}")
    return ", ".join(drop)


def stats_query(
    sel: str,
    *,
    window_s: int,
    recent_s: int = RECENT_S,
    avg_step_s: int = AVG_STEP_S,
    stats: Sequence[str] = STATS_BRANCHES,
    drop: Sequence[str] = (),
) -> str:
    """The window statistics `stats` of a gauge-like metric in one query (one result series per stat).

    Args:
        sel: the selector. window_s: the window (seconds). stats: statistics to compute (`STATS_BRANCHES`
            order is kept). drop: labels aggregated away (`MERGE_OPS[stat]` without (…)); none by default.

    Raises:
        ValueError: a dropped label that is not a valid label name.
    """
    w = f"[{int(window_s)}s]"
    r = f"[{min(int(recent_s), int(window_s))}s]"
    branches = {
        "count": f"count_over_time({sel}{w})",
        "sum": f"sum_over_time({sel}{w})",
        "max": f"max_over_time({sel}{w})",
        "min": f"min_over_time({sel}{w})",
        "p95": f"quantile_over_time(0.95, {sel}{w})",
        "changes": f"changes({sel}{w})",
        "recent": f"count_over_time({sel}{r})",
        "max_avg_10m": f"max_over_time(avg_over_time({sel}[{int(avg_step_s)}s])[{int(window_s)}s:{int(avg_step_s)}s])",
    }
    wanted = [k for k in STATS_BRANCHES if k in stats]
    if drop:
        labels = _label_list(drop)
        branches["max_avg_10m"] = f"({branches['max_avg_10m']} and {branches['count']})"
        branches = {k: f"{MERGE_OPS[k]} without ({labels}) ({v})" for k, v in branches.items()}
    return " or ".join(_tag(branches[k], k) for k in wanted)


def rate_query(sel: str, *, window_s: int, recent_s: int = RECENT_S) -> str:
    """Rate, sample count, resets and recent count of a counter in one query."""
    w = f"[{int(window_s)}s]"
    r = f"[{min(int(recent_s), int(window_s))}s]"
    branches = {
        "rate": f"rate({sel}{w})",
        "count": f"count_over_time({sel}{w})",
        "resets": f"resets({sel}{w})",
        "recent": f"count_over_time({sel}{r})",
    }
    return " or ".join(_tag(branches[k], k) for k in RATE_BRANCHES)


def metric_query(spec: MetricSpec, *, window_s: int, matchers: Mapping[str, str] | None = None, drop: Sequence[str] = ()) -> str:
    """The one query of a plan entry (`drop`: labels aggregated away, GPU metrics only)."""
    sel = selector(spec.names, matchers)
    if spec.summary == "rate":
        return rate_query(sel, window_s=window_s)
    return stats_query(sel, window_s=window_s, stats=spec.computed, drop=drop if spec.scope == "gpu" else ())


def scan_queries(
    *, window_s: int, matchers: Mapping[str, str] | None = None, plan: Sequence[MetricSpec] = PLAN, drop: Sequence[str] = ()
) -> list[tuple[MetricSpec, str]]:
    """The fixed per-scan query plan: (plan entry, PromQL), one per entry, independent of fleet size.

    Args:
        drop: labels aggregated away from GPU metrics (the Prometheus adapter passes
            `metrics_plan.droppable_labels(settings)`); none by default.
    """
    return [(spec, metric_query(spec, window_s=window_s, matchers=matchers, drop=drop)) for spec in plan]


def raw_samples_query(spec: MetricSpec, *, range_s: int, matchers: Mapping[str, str] | None = None) -> str:
    """A range-vector selector returning the raw samples (with `__name__`) of `[t − range, t]` (for `record`)."""
    return f"{selector(spec.names, matchers)}[{int(range_s)}s]"


def series_count_query(name: str, matchers: Mapping[str, str] | None = None) -> str:
    """How many series of a metric exist at the evaluation time (for `doctor`)."""
    return f"count({selector([name], matchers)})"


__all__ = [
    "MERGE_OPS",
    "RATE_BRANCHES",
    "STATS_BRANCHES",
    "STAT_LABEL",
    "escape_label_value",
    "metric_query",
    "raw_samples_query",
    "rate_query",
    "scan_queries",
    "selector",
    "series_count_query",
    "stats_query",
]

"""Adapter helper: every PromQL expression gpuwaste sends, and the shipped recording rules (PromQL lives only here).

The per-scan plan is fixed whatever the number of nodes or pods (`scan_queries`: 26 queries with the bundled
plan read raw — 6 time-resolved GPU fields × 3 statistics + 6 other GPU fields + 2 for the pod metrics — and
14 with the recording rules; the adapter adds one probe for the rules). Every query is evaluated at the window end `T`
(never the wall clock).

* **Time-resolved metrics** (`MetricSpec.resolved`) are read as buckets of `B = TelemetryWindow.bucket_s`
  ending at `T − (n−1)·B, …, T`:

  - *raw* plan: per GPU field, three `query_range` requests (start `T − W + B`, end `T`, step `B`), one
    for each of `count_over_time`, `sum_over_time`, `max_over_time` over `[B − 1 ms]` (left-open buckets
    in Prometheus 2.x and 3.x alike), neither tagged nor aggregated: Prometheus evaluates a range query
    step by step, and `label_replace`, `or` and `sum without (…)` at every step cost it three to four
    times the functions themselves. The scan merges the dropped labels away itself
    (`metrics_plan.merge_dropped`, the same operators);
  - *recording rules* plan (`RULE_INTERVAL_S` divides `B`, and the rules cover the window): the shipped
    rules record the same three statistics per 5-minute bucket
    (`gpuwaste:<metric>:count5m|sum5m|max5m`, the count only where it differs from the reference field's,
    see `recording_rules`); one instant query per metric reads the recorded samples
    of `(T − W + 5 min, T]` raw and the scan adds them up into its buckets. Rule evaluation is not
    aligned with `T`: a recorded sample at `t` covers `(t − 5 min, t]`, so only samples whose bucket lies
    wholly inside the window are read (at most the last 5 minutes before `T` and the first 5 minutes of
    the window go unread; nothing outside the window is ever read).

* **Other GPU metrics**: one instant query of `count_over_time`, `sum_over_time`, `max_over_time`
  (or `changes` for the energy counter) over `[W − 1 ms]`, aggregated `sum/max without (dropped labels)`,
  each statistic a result series told apart by the label `gpuwaste_stat`.
* **Pod metrics**: one instant query for all pod counters — `rate`, `count_over_time`, `resets` over `[W]`
  and `count_over_time` over the recent tail (Prometheus 2.x `rate` semantics, both ends included) — and
  one `query_range` for all time-resolved pod gauges (tagged bucket statistics), each series naming its
  metric in the label `gpuwaste_metric`.

Label values that come from configuration are escaped with `escape_label_value`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpuwaste.models.telemetry import bucket_seconds
from gpuwaste.sources.metrics_plan import ALIAS_LABEL, ALL_STATS, BUCKET_STATS, DROPPED_LABELS, PLAN, MetricSpec

STAT_LABEL = "gpuwaste_stat"
#: The label naming the plan entry of a result series when one query reads several (the pod metrics).
METRIC_LABEL = "gpuwaste_metric"
RECENT_S = 600
#: Evaluation interval of the shipped recording rules (seconds) and the rules' version.
RULE_INTERVAL_S = 300
RULES_VERSION = "2"
#: Rules versions a scan reads: version 1 records every field's count in full, version 2 only where it differs from the
#: reference field's (`COUNT_REFERENCE`); the reader resolves either (a window may span an upgrade).
READABLE_RULES_VERSIONS: tuple[str, ...] = ("1", "2")
#: The time-resolved field whose recorded sample count is the shared one (present on every GPU, whole-GPU scope).
COUNT_REFERENCE = "DCGM_FI_DEV_GPU_UTIL"
RULES_MARKER = "gpuwaste:recording_rules:info"
RULE_GROUP = "gpuwaste-dcgm-buckets"

STATS_BRANCHES: tuple[str, ...] = ALL_STATS
#: How each statistic of series that differ only in dropped labels is merged (as `WindowStats.merge`).
MERGE_OPS: dict[str, str] = {"count": "sum", "sum": "sum", "max": "max", "changes": "sum"}
RATE_BRANCHES: tuple[str, ...] = ("rate", "count", "resets", "recent")
_FUNCS = {"count": "count_over_time", "sum": "sum_over_time", "max": "max_over_time", "changes": "changes"}

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


#: Largest regex of one `OneOf` matcher (bytes): a shard's node list travels in the URL of every query (GET), and
#: Prometheus, proxies and AMP bound the request line; a longer list is not sent (the source reads every series and the
#: scan keeps its shard's own: `services.shards`).
MAX_ONE_OF_BYTES = 48 * 1024


class OneOf(str):
    """A matcher value meaning "any of these literal values".

    Rendered as an anchored regex `label=~"a|b|c"`; with `or_absent`, `label=~"a|b|c|"`, which a series without the
    label matches too (Prometheus reads a missing label as the empty string). The exporter's host label is `Hostname` or `hostname` (B03), so a shard's node list goes on both,
    each allowing absence: a series is kept when whichever of them it carries names one of the shard's hosts.

    A `str` (the joined, escaped regex) so it travels in the `Mapping[str, str]` matchers every query builder takes.

    Raises:
        ValueError: no values, or the regex is longer than `MAX_ONE_OF_BYTES`.
    """

    or_absent: bool

    def __new__(cls, values: Sequence[str], *, or_absent: bool = False) -> OneOf:
        if not values or any(not v for v in values):
            raise ValueError("a OneOf matcher needs at least one value, none empty")
        regex = "|".join(_regex_escape(v) for v in sorted(set(values)))
        if len(regex.encode()) > MAX_ONE_OF_BYTES:
            raise ValueError(f"{len(values)} values make a {len(regex.encode())}-byte regex, over {MAX_ONE_OF_BYTES}")
        made = super().__new__(cls, regex + ("|" if or_absent else ""))
        made.or_absent = or_absent
        return made


def _matcher_parts(matchers: Mapping[str, str] | None) -> list[str]:
    """`label="value"` per matcher, sorted (values escaped; a `OneOf` value is a regex matcher `label=~"…"`).

    Raises:
        ValueError: a label name that is not a valid Prometheus name.
    """
    parts: list[str] = []
    for label, value in sorted((matchers or {}).items()):
        if not _LABEL_NAME.match(label):
            raise ValueError(f"invalid label name {label!r}")
        op = "=~" if isinstance(value, OneOf) else "="
        parts.append(f'{label}{op}"{escape_label_value(value)}"')
    return parts


def selector(names: Sequence[str], matchers: Mapping[str, str] | None = None) -> str:
    """An instant-vector selector for the metric names (aliases via an anchored `__name__` regex).

    Args:
        names: metric names (canonical first). matchers: extra equality matchers `label="value"`
            (values escaped; e.g. a `cluster` label on a shared Prometheus); a `OneOf` value is a regex matcher.

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
    parts += _matcher_parts(matchers)
    head = names[0] if len(names) == 1 else ""
    return f"{head}{{{','.join(parts)}}}" if parts else head


def _tag(expr: str, stat: str) -> str:
    return f'label_replace({expr}, "{STAT_LABEL}", "{stat}", "", "")'


def _label_list(drop: Sequence[str]) -> str:
    for label in drop:
        if not _LABEL_NAME.match(label):
            raise ValueError(f"invalid label name {label!r}")
    return ", ".join(drop)


def _range_ms(seconds: int) -> str:
    """`[s − 1 ms]`: a left-open range of `seconds` in Prometheus 2.x (both ends included) and 3.x alike."""
    return f"[{int(seconds) * 1000 - 1}ms]"


def over_names(func: str, names: Sequence[str], rng: str, matchers: Mapping[str, str] | None = None) -> str:
    """`func(<names>[rng])` over a field's exported names, with unique label sets whatever names the data holds.

    The names are read in branches, one per spelling (a name and its lower-cased form, which no exporter publishes
    side by side): the canonical name's result as is, `or` each other name's result tagged with its lower-cased name
    in `ALIAS_LABEL` (`metrics_plan.alias_tag`). So the same series under two names (an exporter upgraded in the
    window, a second counters CSV) is two results, never one label set twice (HTTP 422 "vector cannot contain metrics
    with the same labelset"); the scan merges them per device as the recording path does. Where only one name has
    series (the usual case) the other branches are empty.

    Raises:
        ValueError: a metric or label name that is not a valid Prometheus name.
    """
    spellings: dict[str, list[str]] = {}
    for n in names:
        spellings.setdefault(n.lower(), []).append(n)
    parts = []
    for i, (key, group) in enumerate(spellings.items()):
        expr = f"{func}({selector(group, matchers)}{rng})"
        parts.append(expr if i == 0 else f'label_replace({expr}, "{ALIAS_LABEL}", "{key}", "", "")')
    return " or ".join(parts)


def _branches(names: Sequence[str], matchers: Mapping[str, str] | None, rng: str, stats: Sequence[str], drop: Sequence[str]) -> str:
    wanted = [k for k in (*ALL_STATS,) if k in stats]
    labels = _label_list(drop)
    parts = []
    for k in wanted:
        expr = over_names(_FUNCS[k], names, rng, matchers)
        if labels:
            expr = f"{MERGE_OPS[k]} without ({labels}) ({expr})"
        parts.append(_tag(expr, k))
    return " or ".join(parts)


def stats_query(names: Sequence[str], *, window_s: int, stats: Sequence[str] = STATS_BRANCHES, drop: Sequence[str] = (),
                matchers: Mapping[str, str] | None = None) -> str:
    """Window statistics `stats` (count, sum, max, changes) of a gauge over `(T − W, T]` in one instant query.

    Args:
        names: the field's exported names (canonical first, see `over_names`). window_s: the window (seconds).
            stats: statistics to compute (`ALL_STATS` order is kept). drop: labels aggregated away
            (`MERGE_OPS[stat]` without (…)); none by default.
            matchers: extra equality matchers.

    Raises:
        ValueError: a dropped label that is not a valid label name.
    """
    return _branches(names, matchers, _range_ms(window_s), stats, drop)


def bucket_query(names: Sequence[str], *, bucket_s: int, drop: Sequence[str] = (), matchers: Mapping[str, str] | None = None) -> str:
    """Count, sum and max over one bucket `(t − B, t]`, for a `query_range` with step B ending at T."""
    return _branches(names, matchers, _range_ms(bucket_s), BUCKET_STATS, drop)


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


def rule_name(spec: MetricSpec, stat: str) -> str:
    """The recorded series of one bucket statistic: `gpuwaste:<metric lower-cased>:<stat>5m`."""
    return f"gpuwaste:{spec.name.lower()}:{stat}{RULE_INTERVAL_S // 60}m"


def recorded_query(spec: MetricSpec, *, window_s: int, matchers: Mapping[str, str] | None = None) -> str:
    """The recorded 5-minute buckets of a metric whose bucket lies inside `(T − W, T]`, raw (one instant query).

    Selects recorded samples at `t ∈ [T − W + 5 min, T]` (the range is one millisecond longer than
    `W − 5 min`, so a sample exactly at `T − W + 5 min` is read by Prometheus 2.x and 3.x alike).
    """
    names = [rule_name(spec, k) for k in BUCKET_STATS]
    sel = selector(names, matchers)
    return f"{sel}[{(int(window_s) - RULE_INTERVAL_S) * 1000 + 1}ms]"


def rules_probe_query(*, window_s: int) -> str:
    """How many times the shipped rules were evaluated in the window, per rules version (one series)."""
    return f"count_over_time({RULES_MARKER}[{_range_ms(window_s)[1:-1]}])"


def metric_query(spec: MetricSpec, *, window_s: int, matchers: Mapping[str, str] | None = None, drop: Sequence[str] = (),
                 bucket_s: int | None = None) -> str:
    """The one raw query of a plan entry (`drop`: labels aggregated away, GPU metrics only).

    A time-resolved entry gets the bucket query (for `query_range`, step `bucket_s`).
    """
    gpu_drop = drop if spec.scope == "gpu" else ()
    if spec.summary == "rate":
        return rate_query(selector(spec.names, matchers), window_s=window_s)
    if spec.summary == "buckets":
        return bucket_query(spec.names, bucket_s=int(bucket_s or window_s), drop=gpu_drop, matchers=matchers)
    return stats_query(spec.names, window_s=window_s, stats=spec.computed, drop=gpu_drop, matchers=matchers)


Kind = Literal["instant", "range", "recorded"]


@dataclass(frozen=True)
class PlannedQuery:
    """One query of a scan: the plan entry (or entries), its PromQL and how it is sent.

    Attributes:
        kind: "instant" (at T), "range" (`query_range` from `T − W + step` to `T`, step `step_s`) or
            "recorded" (an instant query at T returning the recorded 5-minute buckets raw).
        stat: the one bucket statistic ("count", "sum" or "max") the query returns untagged (a time-resolved
            GPU field read raw is three such queries); None when each result series says its statistic in
            `STAT_LABEL` (or, for recorded buckets, in its name).
        group: the plan entries one query reads together (the pod metrics), each result series naming its
            entry in `METRIC_LABEL`; empty for a query of `spec` alone.
    """

    spec: MetricSpec
    promql: str
    kind: Kind = "instant"
    step_s: int | None = None
    stat: str | None = None
    group: tuple[MetricSpec, ...] = ()


def bucket_stat_query(names: Sequence[str], stat: str, *, bucket_s: int, matchers: Mapping[str, str] | None = None) -> str:
    """One statistic (`BUCKET_STATS`) of every series over one bucket `(t − B, t]`, untagged and not aggregated.

    The cheapest time-resolved read Prometheus can evaluate step by step: no `sum without (…)` and no statistic tag at
    each step (measured in bench/RESULTS.md: a quarter of the tagged, aggregated query's evaluation time). The labels
    nobody reads come back and the scan merges them away (`metrics_plan.merge_dropped`, the operators of `MERGE_OPS`),
    exactly what the aggregated query computed. A field with other exported names reads each name in its own branch
    (`over_names`: empty branches where the data does not use that name), the scan adds the aliases' results to the
    canonical name's the same way.
    """
    return over_names(_FUNCS[stat], names, _range_ms(bucket_s), matchers)


def _tag_metric(expr: str, spec: MetricSpec) -> str:
    return f'label_replace({expr}, "{METRIC_LABEL}", "{escape_label_value(spec.name)}", "", "")'


def scan_queries(
    *, window_s: int, matchers: Mapping[str, str] | None = None, plan: Sequence[MetricSpec] = PLAN, drop: Sequence[str] = (),
    bucket_s: int | None = None, rules: bool = False, node_matchers: Mapping[str, str] | None = None,
) -> list[PlannedQuery]:
    """The fixed per-scan query plan, independent of fleet size.

    * each time-resolved GPU field: three `query_range` requests, one per bucket statistic (`bucket_stat_query`);
      with the recording rules, one instant read of its three recorded series instead;
    * each other GPU field: one instant query of its window statistics (aggregated without `drop`);
    * the pod metrics: one instant query for every pod counter and window statistic, one `query_range` for every
      time-resolved pod gauge, each series tagged with its metric (`METRIC_LABEL`).

    Args:
        drop: labels aggregated away from the instant GPU queries (the Prometheus adapter passes
            `metrics_plan.droppable_labels(settings)`; the time-resolved reads return them and the adapter merges
            them away); none by default.
        bucket_s: bucket width of the time-resolved entries (default: `models.telemetry.bucket_seconds`).
        rules: read the time-resolved GPU entries from the shipped recording rules.
        node_matchers: matchers added to the GPU (DCGM) queries only, e.g. a shard's `Hostname` `OneOf`
            (`services.shards`); pod metrics carry no node label and are read whole.
    """
    b = int(bucket_s or bucket_seconds(window_s))
    pod_matchers = matchers
    if node_matchers:
        matchers = {**(matchers or {}), **node_matchers}
    out: list[PlannedQuery] = []
    pod_instant: list[MetricSpec] = []
    pod_range: list[MetricSpec] = []
    for spec in plan:
        if spec.scope == "pod":
            (pod_range if spec.summary == "buckets" else pod_instant).append(spec)
        elif spec.summary == "buckets" and rules:
            out.append(PlannedQuery(spec, recorded_query(spec, window_s=window_s, matchers=matchers), "recorded", RULE_INTERVAL_S))
        elif spec.summary == "buckets":
            out.extend(PlannedQuery(spec, bucket_stat_query(spec.names, k, bucket_s=b, matchers=matchers), "range", b, stat=k)
                       for k in BUCKET_STATS)
        else:
            out.append(PlannedQuery(spec, metric_query(spec, window_s=window_s, matchers=matchers, drop=drop)))
    if pod_instant:
        promql = " or ".join(_tag_metric(metric_query(s, window_s=window_s, matchers=pod_matchers), s) for s in pod_instant)
        out.append(PlannedQuery(pod_instant[0], promql, "instant", group=tuple(pod_instant)))
    if pod_range:
        promql = " or ".join(_tag_metric(metric_query(s, window_s=window_s, matchers=pod_matchers, bucket_s=b), s) for s in pod_range)
        out.append(PlannedQuery(pod_range[0], promql, "range", b, group=tuple(pod_range)))
    return out


def minimal_queries(*, window_s: int, plan: Sequence[MetricSpec] = PLAN, drop: Sequence[str] = DROPPED_LABELS) -> list[str]:
    """The *minimal floor* of issue 13: avg, max and count of each GPU metric over the window, one instant query each."""
    out = []
    for spec in plan:
        if spec.scope != "gpu":
            continue
        w = f"[{int(window_s)}s]"
        labels = _label_list(drop)
        out.append(" or ".join(_tag(f"{op} without ({labels}) ({over_names(fn, spec.names, w)})", k) for k, op, fn in
                               (("avg", "max", "avg_over_time"), ("max", "max", "max_over_time"), ("count", "sum", "count_over_time"))))
    return out


def _bucket_stat(spec: MetricSpec, stat: str, drop: Sequence[str]) -> str:
    """One statistic of a field over one rules interval, aggregated without the dropped labels."""
    return f"{MERGE_OPS[stat]} without ({_label_list(drop)}) ({over_names(_FUNCS[stat], spec.names, _range_ms(RULE_INTERVAL_S))})"


def recording_rules(plan: Sequence[MetricSpec] = PLAN, drop: Sequence[str] = DROPPED_LABELS, *, count_reference: str | None = COUNT_REFERENCE,
                    version: str = RULES_VERSION) -> dict[str, Any]:
    """The shipped recording rules (a Prometheus rules file document): 5-minute bucket statistics of each time-resolved DCGM field.

    For each time-resolved GPU metric M (with its aliases) and each of sum and max:
    `gpuwaste:<m>:<stat>5m = <sum|max> without (<dropped labels>) (<stat>_over_time(M[5m − 1 ms]))`, evaluated every
    5 minutes. The sample count `C(M)` (`sum without (…) (count_over_time(M[5m − 1 ms]))`) is recorded in full for the
    reference field R (`COUNT_REFERENCE`) only; for every other field it is recorded where it differs from R's count
    of the same series, or where R has no such series (`C(M) unless (C(M) == C(R))`): the fields of one GPU are
    scraped together, so their counts almost always agree, and a field missing from some scrapes still records its
    lower count (its coverage is never overstated). The scan takes R's count where a field's own is not recorded.
    Plus the marker `gpuwaste:recording_rules:info{version}` the scan and `gpuwaste doctor` look for.
    (`count_reference=None, version="1"`: the version 1 rules, every count in full; kept for tests of upgrades.)
    """
    rules: list[dict[str, Any]] = [{"record": RULES_MARKER, "expr": "vector(1)", "labels": {"version": version}}]
    specs = [s for s in plan if s.scope == "gpu" and s.summary == "buckets"]
    reference = next((s for s in specs if s.name == count_reference), None)
    for spec in specs:
        for k in BUCKET_STATS:
            expr = _bucket_stat(spec, k, drop)
            if k == "count" and reference is not None and spec is not reference:
                expr = f"{expr} unless ({expr} == {_bucket_stat(reference, k, drop)})"
            rules.append({"record": rule_name(spec, k), "expr": expr})
    return {"groups": [{"name": RULE_GROUP, "interval": f"{RULE_INTERVAL_S // 60}m", "rules": rules}]}


def raw_samples_query(spec: MetricSpec, *, range_s: int, matchers: Mapping[str, str] | None = None) -> str:
    """A range-vector selector returning the raw samples (with `__name__`) of `[t − range, t]` (for `record`)."""
    return f"{selector(spec.names, matchers)}[{int(range_s)}s]"


#: Every DCGM series, either spelling (dcgm-exporter's `DCGM_FI_*`/`DCGM_EXP_*`, the lower-cased `dcgm_fi_*`): what the
#: recording path counts a GPU on when none of its series is a plan field (`sources.recording`, issue 21 §9).
DCGM_ANY_NAME = "DCGM_.+|dcgm_fi_.+"
#: Most evaluation steps of the presence subqueries over a window (their step: window ÷ this, at least 5 minutes,
#: Prometheus' lookback, so the steps leave no gap shorter than a window ÷ 24).
PRESENCE_STEPS = 24


def _any_dcgm(matchers: Mapping[str, str] | None) -> str:
    return "{" + ",".join([f'__name__=~"{escape_label_value(DCGM_ANY_NAME)}"', *_matcher_parts(matchers)]) + "}"


def _presence_range(window_s: int) -> str:
    step = max(300, int(window_s) // PRESENCE_STEPS)
    return f"[{int(window_s)}s:{step}s]"


def dcgm_presence_query(uuid_labels: Sequence[str], *, window_s: int, matchers: Mapping[str, str] | None = None,
                        host_labels: Sequence[str] = ()) -> str:
    """One row per GPU UUID (labels `uuid_labels`, and the exporter's `host_labels`) on any DCGM series in the window.

    Whatever the field. The live path's count of GPUs that carry none of the plan's fields (clocks, temperatures only). Grouped before the
    subquery (so fields never collide as one label set) and sampled at `PRESENCE_STEPS` steps of the window at most.

    Raises:
        ValueError: an invalid label name.
    """
    labels = _label_list(tuple(dict.fromkeys((*uuid_labels, *host_labels))))
    return f"group by ({labels}) (max_over_time((group by ({labels}) ({_any_dcgm(matchers)})){_presence_range(window_s)}))"


def dcgm_fields_query(*, window_s: int, matchers: Mapping[str, str] | None = None) -> str:
    """One row per DCGM field name present in the window (label `METRIC_LABEL`).

    The fields a thin scrape does carry, for the `no_activity_fields` finding.
    """
    inner = f'group by ({METRIC_LABEL}) (label_replace({_any_dcgm(matchers)}, "{METRIC_LABEL}", "$1", "__name__", "(.+)"))'
    return f"group by ({METRIC_LABEL}) (max_over_time(({inner}){_presence_range(window_s)}))"


def series_count_query(name: str, matchers: Mapping[str, str] | None = None) -> str:
    """How many series of a metric exist at the evaluation time (for `doctor`)."""
    return f"count({selector([name], matchers)})"


__all__ = [
    "ALIAS_LABEL",
    "COUNT_REFERENCE",
    "MERGE_OPS",
    "RATE_BRANCHES",
    "READABLE_RULES_VERSIONS",
    "RULES_MARKER",
    "RULES_VERSION",
    "RULE_INTERVAL_S",
    "STATS_BRANCHES",
    "STAT_LABEL",
    "METRIC_LABEL",
    "PlannedQuery",
    "bucket_query",
    "bucket_stat_query",
    "dcgm_fields_query",
    "dcgm_presence_query",
    "escape_label_value",
    "metric_query",
    "minimal_queries",
    "over_names",
    "raw_samples_query",
    "rate_query",
    "recorded_query",
    "recording_rules",
    "rule_name",
    "rules_probe_query",
    "scan_queries",
    "selector",
    "series_count_query",
    "stats_query",
]

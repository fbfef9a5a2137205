"""Unit tests: the PromQL plan (sources/promql.py), the metrics plan and the counter-rate mirror (sources/window.py)."""

from __future__ import annotations

import pytest

from gpuwaste.models.telemetry import Signal
from gpuwaste.sources.metrics_plan import (
    DROPPED_LABELS,
    GPU_METRICS,
    POD_METRICS,
    SeriesSummary,
    assemble,
    spec_for,
    summarise_samples,
)
from gpuwaste.sources.promql import (
    ALIAS_LABEL,
    METRIC_LABEL,
    RATE_BRANCHES,
    STAT_LABEL,
    STATS_BRANCHES,
    escape_label_value,
    metric_query,
    raw_samples_query,
    scan_queries,
    selector,
)
from gpuwaste.sources.window import counter_rate, counter_resets

HOSTILE = 'a"b\\c\n{}=~'


def test_escape_label_value_escapes_backslash_quote_and_newline() -> None:
    # GIVEN a configured value holding a quote, a backslash, a newline and PromQL syntax
    # WHEN it is escaped
    escaped = escape_label_value(HOSTILE)
    # THEN backslash, quote and newline are escaped and nothing else changes
    assert escaped == 'a\\"b\\\\c\\n{}=~'
    assert "\n" not in escaped


def test_selector_puts_hostile_matcher_values_inside_one_quoted_string() -> None:
    # GIVEN a matcher value that would close the string and inject a matcher if not escaped
    # WHEN a selector is built
    sel = selector(["DCGM_FI_DEV_GPU_UTIL"], {"cluster": HOSTILE})
    # THEN the value is escaped in place and the selector has exactly one matcher
    assert sel == 'DCGM_FI_DEV_GPU_UTIL{cluster="a\\"b\\\\c\\n{}=~"}'


def test_selector_with_aliases_uses_a_name_regex() -> None:
    # GIVEN a metric with aliases (1.x compatibility name, lower-case spelling)
    spec = spec_for("DCGM_FI_DEV_GPU_UTIL")
    assert spec is not None
    # WHEN its selector is built
    sel = selector(spec.names)
    # THEN every name is an alternative of one anchored __name__ regex
    assert sel.startswith('{__name__=~"DCGM_FI_DEV_GPU_UTIL|')
    assert "dcgm_gpu_utilization" in sel and "dcgm_fi_dev_gpu_util" in sel


def test_selector_rejects_an_invalid_label_name() -> None:
    # GIVEN a label name that is not a Prometheus label name
    # WHEN / THEN building a selector fails instead of emitting broken PromQL
    with pytest.raises(ValueError, match="invalid label name"):
        selector(["x"], {'bad"name': "v"})


def test_scan_queries_count_is_fixed_whatever_the_matchers_and_window() -> None:
    # GIVEN the bundled plan
    # WHEN the per-scan query plan is built with and without matchers, for two windows
    plans = [scan_queries(window_s=w, matchers=m) for w in (3600, 4200) for m in (None, {"cluster": "a"})]
    # THEN every plan has the same fixed number of queries: 6 time-resolved GPU fields × 3 statistics + 6 other GPU fields
    # + one instant query for the pod counters + one range query for the pod gauges = 26
    assert {len(p) for p in plans} == {26}
    assert len(GPU_METRICS) == 12 and len(POD_METRICS) == 15  # GKE's accelerator duty cycle joins the pod gauges' query


def test_raw_time_resolved_gpu_field_is_three_untagged_unaggregated_range_queries() -> None:
    # GIVEN the raw plan (no recording rules)
    plan = scan_queries(window_s=3600, drop=DROPPED_LABELS)
    spec = spec_for("DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    assert spec is not None
    # WHEN the GR engine field's queries are picked
    mine = [q for q in plan if q.spec is spec]
    old, new = selector(["DCGM_FI_PROF_GR_ENGINE_ACTIVE", "dcgm_fi_prof_gr_engine_active"]), selector(
        ["DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "dcgm_fi_prof_gr_engine_util_ratio"])
    # THEN one range query per bucket statistic, each the bare function over one left-open bucket: no statistic tag and
    # no aggregation (Prometheus evaluates them at every step); the DCGM 4.x name is its own branch, tagged with its name
    # so that a series exported under both names is two results (never one label set twice: HTTP 422)
    assert [(q.kind, q.stat, q.step_s) for q in mine] == [("range", "count", 300), ("range", "sum", 300), ("range", "max", 300)]
    assert [q.promql for q in mine] == [
        f'{fn}({old}[299999ms]) or label_replace({fn}({new}[299999ms]), "{ALIAS_LABEL}", "dcgm_fi_prof_gr_engine_util_ratio", "", "")'
        for fn in ("count_over_time", "sum_over_time", "max_over_time")]
    assert all(STAT_LABEL not in q.promql and "without" not in q.promql for q in mine)


def test_pod_metrics_are_read_by_two_queries_each_series_naming_its_metric() -> None:
    # GIVEN the bundled plan
    plan = scan_queries(window_s=3600)
    # WHEN the pod queries are picked
    pods = [q for q in plan if q.group]
    # THEN one instant query holds every pod counter, one range query every time-resolved pod gauge
    assert [(q.kind, len(q.group)) for q in pods] == [("instant", 8), ("range", 7)]  # + GKE accelerator duty cycle
    for q in pods:
        for spec in q.group:
            assert f'"{METRIC_LABEL}", "{spec.name}", "", ""' in q.promql
    assert {s.name for q in pods for s in q.group} == {s.name for s in POD_METRICS}


def test_time_resolved_query_asks_for_count_sum_and_max_per_left_open_bucket() -> None:
    # GIVEN a time-resolved gauge (an activity signal)
    spec = spec_for("DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    assert spec is not None and spec.summary == "buckets"
    # WHEN its query is built for a 70-minute window (5-minute buckets)
    q = metric_query(spec, window_s=4200, bucket_s=300)
    sel = selector(["DCGM_FI_PROF_GR_ENGINE_ACTIVE", "dcgm_fi_prof_gr_engine_active"])
    # THEN three branches over one bucket minus a millisecond (left-open in Prometheus 2.x and 3.x), nothing costlier,
    # each over both spellings of the field (the DCGM 4.x name tagged, kept apart: the scan merges it per device)
    assert q.count(f'"{STAT_LABEL}", ') == 3 and q.count(f'"{ALIAS_LABEL}", ') == 3 and q.count(" or ") == 5
    for stat, fn in (("count", "count_over_time"), ("sum", "sum_over_time"), ("max", "max_over_time")):
        assert f"{fn}({sel}[299999ms])" in q and f'"{STAT_LABEL}", "{stat}", "", ""' in q
        assert f"{fn}({selector(['DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO', 'dcgm_fi_prof_gr_engine_util_ratio'])}[299999ms])" in q
    assert "without" not in q
    assert "quantile_over_time" not in q and "min_over_time" not in q and ":" not in q.split("[")[1].split("]")[0]


def test_window_statistics_of_other_fields_are_the_cheap_ones() -> None:
    # GIVEN the energy counter and the framebuffer
    energy, fb = spec_for("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"), spec_for("DCGM_FI_DEV_FB_USED")
    assert energy is not None and fb is not None
    # WHEN their queries are built
    qe, qf = metric_query(energy, window_s=3600), metric_query(fb, window_s=3600)
    # THEN energy asks for count and changes, the framebuffer for count, sum and max, over the left-open window
    assert qe.count(f'"{STAT_LABEL}", ') == 2 and "changes(" in qe and "[3599999ms]" in qe
    assert qf.count(f'"{STAT_LABEL}", ') == 3 and "max_over_time(" in qf and "changes(" not in qf
    assert set(STATS_BRANCHES) == {"count", "sum", "max", "changes"}


def test_counter_query_asks_for_rate_count_resets_and_recent() -> None:
    # GIVEN a pod counter
    spec = spec_for("vllm:generation_tokens_total")
    assert spec is not None and spec.summary == "rate"
    # WHEN its query is built
    q = metric_query(spec, window_s=3600)
    # THEN it holds exactly the rate branches
    assert q.count("label_replace(") == len(RATE_BRANCHES) == 4
    assert "rate(vllm:generation_tokens_total[3600s])" in q
    assert "resets(vllm:generation_tokens_total[3600s])" in q


def test_scan_plan_reads_recorded_buckets_when_the_rules_are_used() -> None:
    # GIVEN the bundled plan with and without the recording rules
    raw = scan_queries(window_s=3600, drop=DROPPED_LABELS)
    ruled = scan_queries(window_s=3600, drop=DROPPED_LABELS, rules=True)
    # THEN each time-resolved GPU field becomes one raw read of its three recorded series (26 → 14 queries)
    assert (len(raw), len(ruled)) == (26, 14)
    kinds = {(q.spec.name, q.kind) for q in ruled}
    assert ("DCGM_FI_PROF_SM_ACTIVE", "recorded") in kinds and ("DCGM_FI_DEV_FB_USED", "instant") in kinds
    gauges = next(q for q in ruled if q.kind == "range")  # pod gauges are never recorded
    assert "vllm:num_requests_running" in {s.name for s in gauges.group}
    sm = next(q for q in ruled if q.spec.name == "DCGM_FI_PROF_SM_ACTIVE")
    assert "gpuwaste:dcgm_fi_prof_sm_active:count5m" in sm.promql and sm.promql.endswith("[3300001ms]")
    assert {q.step_s for q in raw if q.kind == "range"} == {300}


def test_raw_samples_query_is_a_range_selector() -> None:
    # GIVEN a metric with aliases
    spec = spec_for("DCGM_FI_DEV_POWER_USAGE")
    assert spec is not None
    # WHEN the raw-sample query for `record` is built
    q = raw_samples_query(spec, range_s=4200)
    # THEN it selects every name over the range, with no function (raw samples keep __name__)
    assert q.endswith("}[4200s]") and "DCGM_FI_DEV_BOARD_POWER_WATTS" in q and "(" not in q.split("{")[0]


def test_spec_for_maps_aliases_to_the_canonical_field() -> None:
    # GIVEN names used by dcgm-exporter 1.x, Azure lower-casing and DCGM 4.6
    # WHEN they are looked up
    names = {n: spec_for(n) for n in ("dcgm_gpu_utilization", "dcgm_fi_prof_sm_active", "DCGM_FI_DEV_GPU_UTIL_RATIO",
                                       "DCGM_FI_DEV_BOARD_POWER_WATTS", "dcgm_total_energy_consumption", "node_cpu_seconds_total")}
    # THEN each maps to its canonical Signal (and an unknown name to None)
    assert names["dcgm_gpu_utilization"].name == Signal.GPU_UTIL.value  # type: ignore[union-attr]
    assert names["dcgm_fi_prof_sm_active"].name == Signal.SM_ACTIVE.value  # type: ignore[union-attr]
    assert names["DCGM_FI_DEV_GPU_UTIL_RATIO"].name == Signal.GPU_UTIL.value  # type: ignore[union-attr]
    assert names["DCGM_FI_DEV_BOARD_POWER_WATTS"].name == Signal.POWER_USAGE.value  # type: ignore[union-attr]
    assert names["dcgm_total_energy_consumption"].kind == "counter"  # type: ignore[union-attr]
    assert names["node_cpu_seconds_total"] is None


def _ts(*seconds: int) -> list[int]:
    return [s * 1000 for s in seconds]


def test_counter_rate_extrapolates_to_the_window_start_like_prometheus() -> None:
    # GIVEN a counter sampled every 60 s from 60 s to 600 s, +6 per sample, window [0, 600]
    ts = _ts(*range(60, 601, 60))
    vals = [100.0 + 6 * i for i in range(1, 11)]
    # WHEN its rate is taken at 600 s over 600 s
    rate = counter_rate(ts, vals, eval_ms=600_000, window_ms=600_000)
    # THEN the 54 increase over 540 s is extrapolated by the 60 s to the start: 54 × 600/540 / 600
    assert rate == pytest.approx(0.1, rel=1e-12)


def test_counter_rate_adds_the_value_before_a_reset() -> None:
    # GIVEN a counter that resets from 130 to 5 mid-window
    ts = _ts(*range(60, 601, 60))
    vals = [106.0, 112.0, 118.0, 124.0, 130.0, 5.0, 11.0, 17.0, 23.0, 29.0]
    # WHEN its rate is taken
    rate = counter_rate(ts, vals, eval_ms=600_000, window_ms=600_000)
    # THEN the increase is 29 − 106 + 130 = 53, extrapolated as above; one reset is counted
    assert rate == pytest.approx(53 / 540, rel=1e-12)
    assert counter_resets(vals) == 1


def test_counter_rate_does_not_extrapolate_below_zero_or_past_a_gap() -> None:
    # GIVEN a young counter (10 at 300 s, +6 per minute) in a 600 s window: its zero point is 100 s before
    # the first sample, which is more than 1.1 intervals from the window start
    ts = _ts(300, 360, 420, 480, 540, 600)
    vals = [10.0, 16.0, 22.0, 28.0, 34.0, 40.0]
    # WHEN its rate is taken
    rate = counter_rate(ts, vals, eval_ms=600_000, window_ms=600_000)
    # THEN only half an interval is added at the start: 30 × 330/300 / 600
    assert rate == pytest.approx(30 * 330 / 300 / 600, rel=1e-12)
    # AND a single sample has no rate
    assert counter_rate(_ts(600), [1.0], eval_ms=600_000, window_ms=600_000) is None


def test_assemble_sums_container_rates_per_pod_and_skips_pod_cgroup_series() -> None:
    # GIVEN cAdvisor CPU counters of two containers, the pod cgroup (container="") and the pause container
    spec = spec_for("container_cpu_usage_seconds_total")
    assert spec is not None
    ts = _ts(*range(60, 601, 60))

    def one(container: str, per_min: float) -> SeriesSummary:
        vals = [per_min * i for i in range(1, 11)]
        labels = {"namespace": "ns", "pod": "p", "container": container}
        s = summarise_samples(spec, labels, ts, vals, eval_ms=600_000, window_ms=600_000, recent_ms=600_000)
        assert s is not None
        return s

    summaries = [one("a", 60.0), one("b", 30.0), one("", 90.0), one("POD", 1.0)]
    # WHEN they are assembled
    parts = assemble(summaries)
    # THEN the pod holds one rate: 1.0 + 0.5 cores (extrapolated to the window start), from two series
    (pod,) = parts.pods
    stats = pod.signals["container_cpu_usage_seconds_total:rate"]
    assert stats.max == pytest.approx(1.5, rel=1e-12) and stats.total == stats.max
    assert stats.series == 2 and stats.count == 20
    assert parts.metrics_present == frozenset({"container_cpu_usage_seconds_total"})


def test_one_of_is_an_anchored_regex_of_escaped_literals_that_may_allow_absence() -> None:
    from gpuwaste.sources.promql import OneOf, selector

    # GIVEN node names with regex metacharacters, on the two spellings of the exporter's host label
    one = OneOf(["ip-10-0-1-2.ec2.internal", "n(1)", "ip-10-0-1-2.ec2.internal"], or_absent=True)
    # WHEN rendered in a selector
    sel = selector(["DCGM_FI_DEV_GPU_UTIL"], {"Hostname": one, "hostname": one, "cluster": "a"})
    # THEN each is a regex matcher whose literals are escaped, deduplicated, sorted, with the empty alternative last
    assert sel == ('DCGM_FI_DEV_GPU_UTIL{Hostname=~"ip-10-0-1-2\\\\.ec2\\\\.internal|n\\\\(1\\\\)|",cluster="a",'
                   'hostname=~"ip-10-0-1-2\\\\.ec2\\\\.internal|n\\\\(1\\\\)|"}')
    assert OneOf(["a"]) == "a" and not OneOf(["a"]).or_absent


def test_one_of_refuses_no_values_an_empty_value_and_a_list_over_the_bound() -> None:
    from gpuwaste.sources.promql import MAX_ONE_OF_BYTES, OneOf

    for bad in ([], [""]):
        with pytest.raises(ValueError, match="at least one value"):
            OneOf(bad)
    names = [f"node-{i:06d}" for i in range(MAX_ONE_OF_BYTES // 12 + 1)]
    with pytest.raises(ValueError, match="regex"):
        OneOf(names)
    assert OneOf(names[: MAX_ONE_OF_BYTES // 24])


def test_node_matchers_narrow_the_gpu_queries_and_leave_the_pod_queries_whole() -> None:
    from gpuwaste.sources.promql import OneOf, scan_queries

    # GIVEN a shard's host list as node matchers
    node = {"Hostname": OneOf(["n1", "n2"], or_absent=True)}
    # WHEN the scan's plan is built with them (raw and with the recording rules)
    for rules in (False, True):
        queries = scan_queries(window_s=3600, rules=rules, node_matchers=node)
        # THEN every GPU query carries the matcher and no pod query does
        gpu = [q for q in queries if q.spec.scope != "pod"]
        pod = [q for q in queries if q.spec.scope == "pod"]
        assert gpu and pod
        assert all('Hostname=~"n1|n2|"' in q.promql for q in gpu)
        assert not any("Hostname" in q.promql for q in pod)
        assert len(queries) == len(scan_queries(window_s=3600, rules=rules))

"""People's words, one function each: rules stated with their reading in the threshold's unit and the right way
round (`people.rule_text`), "since" counted from when the waste began (`people.waste_since`), and one name per kind
in the table, the ticket and the digest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from gpuwaste.models.findings import Episode, Evidence, Finding, Subject, WasteKind
from gpuwaste.models.ledger import LedgerSpan
from gpuwaste.people import (
    KIND_HEADINGS,
    evidence_text,
    kind_heading,
    kind_label,
    rule_text,
    signal_name,
    since_words,
    waste_since,
)

T = datetime(2024, 1, 1, 1, 20, tzinfo=UTC)


@pytest.mark.parametrize(("evidence", "said"), [
    # the cases: KV cache above its limit, CPU throttling above its floor, activity below the idle line
    (Evidence(signal="vllm:kv_cache_usage_perc", unit="ratio", window_s=4200, avg=0.96, max_avg_10m=0.96, threshold=0.9,
              comparison="highest 10-min avg ≥ 0.9"),
     "KV cache usage: highest 10-min avg 96 %, flagged at 90 % or above"),
    (Evidence(signal="rate(container_cpu_cfs_throttled_periods_total ÷ container_cpu_cfs_periods_total[4200s])", unit="ratio",
              window_s=4200, avg=0.6, threshold=0.25, comparison="≥ 0.25"),
     "CPU throttled: 60 %, flagged at 25 % or above"),
    (Evidence(signal="DCGM_FI_PROF_SM_ACTIVE", unit="ratio", window_s=4200, avg=0.002, p95=0.008, threshold=0.05,
              comparison="p95 < 0.05 and every 10-min avg < 0.05 (5 %)"),
     "SM activity: p95 0.8 %, flagged below 5 %"),
    # a percent reading against a 0–1 threshold is shown in percent on both sides
    (Evidence(signal="DCGM_FI_DEV_GPU_UTIL", unit="percent", window_s=4200, avg=100.0, threshold=0.8,
              comparison="avg ≥ 0.8 on every GPU"),
     "GPU utilisation: avg 100 %, flagged at 80 % or above"),
    (Evidence(signal="pod_age_s", unit="s", window_s=3600, avg=300000.0, threshold=259200.0, comparison="> 259200 s"),
     "pod age: 3.5 d, flagged above 3.0 d"),
    (Evidence(signal="rate(vllm:generation_tokens_total[4200s])", unit="per_s", window_s=4200, avg=0.0, threshold=0.0,
              comparison="≤ 0/s (flat counter)"),
     "generated tokens: 0/s, flagged at 0/s or below"),
])
def test_rule_text_states_the_reading_and_the_rule_in_one_unit_the_right_way_round(evidence: Evidence, said: str) -> None:
    assert rule_text(evidence) == said
    line = evidence_text(evidence)
    assert line.startswith(said)
    # no PromQL, no 0–1 number beside a percent, never "flagged under" for an upper limit
    assert "rate(" not in line and "[4200s]" not in line and "_total" not in line
    assert "flagged under" not in line and "< 0." not in line


def test_context_evidence_states_no_rule() -> None:
    e = Evidence(signal="DCGM_FI_PROF_SM_ACTIVE", unit="ratio", window_s=4200, avg=0.07, max_avg_10m=0.08,
                 comparison="context: GPU activity (not the criterion)")
    assert rule_text(e) == "" and evidence_text(e).startswith("SM activity: avg 7 %, highest 10-min avg 8 %")


def test_signal_names_never_show_promql() -> None:
    assert signal_name("rate(vllm:num_preemptions_total[4200s])") == "preemptions"
    assert signal_name("rate(tgi_request_queue_duration_sum[600s])") == "tgi request queue duration sum"
    assert signal_name("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE") == "tensor core activity"


def _finding(episode_start: datetime | None) -> Finding:
    episodes = (Episode(start=episode_start, end=T, ongoing=True),) if episode_start else ()
    return Finding(kind=WasteKind.IDLE, detector="idle_allocation", subject=Subject(cluster="c", namespace="ml", pod="p"),
                   title="1 GPU(s) held by ml/p idle for 70 min", recommendation="r", observed_at=T, window_s=4200,
                   episodes=episodes, wasted_gpu_share=Decimal(1))


def test_since_is_when_the_waste_began_not_when_it_was_first_reported() -> None:
    # GIVEN a finding first reported at this scan whose evidence shows 70 min of waste
    f = _finding(T - timedelta(minutes=70))
    # THEN "since" is 70 min before the scan, never "0m before the scan"
    assert waste_since(T, f) == T - timedelta(minutes=70)
    assert since_words(T, f, T) == "2024-01-01 00:10 UTC (1h 10m before the scan)"
    # AND a finding first reported two days ago, still wasting, is open since then, with no "first reported" twice
    assert since_words(T - timedelta(days=2), f, T) == "2023-12-30 01:20 UTC (2d 0h before the scan)"
    # AND a later report of a waste the first report saw begin earlier keeps its start (from the money ledger)
    first = T - timedelta(hours=3)
    ledger = (LedgerSpan(start=first - timedelta(minutes=50), end=T, usd_per_day=Decimal(10)),)
    assert waste_since(first, f, ledger) == first - timedelta(minutes=50)
    # AND a span of an earlier open period (ended before this one's evidence began) is not its start
    old = (LedgerSpan(start=T - timedelta(days=9), end=T - timedelta(days=8), usd_per_day=Decimal(10)),)
    assert waste_since(first, f, old) == first
    assert waste_since(first, None, old, window_s=4200) == first


def test_a_sizing_note_without_episodes_says_first_reported_on_its_evidence() -> None:
    f = _finding(None)
    assert since_words(T, f, T) == "first reported at this scan (2024-01-01 01:20 UTC), on 70 min of evidence"


def test_every_kind_has_one_name_in_people_words_and_its_heading_starts_with_it() -> None:
    for kind in WasteKind:
        label = kind_label(kind)
        assert "_" not in label, kind
        assert kind in KIND_HEADINGS, kind
        assert label.lower() in kind_heading(kind).lower(), (kind, label, kind_heading(kind))

"""Time-resolved telemetry, inferred sample spacing and unreadable samples, on the minimal inputs of issue 10.

Each input is written as a recording (text exposition, millisecond timestamps) and read through the recording
adapter, then scanned where a verdict is asserted. The same buckets come from Prometheus (the parity tests).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gpuwaste.detectors import DetectorSettings, run_detectors
from gpuwaste.join import join
from gpuwaste.models.findings import WasteKind
from gpuwaste.models.telemetry import Signal
from gpuwaste.sources.recording import RecordingClusterSource, RecordingTelemetrySource
from tests.fixtures.field_guide.builders import node, pod

EVAL = datetime(2024, 1, 1, 6, 0, tzinfo=UTC)
LABELS = 'gpu="0",UUID="GPU-0000aaaa-0001",modelName="NVIDIA A100-SXM4-80GB",Hostname="n1",namespace="ml",pod="train-0"'


def _write(tmp: Path, lines: list[str], *, window_s: int, step_s: float = 30.0) -> Path:
    (tmp / "telemetry.prom").write_text("\n".join(lines) + "\n")
    objs = [node("n1", itype="p4de.24xlarge", gpus=1), pod("ml", "train-0", "n1", started="2024-01-01T00:00:00Z")]
    (tmp / "cluster.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    (tmp / "recording.json").write_text(json.dumps({"cluster": "t", "eval_time": EVAL.isoformat(), "window_s": window_s,
                                                   "scrape_interval_s": step_s, "format": "text"}))
    return tmp


def _series(metric: str, value, *, window_s: int, step_s: int = 30, labels: str = LABELS) -> list[str]:
    """One sample every `step_s` over (EVAL − window, EVAL]; `value(minute)` gives each sample's value text."""
    out = []
    n = window_s // step_s
    for i in range(1, n + 1):
        t = EVAL - timedelta(seconds=window_s) + timedelta(seconds=i * step_s)
        minute = (t - (EVAL - timedelta(seconds=window_s))).total_seconds() / 60
        out.append(f"{metric}{{{labels}}} {value(minute)} {int(t.timestamp() * 1000)}")
    return out


def _scan(path: Path, window: timedelta):
    tel = RecordingTelemetrySource(path).telemetry(at=EVAL, window=window)
    cl = RecordingClusterSource(path).cluster_state(at=EVAL)
    settings = DetectorSettings()
    ctx = join(cl, tel, settings.common)
    return tel, ctx, run_detectors(ctx, settings.by_name(), settings.enabled)


def test_a_five_minute_export_gets_full_coverage_and_a_verdict(tmp_path: Path):
    # GIVEN an idle GPU exported every 5 minutes for an hour (a recording configured with no spacing: default 30 s)
    lines = _series(Signal.GR_ENGINE_ACTIVE.value, lambda m: "0", window_s=3600, step_s=300)
    path = _write(tmp_path, lines, window_s=3600, step_s=30)
    # WHEN scanned over the hour
    tel, ctx, result = _scan(path, timedelta(hours=1))
    # THEN the spacing is inferred from the data (300 s), coverage is full (not 10 %), and the idle GPU gets its verdict
    assert tel.scrape_interval_s == 300.0 and tel.scrape_interval_inferred
    st = tel.gpus[0].merged(Signal.GR_ENGINE_ACTIVE)
    assert st is not None and st.count == 12 and tel.coverage(st) == 1.0
    assert [f.kind for f in result.findings if f.subject.pod == "train-0"] == [WasteKind.IDLE]


def test_an_unreadable_sample_is_counted_with_file_and_line_and_never_changes_the_signal(tmp_path: Path):
    # GIVEN a busy GPU (GR engine 0.9) whose exporter wrote one non-numeric sample and one ratio of 250 (a percent in a
    # ratio field), with GPU_UTIL alongside
    gr = _series(Signal.GR_ENGINE_ACTIVE.value, lambda m: "0.9", window_s=3600)
    bad_text = gr[30].rsplit(" ", 2)
    gr[30] = f"{bad_text[0]} ERR! {bad_text[2]}"
    bad_range = gr[80].rsplit(" ", 2)
    gr[80] = f"{bad_range[0]} 250 {bad_range[2]}"
    util = _series(Signal.GPU_UTIL.value, lambda m: "3", window_s=3600)
    path = _write(tmp_path, gr + util, window_s=3600)
    # WHEN scanned
    tel, ctx, result = _scan(path, timedelta(hours=1))
    # THEN both samples are problems with file:line, their two 5-minute buckets (20 samples) are left out, the GR engine
    # stays the activity signal (busy: no idle verdict from the 3 % GPU_UTIL), and the report carries the count
    (problem,) = tel.problems
    assert problem.metric == Signal.GR_ENGINE_ACTIVE.value and problem.count == 20
    assert problem.where == f"{path / 'telemetry.prom'}:31" and "non-numeric" in problem.reason
    st = tel.gpus[0].merged(Signal.GR_ENGINE_ACTIVE)
    assert st is not None and st.unreadable == 20 and st.count == 100 and st.max == 0.9
    assert sum(1 for b in st.buckets if b.count == 0) == 2
    assert ctx.activity_signal(tel.gpus[0]) is Signal.GR_ENGINE_ACTIVE
    assert not [f for f in result.findings if f.kind in (WasteKind.IDLE, WasteKind.UNDERUSED)]
    assert tel.unreadable_samples == 20


def test_every_sample_unreadable_keeps_the_signal_and_gives_no_verdict(tmp_path: Path):
    # GIVEN a GR engine series whose every sample is a DCGM blank, and GPU_UTIL reading 0
    gr = _series(Signal.GR_ENGINE_ACTIVE.value, lambda m: "9223372036854775794", window_s=3600)
    util = _series(Signal.GPU_UTIL.value, lambda m: "0", window_s=3600)
    path = _write(tmp_path, gr + util, window_s=3600)
    # WHEN scanned
    tel, ctx, result = _scan(path, timedelta(hours=1))
    # THEN the GR engine is still the signal (count 0, 120 unreadable) and no idle verdict is drawn from GPU_UTIL
    assert ctx.activity_signal(tel.gpus[0]) is Signal.GR_ENGINE_ACTIVE
    assert tel.problems[0].count == 120 and "blank" in tel.problems[0].reason
    assert not [f for f in result.findings if f.kind is WasteKind.IDLE]


def test_a_late_stall_shows_in_the_buckets(tmp_path: Path):
    # GIVEN a training GPU busy for the first hour of a 4-hour window, then hung: GPU_UTIL stays 100 %, tensor and DRAM
    # fall to 0, power to idle
    w = 4 * 3600
    lines = (_series(Signal.GPU_UTIL.value, lambda m: "100", window_s=w)
             + _series(Signal.TENSOR_ACTIVE.value, lambda m: "0.6" if m <= 60 else "0", window_s=w)
             + _series(Signal.DRAM_ACTIVE.value, lambda m: "0.4" if m <= 60 else "0", window_s=w)
             + _series(Signal.POWER_USAGE.value, lambda m: "380" if m <= 60 else "90", window_s=w))
    path = _write(tmp_path, lines, window_s=w)
    # WHEN the 4-hour window is read
    tel = RecordingTelemetrySource(path).telemetry(at=EVAL, window=timedelta(seconds=w))
    # THEN 24 buckets of 10 minutes: the first 6 show the work, the last 18 the stall (3 h × the GPU), on every signal
    assert tel.bucket_s == 600
    dev = tel.gpus[0]
    tensor, power, util = (dev.merged(s) for s in (Signal.TENSOR_ACTIVE, Signal.POWER_USAGE, Signal.GPU_UTIL))
    assert tensor is not None and power is not None and util is not None
    assert [round(b.avg or 0, 3) for b in tensor.buckets] == [0.6] * 6 + [0.0] * 18
    assert [b.avg for b in power.buckets] == [380.0] * 6 + [90.0] * 18
    assert {b.avg for b in util.buckets} == {100.0} and all(b.count == 20 for b in util.buckets)
    stalled_s = sum(tel.bucket_s for b in tensor.buckets if b.count and (b.avg or 0) <= 0.02)
    assert stalled_s == 3 * 3600
    # AND the window summary alone would hide it: the highest 10-minute tensor average is the busy hour's
    assert tensor.max_avg_10m == 0.6


def test_a_bursty_service_under_a_ten_minute_window_is_not_low_bandwidth_waste(tmp_path: Path):
    # GIVEN an inference GPU serving bursts: SM and DRAM at 90 % / 60 % for 30 s every 2 minutes, idle between
    w = 600
    lines = (_series(Signal.SM_ACTIVE.value, lambda m: "0.9" if m % 2 == 0 else "0.02", window_s=w)
             + _series(Signal.DRAM_ACTIVE.value, lambda m: "0.6" if m % 2 == 0 else "0.01", window_s=w)
             + _series(Signal.GR_ENGINE_ACTIVE.value, lambda m: "0.95" if m % 2 == 0 else "0.03", window_s=w))
    path = _write(tmp_path, lines, window_s=w)
    # WHEN scanned over 10 minutes
    tel, ctx, result = _scan(path, timedelta(minutes=10))
    # THEN 1-minute buckets show every burst; the p95 (of bucket maxima) sees them, so no low-bandwidth or under-used verdict
    assert tel.bucket_s == 60
    sm = tel.gpus[0].merged(Signal.SM_ACTIVE)
    assert sm is not None and len(sm.buckets) == 10 and [b.max for b in sm.buckets].count(0.9) == 5
    assert sm.p95 >= 0.9
    kinds = {f.kind for f in result.findings if f.subject.pod == "train-0"}
    assert not kinds & {WasteKind.LOW_MEMORY_BANDWIDTH, WasteKind.UNDERUSED, WasteKind.IDLE}


def test_an_unreadable_sample_of_a_field_without_buckets_empties_its_window_statistics(tmp_path: Path):
    # GIVEN a framebuffer series (window statistics only) with one NaN sample, next to a readable activity signal
    fb = _series(Signal.FB_USED.value, lambda m: "NaN" if m == 30 else "1024", window_s=3600)
    gr = _series(Signal.GR_ENGINE_ACTIVE.value, lambda m: "0.5", window_s=3600)
    path = _write(tmp_path, fb + gr, window_s=3600)
    # WHEN read
    tel = RecordingTelemetrySource(path).telemetry(at=EVAL, window=timedelta(hours=1))
    # THEN the framebuffer's window counts as unreadable (as Prometheus's NaN sum would show), reported with its line
    st = tel.gpus[0].merged(Signal.FB_USED)
    assert st is not None and st.count == 0 and st.unreadable == 120 and st.avg == 0.0
    (problem,) = tel.problems
    assert problem.metric == Signal.FB_USED.value and problem.where.endswith(":60") and "non-finite" in problem.reason

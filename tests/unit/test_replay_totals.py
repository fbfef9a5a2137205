"""The Alibaba trace replay: USD/day rounded once from unrounded pods, and the mapping's origin named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gpuwaste.commands.replay import DEFAULT_INSTANCE, DEFAULT_MODEL, mapping_origin, replay_summary, scan_window
from gpuwaste.config import GpuWasteConfig
from gpuwaste.sources.alibaba import AlibabaReplaySource, AlibabaTrace, PodSeries


def _idle_trace(pods: int = 3, hours: int = 2) -> AlibabaTrace:
    start = datetime(2022, 9, 11, 0, 0, tzinfo=UTC)
    step_ms = 57_000
    n = hours * 3600_000 // step_ms + 1
    series = {}
    for i in range(pods):
        key = f"{i:x}" * 32  # the pod and node names use the first 10 characters
        ts = [round(start.timestamp() * 1000) + k * step_ms for k in range(n)]
        series[key] = PodSeries(key, util_ts=ts, util=[0.0] * n, mem_ts=list(ts), mem_mib=[1024.0] * n)
    end = start + timedelta(milliseconds=(n - 1) * step_ms)
    return AlibabaTrace(pods=series, step_s=57.0, start=start, end=end, rows=2 * pods * n)


def test_replay_usd_per_day_is_rounded_once_from_unrounded_pods() -> None:
    # GIVEN 3 pods with zero duty cycle mapped to g5.xlarge ($1.006/GPU-h)
    source = AlibabaReplaySource(_idle_trace(), gpu_model=DEFAULT_MODEL, instance_type=DEFAULT_INSTANCE)
    window_s = int(source.trace.span_s)
    # WHEN the whole trace is replayed
    s = replay_summary(scan_window(source, at=source.trace.end, window_s=window_s, config=GpuWasteConfig()), source)
    # THEN 3 × $1.006 × 24 = $72.432 → $72.43 (rounding each pod first would give 3 × $24.14 = $72.42)
    assert s.counts["idle"] == 3
    assert s.usd_per_gpu_hour == Decimal("1.006")
    assert s.usd_per_day["idle"] == Decimal("72.43")


def test_replay_mapping_origin_names_the_values_used() -> None:
    # GIVEN the defaults, and an overridden model and instance type
    # WHEN the mapping origin is stated
    default = mapping_origin(DEFAULT_MODEL, DEFAULT_INSTANCE)
    overridden = mapping_origin("NVIDIA L4", "g6.xlarge")
    model_only = mapping_origin("NVIDIA L4", DEFAULT_INSTANCE)
    # THEN "the defaults" only when nothing was overridden; otherwise the options that set them
    assert default == "the defaults"
    assert overridden.startswith("set by --gpu-model and --instance-type")
    assert model_only.startswith("set by --gpu-model;")


def test_replay_terminal_line_says_the_wasted_gpu_hours_and_the_stretch_rule(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # GIVEN 3 idle pods over 2 h replayed (6 GPU-hours observed, the whole window an idle stretch)
    import io

    from rich.console import Console

    from gpuwaste.commands import replay

    source = AlibabaReplaySource(_idle_trace(), gpu_model=DEFAULT_MODEL, instance_type=DEFAULT_INSTANCE)
    s = replay_summary(scan_window(source, at=source.trace.end, window_s=int(source.trace.span_s),
                                   config=GpuWasteConfig()), source)
    buf = io.StringIO()
    monkeypatch.setattr(replay, "out", Console(file=buf, width=400, color_system=None))
    # WHEN its summary is printed
    replay._print_summary(s, source)
    text = buf.getvalue()
    # THEN the idle line gives the observed and the wasted GPU-hours (the figure docs/real-data.md quotes), the
    # verdicts read as words, and the rule printed is the stretch rule the scan applies
    idle_line = next(line for line in text.splitlines() if line.strip().startswith("idle "))
    wasted = s.wasted_gpu_hours["idle"]
    assert wasted > 0
    assert f"{s.gpu_hours['idle']:.1f} GPU-h observed, {wasted:.1f} GPU-h wasted" in idle_line
    assert "no verdict " in text and "no_verdict" not in text and "under-used " in text
    assert "stretches" in text and "every 10-min average < 0.05" not in text

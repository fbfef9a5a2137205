"""Episodes: waste that starts or stops inside the window is found as stretches with start, end and GPU-hours."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from gpuwaste.detectors import DetectorSettings, detect
from gpuwaste.models.findings import WasteKind
from gpuwaste.models.telemetry import Signal
from tests.unit.timeline_builders import T, cluster, const, gpu, node, pod, until, window

H = 3600
UTIL, SM, TENSOR, DRAM, POWER, LIMIT = (Signal.GPU_UTIL, Signal.SM_ACTIVE, Signal.TENSOR_ACTIVE, Signal.DRAM_ACTIVE,
                                        Signal.POWER_USAGE, Signal.POWER_LIMIT)


def _training_gpu(i: int, *, hang_after_min: float, window_s: int, bucket_s: int) -> object:
    """An H100 of a training pod: real work until `hang_after_min`, then a hung collective (B14)."""
    signals = {
        UTIL: until(hang_after_min, 96.0, 100.0),
        SM: until(hang_after_min, 0.62, 0.97),
        TENSOR: until(hang_after_min, 0.41, 0.0),
        DRAM: until(hang_after_min, 0.52, 0.0),
        POWER: until(hang_after_min, 560.0, 118.0),
        LIMIT: const(700.0),
    }
    return gpu(f"GPU-{i:04d}", "n1", signals, pod="pretrain-0", namespace="ml", window_s=window_s, bucket_s=bucket_s)


def test_a_training_job_that_hangs_after_its_first_hour_is_stalled_for_three_hours_times_its_gpus() -> None:
    # GIVEN an 8×H100 training pod that works for the first hour of a 4-hour window, then hangs (busy-looking, no work)
    gpus = [_training_gpu(i, hang_after_min=60, window_s=4 * H, bucket_s=300) for i in range(8)]
    cl = cluster(node(gpus=8), pod("pretrain-0", 8, kind="PyTorchJob"))
    # WHEN scanned over the 4 hours
    found = detect(cl, window(*gpus, window_s=4 * H, bucket_s=300)).findings
    # THEN it is stalled for 3 h × 8 GPUs = 24 GPU-hours, an episode from hour 1 still going on, and nothing else is priced
    (stall,) = [f for f in found if f.kind is WasteKind.STALLED]
    (ep,) = stall.episodes
    assert (ep.start, ep.end, ep.ongoing) == (T - timedelta(hours=3), T, True)
    assert stall.wasted_gpu_hours == Decimal(24) and stall.wasted_gpu_share == 8
    assert stall.observed_s == 4 * H
    assert not [f for f in found if f.kind.is_waste and f is not stall and f.wasted_gpu_share > 0 and f.money_owner is None]


def test_a_job_that_goes_idle_after_40_minutes_of_an_hour_is_idle_for_20_minutes_only_when_long_enough() -> None:
    # GIVEN two pods busy at first, then idle: one for the last 40 minutes, one for the last 20 minutes
    a = gpu("GPU-a", "n1", {SM: until(20, 0.7, 0.0)}, pod="a-0", namespace="ml")
    b = gpu("GPU-b", "n1", {SM: until(40, 0.7, 0.0)}, pod="b-0", namespace="ml")
    cl = cluster(node(gpus=2), pod("a-0"), pod("b-0"))
    # WHEN scanned over the hour (episodes need ≥ 30 minutes)
    found = detect(cl, window(a, b), DetectorSettings(enabled=["idle_allocation"])).findings
    # THEN only a is idle: one ongoing 40-minute episode = 0.6667 GPU-hours
    (idle,) = found
    assert idle.subject.pod == "a-0" and idle.kind is WasteKind.IDLE
    (ep,) = idle.episodes
    assert (ep.start, ep.ongoing, ep.wasted_gpu_hours) == (T - timedelta(minutes=40), True, Decimal("0.6667"))


def test_an_idle_stretch_that_ended_before_the_evaluation_time_is_not_ongoing() -> None:
    # GIVEN a pod idle for the first 45 minutes of the hour, then busy
    g = gpu("GPU-a", "n1", {SM: lambda m: 0.0 if m <= 45 else 0.8}, pod="a-0", namespace="ml")
    # WHEN scanned
    (idle,) = detect(cluster(node(gpus=1), pod("a-0")), window(g), DetectorSettings(enabled=["idle_allocation"])).findings
    # THEN the episode ends at minute 45 and is over
    (ep,) = idle.episodes
    assert (ep.start, ep.end, ep.ongoing) == (T - timedelta(hours=1), T - timedelta(minutes=15), False)
    assert idle.details["ongoing"] is False and idle.wasted_gpu_hours == Decimal("0.75")


def test_the_highest_10_minute_average_never_reaches_outside_the_window() -> None:
    # GIVEN a GPU idle for the whole hour whose source summary still carries a 0.9 "highest 10-minute average"
    # from an epoch-aligned step that reached back before the window start (a burst that ended before it)
    g = gpu("GPU-a", "n1", {SM: const(0.0)}, pod="a-0", namespace="ml")
    grp = g.groups[0]
    leaky = grp.signals[SM.value].model_copy(update={"max_avg_10m": 0.9})
    g = g.model_copy(update={"groups": (grp.model_copy(update={"signals": {SM.value: leaky}}),)})
    # WHEN scanned with the window's buckets
    found = detect(cluster(node(gpus=1), pod("a-0")), window(g), DetectorSettings(enabled=["idle_allocation"])).findings
    # THEN the 10-minute averages come from the buckets inside the window: idle for the whole hour
    (idle,) = found
    assert idle.evidence[0].max_avg_10m == 0.0 and idle.wasted_gpu_hours == Decimal(1)


def test_an_idle_stretch_before_a_stall_that_started_later_stays_its_own_finding() -> None:
    # GIVEN a pod idle for the first 2 hours of a 4-hour window, then hung (busy-looking, no work) for the last 2
    def sig(idle: float, stall: float):  # type: ignore[no-untyped-def]
        return lambda m: idle if m <= 120 else stall
    gpus = [gpu(f"GPU-{i}", "n1", {UTIL: sig(0.0, 100.0), SM: sig(0.0, 0.97), TENSOR: const(0.0), DRAM: const(0.0),
                                   POWER: sig(70.0, 115.0), LIMIT: const(700.0)}, pod="pretrain-0", namespace="ml",
                window_s=4 * H, bucket_s=300) for i in range(2)]
    cl = cluster(node(gpus=2), pod("pretrain-0", 2, kind="PyTorchJob"))
    # WHEN scanned
    found = [f for f in detect(cl, window(*gpus, window_s=4 * H, bucket_s=300)).findings if f.kind.is_waste]
    # THEN idle for the first 2 h (over) and stalled for the last 2 h (going on): 4 + 4 GPU-hours, each priced once
    by_kind = {f.kind: f for f in found}
    idle, stall = by_kind[WasteKind.IDLE], by_kind[WasteKind.STALLED]
    assert [(e.start, e.end, e.ongoing) for e in idle.episodes] == [(T - timedelta(hours=4), T - timedelta(hours=2), False)]
    assert [(e.start, e.end, e.ongoing) for e in stall.episodes] == [(T - timedelta(hours=2), T, True)]
    assert (idle.wasted_gpu_hours, stall.wasted_gpu_hours) == (Decimal(4), Decimal(4))
    assert idle.money_owner is None and stall.money_owner is None


def test_a_gpu_that_starts_spinning_at_high_power_is_a_power_anomaly_for_that_stretch() -> None:
    # GIVEN a pod computing for the first 20 minutes, then at 5 % SM activity while drawing 90 % of its 700 W limit
    g = gpu("GPU-p", "n1", {SM: until(20, 0.8, 0.05), POWER: until(20, 600.0, 630.0), LIMIT: const(700.0), DRAM: until(20, 0.5, 0.8)},
            pod="spin-0", namespace="ml")
    # WHEN scanned
    found = [f for f in detect(cluster(node(gpus=1), pod("spin-0")), window(g)).findings if f.kind.is_waste]
    # THEN a power anomaly for the last 40 minutes, going on: 1 × (1 − 0.05) × 40/60 GPU-h
    (pa,) = found
    assert pa.kind is WasteKind.POWER_ANOMALY
    (ep,) = pa.episodes
    assert (ep.start, ep.ongoing, ep.wasted_gpu_hours) == (T - timedelta(minutes=40), True, Decimal("0.6333"))

"""Detection shortcuts are proofs, not guesses: the bucket bounds that let detectors skip subjects really bound every
value the detectors would have computed, and findings not built because a reported finding supersedes them change
no verdict.

Inputs: the bundled demo fleet and generated scorecard/random fleets (every waste kind and its look-alikes), read
through the recording path as a scan reads them.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from gpuwaste.bootstrap import local
from gpuwaste.config import GpuWasteConfig
from gpuwaste.detectors import REGISTRY, DetectorSettings, NoVerdict, run_detectors
from gpuwaste.detectors.episodes import complete
from gpuwaste.detectors.readings import power_ratio_bounds, power_ratio_series
from gpuwaste.detectors.registry import Superseded, _supersede, subject_key
from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording
from gpuwaste.join import BOUND_EPS, ScanContext, join
from gpuwaste.models.findings import Finding
from gpuwaste.models.telemetry import Signal
from gpuwaste.pricing.power import power_limits_w
from tests.unit.timeline_builders import cluster, const, gpu, node, pod, window

SM, UTIL, POWER, LIMIT = Signal.SM_ACTIVE, Signal.GPU_UTIL, Signal.POWER_USAGE, Signal.POWER_LIMIT


def _context(path: Path, window_s: int | None = None) -> tuple[ScanContext, DetectorSettings]:
    cfg = GpuWasteConfig()
    sources = local.recording_sources(path, cfg)
    cfg, _ = local.recording_config(cfg, sources, config_given=False)
    assert sources.recording is not None
    at = sources.recording.end_time()
    window = timedelta(seconds=window_s or sources.recording.meta.window_s or 3600)
    telemetry = sources.telemetry.telemetry(at=at, window=window)
    cluster = sources.cluster.cluster_state(at=at)
    ctx = join(cluster, telemetry, cfg.detectors.common, power_limits_w=power_limits_w(g.model_name for g in telemetry.gpus))
    return ctx, cfg.detectors


def _fleets() -> Iterator[tuple[str, Path, int | None]]:
    yield "demo", local.demo_recording(), None
    yield "demo-30m", local.demo_recording(), 1800
    with tempfile.TemporaryDirectory(prefix="shortcuts-") as tmp:
        for layout, nodes, seed in (("scorecard", 2, 7), ("random", 30, 3)):
            path = write_recording(generate_fleet(FleetSpec(layout=layout, nodes=nodes, seed=seed, cluster=layout)),
                                   Path(tmp) / layout, compress=False)
            yield layout, path, None


@pytest.fixture(scope="module")
def contexts() -> list[tuple[str, ScanContext, DetectorSettings]]:
    out = []
    for name, path, window_s in _fleets():
        ctx, settings = _context(path, window_s)
        out.append((name, ctx, settings))
    return out


def test_bucket_bounds_hold_every_series_value_of_every_allocation(contexts):
    # GIVEN fleets with idle, busy, stalled, power-hungry, MIG and broken-counter GPUs (time-resolved telemetry)
    checked = 0
    for name, ctx, _ in contexts:
        assert ctx.slots, name
        for alloc in ctx.allocations:
            # WHEN the activity floor and the power bounds are taken
            floor = ctx.activity_floor(alloc.devices, alloc.pod)
            series = ctx.activity_series(alloc.devices, alloc.pod)
            shown = [v for v in series if v is not None]
            # THEN no slot shows activity under the floor, and a floor of None means no slot shows any value
            if floor is None:
                assert shown == [], (name, alloc.pod.name)
            else:
                assert all(v >= floor - BOUND_EPS for v in shown), (name, alloc.pod.name, floor, shown)
            power = power_ratio_bounds(ctx, alloc.devices)
            watts = [v for v in power_ratio_series(ctx, alloc.devices) if v is not None]
            if power is None:
                assert watts == [], (name, alloc.pod.name)
            else:
                assert all(power[0] - BOUND_EPS <= v <= power[1] + BOUND_EPS for v in watts), (name, alloc.pod.name, power, watts)
            # AND every device's buckets lie between its summary's bounds, signal by signal
            for dev in alloc.devices:
                for sig in (Signal.SM_ACTIVE, Signal.GR_ENGINE_ACTIVE, Signal.GPU_UTIL, Signal.TENSOR_ACTIVE, Signal.POWER_USAGE):
                    st = ctx.device_stats(dev, sig, alloc.pod)
                    avgs = [b.avg for b in ctx.buckets_of(st) if b is not None and b.avg is not None]
                    bounds = ctx.avg_bounds(st)
                    assert (bounds is None) == (not avgs), (name, alloc.pod.name, sig)
                    if bounds is not None:
                        assert min(avgs) >= bounds[0] and max(avgs) <= bounds[1]
                        checked += 1
    assert checked > 100


def _contradicted_by_hand(ctx: ScanContext, dev) -> list[bool]:  # type: ignore[no-untyped-def]
    """The bucket-level contradiction of one device, slot by slot, without any shortcut."""
    sig = ctx.activity_signal(dev)
    limit = ctx.power_limit_w(dev)
    if sig is None or sig is Signal.GPU_UTIL or dev.device.gpu_i_id is not None or limit is None:
        return [False] * len(ctx.slots)
    prof = ctx.buckets_of(dev.merged(sig))
    util = ctx.buckets_of(dev.merged(Signal.GPU_UTIL))
    power = ctx.buckets_of(dev.merged(Signal.POWER_USAGE))
    return [p is not None and u is not None and w is not None and sig.to_ratio(p.total / p.count) < 0.05
            and u.total / u.count / 100 >= 0.5 and w.total / w.count >= 0.5 * limit
            for p, u, w in zip(prof, util, power, strict=True)]


def _broken_counters() -> ScanContext:
    """Four GPUs over 4 hours: a profiling counter that drops to 0 after hour 2 while GPU_UTIL and power go on, one
    that reads 0 only while power is low, one idle on every signal, and a working one."""
    def late(m: float) -> float:
        return 0.7 if m <= 120 else 0.0

    w = 4 * 3600
    gpus = [
        gpu("GPU-late", "n1", {SM: late, UTIL: const(97.0), POWER: const(600.0), LIMIT: const(700.0)}, pod="a", namespace="ml", window_s=w, bucket_s=300),
        gpu("GPU-cool", "n1", {SM: late, UTIL: const(97.0), POWER: const(100.0), LIMIT: const(700.0)}, pod="b", namespace="ml", window_s=w, bucket_s=300),
        gpu("GPU-idle", "n1", {SM: const(0.0), UTIL: const(0.0), POWER: const(60.0), LIMIT: const(700.0)}, pod="c", namespace="ml", window_s=w, bucket_s=300),
        gpu("GPU-busy", "n1", {SM: const(0.8), UTIL: const(99.0), POWER: const(650.0), LIMIT: const(700.0)}, pod="d", namespace="ml", window_s=w, bucket_s=300),
    ]
    return join(cluster(node(gpus=4), pod("a"), pod("b"), pod("c"), pod("d")), window(*gpus, window_s=w, bucket_s=300))


def test_contradicted_buckets_match_a_slot_by_slot_reading(contexts):
    # GIVEN the fleets and GPUs whose profiling counter breaks mid-window
    found = 0
    for name, ctx, _ in [*contexts, ("broken counters", _broken_counters(), None)]:
        for dev in ctx.telemetry.gpus:
            # WHEN the contradicted buckets of each device are read with the bounds shortcut
            got = ctx.contradicted_slots([dev])
            # THEN they are exactly the buckets a slot-by-slot reading finds
            assert got == _contradicted_by_hand(ctx, dev), (name, str(dev.device))
            found += sum(got)
    assert found == 24  # GPU-late's last 2 hours (24 five-minute buckets): the shortcut was not the only path taken


def _findings_without_placeholders(ctx: ScanContext, settings: DetectorSettings) -> list[Finding]:
    """Every detector's findings built in full (no `superseded_now`), then supersession as before the shortcut."""
    findings: list[Finding] = []
    for name in settings.enabled or list(REGISTRY):
        spec = REGISTRY[name]
        for item in spec.fn(ctx, settings.by_name().get(name) or spec.settings_model()):
            assert not isinstance(item, Superseded)  # outside run_detectors nothing is ever superseded early
            if not isinstance(item, NoVerdict):
                findings.append(complete(ctx, item))
    present: dict = {}
    for f in findings:
        present.setdefault(subject_key(f), []).append(f)
    return _supersede(findings, present)


def _canonical(findings: list[Finding]) -> list[str]:
    return sorted(json.dumps(f.model_dump(mode="json"), sort_keys=True) for f in findings)


@pytest.mark.parametrize("fleet", ["demo", "demo-30m", "scorecard", "random"])
def test_findings_not_built_because_superseded_change_no_verdict(contexts, fleet):
    # GIVEN a fleet where idle, under-used and low-bandwidth findings cover the same pods
    name, ctx, settings = next(c for c in contexts if c[0] == fleet)
    # WHEN detection runs with the superseded findings skipped (run_detectors) and with every finding built
    fast = run_detectors(ctx, settings.by_name(), settings.enabled)
    full = _findings_without_placeholders(ctx, settings)
    # THEN the surviving findings are the same, finding for finding (money owners are assigned after supersession)
    assert _canonical([f.model_copy(update={"money_owner": None}) for f in fast.findings]) == \
        _canonical([f.model_copy(update={"money_owner": None}) for f in full])
    assert fast.findings

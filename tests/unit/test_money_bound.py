"""Each GPU-hour priced once: the waste a scan reports never exceeds the cost of the GPUs it judged.

Proven over the scorecard scenarios, the demo, seeded random generator fleets, and hypothesis-built clusters
whose pods go idle, stall, spin at high power, break their profiling counters or finish mid-window.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwaste.bootstrap import local
from gpuwaste.config import GpuWasteConfig
from gpuwaste.detectors import DetectorSettings, detect
from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording
from gpuwaste.fleet.scorecard import scorecard_settings
from gpuwaste.join import ScanContext, join
from gpuwaste.models.cluster import PodPhase
from gpuwaste.models.findings import Finding
from gpuwaste.models.telemetry import Signal
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.pricing.cost import price_finding
from gpuwaste.pricing.prices import GpuHourRate
from tests.unit.timeline_builders import T, cluster, const, gpu, node, pod, until, window

BOOK = PriceBook.bundled()
CENTS = Decimal("0.05")


@dataclass(frozen=True)
class Budget:
    """What the judged GPUs cost over the window (GPU-hours, USD) and per day at their rate (USD/day)."""

    gpu_hours: Decimal
    usd_in_window: Decimal
    usd_per_day: Decimal
    per_node_gpu_hours: dict[str, Decimal]


def budget(ctx: ScanContext) -> Budget:
    """Physical GPUs of every node × the window, priced at each node's own rate."""
    hours = Decimal(ctx.window_s) / Decimal(3600)
    gh, usd, day = Decimal(0), Decimal(0), Decimal(0)
    per_node: dict[str, Decimal] = {}
    for inv in ctx.nodes.values():
        gpus = Decimal(inv.capacity_gpus())
        per_node[inv.name] = gpus * hours
        gh += gpus * hours
        s = ctx.node_subject(inv, inv.devices, gpus)
        rate = BOOK.gpu_hour_rate(instance_type=s.instance_type, capacity_type=s.capacity_type, gpu_model=s.gpu_model,
                                  physical_gpus=s.physical_gpus_on_node, region=s.region, accelerator=s.accelerator)
        if isinstance(rate, GpuHourRate):
            usd += rate.usd_per_gpu_hour * gpus * hours
            day += rate.usd_per_gpu_hour * gpus * 24
    return Budget(gh, usd, day, per_node)


def assert_priced_once(findings: list[Finding], b: Budget) -> None:
    """The invariants: totals within the budget, per node within its GPUs, no two money-carrying findings of one pod
    overlapping in time."""
    waste = [f for f in findings if f.kind.is_waste]
    assert sum((f.wasted_gpu_hours for f in waste), Decimal(0)) <= b.gpu_hours + Decimal("0.01")
    assert sum((f.cost.usd_in_window or Decimal(0) for f in waste if f.cost), Decimal(0)) <= b.usd_in_window + CENTS
    assert sum((f.usd_per_day or Decimal(0) for f in waste), Decimal(0)) <= b.usd_per_day + CENTS
    per_node: dict[str, Decimal] = {}
    for f in waste:
        if f.subject.node and "replicas" not in f.details:
            per_node[f.subject.node] = per_node.get(f.subject.node, Decimal(0)) + f.wasted_gpu_hours
    for name, h in per_node.items():
        assert h <= b.per_node_gpu_hours.get(name, Decimal(0)) + Decimal("0.01"), name
    by_pod: dict[tuple[str | None, str | None], list[Finding]] = {}
    for f in waste:
        if f.subject.pod and not f.money_owner and f.wasted_gpu_share > 0:
            by_pod.setdefault((f.subject.namespace, f.subject.pod), []).append(f)
    for key, items in by_pod.items():
        for i, a in enumerate(items):
            for c in items[i + 1:]:
                assert not any(x.start < y.end and y.start < x.end for x in a.episodes for y in c.episodes), (key, a.kind, c.kind)
    for f in waste:
        if f.money_owner:
            assert f.wasted_gpu_share == 0 and f.wasted_gpu_hours == 0
            assert f.money_owner in {o.fingerprint for o in findings}, f.title


def _scan_recording(path: Path, config: GpuWasteConfig) -> tuple[list[Finding], ScanContext]:
    sources = local.recording_sources(path, config)
    assert sources.recording is not None
    at = sources.recording.end_time()
    window_s = sources.recording.meta.window_s or 3600
    report = local.scan_service(sources, config, window_s=window_s).scan(at=at)
    ctx = join(sources.cluster.cluster_state(at=at), sources.telemetry.telemetry(at=at, window=timedelta(seconds=window_s)))
    return report.findings, ctx


def test_money_scorecard_scenarios_never_price_a_gpu_hour_twice() -> None:
    # GIVEN the scorecard fleet (every catalogue kind and its look-alikes, 3 times over)
    spec = FleetSpec(layout="scorecard", nodes=3, seed=7, cluster="scorecard")
    with tempfile.TemporaryDirectory() as tmp:
        path = write_recording(generate_fleet(spec), Path(tmp) / "sc", compress=False)
        # WHEN scanned and priced
        findings, ctx = _scan_recording(path, GpuWasteConfig(detectors=scorecard_settings(spec.history_s - 600)))
    # THEN the waste stays within what its GPUs cost, and findings sharing GPU-hours point to one owner
    b = budget(ctx)
    assert_priced_once(findings, b)
    assert sum(f.wasted_gpu_hours for f in findings if f.kind.is_waste) > 0


def test_money_demo_never_prices_a_gpu_hour_twice() -> None:
    # GIVEN the bundled demo
    # WHEN scanned
    findings, ctx = _scan_recording(local.demo_recording(), GpuWasteConfig())
    # THEN within budget
    assert_priced_once(findings, budget(ctx))


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_money_random_generator_fleets_never_price_a_gpu_hour_twice(seed: int) -> None:
    # GIVEN a seeded random fleet with more idle, under-used and free GPUs than usual
    spec = FleetSpec(layout="random", nodes=12, seed=seed, cluster=f"random-{seed}",
                     weights={"busy": 0.2, "idle": 0.3, "underused": 0.2, "bursty": 0.15, "free": 0.15})
    with tempfile.TemporaryDirectory() as tmp:
        path = write_recording(generate_fleet(spec), Path(tmp) / "r", compress=False)
        # WHEN scanned
        findings, ctx = _scan_recording(path, GpuWasteConfig())
    # THEN within budget
    assert_priced_once(findings, budget(ctx))


# -- hypothesis: small clusters whose GPUs do anything over the hour -------------------------------------------

UTIL, SM, TENSOR, DRAM, POWER, LIMIT = (Signal.GPU_UTIL, Signal.SM_ACTIVE, Signal.TENSOR_ACTIVE, Signal.DRAM_ACTIVE,
                                        Signal.POWER_USAGE, Signal.POWER_LIMIT)
PATTERNS = {
    "busy": {SM: const(0.7), UTIL: const(95.0), TENSOR: const(0.4), DRAM: const(0.5), POWER: const(520.0)},
    "idle": {SM: const(0.0), UTIL: const(0.0), TENSOR: const(0.0), DRAM: const(0.0), POWER: const(70.0)},
    "late_stall": {SM: until(20, 0.6, 0.97), UTIL: const(100.0), TENSOR: until(20, 0.4, 0.0), DRAM: until(20, 0.5, 0.0),
                   POWER: until(20, 520.0, 110.0)},
    "spin": {SM: const(0.0), TENSOR: const(0.0), DRAM: const(0.8), POWER: const(640.0)},
    "broken_counter": {SM: const(0.0), UTIL: const(98.0), POWER: const(630.0)},
    "late_idle": {SM: until(15, 0.8, 0.0), UTIL: until(15, 90.0, 0.0), POWER: until(15, 500.0, 70.0)},
    "underused": {SM: const(0.1), UTIL: const(60.0), DRAM: const(0.1), POWER: const(250.0)},
}
HOLDERS = ("none", "running", "finished")


@st.composite
def clusters(draw):  # type: ignore[no-untyped-def]
    n_gpus = draw(st.integers(1, 4))
    items: list[object] = [node(gpus=n_gpus)]
    devs = []
    for i in range(n_gpus):
        pattern = draw(st.sampled_from(sorted(PATTERNS)))
        holder = draw(st.sampled_from(HOLDERS))
        signals = {**PATTERNS[pattern], LIMIT: const(700.0)}
        name = f"p{i}-0"
        if holder == "running":
            items.append(pod(name, 1, kind=draw(st.sampled_from(["Deployment", "Job", "Pod"]))))
            devs.append(gpu(f"GPU-{i}", "n1", signals, pod=name, namespace="ml"))
        elif holder == "finished":
            end = draw(st.integers(5, 55))
            items.append(pod(name, 1, phase=PodPhase.SUCCEEDED, kind="Job", finished=T - timedelta(minutes=60 - end)))
            devs.append(gpu(f"GPU-{i}", "n1", signals, pod=name, namespace="ml"))
        else:
            devs.append(gpu(f"GPU-{i}", "n1", signals))
    return cluster(*items), window(*devs)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_money_hypothesis_clusters_never_price_a_gpu_hour_twice(case) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a small cluster whose GPUs idle, stall late, spin, break counters, finish mid-window or are unheld
    cl, tel = case
    # WHEN every detector runs and the findings are priced
    findings = [price_finding(f, BOOK) for f in detect(cl, tel, DetectorSettings()).findings]
    # THEN the waste never exceeds what the node's GPUs cost over the hour
    assert_priced_once(findings, budget(join(cl, tel)))

"""The fleet funnel (total → allocated → active → effective GPUs) and unmet GPU requests of a scan, in the scan's
inventory and on `/metrics` (issue 24 §1): computed from the join and the ledger, exposed through the real
prometheus-client exposition and read back with its parser."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuwaste.join import join
from gpuwaste.models.cluster import PodPhase
from gpuwaste.models.settings import DeliverySettings
from gpuwaste.models.telemetry import Signal
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.services.metrics import health_of_scan, snapshot_of_scan
from gpuwaste.services.scan import inventory_of
from gpuwaste.services.showback import FUNNEL_RULE, funnel_figures, health_figures, scan_ledger, showback
from gpuwaste.sinks.prometheus_metrics import render_text
from tests.unit.timeline_builders import T, cluster, const, gpu, node, pod, window

SM, UTIL = Signal.SM_ACTIVE, Signal.SM_ACTIVE


def _fleet():  # type: ignore[no-untyped-def]
    busy = {SM: const(0.6)}
    idle = {SM: const(0.0)}
    c = cluster(
        node("n1", gpus=4, itype="p5.48xlarge"),
        pod("train-0", 1),
        pod("idle-0", 1, ns="research"),
        pod("finished-0", 1, phase=PodPhase.SUCCEEDED, kind="Job", finished=T - timedelta(minutes=30)),
        pod("waiting-0", 2, node_name=None, phase=PodPhase.PENDING, started=T - timedelta(minutes=45)),
        pod("waiting-1", 1, node_name=None, phase=PodPhase.PENDING, started=T - timedelta(minutes=5), ns="research"),
    )
    w = window(
        gpu("GPU-0", "n1", busy, pod="train-0", namespace="ml"),
        gpu("GPU-1", "n1", idle, pod="idle-0", namespace="research"),
        gpu("GPU-2", "n1", busy, pod="finished-0", namespace="ml"),
        gpu("GPU-3", "n1", idle),
    )
    return join(c, w)


def test_funnel_counts_total_allocated_active_effective_by_the_stated_rule() -> None:
    # GIVEN 4 GPUs: one busy at 60 %, one held idle, one held for half the window at 60 %, one free
    ctx = _fleet()
    # WHEN the ledger and its funnel are built
    sl = scan_ledger(ctx, PriceBook.bundled())
    row = funnel_figures(sl, "cluster")["c"]
    # THEN total 4 GPUs, allocated 2.5, active 1.5 (the idle holder is not), effective 0.6 × 1.5
    assert row["total_gpus"] == 4.0
    assert row["allocated_gpus"] == 2.5
    assert row["active_gpus"] == 1.5
    assert row["effective_gpus"] == pytest.approx(0.9, abs=1e-3)
    assert row["unobserved_gpus"] == 0.0
    assert row["total_gpu_hours"] == 4.0  # the 1-hour window
    # AND per namespace the holders are split, the free GPU is its own group
    by_ns = funnel_figures(sl, "namespace")
    assert by_ns["ml"]["allocated_gpus"] == 1.5 and by_ns["research"]["active_gpus"] == 0.0
    assert by_ns["(unallocated)"]["total_gpus"] == pytest.approx(1.5)
    assert "10-minute average" in FUNNEL_RULE


def test_unmet_gpu_requests_by_resource_with_their_wait_in_the_inventory_and_metrics() -> None:
    # GIVEN two pending pods no node took (45 and 5 minutes old)
    ctx = _fleet()
    sl = scan_ledger(ctx, PriceBook.bundled())
    inv = inventory_of(ctx, sl)
    # THEN the inventory says how many pods ask for how many GPUs and how long the longest waited
    assert inv.unmet_gpu_requests == {
        "nvidia.com/gpu": {"pods": 2, "requested": 3, "longest_wait_s": 2700, "mean_wait_s": 1500.0}
    }
    assert inv.conservation["holds"] is True and inv.funnel["cluster"]["c"]["allocated_gpus"] == 2.5
    # AND /metrics exposes the funnel, the unmet requests and the window's cost charged once
    health = health_of_scan(
        "c",
        at=T,
        duration_s=1.0,
        window_s=3600,
        gpus=4,
        findings=[],
        no_verdict_detectors=[],
        showback=health_figures(sl, DeliverySettings()),
    )
    text = render_text(snapshot_of_scan([], health, DeliverySettings(), top=5)).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    assert (
        samples[
            ("gpuwaste_fleet_gpus", (("cluster", "c"), ("gpu_model", "NVIDIA H100 80GB HBM3"), ("stage", "allocated")))
        ]
        == 2.5
    )
    assert samples[("gpuwaste_team_gpus", (("cluster", "c"), ("stage", "active"), ("team", "ml")))] == 1.5
    assert samples[("gpuwaste_unmet_gpu_requests", (("cluster", "c"), ("resource", "nvidia.com/gpu")))] == 2
    assert (
        samples[("gpuwaste_unmet_gpu_request_wait_seconds", (("cluster", "c"), ("resource", "nvidia.com/gpu")))] == 2700
    )
    cost = {dict(k[1])["line"]: v for k, v in samples.items() if k[0] == "gpuwaste_window_cost_usd"}
    c = sl.ledger.conservation
    assert (
        Decimal(str(cost["holders"] + cost["unsold_slices"] + cost["unallocated"])).quantize(Decimal("0.01"))
        == Decimal(c.cents) / 100
    )
    assert cost["holders"] > 0 and cost["unallocated"] > 0
    # AND each team's allocated cost at a day's rate (the 1-hour window's ledger cents × 24), holders only
    spend = {dict(k[1])["team"]: v for k, v in samples.items() if k[0] == "gpuwaste_team_spend_usd_per_day"}
    rows = {r.group: r.allocated_cents for r in showback(sl, (), "team", DeliverySettings())}
    assert set(spend) == {"ml", "research"} and spend["ml"] == rows["ml"] * 24 / 100 > 0

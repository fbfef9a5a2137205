"""Share conservation, proven: every physical GPU-hour of a window is charged once — to its holders, its unsold slices or
its unallocated part — never negative, never above 100 % of a GPU, and to the cent (issue 24 §3).

Property (hypothesis, derandomized): nodes holding every allocation kind at once — device-plugin GPUs, MIG slices by
profile (7- and 4-slice GPUs), time-slicing and MPS replicas, HAMi cores, KAI / Run:ai fractions, DRA claims (shared
by several pods), vGPU profiles, holdings the telemetry cannot place, over-booked GPUs (conflicting data), holders that
finished mid-window, unpriced nodes. Then the real join: the mixed-allocation fleet of the generator and the demo,
scanned from their recordings, against the generator's allocation truth.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwaste.bootstrap import local
from gpuwaste.config import GpuWasteConfig
from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording
from gpuwaste.join import ScanContext, join
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.services.showback import Hold, NodeGpus, check_conservation, conserve, scan_ledger

ONE = Decimal(1)
EPS = Decimal("1e-20")  # the test sums in 28 digits; the ledger in 60
KINDS = ("device plugin", "MIG", "time-slicing", "MPS", "HAMi", "KAI", "DRA", "vGPU", "unplaced")


@st.composite
def node_cases(draw):  # type: ignore[no-untyped-def]
    """One node: GPUs, a window, a rate (or unpriced), and holds of any kind, possibly over-booked."""
    n = draw(st.integers(1, 8))
    uuids = tuple(f"GPU-{i}" for i in range(n))
    H = Decimal(draw(st.integers(600, 86_400 * 3))) / Decimal(3600)
    rate = draw(st.one_of(st.none(), st.decimals(min_value=Decimal("0.05"), max_value=Decimal("120"), places=4)))
    holds: list[Hold] = []
    for i in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(KINDS))
        hours = H if draw(st.booleans()) else H * Decimal(draw(st.integers(0, 100))) / 100  # finished mid-window
        gpu = draw(st.integers(0, n - 1))
        if kind == "device plugin":
            k = draw(st.integers(1, n))
            share, placement = Decimal(k), dict.fromkeys(uuids[gpu : gpu + k] or uuids[:k], ONE)
            share = Decimal(len(placement))
        elif kind == "MIG":
            total = draw(st.sampled_from([7, 4]))
            share = Decimal(draw(st.sampled_from([1, 2, 3, 4, 7] if total == 7 else [1, 2, 4]))) / total
            placement = {uuids[gpu]: share}
        elif kind in ("time-slicing", "MPS"):
            share = ONE / draw(st.integers(2, 10))
            placement = {uuids[gpu]: share}
        elif kind == "HAMi":
            share = Decimal(draw(st.integers(1, 100))) / 100
            placement = {uuids[gpu]: share}
        elif kind == "KAI":
            share = Decimal(draw(st.integers(1, 20))) / 20
            placement = {uuids[gpu]: share}
        elif kind == "DRA":  # a claim of m GPUs shared by p pods: each pod m/p, 1/p per GPU
            m, p = draw(st.integers(1, n)), draw(st.integers(1, 4))
            claimed = uuids[:m]
            for j in range(p):
                holds.append(Hold(("dra", i, j), Decimal(m) / p * hours, dict.fromkeys(claimed, ONE / p), hours, "DRA"))
            continue
        elif kind == "vGPU":
            share = ONE / draw(st.sampled_from([1, 2, 4, 8]))
            placement = {uuids[gpu]: share}
        else:  # the telemetry cannot tell which GPUs: placed by the ledger
            share, placement = Decimal(draw(st.integers(1, 4 * n))) / 4, {}
        holds.append(Hold((kind, i), share * hours, placement, hours, kind))
    return NodeGpus(f"node-{draw(st.integers(0, 3))}", uuids, H, rate, tuple(holds))


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(node_cases(), min_size=1, max_size=4).map(
        lambda ns: [replace(n, node=f"{n.node}-{i}") for i, n in enumerate(ns)]
    )
)
def test_every_physical_gpu_hour_is_charged_once_for_every_allocation_kind(nodes: list[NodeGpus]) -> None:
    # GIVEN nodes holding GPUs every way at once
    # WHEN the ledger is built
    ledger = conserve(nodes)
    # THEN the check holds
    assert ledger.conservation.holds, ledger.conservation.problems
    by_node = {n.node: n for n in nodes}
    for n in nodes:
        lines = [ln for ln in ledger.lines if ln.node == n.node]
        # AND (recomputed here, not by the check) each GPU's lines add up to the window, in GPU-hours and in cents
        for u in n.uuids:
            mine = [ln for ln in lines if ln.gpu == u]
            assert sum(ln.gpu_hours for ln in mine) == pytest.approx(n.hours, abs=EPS)
            assert all(ln.gpu_hours >= 0 for ln in mine)
            held = sum((ln.gpu_hours for ln in mine if ln.kind == "holder"), Decimal(0))
            assert held <= n.hours + EPS  # never above 100 %
            if n.usd_per_gpu_hour is not None:
                assert sum(ln.cents or 0 for ln in mine) == int(
                    (n.hours * n.usd_per_gpu_hour * 100).quantize(ONE, rounding=ROUND_HALF_UP)
                )
                assert all((ln.cents or 0) >= 0 for ln in mine)
            # AND unsold slices only on a GPU some holder holds a fraction of
            if any(ln.kind == "unsold slices" for ln in mine):
                assert any(0 < h.placement.get(u, ONE) < ONE for h in n.holds)
        # AND a holder is never charged more than it held; when nothing is over-booked, exactly what it held
        demand = sum((h.gpu_hours for h in n.holds), Decimal(0))
        per_gpu = {
            u: sum((s * h.hours for h in n.holds for g, s in h.placement.items() if g == u), Decimal(0))
            for u in n.uuids
        }
        placed_fit = all(v <= n.hours for v in per_gpu.values())
        for h in n.holds:
            charged = sum((ln.gpu_hours for ln in lines if ln.key == h.key), Decimal(0))
            assert charged <= h.gpu_hours + EPS
            if (
                placed_fit
                and demand <= n.hours * len(n.uuids)
                and all(sum(h.placement.values()) * h.hours >= h.gpu_hours - EPS for h in n.holds)
            ):
                assert charged == pytest.approx(h.gpu_hours, abs=EPS), h.key
    # AND the totals add up across the fleet: holders + unsold slices + unallocated = every GPU's cost, to the cent
    c = ledger.conservation
    assert c.holder_cents + c.unsold_cents + c.unallocated_cents == c.cents
    assert c.gpus == sum(len(by_node[n].uuids) for n in by_node)


def test_the_check_catches_a_ledger_that_does_not_add_up() -> None:
    # GIVEN a good ledger of a half-sold shared GPU and a free one
    n = NodeGpus(
        "n1",
        ("GPU-0", "GPU-1"),
        Decimal(1),
        Decimal("10.00"),
        (Hold("a", Decimal("0.25"), {"GPU-0": Decimal("0.25")}, ONE, "HAMi"),),
    )
    ledger = conserve([n])
    assert ledger.conservation.holds
    assert [(ln.gpu, ln.kind, ln.cents) for ln in ledger.lines] == [
        ("GPU-0", "holder", 250),
        ("GPU-0", "unsold slices", 750),
        ("GPU-1", "unallocated", 1000),
    ]
    # WHEN a line is charged twice, dropped, made negative, or a GPU charged above 100 %
    lines = list(ledger.lines)
    doubled = check_conservation([*lines, lines[0]], ledger.gpus)
    over = check_conservation(
        [*lines[:2], replace(lines[2], kind="holder", gpu_hours=Decimal("1.5"), usd=Decimal(15), cents=1500)],
        ledger.gpus,
    )
    dropped = check_conservation(lines[1:], ledger.gpus)
    negative = check_conservation(
        [replace(lines[1], gpu_hours=Decimal("-0.75"), cents=-750), *lines[2:], lines[0]], ledger.gpus
    )
    # THEN the check names it
    assert not doubled.holds and doubled.problems[0] == "n1/GPU-0: lines 1.25 GPU-h ≠ the GPU's 1"
    assert not over.holds and "above 100 %" in " ".join(over.problems)
    assert not dropped.holds and "GPU-0" in dropped.problems[0]
    assert not negative.holds and any("negative" in p for p in negative.problems)


def test_overbooked_gpu_is_charged_pro_rata_and_said() -> None:
    # GIVEN two whole-GPU claims on one GPU (conflicting data)
    n = NodeGpus(
        "n1",
        ("GPU-0",),
        Decimal(2),
        Decimal("3.00"),
        (Hold("a", Decimal(2), {"GPU-0": ONE}, Decimal(2)), Hold("b", Decimal(2), {"GPU-0": ONE}, Decimal(2))),
    )
    # WHEN conserved
    ledger = conserve([n])
    # THEN each is charged half, the GPU exactly once, and a note says so
    assert [(ln.key, ln.gpu_hours, ln.cents) for ln in ledger.lines] == [("a", ONE, 300), ("b", ONE, 300)]
    assert ledger.conservation.holds and "pro rata" in ledger.notes[0]


def test_bad_holds_are_refused() -> None:
    with pytest.raises(ValueError, match="outside 0–1"):
        conserve([NodeGpus("n1", ("GPU-0",), ONE, None, (Hold("a", ONE, {"GPU-0": Decimal(2)}, ONE),))])
    with pytest.raises(ValueError, match="negative"):
        conserve([NodeGpus("n1", ("GPU-0",), ONE, None, (Hold("a", Decimal(-1), {}, ONE),))])


# -- the real join: the generator's mixed-allocation fleet and the demo ------------------------------------------


def _ctx(path: Path) -> ScanContext:
    sources = local.recording_sources(path, GpuWasteConfig())
    assert sources.recording is not None
    at = sources.recording.end_time()
    window_s = sources.recording.meta.window_s or 3600
    return join(
        sources.cluster.cluster_state(at=at), sources.telemetry.telemetry(at=at, window=timedelta(seconds=window_s))
    )


def test_mixed_allocation_fleet_conserves_every_share_against_the_truth() -> None:
    # GIVEN the generator's cluster with device-plugin GPUs, DRA (a shared claim), HAMi, KAI fractions and Blackwell MIG
    fleet = generate_fleet(FleetSpec(layout="allocation", cluster="mixed", label_style="pod", inference_metrics=False))
    truth = fleet.allocation
    assert truth is not None
    with tempfile.TemporaryDirectory() as tmp:
        ctx = _ctx(write_recording(fleet, Path(tmp) / "a", compress=False))
    # WHEN its ledger is built
    sl = scan_ledger(ctx, PriceBook.bundled())
    ledger = sl.ledger
    H = (ctx.eval_time - ctx.window_start).total_seconds() / 3600
    # THEN the check holds and every physical GPU of the truth is in it once
    assert ledger.conservation.holds, ledger.conservation.problems
    assert {n: sum(1 for g in ledger.gpus if g.node == n) for n in truth.physical_gpus} == truth.physical_gpus
    # AND each holder is charged its true share over the window
    charged: dict[tuple[str, str], Decimal] = {}
    for ln in ledger.lines:
        if ln.kind == "holder":
            ns, pod, _ = ln.key  # type: ignore[misc]
            charged[(ns, pod)] = charged.get((ns, pod), Decimal(0)) + ln.gpu_hours
    assert {k: round(float(v) / H, 6) for k, v in charged.items()} == {
        (t.namespace, t.pod): t.share for t in truth.holders
    }
    # AND the unsold part of shared GPUs is its own line: KAI's 0.75 of GPU 1, the free 2g.48gb MIG instance (0.5)
    unsold = {}
    for ln in ledger.lines:
        if ln.kind == "unsold slices":
            unsold[ln.node] = unsold.get(ln.node, 0.0) + float(ln.gpu_hours) / H
    assert {k: round(v, 6) for k, v in unsold.items()} == {
        "ip-10-1-0-40.ec2.internal": 0.75,
        "ip-10-1-0-50.ec2.internal": 0.5,
    }
    # AND the rest of each node is unallocated: the truth's free GPUs less the unsold slices
    free = {}
    for ln in ledger.lines:
        free[ln.node] = free.get(ln.node, 0.0) + (float(ln.gpu_hours) / H if ln.kind != "holder" else 0.0)
    assert {k: round(v, 6) for k, v in free.items()} == dict(truth.free_gpus)
    # AND the printed check adds up to the cent
    c = ledger.conservation
    assert c.holder_cents + c.unsold_cents + c.unallocated_cents == c.cents > 0
    assert "holds" in c.text()


def test_demo_fleet_conserves_to_the_cent() -> None:
    # GIVEN the bundled demo, WHEN its ledger is built
    ctx = _ctx(local.demo_recording())
    sl = scan_ledger(ctx, PriceBook.bundled())
    c = sl.ledger.conservation
    # THEN it holds, every physical GPU the scan counts is in it, and holders + unsold + unallocated = the cost to the cent
    assert c.holds, c.problems
    assert c.gpus == sum(inv.capacity_gpus() for inv in ctx.nodes.values() if inv.capacity_gpus())
    assert c.holder_cents + c.unsold_cents + c.unallocated_cents == c.cents
    held = sum(
        (
            a.held_share * Decimal(str((ctx.held_span(a)[1] - ctx.held_span(a)[0]).total_seconds())) / 3600
            for a in ctx.allocations
        ),
        Decimal(0),
    )
    assert float(c.holder_gpu_hours) == pytest.approx(float(held), abs=1e-9)

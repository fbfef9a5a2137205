"""Core detectors at and around their thresholds; supersession; grace; fingerprints; USD/day pricing."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from gpuwaste.detectors import DetectorSettings
from gpuwaste.models.findings import Finding, Subject, WasteKind
from gpuwaste.models.telemetry import Signal
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.pricing.cost import cost_of
from tests.fixtures.field_guide.builders import EVAL, S, node, pod, scan

GR = Signal.GR_ENGINE_ACTIVE.value


def _one(tmp_path, value: float, *, from_minute: float = 0, started: str = "2024-01-01T00:00:00Z", settings=None):
    labels = {"gpu": "0", "UUID": "GPU-c0de0000-0001", "modelName": "NVIDIA A10G", "Hostname": "n1", "namespace": "ml", "pod": "p"}
    objs = [node("n1"), pod("ml", "p", "n1", started=started)]
    return scan(tmp_path, [S(GR, labels, value, from_minute=from_minute)], objs, settings=settings)  # type: ignore[arg-type]


def _kinds(sc) -> set[str]:
    return {f.kind.value for f in sc.findings if f.subject.pod == "p"}


@pytest.mark.parametrize(("activity", "kinds"), [
    (0.0, {"idle_allocation"}),
    (0.049, {"idle_allocation"}),
    (0.05, {"underused_allocation"}),  # idle is strict: 5 % is not under 5 %
    (0.199, {"underused_allocation"}),
    (0.20, set()),  # under-used is strict too
    (0.5, set()),
])
def test_detectors_idle_and_underused_thresholds_at_their_boundaries(tmp_path, activity, kinds):
    # GIVEN one running pod whose GPU reads a constant GR_ENGINE_ACTIVE ratio for the hour
    # WHEN scanned with the default settings (idle p95 < 0.05, under-used highest 10-min avg < 0.20)
    sc = _one(tmp_path, activity)
    # THEN exactly the expected kind (an idle pod is never also under-used: supersession)
    assert _kinds(sc) == kinds


def test_detectors_supersession_removes_underused_only_when_idle_fired(tmp_path):
    # GIVEN an idle pod
    # WHEN only the under-used detector runs
    alone = _one(tmp_path, 0.0, settings=DetectorSettings(enabled=["underused_allocation"]))
    # THEN it reports under-used (the idle pod is also under 20 %) — so the full scan's single idle finding is supersession's doing
    assert _kinds(alone) == {"underused_allocation"}
    full = _one(tmp_path, 0.0)
    assert _kinds(full) == {"idle_allocation"}


@pytest.mark.parametrize(("from_minute", "verdict"), [(12.5, True), (13.0, False)])
def test_detectors_coverage_boundary_at_80_percent(tmp_path, from_minute, verdict):
    # GIVEN an idle GPU whose samples start late: 96/120 (0.80) or 95/120 (0.79) of the expected samples
    # WHEN scanned
    sc = _one(tmp_path, 0.0, from_minute=from_minute)
    # THEN 0.80 is enough for a verdict; below it, partial coverage is reported and no idle verdict
    assert ("idle_allocation" in _kinds(sc)) is verdict
    assert ("partial_coverage" in sc.checks()) is (not verdict)


def test_detectors_young_pod_gets_no_verdict(tmp_path):
    # GIVEN an idle GPU held by a pod started 10 minutes before the evaluation time (grace 900 s)
    started = (EVAL - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    # WHEN scanned
    sc = _one(tmp_path, 0.0, from_minute=50, started=started)
    # THEN no waste or coverage finding, and a NoVerdict that says why
    assert _kinds(sc) == set()
    reasons = {(nv.detector, nv.reason) for nv in sc.result.no_verdict}
    assert ("idle_allocation", "pod younger than 900s") in reasons


def test_detectors_unallocated_capacity_threshold(tmp_path):
    # GIVEN a 2-GPU node with one pod holding 1 GPU (busy) and the other GPU idle, and a second case with both GPUs held
    def series(n_pods: int) -> list[S]:
        out = []
        for i in range(2):
            lab = {"gpu": str(i), "UUID": f"GPU-c0de0000-010{i}", "modelName": "NVIDIA A10G", "Hostname": "n2"}
            if i < n_pods:
                lab.update(namespace="ml", pod=f"q{i}")
            out.append(S(GR, lab, 0.9 if i < n_pods else 0.0))
        return out
    one = scan(tmp_path, series(1), [node("n2", itype="g5.12xlarge", gpus=2), pod("ml", "q0", "n2")])
    # WHEN scanned
    (free,) = one.of_kind(WasteKind.UNALLOCATED)
    # THEN 1 free GPU is reported (priced: $5.672/h ÷ 4 GPUs in the book); with both held, nothing
    assert free.wasted_gpu_share == 1 and free.subject.node == "n2"
    both = scan(tmp_path, series(2), [node("n2", itype="g5.12xlarge", gpus=2), pod("ml", "q0", "n2"), pod("ml", "q1", "n2")])
    assert both.of_kind(WasteKind.UNALLOCATED) == []


def test_detectors_unallocated_min_free_share_admits_one_mig_slice(tmp_path):
    # GIVEN a MIG single node: 1 UUID × 7 instances, pods hold 6 busy slices (1/7 GPU left free, idle)
    n = node("n3", itype="p4d.24xlarge", gpus=7, labels={"nvidia.com/mig.strategy": "single",
                                                          "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"})
    series, objs = [], [n]
    for i in range(7):
        lab = {"gpu": "0", "UUID": "GPU-c0de0000-0200", "GPU_I_ID": str(i), "GPU_I_PROFILE": "1g.5gb", "Hostname": "n3"}
        if i < 6:
            lab.update(namespace="ml", pod=f"s{i}")
            objs.append(pod("ml", f"s{i}", "n3"))
        series.append(S(GR, lab, 0.9 if i < 6 else 0.0))
    # WHEN scanned
    sc = scan(tmp_path, series, objs)
    # THEN the free 1/7 (0.1429 ≥ min_free_gpus 0.14) is reported
    (free,) = sc.of_kind(WasteKind.UNALLOCATED)
    assert free.wasted_gpu_share.quantize(Decimal("0.0001")) == Decimal("0.1429")


def test_detectors_fingerprint_stable_across_scans_and_distinct_across_kinds(tmp_path):
    # GIVEN two scans of the same idle pod
    a = _one(tmp_path, 0.0)
    b = _one(tmp_path, 0.0)
    (fa,) = a.of_kind(WasteKind.IDLE)
    (fb,) = b.of_kind(WasteKind.IDLE)
    # WHEN compared, including a copy observed a day later and a copy of another kind
    later = fa.model_copy(update={"observed_at": fa.observed_at + timedelta(days=1)})
    other = fa.model_copy(update={"kind": WasteKind.UNDERUSED})
    # THEN the fingerprint is the same across scans and times, different across kinds
    assert fa.fingerprint == fb.fingerprint == later.fingerprint
    assert other.fingerprint != fa.fingerprint
    assert len(fa.fingerprint) == 64


def _finding(instance_type: str | None, share: str, physical: int | None = 4) -> Finding:
    return Finding(kind=WasteKind.IDLE, detector="idle_allocation",
                   subject=Subject(cluster="c", namespace="ml", pod="p", instance_type=instance_type, gpu_model="NVIDIA A10G",
                                   capacity_type="on-demand", physical_gpus_on_node=physical),
                   title="t", recommendation="r", observed_at=EVAL, window_s=3600, wasted_gpu_share=Decimal(share))


def test_pricing_usd_per_day_formula_is_exact_decimal():
    # GIVEN half a GPU idle on a g5.12xlarge ($5.672/h for 4 GPUs in the bundled book)
    # WHEN priced
    cost = cost_of(_finding("g5.12xlarge", "0.5"), PriceBook.bundled())
    # THEN $/GPU-h = 5.672 ÷ 4 = 1.418 exactly; USD/day = 1.418 × 0.5 × 24 = 17.016 → $17.02 (Decimal, no float);
    # in the 1-hour window (no episodes: the whole window): 1.418 × 0.5 GPU-h = 0.709 → $0.71
    assert cost.priced
    assert cost.usd_per_gpu_hour == Decimal("1.418")
    assert cost.usd_per_day == Decimal("17.02") and cost.usd_in_window == Decimal("0.71")
    assert isinstance(cost.usd_per_day, Decimal)
    assert cost.formula == "$1.418/GPU-h × 0.5000 GPU × 24 h = $17.02/day; $1.418/GPU-h × 0.5 GPU-h = $0.71 in the window"


def test_pricing_mig_slice_share_priced_by_fraction():
    # GIVEN one 1/7 slice on a p4d.24xlarge ($21.957642/h, 8 GPUs)
    # WHEN priced
    cost = cost_of(_finding("p4d.24xlarge", str(Decimal(1) / Decimal(7)), physical=8), PriceBook.bundled())
    # THEN (21.957642 ÷ 8) × 1/7 × 24, rounded half-up to the cent
    expected = (Decimal("21.957642") / 8 * (Decimal(1) / Decimal(7)) * 24).quantize(Decimal("0.01"))
    assert cost.usd_per_day == expected == Decimal("9.41")


def test_pricing_unknown_instance_is_unpriced_with_reason_never_zero():
    # GIVEN an instance type that no price book row knows
    # WHEN priced
    cost = cost_of(_finding("x9.gpu-mystery", "2", physical=2), PriceBook.bundled())
    # THEN unpriced with a reason and warning — never $0
    assert cost.priced is False
    assert cost.usd_per_day is None and cost.usd_per_gpu_hour is None
    assert cost.formula.startswith("unpriced: ") and "x9.gpu-mystery" in cost.formula
    assert cost.warnings

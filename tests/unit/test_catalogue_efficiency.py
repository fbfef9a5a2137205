"""Waste catalogue: power anomaly, low memory bandwidth and stalled GPUs, at and around their thresholds (B05, B06, B14, B15, B21)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuwaste.detectors import DetectorSettings
from gpuwaste.detectors.stalled import StalledSettings
from gpuwaste.models.findings import Confidence, WasteKind
from tests.fixtures.field_guide.builders import node, pod
from tests.unit.catalogue_builders import DRAM, GR, LIMIT, POWER, SM, TENSOR, UTIL, gpu, kinds, reasons, scan

A10G = "GPU-a10a0000-0001"


def _power_case(tmp_path, *, sm: float, power_w: float, limit_w: float | None = 300.0, dram: float = 0.7):
    lab = gpu(A10G)
    series = [(SM, lab, sm), (GR, lab, sm), (DRAM, lab, dram), (TENSOR, lab, 0.01), (POWER, lab, power_w)]
    if limit_w is not None:
        series.append((LIMIT, lab, limit_w))
    return scan(tmp_path, series, [node("n1"), pod("ml", "p", "n1")])


@pytest.mark.parametrize(("power_w", "sm", "flagged"), [
    (240.0, 0.10, True),    # exactly 80 % of 300 W: at the threshold counts
    (237.0, 0.10, False),   # 79 %
    (270.0, 0.199, True),   # SM just under 20 %
    (270.0, 0.20, False),   # SM at 20 % is not "under"
])
def test_power_anomaly_thresholds_at_80_percent_power_and_20_percent_sm(tmp_path, power_w, sm, flagged):
    # GIVEN one A10G whose DCGM enforced power limit is 300 W, with constant power and SM activity
    # WHEN scanned with every detector
    sc = _power_case(tmp_path, sm=sm, power_w=power_w)
    # THEN power_anomaly exactly when power ≥ 0.8 × limit and SM < 0.2 (and under-use is superseded by it)
    assert ("power_anomaly" in kinds(sc)) is flagged
    if flagged:
        (f,) = sc.of_kind(WasteKind.POWER_ANOMALY)
        assert f.details["power_limit_source"] == "DCGM_FI_DEV_ENFORCED_POWER_LIMIT"
        assert "underused_allocation" not in kinds(sc)
        assert f.wasted_gpu_share == (Decimal(1) - Decimal(str(sm))).quantize(Decimal("0.0001"))
        assert f.usd_per_day is not None and f.usd_per_day > 0


def test_power_anomaly_uses_bundled_limit_when_dcgm_has_none_and_lowers_confidence(tmp_path):
    # GIVEN the same A10G at 255 W without any power-limit field (the default dcgm-exporter CSV has none)
    sc = _power_case(tmp_path, sm=0.1, power_w=255.0, limit_w=None)
    # WHEN scanned
    (f,) = sc.of_kind(WasteKind.POWER_ANOMALY)
    # THEN the bundled A10G board limit (300 W) is used, named, and the grade is one lower than with DCGM's limit
    assert f.details["power_limit_source"] == "bundled catalog" and f.details["power_limit_w"] == 300.0
    assert f.confidence is Confidence.MEDIUM


def test_power_anomaly_b21_idle_power_is_never_the_idle_criterion(tmp_path):
    # GIVEN B21: an A100-SXM4-40GB idling at 101.3 W with all PROF ratios 0, and a second GPU at 45 W that works (SM 0.6)
    a = gpu("GPU-a1000000-0021", model="NVIDIA A100-SXM4-40GB")
    b = gpu("GPU-a1000000-0022", model="NVIDIA A100-SXM4-40GB", pod="q", index="1")
    series = [(SM, a, 0.0), (GR, a, 0.0), (POWER, a, 101.3), (SM, b, 0.6), (GR, b, 0.6), (POWER, b, 45.0)]
    sc = scan(tmp_path, series, [node("n1", itype="p4d.24xlarge", gpus=2), pod("ml", "p", "n1"), pod("ml", "q", "n1")])
    # WHEN scanned
    # THEN the idle verdict comes from activity alone: the 101 W GPU is idle (not a power anomaly: 25 % of 400 W),
    # and the low-power GPU that computes is not idle
    assert kinds(sc, "p") == {"idle_allocation"}
    assert kinds(sc, "q") == set()


def test_power_anomaly_b06_mig_power_counted_once_per_physical_gpu(tmp_path):
    # GIVEN B06: an A100 80GB PCIe split into 4 MIG 1g.10gb instances; board power 280 W repeated on every instance
    # series; enforced limit 300 W; every instance at SM 0.1, each held by its own pod
    objs = [node("n1", itype=None, gpus=4, resource="nvidia.com/mig-1g.10gb")]
    series = []
    for gi in range(4):
        lab = gpu("GPU-a1000000-0006", model="NVIDIA A100 80GB PCIe", gi=str(gi), profile="1g.10gb", pod=f"m{gi}")
        series += [(SM, lab, 0.1), (GR, lab, 0.1), (DRAM, lab, 0.7), (POWER, lab, 280.0), (LIMIT, lab, 300.0)]
        objs.append(pod("ml", f"m{gi}", "n1", resource="nvidia.com/mig-1g.10gb"))
    # WHEN scanned
    sc = scan(tmp_path, series, objs)
    # THEN each slice's finding reads 280 W once (ratio 0.93, never 4 × 280 W), and the wasted share is its 1/7 slice
    found = sc.of_kind(WasteKind.POWER_ANOMALY)
    assert len(found) == 4
    ev = next(e for e in found[0].evidence if e.signal == POWER)
    assert ev.avg == 280.0
    assert found[0].details["power_ratio"] == pytest.approx(280 / 300, abs=1e-4)
    assert found[0].wasted_gpu_share == (Decimal(1) / 7 * Decimal("0.9")).quantize(Decimal("0.0001"))


def test_power_anomaly_mig_not_blamed_when_a_sibling_instance_is_busy(tmp_path):
    # GIVEN an A100 80GB PCIe in 2 MIG instances sharing 280/300 W: instance 0 at SM 0.1, instance 1 busy at SM 0.9
    objs = [node("n1", itype=None, gpus=2, resource="nvidia.com/mig-3g.40gb")]
    series = []
    for gi, sm in ((0, 0.1), (1, 0.9)):
        lab = gpu("GPU-a1000000-0007", model="NVIDIA A100 80GB PCIe", gi=str(gi), profile="3g.40gb", pod=f"m{gi}")
        series += [(SM, lab, sm), (GR, lab, sm), (POWER, lab, 280.0), (LIMIT, lab, 300.0)]
        objs.append(pod("ml", f"m{gi}", "n1", resource="nvidia.com/mig-3g.40gb"))
    # WHEN scanned
    sc = scan(tmp_path, series, objs)
    # THEN the quiet tenant is not blamed for the board's power (no verdict, with the reason)
    assert "power_anomaly" not in kinds(sc, "m0")
    assert any("MIG" in r for r in reasons(sc, "power_anomaly"))


@pytest.mark.parametrize(("dram", "sm", "flagged"), [
    (0.29, 0.35, True),
    (0.30, 0.35, False),   # DRAM at 30 % is not under it
    (0.10, 0.49, True),    # SM p95 just under 0.5
    (0.10, 0.50, False),
])
def test_low_memory_bandwidth_thresholds(tmp_path, dram, sm, flagged):
    # GIVEN one GPU with constant SM and DRAM activity (above the under-use threshold of 20 %)
    lab = gpu(A10G)
    sc = scan(tmp_path, [(SM, lab, sm), (GR, lab, sm), (DRAM, lab, dram), (POWER, lab, 100.0), (LIMIT, lab, 300.0)],
              [node("n1"), pod("ml", "p", "n1")])
    # WHEN scanned
    # THEN low_memory_bandwidth exactly when every 10-min DRAM average < 0.30 and SM p95 < 0.50
    assert ("low_memory_bandwidth" in kinds(sc)) is flagged


def test_low_memory_bandwidth_superseded_by_underuse(tmp_path):
    # GIVEN a GPU at SM 0.10 and DRAM 0.05 (both under-used and low-bandwidth)
    lab = gpu(A10G)
    sc = scan(tmp_path, [(SM, lab, 0.10), (GR, lab, 0.10), (DRAM, lab, 0.05), (POWER, lab, 60.0)], [node("n1"), pod("ml", "p", "n1")])
    # WHEN scanned
    # THEN one finding: the under-used one (the money is never counted twice)
    assert kinds(sc) == {"underused_allocation"}


def _b14(tmp_path, *, util: float = 100.0, tensor: float = 0.0, dram: float = 0.0, power: float = 116.4, sm: float = 0.14,
         second_tensor: float | None = None, settings=None):
    """B14: two H100s of one pod at GPU_UTIL 100 %, tensor 0, SM 0.14, 116.4 W of a 700 W board."""
    series = []
    for i in range(2):
        lab = gpu(f"GPU-bbbb2222-000{i}", node="n1", model="NVIDIA H100 80GB HBM3", pod="llm-pretrain-worker-3", index=str(i))
        t = second_tensor if (i == 1 and second_tensor is not None) else tensor
        series += [(UTIL, lab, util), (SM, lab, sm), (TENSOR, lab, t), (DRAM, lab, dram), (POWER, lab, power)]
    objs = [node("n1", itype="p5.48xlarge", gpus=2), pod("ml", "llm-pretrain-worker-3", "n1", gpus=2, owner=("PyTorchJob", "pretrain"))]
    return scan(tmp_path, series, objs, settings=settings)


def test_stalled_b14_nccl_hang_is_stalled_and_priced_in_full(tmp_path):
    # GIVEN the B14 input on both GPUs of the pod for the whole hour
    sc = _b14(tmp_path)
    # WHEN scanned with every detector
    fs = sc.for_pod("llm-pretrain-worker-3")
    # THEN one finding, stalled (not idle, not under-used), priced as the full 2 GPUs
    assert {f.kind for f in fs} == {WasteKind.STALLED}
    (f,) = fs
    assert f.wasted_gpu_share == 2 and f.usd_per_day == Decimal("330.24")  # $6.88/GPU-h × 2 × 24
    assert f.details["busy_signal"] == UTIL and f.details["power_ratio"] == pytest.approx(116.4 / 700, abs=1e-4)


@pytest.mark.parametrize(("change", "stalled"), [
    ({"util": 80.0}, True),           # busy threshold 0.80 reached
    ({"util": 79.0}, False),
    ({"tensor": 0.02}, True),         # "≈ 0" up to 0.02
    ({"tensor": 0.021}, False),
    ({"power": 245.0}, True),         # 0.35 × 700 W
    ({"power": 246.0}, False),
    ({"second_tensor": 0.4}, False),  # one GPU of the pod works: not a stall of the pod
])
def test_stalled_thresholds(tmp_path, change, stalled):
    # GIVEN the B14 input with one value moved to or past a threshold
    sc = _b14(tmp_path, **change)
    # WHEN scanned
    # THEN stalled exactly at/inside every threshold on all the pod's GPUs
    assert ("stalled" in kinds(sc, "llm-pretrain-worker-3")) is stalled


def test_stalled_needs_the_threshold_duration(tmp_path):
    # GIVEN the B14 input, but a minimum stall duration of 2 h for a 1 h window
    sc = _b14(tmp_path, settings=DetectorSettings(stalled=StalledSettings(min_duration_s=7200)))
    # WHEN scanned
    # THEN no stalled verdict, with the reason
    assert "stalled" not in kinds(sc, "llm-pretrain-worker-3")
    assert any("shorter than min_duration_s" in r for r in reasons(sc, "stalled"))


def test_stalled_b15_gpu_util_100_with_sm_004_is_stalled_not_idle(tmp_path):
    # GIVEN B15: GPU_UTIL 100 % while SM_ACTIVE is 0.04 (a tiny kernel looping), tensor/DRAM 0, near-idle power
    sc = _b14(tmp_path, sm=0.04)
    # WHEN scanned
    # THEN SM (not GPU_UTIL) is the activity signal, and the pod is stalled — not also idle
    assert kinds(sc, "llm-pretrain-worker-3") == {"stalled"}


def test_stalled_b05_mig_instance_ignores_whole_gpu_util(tmp_path):
    # GIVEN B05: a MIG instance whose (whole-GPU) GPU_UTIL reads 100 while its own GR_ENGINE_ACTIVE is 0.1,
    # tensor/DRAM 0 and power low
    lab = gpu("GPU-5555eeee-0001", model="NVIDIA A100 80GB PCIe", gi="1", profile="3g.40gb", pod="asr-0")
    series = [(UTIL, lab, 100.0), (GR, lab, 0.1), (TENSOR, lab, 0.0), (DRAM, lab, 0.0), (POWER, lab, 60.0)]
    objs = [node("n1", itype=None, gpus=2, resource="nvidia.com/mig-3g.40gb"), pod("speech", "asr-0", "n1", resource="nvidia.com/mig-3g.40gb")]
    for o in objs[1:]:
        o["metadata"]["namespace"] = "ml"
    sc = scan(tmp_path, series, objs)
    # WHEN scanned
    # THEN GPU_UTIL is ignored on the instance: GR_ENGINE 0.1 is not "busy", so no stall; the slice is under-used
    assert "stalled" not in kinds(sc, "asr-0")
    assert kinds(sc, "asr-0") == {"underused_allocation"}

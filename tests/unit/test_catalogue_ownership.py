"""Waste catalogue: orphaned GPU holders and wrong hardware (B07, B08, B16), at and around their thresholds."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from gpuwaste.detectors import DetectorSettings
from gpuwaste.detectors.hardware import WrongHardwareSettings
from gpuwaste.models.findings import Confidence, IdleMode, WasteKind
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.pricing.hardware_fit import fitting_options
from tests.fixtures.field_guide.builders import EVAL, node, pod
from tests.unit.catalogue_builders import FB, FB_FREE, GR, SM, gpu, kinds, pod_labels, reasons, scan

HOUR = WrongHardwareSettings(lookback_s=3600)


def _iso(delta: timedelta) -> str:
    return (EVAL - delta).strftime("%Y-%m-%dT%H:%M:%SZ")


def _busy(pod_name: str = "p") -> list:
    lab = gpu("GPU-0a0a0000-0001", pod=pod_name)
    return [(GR, lab, 0.7), (SM, lab, 0.7)]


def test_orphaned_owner_gone(tmp_path):
    # GIVEN a busy pod owned by ReplicaSet web-abc, which is not in the cluster while other ReplicaSets are listed
    p = pod("ml", "p", "n1", owner=("ReplicaSet", "web-abc"))
    other = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "api-123", "namespace": "ml"}}
    # WHEN scanned
    sc = scan(tmp_path, _busy(), [node("n1"), p, other])
    # THEN orphaned (owner gone), high confidence, the whole GPU priced, the activity shown as context
    (f,) = sc.of_kind(WasteKind.ORPHANED)
    assert f.details["reason"] == "owner_gone" and f.confidence is Confidence.HIGH
    assert f.wasted_gpu_share == 1 and f.usd_per_day is not None
    assert any(e.signal == SM for e in f.evidence)


@pytest.mark.parametrize(("age", "flagged"), [(timedelta(days=3, minutes=1), True), (timedelta(days=3) - timedelta(minutes=1), False)])
def test_orphaned_bare_pod_age_threshold_3_days(tmp_path, age, flagged):
    # GIVEN a busy bare pod (no ownerReferences) created `age` ago
    p = pod("ml", "p", "n1", started=_iso(age))
    # WHEN scanned
    sc = scan(tmp_path, _busy(), [node("n1"), p])
    # THEN flagged only past 3 days
    assert ("orphaned" in kinds(sc)) is flagged


@pytest.mark.parametrize(("pending", "flagged"), [(timedelta(minutes=16), True), (timedelta(minutes=14), False)])
def test_orphaned_pending_pod_bound_to_a_node_holds_gpus(tmp_path, pending, flagged):
    # GIVEN a pod bound to n1 but Pending (image pull) for `pending`, its GPU unlabelled and idle
    p = pod("ml", "p", "n1", phase="Pending", started=_iso(pending), owner=("ReplicaSet", "web-abc"))
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-abc", "namespace": "ml"}}
    lab = gpu("GPU-0a0a0000-0002", ns=None, pod=None)
    # WHEN scanned
    sc = scan(tmp_path, [(GR, lab, 0.0)], [node("n1"), p, rs])
    # THEN orphaned past 15 min, classed provisioning idle (the capacity is stranded), and no unallocated double count:
    # the GPU was free only before the pod was bound (an episode that ended then), never while the pod holds it
    assert ("orphaned" in kinds(sc)) is flagged
    if flagged:
        (f,) = sc.of_kind(WasteKind.ORPHANED)
        assert f.idle_mode is IdleMode.PROVISIONING and f.details["reason"] == "pending_holding"
    bound = sc.ctx.eval_time - pending
    for free in sc.of_kind(WasteKind.UNALLOCATED):
        assert free.usd_per_day == 0 and all(e.end <= bound and not e.ongoing for e in free.episodes)


def test_orphaned_finished_job_pod_still_holding_gpus_supersedes_idle(tmp_path):
    # GIVEN a Job pod whose main container terminated 40 min ago while a sidecar keeps it Running; GPU idle since
    p = pod("ml", "p", "n1", owner=("Job", "nightly-28711440"))
    p["status"]["containerStatuses"] = [
        {"name": "c0", "state": {"terminated": {"exitCode": 0, "finishedAt": _iso(timedelta(minutes=40))}}},
        {"name": "sidecar", "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}}},
    ]
    lab = gpu("GPU-0a0a0000-0003")
    # WHEN scanned
    sc = scan(tmp_path, [(GR, lab, 0.0), (SM, lab, 0.0)], [node("n1"), p])
    # THEN one finding: orphaned (finished job, batch idle) — the idle one is superseded, the money counted once
    assert kinds(sc) == {"orphaned"}
    (f,) = sc.of_kind(WasteKind.ORPHANED)
    assert f.details["reason"] == "finished_job" and f.idle_mode is IdleMode.BATCH


@pytest.mark.parametrize(("idle", "flagged"), [(timedelta(hours=25), True), (timedelta(hours=23), False)])
def test_orphaned_notebook_idle_past_threshold(tmp_path, idle, flagged):
    # GIVEN a Kubeflow notebook pod whose last-activity annotation is `idle` old, GPU idle
    p = pod("ml", "p", "n1", owner=("StatefulSet", "nb-alice"))
    p["metadata"]["annotations"] = {"notebooks.kubeflow.org/last-activity": _iso(idle)}
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "nb-alice", "namespace": "ml"}}
    lab = gpu("GPU-0a0a0000-0004")
    # WHEN scanned
    sc = scan(tmp_path, [(GR, lab, 0.0)], [node("n1"), p, sts])
    # THEN orphaned (idle-held) past 24 h; before that the plain idle finding stands
    assert kinds(sc) == ({"orphaned"} if flagged else {"idle_allocation"})


def _wh(tmp_path, *, fb_mib: float, activity: float, model: str = "NVIDIA A100-SXM4-40GB", itype: str = "p4d.24xlarge",
        total_mib: float = 40960.0, extra=None, objs_extra=None, settings: DetectorSettings | None = None, image: str = "app:1"):
    lab = gpu("GPU-0b0b0000-0001", model=model)
    series = [(GR, lab, activity), (FB, lab, fb_mib), (FB_FREE, lab, total_mib - fb_mib), *(extra or [])]
    p = pod("ml", "p", "n1", image=image)
    for k, v in (objs_extra or {}).items():
        p["metadata"].setdefault(k, {}).update(v) if k == "annotations" else p["spec"]["containers"][0].update(v)
    return scan(tmp_path, series, [node("n1", itype=itype, gpus=8), p],
                settings=settings or DetectorSettings(wrong_hardware=HOUR))


@pytest.mark.parametrize(("fb_mib", "activity", "flagged"), [
    (8192.0, 0.25, True),
    (17066.0, 0.25, True),     # 17066 × 1.2 = 20479 ≤ 0.5 × 40960
    (17100.0, 0.25, False),    # just over half the GPU with headroom
    (8192.0, 0.50, False),     # peak activity at 50 % is not "fits a smaller GPU"
])
def test_wrong_hardware_memory_and_activity_thresholds(tmp_path, fb_mib, activity, flagged):
    # GIVEN a training pod on an A100 40GB with constant framebuffer use and activity, look-back = the 1 h window
    sc = _wh(tmp_path, fb_mib=fb_mib, activity=activity)
    # WHEN scanned and priced
    # THEN wrong_hardware exactly when demand × 1.2 ≤ half the GPU and peak activity < 0.5
    assert ("wrong_hardware" in kinds(sc)) is flagged


def test_wrong_hardware_priced_at_the_cheapest_fitting_option(tmp_path):
    # GIVEN 8 GiB and 25 % activity on an A100 40GB of a p4d.24xlarge ($21.957642/h ÷ 8)
    sc = _wh(tmp_path, fb_mib=8192.0, activity=0.25)
    (f,) = sc.of_kind(WasteKind.WRONG_HARDWARE)
    # WHEN priced
    # THEN the cheapest option that fits memory (9.6 GiB with headroom) and compute (0.3 × 312 TFLOPS ≤ 121) is an L4
    # ($0.8048/h g6.xlarge): wasted = 1 − 0.8048 ÷ 2.7447 = 0.7068 GPU, USD/day = 2.7447 × 0.7068 × 24; the same
    # GPU's MIG 3g.20gb (3/7) is listed as another option
    assert f.details["cheapest_option"] == "L4"
    assert f.wasted_gpu_share == Decimal("0.7068")
    assert f.usd_per_day == Decimal("46.56")
    assert "MIG 3g.20gb" in str(f.details["other_options"])
    assert "1 − 0.2932" in f.cost.formula


def test_wrong_hardware_needs_the_look_back(tmp_path):
    # GIVEN the same pod scanned with the default 7-day look-back over a 1 h window
    sc = _wh(tmp_path, fb_mib=8192.0, activity=0.25, settings=DetectorSettings())
    # WHEN scanned
    # THEN no wrong-hardware verdict, with the reason (the under-used finding stands instead)
    assert "wrong_hardware" not in kinds(sc)
    assert any("look-back" in r for r in reasons(sc, "wrong_hardware"))
    # AND the reason says the durations as people do ("1 h", "7 d"), never as raw seconds ("3600s")
    assert any("the 1 h window is shorter than the 7 d look-back" in r for r in reasons(sc, "wrong_hardware"))
    assert not any("3600s" in r or "604800s" in r for r in reasons(sc, "wrong_hardware"))


def test_wrong_hardware_b16_vllm_framebuffer_is_not_demand(tmp_path):
    # GIVEN B16: a vLLM server on an L40S that pre-allocated 90 % (44 GB), 20 % busy, KV cache 10 % used,
    # with no statement of its model size
    kv = ("vllm:kv_cache_usage_perc", pod_labels(engine="0", model_name="meta-llama/Llama-3.1-8B-Instruct"), 0.10)
    sc = _wh(tmp_path, fb_mib=44237.0, activity=0.2, model="NVIDIA L40S", itype="g6e.12xlarge", total_mib=46068.0,
             extra=[kv], image="vllm/vllm-openai:v0.8.5")
    # WHEN scanned
    # THEN no verdict from framebuffer use (nor from the model name): the reason says why and what to set
    assert "wrong_hardware" not in kinds(sc)
    assert any("B16" in r and "gpuwaste.io/model-weights-mib" in r for r in reasons(sc, "wrong_hardware"))


def test_wrong_hardware_b16_vllm_weights_plus_kv_peak_fit_a_smaller_gpu(tmp_path):
    # GIVEN the same server annotated with 16 GiB of weights and started with --gpu-memory-utilization 0.9
    kv = ("vllm:kv_cache_usage_perc", pod_labels(engine="0", model_name="meta-llama/Llama-3.1-70B-Instruct"), 0.10)
    sc = _wh(tmp_path, fb_mib=44237.0, activity=0.2, model="NVIDIA L40S", itype="g6e.12xlarge", total_mib=46068.0,
             extra=[kv], image="vllm/vllm-openai:v0.8.5",
             objs_extra={"annotations": {"gpuwaste.io/model-weights-mib": "16384"},
                         "container": {"args": ["--model", "/models/x", "--gpu-memory-utilization", "0.9"]}})
    # WHEN scanned and priced
    (f,) = sc.of_kind(WasteKind.WRONG_HARDWARE)
    # THEN demand = weights + peak KV share of the reserved pool (not the 44 GB held), × 1.2 headroom,
    # and a cheaper GPU that fits is named with its USD/day (the 70B in the model name plays no part)
    expected = (16384 + 0.10 * (0.9 * 46068.0 - 16384)) * 1.2
    assert f.details["required_memory_mib"] == pytest.approx(expected, abs=0.2)
    assert f.details["demand_basis"].startswith("weights + peak KV")
    assert f.cost is not None and f.cost.priced and f.usd_per_day > 0
    assert f.details["cheapest_option"] in ("L4", "T4")


def test_hardware_fit_b07_dcgm_profile_spelling_and_compute_limit():
    # GIVEN demand records: (a) a slice whose DCGM profile is spelled 1g.11gb (device plugin: 1g.12gb) on an H100 NVL,
    # (b) a whole A100 40GB needing 9 GiB but 90 % of its compute
    from gpuwaste.models.findings import Finding, Subject
    book = PriceBook.bundled()

    def f(model: str, mem: float, compute: float, profile: str | None) -> Finding:
        return Finding(kind=WasteKind.WRONG_HARDWARE, detector="wrong_hardware", subject=Subject(cluster="c", gpu_model=model,
                       gpu_share=Decimal(1)), title="t", recommendation="r", observed_at=EVAL, window_s=3600,
                       details={"required_memory_mib": mem, "required_compute_ratio": compute, "current_mig_profile": profile})

    # WHEN the fitting options are listed
    _, slice_opts = fitting_options(f("NVIDIA H100 NVL", 5000.0, 0.5, "1g.11gb"), book)
    _, heavy = fitting_options(f("NVIDIA A100-SXM4-40GB", 9216.0, 0.9, None), book)
    # THEN the 1g.11gb spelling parses as the 1/7 slice (no smaller MIG profile exists), and a GPU with too little
    # compute (L4, T4) is never proposed for a compute-heavy workload
    assert all(o.mig_profile is None for o in slice_opts)
    assert not any(o.model in ("L4", "T4") for o in heavy)


def test_orphaned_b08_mig_single_share_is_a_seventh(tmp_path):
    # GIVEN B08: a MIG-single node (nvidia.com/gpu = slices) and an old bare pod holding one 1g.12gb slice
    n = node("n1", itype=None, gpus=14, labels={"nvidia.com/mig.strategy": "single",
                                                 "nvidia.com/gpu.product": "NVIDIA-H100-NVL-MIG-1g.12gb"})
    lab = gpu("GPU-7777aaaa-0001", model="NVIDIA H100 NVL", gi="7", profile="1g.11gb")
    p = pod("ml", "p", "n1", started=_iso(timedelta(days=4)))
    # WHEN scanned
    sc = scan(tmp_path, [(GR, lab, 0.6)], [n, p])
    # THEN the orphan holds 1/7 of a GPU, not a whole H100 (and not 1/14); at 60 % activity the unused 40 % of that
    # slice is what a bare pod that computes wastes: 1/7 × 0.4
    (f,) = sc.of_kind(WasteKind.ORPHANED)
    assert f.wasted_gpu_share.quantize(Decimal("0.0001")) == (Decimal(1) / 7 * Decimal("0.4")).quantize(Decimal("0.0001"))


def test_idle_modes_provisioning_fragmentation_and_idle_orphans(tmp_path):
    # GIVEN a 2-GPU node with 1 GPU free while a 2-GPU pod waits unscheduled, and an idle bare pod older than 3 days
    lab0 = gpu("GPU-0c0c0000-0001", index="0")
    lab1 = gpu("GPU-0c0c0000-0002", ns=None, pod=None, index="1")
    waiting = pod("ml", "big", None, gpus=2, phase="Pending")
    old = pod("ml", "p", "n1", started=_iso(timedelta(days=4)))
    # WHEN scanned
    sc = scan(tmp_path, [(GR, lab0, 0.0), (GR, lab1, 0.0)], [node("n1", itype="g5.12xlarge", gpus=2), old, waiting])
    # THEN the free GPU is provisioning idle stranded by fragmentation, and the idle orphan carries an idle mode
    (free,) = sc.of_kind(WasteKind.UNALLOCATED)
    assert free.idle_mode is IdleMode.PROVISIONING and free.details["stranded_by_fragmentation"] is True
    (orphan,) = sc.of_kind(WasteKind.ORPHANED)
    assert orphan.details["reason"] == "bare_pod" and orphan.idle_mode is IdleMode.IDLE_HELD


def test_orphaned_bare_pod_that_computes_is_priced_by_its_unused_share(tmp_path):
    # GIVEN a bare pod (no ownerReferences) older than 3 days whose GPU is busy
    p = pod("ml", "p", "n1", started=_iso(timedelta(days=4)))
    # WHEN scanned
    sc = scan(tmp_path, _busy(), [node("n1"), p])
    # THEN it is still flagged (governance: nobody manages it) but only the unused share is priced, not the whole GPU
    (f,) = sc.of_kind(WasteKind.ORPHANED)
    assert f.details["reason"] == "bare_pod"
    assert 0 < f.wasted_gpu_share < 1 and "average activity" in str(f.details["formula"])

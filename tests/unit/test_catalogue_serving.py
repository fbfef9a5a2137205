"""Waste catalogue: CPU-bound starvation, KV-cache pressure and inference idle, at and around their thresholds (B16)."""

from __future__ import annotations

import pytest

from gpuwaste.models.findings import IdleMode, WasteKind
from tests.fixtures.field_guide.builders import node, pod
from tests.unit.catalogue_builders import FB, GR, SM, counter, gpu, kinds, pod_labels, reasons, scan

UUID = "GPU-a10a0000-0101"
CPU = "container_cpu_usage_seconds_total"
PERIODS = "container_cpu_cfs_periods_total"
THROTTLED = "container_cpu_cfs_throttled_periods_total"


def _cpu(tmp_path, *, throttled_per_s: float, activity: float | None = None, spiky: bool = True, with_cfs: bool = True):
    lab = gpu(UUID)
    def act(minute: float) -> float:
        if activity is not None:
            return activity
        return 0.7 if spiky and int(minute * 2) % 4 < 2 else 0.02
    series = [(SM, lab, act), (GR, lab, act)]
    c = pod_labels(container="loader")
    series.append((CPU, c, counter(7.9)))
    if with_cfs:
        series += [(PERIODS, c, counter(10.0, 5e6)), (THROTTLED, c, counter(throttled_per_s, 1e4))]
    else:
        q = pod_labels(pod="other", container="x")  # another pod with CFS counters: the metric is scraped
        series += [(PERIODS, q, counter(10.0)), (THROTTLED, q, counter(0.1))]
    return scan(tmp_path, series, [node("n1"), pod("ml", "p", "n1")])


@pytest.mark.parametrize(("throttled_per_s", "flagged"), [(2.5, True), (2.4, False), (6.0, True), (0.0, False)])
def test_cpu_bound_throttling_threshold_25_percent(tmp_path, throttled_per_s, flagged):
    # GIVEN a spiky GPU (avg ~0.36) whose pod's CPU is throttled in `throttled_per_s` of 10 CFS periods per second
    sc = _cpu(tmp_path, throttled_per_s=throttled_per_s)
    # WHEN scanned
    # THEN cpu_bound exactly when throttled ÷ periods ≥ 0.25
    assert ("cpu_bound" in kinds(sc)) is flagged
    if flagged:
        (f,) = sc.of_kind(WasteKind.CPU_BOUND)
        assert f.details["throttled_ratio"] == pytest.approx(throttled_per_s / 10, abs=1e-3)
        assert f.usd_per_day is not None and f.usd_per_day > 0


@pytest.mark.parametrize(("activity", "flagged"), [(0.49, True), (0.50, False)])
def test_cpu_bound_needs_low_gpu_activity(tmp_path, activity, flagged):
    # GIVEN heavy throttling (60 %) with a steady GPU average of `activity`
    sc = _cpu(tmp_path, throttled_per_s=6.0, activity=activity)
    # WHEN scanned
    # THEN only a GPU under 50 % average counts as starved
    assert ("cpu_bound" in kinds(sc)) is flagged


def test_cpu_bound_without_the_pods_cfs_counters_gives_no_verdict(tmp_path):
    # GIVEN cAdvisor CFS counters for another pod only (this pod has no CPU limit)
    sc = _cpu(tmp_path, throttled_per_s=6.0, with_cfs=False)
    # WHEN scanned
    # THEN no cpu_bound guess, and the reason is recorded
    assert "cpu_bound" not in kinds(sc)
    assert any("no cAdvisor CFS" in r for r in reasons(sc, "cpu_bound"))


def _vllm(tmp_path, *, kv: float = 0.5, kv_name: str = "vllm:kv_cache_usage_perc", waiting: float = 0.0, preempt: float = 0.0,
          running: float = 8.0, tokens: float = 300.0, activity: float = 0.6):
    lab = gpu("GPU-1405000-0001", model="NVIDIA L40S", pod="llama31-8b-vllm-6d5-wq2")
    v = pod_labels(pod="llama31-8b-vllm-6d5-wq2", engine="0", model_name="meta-llama/Llama-3.1-8B-Instruct")
    series = [(GR, lab, activity), (FB, lab, 42112.0),
              ("vllm:num_requests_running", v, running), ("vllm:num_requests_waiting", v, waiting), (kv_name, v, kv),
              ("vllm:generation_tokens_total", v, counter(tokens, 1.8234561e07)),
              ("vllm:num_preemptions_total", v, counter(preempt, 3.0))]
    return scan(tmp_path, series, [node("n1", itype="g6e.xlarge"), pod("ml", "llama31-8b-vllm-6d5-wq2", "n1", image="vllm/vllm-openai:v0.8.5")])


@pytest.mark.parametrize(("kv", "waiting", "preempt", "flagged"), [
    (0.90, 1.0, 0.0, True),     # at both thresholds
    (0.89, 5.0, 0.0, False),    # KV not near full
    (0.95, 0.9, 0.0, False),    # near full but nobody waits and nothing is preempted
    (0.95, 0.0, 0.02, True),    # preemptions alone are pressure
])
def test_kv_cache_pressure_thresholds(tmp_path, kv, waiting, preempt, flagged):
    # GIVEN a busy vLLM server with constant KV-cache usage, waiting requests and a preemption rate
    sc = _vllm(tmp_path, kv=kv, waiting=waiting, preempt=preempt)
    # WHEN scanned
    # THEN kv_cache_pressure exactly when KV ≥ 0.9 and (waiting ≥ 1 or preemptions > 0)
    assert ("kv_cache_pressure" in kinds(sc, "llama31-8b-vllm-6d5-wq2")) is flagged


def test_kv_cache_pressure_b16_accepts_the_deprecated_metric_name(tmp_path):
    # GIVEN an older vLLM exporting only vllm:gpu_cache_usage_perc at 0.97 with requests waiting
    sc = _vllm(tmp_path, kv=0.97, kv_name="vllm:gpu_cache_usage_perc", waiting=4.0)
    # WHEN scanned
    (f,) = sc.of_kind(WasteKind.KV_CACHE_PRESSURE)
    # THEN it is read, named in the evidence and marked deprecated
    ev = next(e for e in f.evidence if e.signal == "vllm:gpu_cache_usage_perc")
    assert ev.max == pytest.approx(0.97) and "deprecated" in ev.note


def test_inference_idle_b16_no_requests_flat_tokens_memory_held(tmp_path):
    # GIVEN B16-like: a vLLM server holding 42 GB of an L40S, no running/waiting requests, token counter flat for the
    # hour, and light GPU background activity (0.08: above the idle threshold, so only the server metrics tell)
    sc = _vllm(tmp_path, kv=0.0, running=0.0, tokens=0.0, activity=0.08)
    # WHEN scanned
    fs = sc.for_pod("llama31-8b-vllm-6d5-wq2")
    # THEN inference_idle (idle mode "inference"), priced in full; framebuffer use is shown but not used as demand
    assert [f.kind for f in fs] == [WasteKind.INFERENCE_IDLE]
    (f,) = fs
    assert f.idle_mode is IdleMode.INFERENCE and f.wasted_gpu_share == 1
    assert any(e.signal == FB and "not demand" in e.note for e in f.evidence)


@pytest.mark.parametrize(("running", "tokens"), [(1.0, 0.0), (0.0, 0.5)])
def test_inference_idle_not_flagged_with_any_traffic(tmp_path, running, tokens):
    # GIVEN a server with one running request, or with a token counter that grows
    sc = _vllm(tmp_path, kv=0.1, running=running, tokens=tokens, activity=0.08)
    # WHEN scanned
    # THEN it is not inference idle
    assert "inference_idle" not in kinds(sc, "llama31-8b-vllm-6d5-wq2")


def test_inference_idle_b16_gpu_idle_too_reports_idle_allocation_with_inference_mode(tmp_path):
    # GIVEN B16 exactly: GR_ENGINE 0.000412, no requests, flat tokens
    sc = _vllm(tmp_path, kv=0.0, running=0.0, tokens=0.0, activity=0.000412)
    # WHEN scanned
    fs = sc.for_pod("llama31-8b-vllm-6d5-wq2")
    # THEN one idle finding from compute signals, classed "inference idle" (the server metrics confirm, never double-count)
    assert [f.kind for f in fs] == [WasteKind.IDLE]
    assert fs[0].idle_mode is IdleMode.INFERENCE


def test_kv_cache_pressure_and_idle_for_tgi_and_triton(tmp_path):
    # GIVEN a TGI server with a queue of 6 and a Triton server that served nothing (success counter flat)
    a = gpu("GPU-71600000-0001", pod="tgi", index="0")
    b = gpu("GPU-71600000-0002", pod="triton", index="1")
    series = [(GR, a, 0.7), (GR, b, 0.08),
              ("tgi_queue_size", pod_labels(pod="tgi"), 6.0), ("tgi_batch_current_size", pod_labels(pod="tgi"), 32.0),
              ("nv_inference_request_success", pod_labels(pod="triton", model="resnet"), counter(0.0)),
              ("nv_inference_queue_duration_us", pod_labels(pod="triton", model="resnet"), counter(0.0))]
    sc = scan(tmp_path, series, [node("n1", itype="g5.12xlarge", gpus=2), pod("ml", "tgi", "n1"), pod("ml", "triton", "n1")])
    # WHEN scanned
    # THEN TGI's sustained queue is KV/batch pressure and the idle Triton server is inference idle
    assert kinds(sc, "tgi") == {"kv_cache_pressure"}
    assert kinds(sc, "triton") == {"inference_idle"}


@pytest.mark.parametrize(("limit", "flagged"), [("8", True), ("8500m", True), ("9", False), (None, False)])
def test_cpu_bound_cpu_usage_at_the_pods_cpu_limit_without_cfs_counters(tmp_path, limit, flagged):
    # GIVEN a spiky GPU whose pod uses 7.9 CPU cores (cAdvisor) under a CPU limit of `limit`, no CFS counters
    obj = pod("ml", "p", "n1")
    if limit is not None:
        obj["spec"]["containers"][0]["resources"]["limits"]["cpu"] = limit
    lab = gpu(UUID)
    def act(minute: float) -> float:
        return 0.7 if int(minute * 2) % 4 < 2 else 0.02
    series = [(SM, lab, act), (GR, lab, act), (CPU, pod_labels(container="loader"), counter(7.9))]
    # WHEN scanned
    sc = scan(tmp_path, series, [node("n1"), obj])
    # THEN cpu_bound exactly when usage ≥ 90 % of the limit (7.9 ≥ 7.2 and 7.65; not ≥ 8.1; no limit → no verdict)
    assert ("cpu_bound" in kinds(sc)) is flagged
    if flagged:
        (f,) = sc.of_kind(WasteKind.CPU_BOUND)
        assert f.details["cpu_limit_use_ratio"] == pytest.approx(7.9 / float(limit.rstrip("m")) * (1000 if limit.endswith("m") else 1), rel=1e-3)

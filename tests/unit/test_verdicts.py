"""Verdicts that agree with the telemetry: named contradictions, busy GPUs without a request, holding spans, short
windows that never escalate, and each GPU-hour priced once (field guide B14, B15, B21; issue 10 §4)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from gpuwaste.detectors import DetectorSettings, detect
from gpuwaste.models.cluster import PodPhase
from gpuwaste.models.findings import Confidence, WasteKind
from gpuwaste.models.messages import FindingMessage
from gpuwaste.models.settings import LifecycleSettings
from gpuwaste.models.telemetry import Signal
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.pricing.cost import price_finding
from gpuwaste.queue.memory import MemoryQueue
from gpuwaste.services.lifecycle import LifecycleService
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.unit.timeline_builders import T, cluster, const, gpu, node, pod, window

UTIL, SM, TENSOR, DRAM, POWER, LIMIT = (Signal.GPU_UTIL, Signal.SM_ACTIVE, Signal.TENSOR_ACTIVE, Signal.DRAM_ACTIVE,
                                        Signal.POWER_USAGE, Signal.POWER_LIMIT)
BOOK = PriceBook.bundled()


class _Clock:
    def now(self):  # type: ignore[no-untyped-def]
        return T


def _scan(cl, tel, **settings):  # type: ignore[no-untyped-def]
    result = detect(cl, tel, DetectorSettings(**settings))
    return [price_finding(f, BOOK) for f in result.findings]


def _waste(findings):  # type: ignore[no-untyped-def]
    return [f for f in findings if f.kind.is_waste]


def test_profiling_counter_at_zero_while_util_and_power_show_work_is_a_broken_counter_never_idle() -> None:
    # GIVEN a training pod's H100: SM_ACTIVE exactly 0, GPU_UTIL 98 %, power 630 W of a 700 W limit
    g = gpu("GPU-c0", "n1", {SM: const(0.0), UTIL: const(98.0), POWER: const(630.0), LIMIT: const(700.0)}, pod="train-0", namespace="ml")
    # WHEN scanned by every detector
    found = _scan(cluster(node(gpus=1), pod("train-0")), window(g))
    # THEN a data-quality "profiling counter broken" names it; no idle, no power anomaly, no money
    (dq,) = [f for f in found if f.kind is WasteKind.DATA_QUALITY]
    assert dq.details["check"] == "profiling_counter_broken" and dq.subject.pod == "train-0"
    assert "SM_ACTIVE reads 0 while GPU_UTIL and power show work" in dq.title
    assert _waste(found) == []


def test_util_at_100_with_no_tensor_or_dram_work_and_idle_power_is_stalled_not_idle() -> None:
    # GIVEN GPU_UTIL 100 %, SM_ACTIVE 0, tensor and DRAM 0, power 110 W of 700 W, for the hour
    g = gpu("GPU-s0", "n1", {UTIL: const(100.0), SM: const(0.0), TENSOR: const(0.0), DRAM: const(0.0), POWER: const(110.0),
                             LIMIT: const(700.0)}, pod="train-0", namespace="ml")
    # WHEN scanned
    found = _scan(cluster(node(gpus=1), pod("train-0", kind="PyTorchJob")), window(g))
    # THEN the work signals agree the GPU does nothing: stalled, priced once, no idle verdict
    (stall,) = _waste(found)
    assert stall.kind is WasteKind.STALLED and stall.wasted_gpu_hours == Decimal(1) and stall.money_owner is None


def test_a_busy_gpu_no_pod_requested_is_a_governance_finding_naming_node_and_pod_never_capacity() -> None:
    # GIVEN a 2-GPU node: one GPU held by a pod; the other 60 % busy, labelled with a DaemonSet pod that requests no GPU
    held = gpu("GPU-h0", "n1", {SM: const(0.7)}, pod="train-0", namespace="ml")
    stray = gpu("GPU-h1", "n1", {SM: const(0.6)}, pod="gpu-burner-x7k2p", namespace="monitoring")
    # WHEN scanned
    found = _scan(cluster(node(gpus=2, itype="g5.12xlarge"), pod("train-0")), window(held, stray))
    # THEN "GPU used without a request" on n1 naming the pod, no money; no unallocated capacity
    (gov,) = [f for f in found if f.kind is WasteKind.UNREQUESTED_USE]
    assert gov.subject.node == "n1" and gov.details["pods"] == "monitoring/gpu-burner-x7k2p"
    assert "used without a request" in gov.title and gov.wasted_gpu_share == 0
    assert gov.cost is not None and not gov.cost.priced and gov.usd_per_day is None
    assert [f for f in found if f.kind is WasteKind.UNALLOCATED] == []


def test_an_idle_gpu_no_pod_requested_is_still_unallocated_capacity() -> None:
    # GIVEN the same node with the unrequested GPU idle
    held = gpu("GPU-h0", "n1", {SM: const(0.7)}, pod="train-0", namespace="ml")
    idle = gpu("GPU-h1", "n1", {SM: const(0.0)})
    # WHEN scanned
    found = _scan(cluster(node(gpus=2, itype="g5.12xlarge"), pod("train-0")), window(held, idle))
    # THEN 1 GPU of unallocated capacity, priced for the hour, and no governance finding
    (free,) = [f for f in found if f.kind is WasteKind.UNALLOCATED]
    assert free.wasted_gpu_share == 1 and free.wasted_gpu_hours == Decimal(1)
    assert free.cost is not None and free.cost.usd_in_window == Decimal("1.42")  # g5.12xlarge $5.672/h ÷ 4 GPUs × 1 GPU-h
    assert not [f for f in found if f.kind is WasteKind.UNREQUESTED_USE]


def test_a_job_that_finished_mid_window_is_not_waste_while_it_ran_and_its_gpu_is_free_afterwards() -> None:
    # GIVEN a Job pod that worked for the first 30 minutes and Succeeded then; its GPU idle and unlabelled since
    done = T - timedelta(minutes=30)
    g = gpu("GPU-j0", "n1", {SM: lambda m: 0.8 if m <= 30 else 0.0})
    job = pod("eval-28712000-abcde", 1, phase=PodPhase.SUCCEEDED, kind="Job", finished=done)
    # WHEN scanned
    found = _scan(cluster(node(gpus=1, itype="g5.xlarge"), job), window(g))
    # THEN the node had 1 GPU free for the last 30 minutes only: 0.5 GPU-hours, going on now; nothing about the Job
    (free,) = _waste(found)
    assert free.kind is WasteKind.UNALLOCATED and free.wasted_gpu_share == 1
    (ep,) = free.episodes
    assert (ep.start, ep.end, ep.ongoing, ep.wasted_gpu_hours) == (done, T, True, Decimal("0.5"))
    assert free.cost is not None and free.cost.usd_per_day is not None and free.cost.usd_per_day > 0


def _bursty(window_min: int):  # type: ignore[no-untyped-def]
    """A vLLM service busy 5 minutes in every 15, quiet in the last 10 minutes before the evaluation time."""
    def at(m: float, busy: float, quiet: float) -> float:
        return busy if ((window_min - m) % 15) >= 10 else quiet
    return {SM: lambda m: at(m, 0.85, 0.06), DRAM: lambda m: at(m, 0.55, 0.02), POWER: lambda m: at(m, 520.0, 150.0),
            LIMIT: const(700.0)}


def test_a_bursty_service_under_a_ten_minute_window_is_low_confidence_and_never_ticketed() -> None:
    # GIVEN a bursty vLLM service (5 busy minutes in every 15) whose last 10 minutes were quiet
    vllm = pod("chat-serve-0", container_images=("vllm/vllm-openai:v0.8.5",))
    short = _scan(cluster(node(gpus=1), vllm), window(gpu("GPU-b0", "n1", _bursty(10), pod="chat-serve-0", namespace="ml", window_s=600),
                                                         window_s=600))
    long = _scan(cluster(node(gpus=1), vllm), window(gpu("GPU-b0", "n1", _bursty(60), pod="chat-serve-0", namespace="ml")))
    # WHEN the 10-minute verdict goes through the lifecycle with a $0/day ticket threshold
    lifecycle = LifecycleService(store=SqliteFindingStore(":memory:"), alerts=MemoryQueue("a"), tickets=MemoryQueue("t"),
                                 settings=LifecycleSettings(ticket_usd_per_day=Decimal(0)), clock=_Clock())
    outcomes = [lifecycle.handle_finding(FindingMessage(scan_id="s", finding=f)) for f in _waste(short)]
    # THEN the hour shows no waste; the 10 minutes show at most low-confidence findings, alerted but never ticketed
    assert _waste(long) == []
    assert _waste(short) and all(f.confidence is Confidence.LOW and f.observed_s <= 600 for f in _waste(short))
    assert all(o.tickets == [] for o in outcomes) and any(o.alerts for o in outcomes)


def test_the_same_finding_observed_for_an_hour_is_ticketed_by_cost() -> None:
    # GIVEN an idle pod observed for the whole hour
    g = gpu("GPU-i0", "n1", {SM: const(0.0)}, pod="idle-0", namespace="ml")
    (idle,) = _waste(_scan(cluster(node(gpus=1), pod("idle-0")), window(g)))
    lifecycle = LifecycleService(store=SqliteFindingStore(":memory:"), alerts=MemoryQueue("a"), tickets=MemoryQueue("t"),
                                 settings=LifecycleSettings(ticket_usd_per_day=Decimal(0)), clock=_Clock())
    # WHEN it goes through the lifecycle
    out = lifecycle.handle_finding(FindingMessage(scan_id="s", finding=idle))
    # THEN the ticket rule escalates it (the observed-time check only holds back short observations)
    assert idle.observed_s == 3600 and len(out.tickets) == 1


def test_idle_and_power_anomaly_on_the_same_gpu_hours_are_priced_once() -> None:
    # GIVEN an A100 whose SM activity is 0 while it draws 90 % of its power limit, with no GPU_UTIL to contradict it
    g = gpu("GPU-p0", "n1", {SM: const(0.0), POWER: const(360.0), LIMIT: const(400.0)}, pod="spin-0", namespace="ml",
            model="NVIDIA A100-SXM4-40GB")
    # WHEN scanned
    found = _waste(_scan(cluster(node(gpus=1, itype="p4d.24xlarge"), pod("spin-0")), window(g)))
    # THEN idle owns the money; the power anomaly points to it with none of its own
    by_kind = {f.kind: f for f in found}
    idle, power = by_kind[WasteKind.IDLE], by_kind[WasteKind.POWER_ANOMALY]
    assert idle.money_owner is None and idle.wasted_gpu_hours == Decimal(1)
    assert power.money_owner == idle.fingerprint and power.wasted_gpu_share == 0 and power.wasted_gpu_hours == 0
    assert power.cost is not None and power.cost.usd_per_day == 0 and power.cost.usd_in_window == 0
    assert sum(f.cost.usd_in_window or 0 for f in found if f.cost) == idle.cost.usd_in_window  # type: ignore[union-attr]


def test_a_profiling_counter_that_breaks_late_never_makes_an_idle_or_power_stretch() -> None:
    # GIVEN a working GPU for 4 hours whose SM_ACTIVE drops to 0 after hour 2 while GPU_UTIL (97 %) and power (600 W) go on
    g = gpu("GPU-late", "n1", {SM: lambda m: 0.7 if m <= 120 else 0.0, UTIL: const(97.0), POWER: const(600.0), LIMIT: const(700.0)},
            pod="train-0", namespace="ml", window_s=4 * 3600, bucket_s=300)
    # WHEN scanned over the 4 hours
    found = _scan(cluster(node(gpus=1), pod("train-0")), window(g, window_s=4 * 3600, bucket_s=300))
    # THEN no stretch of idle, under-use or power anomaly comes from the contradicted buckets; data quality names it
    assert _waste(found) == []
    (dq,) = [f for f in found if f.kind is WasteKind.DATA_QUALITY]
    assert dq.details["check"] == "activity_signals_disagree" and dq.details["since"] == (T - timedelta(hours=2)).isoformat()


def test_a_day_long_window_never_calls_idle_the_hours_that_burst() -> None:
    # GIVEN a day at one-hour buckets: "bursty" averages ~4 % an hour but runs at 60 % for 2.5 minutes every hour;
    # "quiet" reads 1 % all day
    day = 24 * 3600
    bursty = gpu("GPU-b", "n1", {SM: lambda m: 0.6 if m % 60 < 3 else 0.02}, pod="bursty-0", namespace="ml",
                 window_s=day, bucket_s=3600, step_s=30)
    quiet = gpu("GPU-q", "n1", {SM: const(0.01)}, pod="quiet-0", namespace="ml", window_s=day, bucket_s=3600, step_s=30)
    # WHEN both are scanned over the day
    found = _waste(_scan(cluster(node(gpus=2), pod("bursty-0"), pod("quiet-0")), window(bursty, quiet, window_s=day, bucket_s=3600)))
    # THEN only the quiet pod is idle: an hour whose average hides a burst above 20 % is work, as a finer window sees it
    idle = [f for f in found if f.kind is WasteKind.IDLE]
    assert [f.subject.pod for f in idle] == ["quiet-0"]
    assert idle[0].wasted_gpu_hours == Decimal(24)

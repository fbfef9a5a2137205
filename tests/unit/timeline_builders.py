"""Helpers for time-resolved tests: telemetry windows with buckets, built from a value per sample time.

Samples fall every `step_s` in `(eval − window, eval]`; buckets tile the window backwards from the evaluation
time (`models.telemetry.Bucket`), so a test states "SM activity 0.9 for the first hour, then 0" and gets the
window summary and the buckets the sources would produce.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from gpuwaste.models.cluster import ClusterState, Node, Pod, PodPhase, Workload
from gpuwaste.models.telemetry import (
    AttributedSeries,
    Bucket,
    DeviceId,
    GpuTelemetry,
    Signal,
    TelemetryWindow,
    WindowStats,
)
from gpuwaste.sources.window import quantile

T = datetime(2026, 11, 2, 12, tzinfo=UTC)
Value = Callable[[float], float | None]  # minutes since the window start → value (None: no sample)


def stats(fn: Value, *, eval_time: datetime = T, window_s: int = 3600, step_s: int = 30, bucket_s: int | None = 60,
          recent_s: int = 600) -> WindowStats | None:
    """Window summary (+ buckets when `bucket_s`) of the samples `fn` gives every `step_s` in `(eval − window, eval]`."""
    start = eval_time - timedelta(seconds=window_s)
    samples: list[tuple[float, float]] = []  # (seconds since start, value)
    for i in range(1, window_s // step_s + 1):
        v = fn(i * step_s / 60)
        if v is not None:
            samples.append((i * step_s, v))
    if not samples:
        return None
    vals = [v for _, v in samples]
    buckets: list[Bucket] = []
    m10: float | None = None
    if bucket_s:
        for k in range(window_s // bucket_s):
            lo, hi = k * bucket_s, (k + 1) * bucket_s
            inside = [v for s, v in samples if lo < s <= hi]
            buckets.append(Bucket(end=start + timedelta(seconds=hi), count=len(inside), total=math.fsum(inside), max=max(inside, default=0.0)))
    tens = []
    for k in range(window_s // 600):
        inside = [v for s, v in samples if k * 600 < s <= (k + 1) * 600]
        if inside:
            tens.append(sum(inside) / len(inside))
    m10 = max(tens) if tens else None
    recent = sum(1 for s, _ in samples if s > window_s - recent_s)
    return WindowStats(count=len(vals), total=math.fsum(vals), max=max(vals), min=min(vals), p95=quantile(0.95, vals),
                       max_avg_10m=m10, recent_count=recent, changes=sum(1 for a, b in zip(vals, vals[1:], strict=False) if a != b),
                       buckets=tuple(buckets))


def gpu(uuid: str, host: str, signals: dict[Signal, Value], *, pod: str | None = None, namespace: str | None = None,
        model: str = "NVIDIA H100 80GB HBM3", eval_time: datetime = T, window_s: int = 3600, bucket_s: int | None = 60,
        step_s: int = 30) -> GpuTelemetry:
    """One device whose signals follow the given functions (labelled with `namespace/pod` when given)."""
    sig = {}
    for s, fn in signals.items():
        st = stats(fn, eval_time=eval_time, window_s=window_s, bucket_s=bucket_s, step_s=step_s)
        if st is not None:
            sig[s.value] = st
    return GpuTelemetry(device=DeviceId(uuid=uuid), model_name=model, hostname=host,
                        groups=(AttributedSeries(pod=pod, namespace=namespace, label_family="pod" if pod else None, signals=sig),))


def window(*gpus: GpuTelemetry, eval_time: datetime = T, window_s: int = 3600, bucket_s: int | None = 60) -> TelemetryWindow:
    """The telemetry window holding `gpus`."""
    present = frozenset(k for g in gpus for grp in g.groups for k in grp.signals)
    return TelemetryWindow(cluster="c", eval_time=eval_time, window_s=window_s, gpus=gpus, bucket_s=bucket_s, metrics_present=present)


def node(name: str = "n1", gpus: int = 8, itype: str = "p5.48xlarge", **kw: object) -> Node:
    """A GPU node created long before the window."""
    cap = {"nvidia.com/gpu": gpus}
    return Node(name=name, instance_type=itype, capacity_type="on-demand", region="us-east-1", created_at=T - timedelta(days=30),
                capacity_gpu=cap, allocatable_gpu=cap, gpu_count_label=gpus, **kw)  # type: ignore[arg-type]


def pod(name: str, gpus: int = 1, *, node_name: str | None = "n1", phase: PodPhase = PodPhase.RUNNING, kind: str = "Deployment",
        started: datetime | None = None, finished: datetime | None = None, resource: str = "nvidia.com/gpu", ns: str = "ml",
        **kw: object) -> Pod:
    """A pod holding `gpus` units of `resource`, started a day before the window by default."""
    return Pod(namespace=ns, name=name, node_name=node_name, phase=phase, gpu_requests={resource: gpus} if gpus else {},
               started_at=started or T - timedelta(days=1), created_at=started or T - timedelta(days=1), finished_at=finished,
               workload=Workload(kind=kind, name=name.rsplit("-", 1)[0], namespace=ns), **kw)  # type: ignore[arg-type]


def cluster(*items: Node | Pod) -> ClusterState:
    """A cluster state of nodes and pods."""
    return ClusterState(cluster="c", observed_at=T, nodes=tuple(i for i in items if isinstance(i, Node)),
                        pods=tuple(i for i in items if isinstance(i, Pod)))


def const(v: float) -> Value:
    """The same value for every sample."""
    return lambda _m: v


def until(minute: float, before: float, after: float) -> Value:
    """`before` until `minute` minutes into the window, `after` from then on."""
    return lambda m: before if m <= minute else after

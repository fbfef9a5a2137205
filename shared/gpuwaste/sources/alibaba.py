"""Adapter: replay Alibaba's GenTD26 per-pod GPU trace as DCGM telemetry and cluster state.

The trace (alibaba/clusterdata `cluster-trace-v2026-GenAI/`, Lin et al., SoCC'25) ships two
tarballs, each holding one CSV:

- `pod_gpu_duty_cycle_anon.csv`: `value,timestamp_anon,container_ip` — GPU utilisation of a pod in
  percent, the `DCGM_FI_DEV_GPU_UTIL` kind of signal;
- `pod_gpu_memory_used_bytes_anon.csv`: `timestamp_anon,value,container_ip` — GPU memory used in bytes.

`container_ip` (an MD5 hash) joins the two and names one pod; timestamps are seconds (shifted). The
trace has no node, GPU model or price, so the replay states a mapping: every pod holds one GPU of
`gpu_model` on its own node of `instance_type` (one pod per node), is Running, and started before
the trace. Duty cycle % becomes `DCGM_FI_DEV_GPU_UTIL` (percent, as dcgm-exporter exports it) and
memory bytes become `DCGM_FI_DEV_FB_USED` (MiB). Nothing is written to disk.
"""

from __future__ import annotations

import csv
import hashlib
import io
import tarfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpuwaste.errors import InputFormatError
from gpuwaste.models.cluster import ClusterState
from gpuwaste.models.telemetry import BucketGrid, Signal, TelemetryWindow, WindowStats
from gpuwaste.sources.dcgm import build_gpu_telemetry
from gpuwaste.sources.k8s_objects import cluster_state_from_objects
from gpuwaste.sources.window import window_stats

DUTY_CYCLE_TARBALL = "pod_gpu_duty_cycle_anon.tar.gz"
MEMORY_TARBALL = "pod_gpu_memory_used_bytes_anon.tar.gz"
NAMESPACE = "genai-serving"
MIB = 1024 * 1024


@dataclass
class PodSeries:
    """One pod's samples, timestamps in ms ascending."""

    key: str
    util_ts: list[int] = field(default_factory=list)
    util: list[float] = field(default_factory=list)
    mem_ts: list[int] = field(default_factory=list)
    mem_mib: list[float] = field(default_factory=list)

    @property
    def pod_name(self) -> str:
        """A Kubernetes-style pod name derived from the trace's hashed container IP."""
        return f"diffusion-{self.key[:10]}"

    @property
    def uuid(self) -> str:
        """A stable synthetic GPU UUID for the pod's GPU."""
        h = hashlib.md5(f"gpu:{self.key}".encode(), usedforsecurity=False).hexdigest()
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@dataclass
class AlibabaTrace:
    """The GenTD26 per-pod GPU series, read from the two tarballs.

    Attributes:
        pods: container_ip hash → series (sorted by hash).
        step_s: the most common spacing between a pod's samples (seconds; 57 in the published trace).
        start, end: first and last sample time (UTC).
        rows: CSV rows read (both files).
    """

    pods: dict[str, PodSeries]
    step_s: float
    start: datetime
    end: datetime
    rows: int

    @property
    def span_s(self) -> float:
        """Seconds from the first to the last sample."""
        return (self.end - self.start).total_seconds()


def _csv_rows(tarball: Path) -> Iterator[dict[str, str]]:
    """Stream the rows of the single CSV inside a tarball.

    Raises:
        InputFormatError: when the file is missing, is not a tar.gz, or holds no CSV.
    """
    try:
        with tarfile.open(tarball, mode="r:gz") as tar:
            member = next((m for m in tar if m.isfile() and m.name.endswith(".csv")), None)
            if member is None:
                raise InputFormatError("no .csv file inside the tarball", source=str(tarball))
            raw = tar.extractfile(member)
            if raw is None:
                raise InputFormatError(f"cannot read {member.name}", source=str(tarball))
            with io.TextIOWrapper(raw, encoding="utf-8", newline="") as text:
                yield from csv.DictReader(text)
    except FileNotFoundError as exc:
        raise InputFormatError("trace file not found", source=str(tarball)) from exc
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise InputFormatError(f"not a readable tar.gz: {exc}", source=str(tarball)) from exc


def _read(tarball: Path, value_scale: float) -> tuple[dict[str, list[tuple[int, float]]], int]:
    out: dict[str, list[tuple[int, float]]] = defaultdict(list)
    n = 0
    for i, row in enumerate(_csv_rows(tarball), start=2):
        try:
            ts_ms = round(float(row["timestamp_anon"]) * 1000)
            value = float(row["value"]) * value_scale
            key = row["container_ip"]
        except (KeyError, TypeError, ValueError) as exc:
            raise InputFormatError(f"bad row (expected value,timestamp_anon,container_ip): {exc}", source=str(tarball), line=i) from exc
        out[key].append((ts_ms, value))
        n += 1
    return out, n


def _sorted_unique(samples: list[tuple[int, float]]) -> tuple[list[int], list[float]]:
    samples.sort(key=lambda s: s[0])
    ts: list[int] = []
    vals: list[float] = []
    for t, v in samples:
        if ts and ts[-1] == t:
            vals[-1] = v  # a repeated timestamp: keep the last value, as Prometheus ingestion would
            continue
        ts.append(t)
        vals.append(v)
    return ts, vals


def load_trace(trace_dir: Path) -> AlibabaTrace:
    """Read both tarballs of the trace (streaming; nothing is extracted to disk).

    Raises:
        InputFormatError: when a tarball is missing or malformed (with the CSV line).
    """
    trace_dir = Path(trace_dir)
    util, n1 = _read(trace_dir / DUTY_CYCLE_TARBALL, 1.0)
    mem, n2 = _read(trace_dir / MEMORY_TARBALL, 1.0 / MIB)
    pods: dict[str, PodSeries] = {}
    steps: dict[int, int] = defaultdict(int)
    for key in sorted(set(util) | set(mem)):
        p = PodSeries(key)
        if key in util:
            p.util_ts, p.util = _sorted_unique(util[key])
        if key in mem:
            p.mem_ts, p.mem_mib = _sorted_unique(mem[key])
        for a, b in zip(p.util_ts, p.util_ts[1:], strict=False):
            steps[b - a] += 1
        pods[key] = p
    all_ts = [t for p in pods.values() for t in (p.util_ts[:1] + p.util_ts[-1:] + p.mem_ts[:1] + p.mem_ts[-1:])]
    if not all_ts:
        raise InputFormatError("the trace holds no samples", source=str(trace_dir))
    step_ms = max(steps.items(), key=lambda kv: kv[1])[0] if steps else 60_000
    return AlibabaTrace(
        pods=pods,
        step_s=step_ms / 1000,
        start=datetime.fromtimestamp(min(all_ts) / 1000, tz=UTC),
        end=datetime.fromtimestamp(max(all_ts) / 1000, tz=UTC),
        rows=n1 + n2,
    )


class AlibabaReplaySource:
    """Telemetry and cluster-state ports over a loaded GenTD26 trace, with a stated hardware mapping.

    Args:
        trace: the loaded trace.
        gpu_model: dcgm-exporter `modelName` given to every pod's GPU (e.g. "NVIDIA A10G").
        instance_type: the node instance type every pod runs on, one pod per node (e.g. "g5.xlarge").
        cluster: cluster name in the findings.
    """

    def __init__(self, trace: AlibabaTrace, *, gpu_model: str, instance_type: str, cluster: str = "alibaba-gentd26") -> None:
        self.trace = trace
        self.gpu_model = gpu_model
        self.instance_type = instance_type
        self.cluster = cluster

    def node_name(self, pod: PodSeries) -> str:
        """The synthetic node that holds only this pod."""
        return f"node-{pod.key[:10]}"

    def objects(self) -> list[dict[str, Any]]:
        """Synthetic `kubectl get pods,nodes -o json` items: one Node and one Running pod per trace pod."""
        before = (self.trace.start - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        product = self.gpu_model.replace(" ", "-")
        items: list[dict[str, Any]] = []
        for p in self.trace.pods.values():
            node = self.node_name(p)
            items.append({
                "kind": "Node",
                "metadata": {"name": node, "creationTimestamp": before, "labels": {
                    "node.kubernetes.io/instance-type": self.instance_type,
                    "karpenter.sh/capacity-type": "on-demand",
                    "nvidia.com/gpu.product": product,
                    "nvidia.com/gpu.count": "1",
                    "kubernetes.io/hostname": node,
                }},
                "status": {"capacity": {"nvidia.com/gpu": "1"}, "allocatable": {"nvidia.com/gpu": "1"}},
            })
            items.append({
                "kind": "Pod",
                "metadata": {"name": p.pod_name, "namespace": NAMESPACE, "creationTimestamp": before,
                             "labels": {"app": "diffusion-serving", "trace-container-ip": p.key}},
                "spec": {"nodeName": node, "containers": [{
                    "name": "server", "image": "diffusion-serving:trace",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
                }]},
                "status": {"phase": "Running", "startTime": before},
            })
        return items

    def cluster_state(self, *, at: datetime) -> ClusterState:
        """The synthetic cluster (every trace pod Running on its own node)."""
        return cluster_state_from_objects(self.objects(), cluster=self.cluster, observed_at=at, source="alibaba-gentd26 (synthetic objects)")

    def telemetry(self, *, at: datetime, window: timedelta) -> TelemetryWindow:
        """The trace's samples in `[at − window, at]` as dcgm-exporter GPU_UTIL and FB_USED summaries."""
        eval_ms = round(at.timestamp() * 1000)
        window_ms = round(window.total_seconds() * 1000)
        recent_ms = min(600_000, window_ms)
        rows: list[tuple[str, dict[str, str], WindowStats]] = []
        present: set[str] = set()
        grid = BucketGrid(at, round(window.total_seconds()))  # GPU_UTIL is time-resolved, as from Prometheus
        for p in self.trace.pods.values():
            labels = {
                "gpu": "0", "UUID": p.uuid, "device": "nvidia0", "modelName": self.gpu_model,
                "Hostname": self.node_name(p), "container": "server", "namespace": NAMESPACE, "pod": p.pod_name,
            }
            for metric, ts, vals in ((Signal.GPU_UTIL.value, p.util_ts, p.util), (Signal.FB_USED.value, p.mem_ts, p.mem_mib)):
                resolved = metric == Signal.GPU_UTIL.value
                stats = window_stats(ts, vals, eval_ms=eval_ms, window_ms=window_ms, recent_ms=recent_ms,
                                     grid=grid if resolved else None, unit="percent" if resolved else None)
                if stats is not None:
                    rows.append((metric, labels, stats))
                    present.add(metric)
        return TelemetryWindow(
            cluster=self.cluster,
            eval_time=at,
            window_s=round(window.total_seconds()),
            recent_s=recent_ms // 1000,
            scrape_interval_s=self.trace.step_s,
            gpus=tuple(build_gpu_telemetry(rows)),
            bucket_s=grid.bucket_s,
            metrics_present=frozenset(present),
            source="alibaba-gentd26 trace replay",
        )


__all__ = ["AlibabaReplaySource", "AlibabaTrace", "PodSeries", "load_trace"]

"""Allocation (internal): small pure indexes the resolvers share (devices by UUID and by node, live pods)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import Decimal, InvalidOperation

from gpuwaste.models.cluster import ClusterState, Node, Pod, PodIdentity, PodPhase
from gpuwaste.models.gpu_models import GpuModelCatalog, GpuModelSpec
from gpuwaste.models.telemetry import ACTIVITY_SIGNALS, GpuTelemetry


def physical_devices(devices: tuple[GpuTelemetry, ...]) -> dict[str, list[GpuTelemetry]]:
    """Physical UUID → its telemetry devices (the whole GPU, or its MIG instances; MIG parents skipped)."""
    out: dict[str, list[GpuTelemetry]] = defaultdict(list)
    for d in devices:
        if not d.is_mig_parent:
            out[d.device.uuid].append(d)
    return dict(out)


def node_of_device(cluster: ClusterState) -> dict[str, str]:
    """Exporter `Hostname` spellings → node name (node name, hostname label, EC2 instance id, IP, exporter pod; B03)."""
    by_host: dict[str, str] = {}
    for n in cluster.nodes:
        by_host.setdefault(n.name, n.name)
        if n.hostname_label:
            by_host.setdefault(n.hostname_label, n.name)
        if n.provider_id:
            by_host.setdefault(n.provider_id.rsplit("/", 1)[-1], n.name)
        for ip in n.internal_ips:
            by_host.setdefault(ip, n.name)
    for pod, node in cluster.exporter_pods.items():
        by_host.setdefault(pod, node)
    return by_host


def devices_by_node(cluster: ClusterState, devices: tuple[GpuTelemetry, ...]) -> dict[str, set[str]]:
    """Node name → physical UUIDs DCGM reports there (through `Hostname`, the exporter's address, or the pod
    labels of a live pod). Devices whose node cannot be told are left out."""
    by_host = node_of_device(cluster)
    pods = {p.key: p for p in cluster.pods}
    out: dict[str, set[str]] = defaultdict(set)
    for d in devices:
        if d.is_mig_parent:
            continue
        node = by_host.get(d.hostname or "")
        if node is None:
            for inst in d.instances:
                node = cluster.exporter_pod_ips.get(inst.rsplit(":", 1)[0])
                if node:
                    break
        if node is None:
            for key in d.workloads:
                pod = pods.get(key)
                if pod is not None and pod.node_name:
                    node = pod.node_name
                    break
        if node:
            out[node].add(d.device.uuid)
    return dict(out)


def span_of(pod: Pod) -> tuple[datetime | None, datetime | None] | None:
    """When a pod holds what it was allocated: (from, until), None for an open end; None when it holds nothing.

    Scheduled and not terminal: from its start (else creation) on. Succeeded/Failed: from its start until its
    last container finished, when that is known (a Job that ended mid-window held its share until then; B11).
    Deleted in the window (`gone_at`): until it was gone.
    """
    if not pod.node_name:
        return None
    start = pod.started_at or pod.created_at
    if pod.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED):
        return (start, pod.finished_at) if pod.finished_at is not None else None
    if pod.gone_at is not None:  # deleted in the window (kube-state-metrics history): held until it was gone
        return start, pod.gone_at
    return start, None


def held(pod: Pod, since: datetime | None = None) -> dict[str, datetime | None]:
    """`Holding` keyword arguments `held_from`/`held_until` for `pod` (`since`: when its allocation was made, if later)."""
    span = span_of(pod)
    start, until = span if span is not None else (None, None)
    if since is not None and (start is None or since > start):
        start = since
    return {"held_from": start, "held_until": until}


def live_pods(cluster: ClusterState, handled: frozenset[PodIdentity]) -> list[Pod]:
    """Pods that hold (or held in the window) what they were allocated (`span_of`), not yet accounted for by an
    earlier resolver."""
    return [p for p in cluster.pods if p.identity not in handled and span_of(p) is not None]


def model_of(uuid: str | None, node: Node | None, by_uuid: dict[str, list[GpuTelemetry]], catalog: GpuModelCatalog) -> GpuModelSpec | None:
    """The catalogue model of a GPU: from DCGM `modelName` of that UUID, else the node's GFD product."""
    for d in by_uuid.get(uuid or "", []):
        spec = catalog.resolve(d.model_name)
        if spec is not None:
            return spec
    return catalog.resolve(node.gpu_product) if node is not None else None


def decimal_or_none(text: str | None) -> Decimal | None:
    """A decimal from annotation text ("0.5", "25"), None when absent or not a finite number."""
    if text is None or not str(text).strip():
        return None
    try:
        value = Decimal(str(text).strip())
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def measured_per_pod(pod: Pod, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry]) -> bool:
    """True when the exporter gives this pod's own activity on a shared GPU (per-process values, e.g. MPS with
    per-client series): the pod has its own series on the device and they differ from another sharer's. Identical
    copies of the device value under each sharer's labels (what time-slicing gives) are device-level, not
    attributable."""
    for d in devices:
        if pod.key not in d.workloads:
            continue
        for sig in ACTIVITY_SIGNALS:
            mine = d.for_workload(pod.namespace, pod.name, sig)
            if mine is None or mine.count == 0:
                continue
            others = [g.signals.get(str(sig)) for g in d.groups if (g.namespace, g.pod) != pod.key and g.pod]
            # side by side over (nearly) the same samples, not one label following another (B10)
            beside = [o for o in others if o is not None and o.count and abs(o.count - mine.count) <= 0.2 * max(o.count, mine.count)]
            if beside and any((o.total / o.count, o.max, o.min) != (mine.total / mine.count, mine.max, mine.min) for o in beside):
                return True
            break
    return False

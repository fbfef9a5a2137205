"""Allocation resolver: device-plugin requests — `nvidia.com/gpu` and configured custom resource names.

A pod holds its effective request (max(largest init container, sum of app containers); the sources
compute it, field guide B11) from its start until it ends (see `hold_span`). One unit of `nvidia.com/gpu`
is one physical GPU. A configured non-NVIDIA resource (e.g. `k8s.amazonaws.com/vgpu`, 40 allocatable on 4
GPUs) is worth physical ÷ allocatable GPUs per unit when the node shows fewer physical GPUs than units
(B20), never one GPU per unit. This resolver is asked last: every pod another mechanism accounted for
(MIG slices, time-sliced replicas, DRA claims, HAMi shares, …) is skipped.
"""

from __future__ import annotations

from decimal import Decimal

from gpuwaste.allocation.base import AllocationResult, Holding, hold_span
from gpuwaste.allocation.nodes import physical_gpus_by_node
from gpuwaste.models.cluster import ClusterState, Node, Pod, PodIdentity
from gpuwaste.models.telemetry import GpuTelemetry


def unit_share(resource: str, node: Node | None, physical: int) -> Decimal:
    """Physical GPUs one unit of `resource` is worth on `node` (`physical`: DCGM UUIDs seen there, 0 when unknown)."""
    alloc = node.allocatable_gpu.get(resource) if node is not None else None
    if not resource.startswith("nvidia.com/") and alloc and physical and alloc > physical:
        return Decimal(physical) / Decimal(alloc)
    return Decimal(1)


class DevicePluginResolver:
    """Whole GPUs requested through a device plugin resource (the default way Kubernetes hands out GPUs)."""

    name = "device plugin"

    def applies(self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...]) -> bool:
        """True when any pod requests a GPU resource (the fallback for every pod nobody else accounted for)."""
        return any(p.gpu_requests for p in cluster.pods)

    def resolve(self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...], *,
                handled: frozenset[PodIdentity]) -> AllocationResult:
        """One holding per scheduled pod not handled yet, share = Σ units × unit share."""
        nodes = {n.name: n for n in cluster.nodes}
        physical = physical_gpus_by_node(cluster, devices)
        holdings: list[Holding] = []
        for pod in cluster.pods:
            if pod.identity in handled:
                continue
            span = hold_span(pod)
            if span is None:
                continue
            node = nodes.get(pod.node_name or "")
            holdings.append(Holding(pod=pod, node=pod.node_name, share=pod_share(pod, node, physical.get(pod.node_name or "", 0)),
                                    mechanism=self.name, held_from=span[0], held_until=span[1], note=_note(pod, node)))
        return AllocationResult(holdings=tuple(holdings), handled_pods=frozenset(h.pod.identity for h in holdings))


def pod_share(pod: Pod, node: Node | None, physical: int) -> Decimal:
    """Physical-GPU equivalents of a pod's device-plugin requests on `node`."""
    return sum((Decimal(c) * unit_share(r, node, physical) for r, c in pod.gpu_requests.items()), Decimal(0))


def _note(pod: Pod, node: Node | None) -> str:
    custom = sorted(r for r in pod.gpu_requests if not r.startswith("nvidia.com/"))
    return f"custom GPU resource {', '.join(custom)}" if custom and node is not None else ""


__all__ = ["DevicePluginResolver", "pod_share", "unit_share"]

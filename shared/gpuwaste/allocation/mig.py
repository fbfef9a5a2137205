"""Allocation resolver: MIG slices — mixed strategy (`nvidia.com/mig-<N>g.<M>gb`) and single strategy.

Under the mixed strategy a pod requests a profile resource; under the single strategy it requests
`nvidia.com/gpu` on a node whose GFD product ends in `-MIG-<N>g.<M>gb`. Either way one unit is N/S of a
physical GPU, S being the GPU's compute slices (`models.cluster.gpu_share_for_request`; field guide
B07/B08). Devices are MIG instances keyed by UUID + GPU_I_ID (B05–B06); the join ties them to pods by
exporter labels or elimination.
"""

from __future__ import annotations

from decimal import Decimal

from gpuwaste.allocation.base import AllocationResult, Holding, hold_span
from gpuwaste.allocation.nodes import devices_by_node
from gpuwaste.models.cluster import ClusterState, Node, Pod, PodIdentity, gpu_share_for_request
from gpuwaste.models.telemetry import GpuTelemetry

MIG_PREFIX = "nvidia.com/mig-"


def is_mig_single(node: Node | None) -> bool:
    """True on a MIG single-strategy node (GFD product `…-MIG-<N>g.<M>gb`)."""
    return node is not None and bool(node.gpu_product) and "-MIG-" in (node.gpu_product or "").upper()


def _mig_pod(pod: Pod, node: Node | None) -> bool:
    return any(r.startswith(MIG_PREFIX) for r in pod.gpu_requests) or (is_mig_single(node) and bool(pod.gpu_requests))


class MigResolver:
    """MIG GPU instances requested as profile resources (mixed) or as `nvidia.com/gpu` on a MIG-single node."""

    name = "MIG"

    def applies(self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...]) -> bool:
        """True when a pod requests a MIG profile or a node runs the MIG single strategy."""
        nodes = {n.name: n for n in cluster.nodes}
        return any(_mig_pod(p, nodes.get(p.node_name or "")) for p in cluster.pods)

    def resolve(self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...], *,
                handled: frozenset[PodIdentity]) -> AllocationResult:
        """One holding per scheduled MIG pod: share = Σ units × slices ÷ the GPU's compute slices."""
        nodes = {n.name: n for n in cluster.nodes}
        models = _models_by_node(cluster, devices)
        holdings: list[Holding] = []
        for pod in cluster.pods:
            node = nodes.get(pod.node_name or "")
            if pod.identity in handled or not _mig_pod(pod, node):
                continue
            span = hold_span(pod)
            if span is None:
                continue
            model = models.get(pod.node_name or "")
            share = sum((gpu_share_for_request(r, c, node, model_name=model) for r, c in pod.gpu_requests.items()), Decimal(0))
            profiles = ", ".join(f"{c} × {r.removeprefix('nvidia.com/')}" for r, c in sorted(pod.gpu_requests.items()))
            holdings.append(Holding(pod=pod, node=pod.node_name, share=share, mechanism=self.name,
                                    held_from=span[0], held_until=span[1], note=f"MIG {profiles}"))
        return AllocationResult(holdings=tuple(holdings), handled_pods=frozenset(h.pod.identity for h in holdings))


def _models_by_node(cluster: ClusterState, devices: tuple[GpuTelemetry, ...]) -> dict[str, str]:
    """Node → the GPU model DCGM reports there (the slice count then comes from the catalogue even without GFD labels)."""
    by_node, _ = devices_by_node(cluster, devices)
    return {name: next((d.model_name for d in devs if d.model_name), "") for name, devs in by_node.items()}


__all__ = ["MIG_PREFIX", "MigResolver", "is_mig_single"]

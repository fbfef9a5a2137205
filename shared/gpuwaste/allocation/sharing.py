"""Allocation resolver: shared GPUs — NVIDIA time-slicing, MPS, GKE GPU time-sharing replicas.

The device plugin advertises `replicas` units per physical GPU (GFD `nvidia.com/gpu.replicas`, GKE
`cloud.google.com/gke-max-shared-clients-per-gpu`; or the renamed `nvidia.com/gpu.shared` resource): one
unit is 1/replicas of a GPU. Every pod labelled on a shared GPU holds its share of it. Activity is
device-level unless the exporter gives per-process values (MPS with per-pod series), so a sharer's
activity is "not attributable" in general.
"""

from __future__ import annotations

from decimal import Decimal

from gpuwaste.allocation._index import measured_per_pod
from gpuwaste.allocation.base import AllocationResult, Holding, hold_span
from gpuwaste.allocation.mig import is_mig_single
from gpuwaste.models.cluster import ClusterState, Node, Pod, PodIdentity
from gpuwaste.models.telemetry import GpuTelemetry

SHARED_RESOURCE = "nvidia.com/gpu.shared"


def mechanism_of(node: Node | None) -> str:
    """"MPS", "GKE time-sharing" or "time-slicing", from the node's labels."""
    labels = node.labels if node is not None else {}
    strategy = (labels.get("nvidia.com/gpu.sharing-strategy") or labels.get("cloud.google.com/gke-gpu-sharing-strategy") or "").lower()
    if strategy == "mps":
        return "MPS"
    if "cloud.google.com/gke-max-shared-clients-per-gpu" in labels or strategy == "time-sharing":
        return "GKE time-sharing"
    return "time-slicing"


def _shared_pod(pod: Pod, node: Node | None) -> bool:
    if is_mig_single(node) or any(r.startswith("nvidia.com/mig-") for r in pod.gpu_requests):
        return False
    return (node is not None and node.gpu_replicas > 1 and bool(pod.gpu_requests)) or SHARED_RESOURCE in pod.gpu_requests


class SharingResolver:
    """Replicas of a physical GPU handed to several pods (time-slicing, MPS, GKE time-sharing)."""

    name = "shared"

    def applies(self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...]) -> bool:
        """True when a node advertises replicas per GPU or a pod requests the shared resource."""
        nodes = {n.name: n for n in cluster.nodes}
        return any(_shared_pod(p, nodes.get(p.node_name or "")) for p in cluster.pods)

    def resolve(self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...], *,
                handled: frozenset[PodIdentity]) -> AllocationResult:
        """One holding per scheduled sharer: share = units ÷ replicas per GPU."""
        nodes = {n.name: n for n in cluster.nodes}
        holdings: list[Holding] = []
        for pod in cluster.pods:
            node = nodes.get(pod.node_name or "")
            if pod.identity in handled or not _shared_pod(pod, node):
                continue
            span = hold_span(pod)
            if span is None:
                continue
            replicas = max(1, node.gpu_replicas if node is not None else 1)
            units = sum(pod.gpu_requests.values())
            mech = mechanism_of(node)
            measured = measured_per_pod(pod, devices)
            holdings.append(Holding(pod=pod, node=pod.node_name, share=Decimal(units) / Decimal(replicas), mechanism=mech,
                                    per_pod_activity=measured, held_from=span[0], held_until=span[1],
                                    note=f"{units} of {replicas} {mech} replicas per GPU"
                                    + ("; the exporter reports this pod's own activity" if measured else "")))
        return AllocationResult(holdings=tuple(holdings), handled_pods=frozenset(h.pod.identity for h in holdings))


__all__ = ["SHARED_RESOURCE", "SharingResolver", "mechanism_of"]

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
from gpuwaste.allocation.nodes import devices_by_node
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


def read_replicas(cluster: ClusterState, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry]) -> tuple[ClusterState, tuple[str, ...]]:
    """The cluster with each time-sliced node's replicas per GPU read from what the hardware says (issue 21 §1).

    A node advertising `nvidia.com/gpu.shared` (time-slicing with `renameByDefault`) or `nvidia.com/gpu` in a
    multiple of its physical GPUs — distinct DCGM UUIDs on the node, else GFD's `nvidia.com/gpu.count` — shares each
    GPU `advertised ÷ physical` ways. That ratio sets the node's `gpu_replicas` (so each sharer holds units ÷ ratio
    of a GPU and the free shares follow) when the replicas label is missing or says otherwise; the disagreement is
    returned as a data-quality note. MIG nodes and nodes with HAMi/vGPU share requests (their capacity counts other
    units) are left as they are.

    Returns:
        (cluster, notes): the cluster with corrected nodes (the same object when nothing changed), and the notes.
    """
    physical: dict[str, set[str]] = {}
    by_node, _ = devices_by_node(cluster, devices)
    for name, devs in by_node.items():
        uuids = {d.device.uuid for d in devs if d.device.gpu_i_id is None}
        if uuids and len(uuids) == len({d.device.uuid for d in devs}):
            physical[name] = uuids
    share_nodes = {p.node_name for p in cluster.pods if p.share_requests}
    notes: list[str] = []
    nodes = []
    changed = False
    for n in cluster.nodes:
        fixed = n
        resource = SHARED_RESOURCE if n.capacity_gpu.get(SHARED_RESOURCE) else "nvidia.com/gpu"
        units = n.capacity_gpu.get(resource) or 0
        seen, counted = len(physical.get(n.name, ())), n.gpu_count_label or 0
        # GFD counts physical GPUs under time-slicing; DCGM may miss a broken one (B23): the larger of the two
        gpus, basis = (counted, "GPU Feature Discovery (nvidia.com/gpu.count)") if counted >= seen else (seen, "DCGM")
        # plain nvidia.com/gpu above the physical count without a sharing sign is unmonitored GPUs, not replicas
        hinted = resource == SHARED_RESOURCE or n.gpu_replicas > 1 or _shared_product(n)
        if (hinted and units and gpus and units > gpus and units % gpus == 0 and not is_mig_single(n)
                and n.name not in share_nodes):
            ratio = units // gpus
            if ratio != n.gpu_replicas:
                said = (f"its nvidia.com/gpu.replicas label says {n.gpu_replicas}" if "nvidia.com/gpu.replicas" in n.labels
                        else "it has no replicas label")
                notes.append(f"node {n.name} advertises {units} {resource} on {gpus} physical GPU(s) ({basis}): "
                             f"{ratio} replicas per GPU used; {said}")
                fixed = n.model_copy(update={"gpu_replicas": ratio})
                changed = True
        nodes.append(fixed)
    if not changed:
        return cluster, tuple(notes)
    return cluster.model_copy(update={"nodes": tuple(nodes)}), tuple(notes)


def _shared_product(node: Node) -> bool:
    """GFD appended `-SHARED` to the product label (time-slicing or MPS with renamed resources)."""
    return (node.gpu_product or "").upper().endswith("-SHARED")


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


__all__ = ["SHARED_RESOURCE", "SharingResolver", "mechanism_of", "read_replicas"]

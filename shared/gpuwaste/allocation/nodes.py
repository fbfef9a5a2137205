"""Allocation: GPU ↔ node — which node a DCGM device is on, and how many physical GPUs each node has.

Pure. The join (`gpuwaste.join`) and every resolver that needs physical GPU counts (a custom resource
worth physical ÷ allocatable GPUs per unit, HAMi shares) use the same resolution, so a device is placed
on one node everywhere. Order (field guide B03): `Hostname` equal to a node name or its
`kubernetes.io/hostname` label, or to an InternalIP; `Hostname` equal to an EC2 instance id in a node's
providerID; `Hostname` equal to a dcgm-exporter pod's name → that pod's node; the exporter pod's IP in
the series' `instance` label; else the node of the (scheduled) pod named in the device's labels.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from gpuwaste.models.cluster import ClusterState, Pod
from gpuwaste.models.telemetry import GpuTelemetry


@dataclass(frozen=True)
class NodeIndex:
    """Lookup tables from what an exporter's labels can say to a node name."""

    cluster: ClusterState
    by_hostname: dict[str, str] = field(default_factory=dict)
    pods: dict[tuple[str, str], Pod] = field(default_factory=dict)

    @classmethod
    def of(cls, cluster: ClusterState) -> NodeIndex:
        """Build the index of a cluster state (node names, hostname labels, provider ids, IPs)."""
        by_hostname: dict[str, str] = {}
        for n in cluster.nodes:
            by_hostname[n.name] = n.name
        for n in cluster.nodes:
            if n.hostname_label:
                by_hostname.setdefault(n.hostname_label, n.name)
            if n.provider_id:
                by_hostname.setdefault(n.provider_id.rsplit("/", 1)[-1], n.name)
            for ip in n.internal_ips:
                by_hostname.setdefault(ip, n.name)
        return cls(cluster, by_hostname, {p.key: p for p in cluster.pods})

    def node_of(self, dev: GpuTelemetry) -> str | None:
        """The node a device is on, or None when nothing ties it to one."""
        host = dev.hostname
        if host:
            if host in self.by_hostname:
                return self.by_hostname[host]
            if host in self.cluster.exporter_pods:
                return self.cluster.exporter_pods[host]
        for inst in dev.instances:
            ip = inst.rsplit(":", 1)[0]
            if ip in self.cluster.exporter_pod_ips:
                return self.cluster.exporter_pod_ips[ip]
        for ns, name in dev.workloads:
            pod = self.pods.get((ns, name))
            if pod is not None and pod.node_name:
                return pod.node_name
        return None


def devices_by_node(cluster: ClusterState, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry]) -> tuple[dict[str, list[GpuTelemetry]], list[GpuTelemetry]]:
    """Allocatable devices (MIG parents left out) grouped by node, and the devices no node could be found for."""
    index = NodeIndex.of(cluster)
    out: dict[str, list[GpuTelemetry]] = defaultdict(list)
    unmapped: list[GpuTelemetry] = []
    for dev in devices:
        if dev.is_mig_parent:
            continue  # the whole-GPU entity of a MIG GPU; its instances are the devices
        name = index.node_of(dev)
        if name is None:
            unmapped.append(dev)
        else:
            out[name].append(dev)
    return dict(out), unmapped


def physical_gpus_by_node(cluster: ClusterState, devices: tuple[GpuTelemetry, ...] | list[GpuTelemetry]) -> dict[str, int]:
    """Distinct DCGM UUIDs seen per node (physical GPUs counted by UUID, never by node capacity; B17)."""
    by_node, _ = devices_by_node(cluster, devices)
    return {name: len({d.device.uuid for d in devs}) for name, devs in by_node.items()}


__all__ = ["NodeIndex", "devices_by_node", "physical_gpus_by_node"]

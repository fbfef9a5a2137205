"""Service: split one cluster's scan into `shard_count` node sets whose findings are complete in themselves.

A shard is a set of nodes. Every fact a finding rests on lives on one node (a pod's GPUs, the node's free capacity,
its price), except one: a finding's fingerprint names the *workload*, and `scan.merge_replicas` merges the replicas
of one workload into one finding. Cutting the nodes by a hash of their names would put two replicas of a Deployment
in two shards, and the pipeline would receive two findings with one fingerprint (the second taken for a redelivery:
money lost). So the node sets are **workload-closed**: nodes that hold GPU pods of the same workload
(namespace + top controller) are joined (union-find) into one group, and whole groups are packed into shards,
largest first, onto the shard with the fewest GPUs so far (ties: the lower index). Everything is ordered by name, so
every shard of a scan computes the same plan from the same cluster state.

Chosen over the alternatives the issue names:
* a stable hash of the node name as a PromQL matcher is not expressible (PromQL has no hash function), and it splits
  workloads (above);
* a node-pool label: dcgm-exporter series carry no node labels (only `Hostname`), and a pool is no bound on size;
* so each shard's telemetry is read with a regex matcher listing its nodes' exporter host names
  (`Hostname=~"n1|n2|…"`: `hostnames`), bounded in size (`sources.promql.MAX_ONE_OF_BYTES`; past it the shard reads
  every series and keeps its own, correct but not cheaper), and whatever the source returns is filtered to the
  shard's nodes (`shard_telemetry`) by the same node resolution the join uses (`allocation.nodes.NodeIndex`).

Pods that no node holds yet (Pending, unscheduled) hold no GPU and produce no finding, but they tell every node's
free capacity apart (fragmentation), so every shard keeps them. A device no node can be found for goes to shard 0,
so it is judged exactly once. The plan needs the cluster state before the telemetry read, so a sharded scan reads
them one after the other (a scan of one shard reads them at the same time, as before).

Known limit: a shard reads the cluster state itself; with the Kubernetes API (a read of "now") a pod scheduled
between two shards' reads can move a node from one shard's plan to another's for that scan. KSM reads state at the
scan's time and is exact.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from gpuwaste.allocation.nodes import NodeIndex
from gpuwaste.models.cluster import ClusterState
from gpuwaste.models.telemetry import TelemetryWindow


@dataclass(frozen=True)
class ShardPlan:
    """Which node belongs to which shard, for one cluster state.

    Attributes:
        shard_count: shards of the scan (≥ 1). node_shard: node name → shard index (0 … shard_count − 1).
        gpus: GPUs each shard holds (allocatable GPU units summed over its nodes; the packing weight).
    """

    shard_count: int
    node_shard: dict[str, int]
    gpus: tuple[int, ...]

    def nodes(self, shard: int) -> frozenset[str]:
        """The node names of `shard`."""
        return frozenset(n for n, s in self.node_shard.items() if s == shard)


def _node_gpus(state: ClusterState) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in state.nodes:
        units = sum((n.allocatable_gpu or n.capacity_gpu).values())
        out[n.name] = max(1, units)
    return out


def plan_shards(state: ClusterState, shard_count: int) -> ShardPlan:
    """Workload-closed node sets of `state` packed into `shard_count` shards (see the module docstring).

    Nodes named only by pods (not listed) are planned too, so their pods land in one shard.

    Raises:
        ValueError: `shard_count` < 1.
    """
    if shard_count < 1:
        raise ValueError(f"shard_count {shard_count}: must be at least 1")
    weight = _node_gpus(state)
    names = set(weight)
    for p in state.pods:
        if p.node_name:
            names.add(p.node_name)
            weight.setdefault(p.node_name, 1)
    parent = {n: n for n in names}

    def find(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    first_node: dict[tuple[str, str, str], str] = {}
    for p in sorted(state.pods, key=lambda p: (p.namespace, p.name)):
        if not p.node_name or p.name in state.exporter_pods:
            continue
        w = p.workload
        key = (w.namespace, w.kind, w.name)
        other = first_node.setdefault(key, p.node_name)
        a, b = find(other), find(p.node_name)
        if a != b:
            parent[max(a, b)] = min(a, b)
    groups: dict[str, list[str]] = defaultdict(list)
    for n in sorted(names):
        groups[find(n)].append(n)
    load = [0] * shard_count
    node_shard: dict[str, int] = {}
    for _root, members in sorted(groups.items(), key=lambda kv: (-sum(weight[m] for m in kv[1]), kv[0])):
        target = min(range(shard_count), key=lambda i: (load[i], i))
        load[target] += sum(weight[m] for m in members)
        for m in members:
            node_shard[m] = target
    return ShardPlan(shard_count, node_shard, tuple(load))


def shard_state(state: ClusterState, plan: ShardPlan, shard: int) -> ClusterState:
    """`state` narrowed to the nodes of `shard`.

    Those nodes, the pods on them, the pods on no node (every shard), the exporter pods on them; namespaces, owners
    and DRA objects are kept whole (they are looked up, not judged).
    """
    if plan.shard_count == 1:
        return state
    mine = plan.nodes(shard)
    return state.model_copy(update={
        "nodes": tuple(n for n in state.nodes if n.name in mine),
        "pods": tuple(p for p in state.pods if not p.node_name or p.node_name in mine),
        "exporter_pods": {k: v for k, v in state.exporter_pods.items() if v in mine},
        "exporter_pod_ips": {k: v for k, v in state.exporter_pod_ips.items() if v in mine},
    })


def hostnames(state: ClusterState, nodes: Iterable[str]) -> tuple[str, ...]:
    """Every `Hostname` label value that `NodeIndex` resolves to one of `nodes`, sorted, distinct.

    Node names, `kubernetes.io/hostname` labels, EC2 instance ids, InternalIPs and the names of the exporter pods on
    them.
    """
    wanted = set(nodes)
    index = NodeIndex.of(state)
    values = {h for h, n in index.by_hostname.items() if n in wanted}
    values.update(pod for pod, n in state.exporter_pods.items() if n in wanted)
    values.update(wanted)
    return tuple(sorted(values))


def shard_telemetry(telemetry: TelemetryWindow, state: ClusterState, plan: ShardPlan, shard: int) -> TelemetryWindow:
    """`telemetry` narrowed to the devices on the nodes of `shard` and the pods those nodes hold.

    Devices are resolved to nodes over the whole `state` as the join does; a device tied to no node goes to shard 0,
    and a pod series of an unknown pod goes to shard 0 too. A GPU with thin telemetry (`other_gpus`) goes to the shard
    of the node its hostname label names (shard 0 without one).
    """
    if plan.shard_count == 1:
        return telemetry
    index = NodeIndex.of(state)

    def keep_device(node: str | None) -> bool:
        return plan.node_shard.get(node, 0) == shard if node is not None else shard == 0

    gpus = tuple(g for g in telemetry.gpus if keep_device(index.node_of(g)))
    uuids = {g.device.uuid for g in gpus}
    pods = tuple(p for p in telemetry.pods if keep_device(_pod_node(index, p.namespace, p.pod)))
    kept_xid = {u: c for u, c in telemetry.xid_errors.items() if u in uuids}
    # GPUs with thin telemetry (no field the scan reads): in the shard of the node their hostname label names
    other = tuple(u for u in telemetry.other_gpus if keep_device(_host_node(index, telemetry.other_gpu_hosts.get(u))))
    hosts = {u: h for u, h in telemetry.other_gpu_hosts.items() if u in other}
    return telemetry.model_copy(update={"gpus": gpus, "pods": pods, "xid_errors": kept_xid, "other_gpus": other,
                                        "other_gpu_hosts": hosts})


def _host_node(index: NodeIndex, host: str | None) -> str | None:
    """The node an exporter hostname label value names (as `NodeIndex.node_of` resolves a device's), or None."""
    if not host:
        return None
    return index.by_hostname.get(host) or index.cluster.exporter_pods.get(host)


def _pod_node(index: NodeIndex, namespace: str, name: str) -> str | None:
    pod = index.pods.get((namespace, name))
    return pod.node_name if pod is not None else None


def shard_of_name(name: str, shard_count: int) -> int:
    """A stable index 0 … `shard_count` − 1 for a name (CRC-32): spreads what carries no plan (e.g. dispatch jitter)."""
    return zlib.crc32(name.encode()) % shard_count


__all__ = ["ShardPlan", "hostnames", "plan_shards", "shard_of_name", "shard_state", "shard_telemetry"]

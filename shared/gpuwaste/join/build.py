"""Join: GPU ↔ node ↔ pod over the window — cluster state + telemetry + allocation holdings in, `ScanContext` out.

Pure. Implements the attribution rules of the field guide: exported_* labels (B02), node resolution from
Hostname / exporter pod / IP / EC2 instance id (B03, `allocation.nodes`), GPU ↔ pod by the exporter's pod
labels, else by the devices the allocation names (node + device), else by elimination (B01, B23), MIG devices keyed by UUID + GPU_I_ID (B05–B08), cluster lifecycle over stale DCGM pod labels
(B10, B11), physical GPUs counted by UUID (B17). Who holds which share from when to when comes from the
allocation resolvers (`gpuwaste.allocation.resolve`); a pod holds GPUs only over its holding span, so a
Job that finished mid-window held its GPU until it ended and the GPU is free afterwards.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal

from gpuwaste.allocation import AllocationResolver, Holding, Resolved, resolve
from gpuwaste.allocation.nodes import devices_by_node
from gpuwaste.allocation.sharing import read_replicas
from gpuwaste.join.readings import ScanContext
from gpuwaste.join.view import Allocation, CommonSettings, NodeInventory
from gpuwaste.models.cluster import ClusterState, Node, Pod
from gpuwaste.models.findings import Attribution
from gpuwaste.models.telemetry import GpuTelemetry, TelemetryWindow

Stray = tuple[GpuTelemetry, str, str, str]


def join(
    cluster: ClusterState,
    telemetry: TelemetryWindow,
    common: CommonSettings | None = None,
    *,
    power_limits_w: dict[str, float] | None = None,
    chain: Sequence[AllocationResolver] | None = None,
) -> ScanContext:
    """Join telemetry devices to nodes and to the pods that hold them in the window.

    Holdings come from the allocation resolvers (`chain`, default `allocation.resolvers()`); holdings that
    ended before the window started are dropped. A device labelled with a pod that holds nothing on that
    node in the window (finished without a known end, deleted, moved) is treated as unheld (B10) and
    recorded in `stray_labels`.
    """
    common = common or CommonSettings()
    window_start = telemetry.eval_time - timedelta(seconds=telemetry.window_s)
    cluster, sharing_notes = read_replicas(cluster, telemetry.gpus)  # replicas per GPU from what the hardware says
    resolved = resolve(cluster, telemetry.gpus, chain)
    if sharing_notes:
        resolved = replace(resolved, notes=(*resolved.notes, *sharing_notes))
    order = {p.identity: i for i, p in enumerate(cluster.pods)}
    holdings = sorted((h for h in resolved.holdings if h.held_until is None or h.held_until > window_start),
                      key=lambda h: order.get(h.pod.identity, len(order)))
    by_node, unmapped = devices_by_node(cluster, telemetry.gpus)
    nodes_by_name = {n.name: n for n in cluster.nodes}
    inventories = _inventories(cluster, by_node, nodes_by_name, resolved.physical_gpus, resolved.physical_uuids,
                               resolved.claimed_uuids)
    held_by_node: dict[str, list[Holding]] = defaultdict(list)
    for h in holdings:
        held_by_node[h.node or ""].append(h)
    by_name: dict[tuple[str, str], list[Holding]] = defaultdict(list)  # a name recreated in the window: one holding per uid
    for h in holdings:
        by_name[h.pod.key].append(h)
    labelled = _label_devices(inventories, cluster, by_name, resolved.infrastructure_pods)
    allocations: list[Allocation] = []
    for name, inv in inventories.items():
        inv.allocations = [_split_lost(a, telemetry) for a in _attribute_node(inv, held_by_node.get(name, []), labelled, telemetry.eval_time)]
        allocations.extend(inv.allocations)
    for name, node_holdings in held_by_node.items():
        if name and name not in inventories:  # a pod on a node that shows no GPU at all
            inv = inventories.setdefault(name, NodeInventory(name=name, node=nodes_by_name.get(name)))
            inv.allocations = [_allocation(h, inv.node, (), Attribution.UNKNOWN, False) for h in node_holdings]
            allocations.extend(inv.allocations)
    return ScanContext(cluster, telemetry, common, allocations, inventories, unmapped, labelled.stray,
                       dict(power_limits_w or {}), resolved)




def _inventories(cluster: ClusterState, by_node: dict[str, list[GpuTelemetry]], nodes: dict[str, Node],
                 known: dict[str, int] | None = None, slice_uuids: dict[str, frozenset[str]] | None = None,
                 claimed: frozenset[str] = frozenset()) -> dict[str, NodeInventory]:
    """One inventory per node with devices, and per GPU node without any (a node whose exporter is missing,
    or a DRA node whose GPUs only its ResourceSlices show). `slice_uuids`: node → the GPU UUIDs its ResourceSlices
    list; `claimed`: those an allocated claim holds (the rest are unclaimed: free capacity the exporter may hide)."""
    known = known or {}
    slice_uuids = slice_uuids or {}

    def inventory(name: str, node: Node | None, devs: list[GpuTelemetry]) -> NodeInventory:
        listed = slice_uuids.get(name, frozenset())
        return NodeInventory(name=name, node=node, devices=devs, known_gpus=known.get(name), slice_uuids=listed,
                             unclaimed_uuids=listed - claimed)

    out: dict[str, NodeInventory] = {}
    for name, devs in by_node.items():
        out[name] = inventory(name, nodes.get(name), list(devs))
    for n in cluster.nodes:
        if n.allocatable_gpu or n.capacity_gpu or n.gpu_product or n.name in known:
            out.setdefault(n.name, inventory(n.name, n, []))
    return out


@dataclass
class _Labelled:
    """Devices tied to pods by the exporter's pod labels (per node: a pod recreated under the same name on another node
    is another holding), and the labels that contradict the cluster."""

    owner: dict[int, tuple[str, str]] = field(default_factory=dict)
    devices: dict[tuple[str, str, str], list[GpuTelemetry]] = field(default_factory=lambda: defaultdict(list))  # (ns, pod, node)
    stray: list[Stray] = field(default_factory=list)


def _label_devices(inventories: dict[str, NodeInventory], cluster: ClusterState, holdings: dict[tuple[str, str], list[Holding]],
                   infrastructure: frozenset[tuple[str, str]] = frozenset()) -> _Labelled:
    """GPU ↔ pod by the exporter's labels: a device belongs to every pod labelled on it that holds GPUs on its node
    in the window (a time-sliced GPU is held by every sharer). Infrastructure pods (KAI/Run:ai reservation pods)
    are labelled on devices they hold for others: neither owners nor stray labels."""
    pods = {p.key: p for p in cluster.pods}
    out = _Labelled()
    for node_name, inv in inventories.items():
        for dev in inv.devices:
            current: list[tuple[str, str]] = []
            for ns, name in dev.workloads:
                if (ns, name) in infrastructure:
                    continue
                named = holdings.get((ns, name), [])
                here = next((h for h in named if h.node == node_name), named[0] if named else None)
                reason = _stray_reason(pods.get((ns, name)), here, node_name)
                if reason:
                    out.stray.append((dev, ns, name, reason))
                else:
                    current.append((ns, name))
            if current:
                out.owner[id(dev)] = current[0]
                for ns, name in current:
                    out.devices[(ns, name, node_name)].append(dev)
    return out


def _stray_reason(pod: Pod | None, holding: Holding | None, node_name: str) -> str:
    if pod is None:
        return "pod not found in the cluster"
    if holding is None:
        return f"pod is {pod.phase.value}; its GPUs are free"
    if holding.node != node_name:
        return f"pod runs on {holding.node}, device on {node_name}"
    return ""


def _attribute_node(inv: NodeInventory, holdings: list[Holding], labelled: _Labelled, eval_time: datetime) -> list[Allocation]:
    """The allocations of one node: devices labelled with the pod first, else the devices its allocation names (node +
    device), else elimination (B01), else unknown devices."""
    node = inv.node
    allocations = [
        _allocation(h, node, tuple(labelled.devices[(*h.pod.key, inv.name)]), Attribution.LABELS, True)
        for h in holdings if labelled.devices.get((*h.pod.key, inv.name))
    ]
    named: set[int] = set()
    for h in [h for h in holdings if not labelled.devices.get((*h.pod.key, inv.name)) and h.devices]:
        devs = _named_devices(inv, h)
        if devs:  # the allocation itself names the device (DRA claim, HAMi annotation, KAI reservation)
            allocations.append(_allocation(h, node, devs, Attribution.ALLOCATION, False))
            named.update(id(d) for d in devs)
    covered = {a.pod.identity for a in allocations}
    unlabelled = [d for d in inv.devices if id(d) not in labelled.owner and id(d) not in named]
    uncovered = [h for h in holdings if h.pod.identity not in covered]
    expected = inv.expected_gpus()
    # B01 + B23: elimination is safe only when every GPU the node should have is seen in DCGM;
    # otherwise the pod may hold the unmonitored GPU and the seen one be free.
    fully_seen = expected is None or len(inv.physical_uuids) >= expected
    if len(uncovered) == 1 and unlabelled and fully_seen and _fits(uncovered[0], unlabelled, node):
        allocations.append(_allocation(uncovered[0], node, tuple(unlabelled), Attribution.ELIMINATION, False))
        unlabelled = []
    else:
        allocations.extend(_allocation(h, node, (), Attribution.UNKNOWN, False) for h in uncovered)
        if uncovered and unlabelled:
            inv.ambiguous_pods.extend(h.pod for h in uncovered)
            inv.unattributed_devices.extend(unlabelled)
    inv.unheld_devices = [] if inv.ambiguous_pods else list(unlabelled)
    return allocations


def _silent_since(dev: GpuTelemetry, telemetry: TelemetryWindow) -> datetime | None:
    """When a device's series went silent inside the window (no sample of any field in the recent tail, samples
    before), as the end of its last bucket with a sample (else the window start); None while it reports."""
    stats = [st for g in dev.groups for st in g.signals.values()] + list(dev.parent_signals.values())
    if not stats or any(st.recent_count > 0 for st in stats) or not any(st.count > 0 for st in stats):
        return None
    ends = [b[0] for st in stats for b in st.buckets if b[1]]
    return max(ends) if ends else telemetry.eval_time - timedelta(seconds=telemetry.window_s)


def _split_lost(alloc: Allocation, telemetry: TelemetryWindow) -> Allocation:
    """A multi-GPU pod whose GPU went silent inside the window while its other GPUs kept reporting (fell off the bus:
    only an XID series left): the silent devices move to `lost_devices` with their share, so the observed ones are
    judged and the lost one is reported on its own (issue 21 §2). Whole-GPU device-plugin holdings only (one device
    per GPU of the share); an exporter that stopped for every device of the pod is not a lost device."""
    devs = alloc.devices
    if len(devs) < 2 or telemetry.single_instant or alloc.mechanism != "device plugin" or any(d.device.gpu_i_id for d in devs):
        return alloc
    if alloc.share != len({d.device.uuid for d in devs}) or len(devs) != len({d.device.uuid for d in devs}):
        return alloc
    silent = {id(d): t for d in devs if (t := _silent_since(d, telemetry)) is not None}
    if not silent or len(silent) == len(devs) or (alloc.held_until is not None and alloc.held_until < telemetry.eval_time):
        return alloc
    lost = tuple(d for d in devs if id(d) in silent)
    kept = tuple(d for d in devs if id(d) not in silent)
    return replace(alloc, devices=kept, share=alloc.share - len(lost), lost_devices=lost, lost_share=Decimal(len(lost)),
                   lost_since=min(silent.values()))


def _named_devices(inv: NodeInventory, h: Holding) -> tuple[GpuTelemetry, ...]:
    """The node's devices a holding names: a MIG instance by (UUID, GPU_I_ID), a physical GPU by UUID (with all its
    MIG instances when it is split)."""
    out: list[GpuTelemetry] = []
    for want in h.devices:
        for d in inv.devices:
            if d.device.uuid == want.uuid and (want.gpu_i_id is None or d.device.gpu_i_id == want.gpu_i_id) and d not in out:
                out.append(d)
    return tuple(out)


def _allocation(h: Holding, node: Node | None, devices: tuple[GpuTelemetry, ...], attribution: Attribution, labelled: bool) -> Allocation:
    return Allocation(h.pod, node, h.share, devices, attribution, labelled, held_from=h.held_from, held_until=h.held_until,
                      mechanism=h.mechanism, per_pod_activity=h.per_pod_activity, note=h.note)


def _fits(h: Holding, devices: list[GpuTelemetry], node: Node | None) -> bool:
    """Elimination is safe when the pod's share matches the unlabelled devices exactly (B01).

    MIG: the pod's MIG units equal the unlabelled instances. Otherwise the held physical-GPU share equals the
    unlabelled physical GPUs (time-sliced replicas are compared as physical GPUs: 4 replicas of 1 GPU never
    "fit" 4 GPUs).
    """
    mig = [d for d in devices if d.device.gpu_i_id is not None]
    if mig:
        return len(mig) == sum(h.pod.gpu_requests.values())
    whole = sum(c for r, c in h.pod.gpu_requests.items() if "mig-" not in r)
    replicas = max(1, node.gpu_replicas if node else 1)
    return Decimal(whole) / replicas == len({d.device.uuid for d in devices})


__all__ = ["Resolved", "join"]

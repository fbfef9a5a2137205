"""Allocation resolver: HAMi vGPU shares (pure; field guide B27).

HAMi's device plugin advertises each physical GPU `deviceSplitCount` times (10 by default) as `nvidia.com/gpu`,
so `nvidia.com/gpu: 1` is one share, not one GPU. A pod's share is `nvidia.com/gpucores` (percent of the SMs),
else `nvidia.com/gpumem-percentage`, else `nvidia.com/gpumem` (MiB) over the GPU's memory; the device it got
is in the pod annotation `hami.io/vgpu-devices-allocated` ("GPU-<uuid>,NVIDIA,<MiB>,<cores>:" per device,
";" between containers). dcgm-exporter usually cannot map HAMi pods, so activity is device-level.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

from gpuwaste.allocation._index import devices_by_node, held, live_pods, model_of, physical_devices
from gpuwaste.allocation.base import AllocationResult, Holding
from gpuwaste.models.cluster import ClusterState, Node, Pod, PodIdentity
from gpuwaste.models.gpu_models import GpuModelCatalog
from gpuwaste.models.telemetry import DeviceId, GpuTelemetry

ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"
CORES = "nvidia.com/gpucores"
MEM_MIB = "nvidia.com/gpumem"
MEM_PERCENT = "nvidia.com/gpumem-percentage"
SHARE_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class HamiDevice:
    """One device entry of `hami.io/vgpu-devices-allocated`.

    Attributes:
        uuid: physical GPU UUID. vendor: "NVIDIA". mem_mib: memory granted (MiB). cores: percent of SMs (0: no limit).
    """

    uuid: str
    vendor: str
    mem_mib: int
    cores: int


def parse_allocated(annotation: str) -> list[HamiDevice]:
    """Parse `hami.io/vgpu-devices-allocated` ("GPU-a,NVIDIA,5000,25:;GPU-b,NVIDIA,1000,0:;"), all containers.

    Malformed entries are skipped (the pod then falls back to its requests)."""
    out: list[HamiDevice] = []
    for container in annotation.split(";"):
        for entry in container.split(":"):
            parts = [p.strip() for p in entry.split(",")]
            if len(parts) < 4 or not parts[0]:
                continue
            try:
                out.append(HamiDevice(uuid=parts[0], vendor=parts[1], mem_mib=int(parts[2]), cores=int(parts[3])))
            except ValueError:
                continue
    return out


class HamiResolver:
    """Pods holding HAMi shares of physical GPUs.

    Args:
        catalog: GPU model catalogue (memory of a model, for `gpumem` shares); default the bundled one.
    """

    name = "HAMi"

    def __init__(self, catalog: GpuModelCatalog | None = None) -> None:
        self.catalog = catalog or GpuModelCatalog.bundled()

    def applies(self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...]) -> bool:
        """True when a pod requests `nvidia.com/gpucores`/`gpumem*` or carries a `hami.io/` device annotation."""
        return any(_is_hami(p) for p in cluster.pods)

    def resolve(
        self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...], *, handled: frozenset[PodIdentity]
    ) -> AllocationResult:
        """Each live HAMi pod holds gpucores/100 (or its memory share) of each GPU named in its annotation."""
        by_uuid = physical_devices(devices)
        nodes = {n.name: n for n in cluster.nodes}
        seen_on = devices_by_node(cluster, devices)
        holdings: list[Holding] = []
        handled_now: set[PodIdentity] = set()
        hami_nodes: dict[str, set[str]] = defaultdict(set)
        for pod in live_pods(cluster, handled):
            if not _is_hami(pod):
                continue
            node = nodes.get(pod.node_name or "")
            allocated = parse_allocated(pod.annotations.get(ALLOCATED_ANNOTATION, ""))
            if allocated:
                shares = [self._share(d.cores, d.mem_mib, pod, node, d.uuid, by_uuid) for d in allocated]
                share = sum(shares, Decimal(0))
                ids = tuple(dict.fromkeys(DeviceId(uuid=d.uuid) for d in allocated))
                hami_nodes[pod.node_name or ""].update(d.uuid for d in allocated)
                parts = ", ".join(f"{_pct(s)} of {d.uuid}" for d, s in zip(allocated, shares, strict=True))
                note = f"HAMi share: {parts}"
            else:
                units = max(1, pod.gpu_requests.get(SHARE_RESOURCE, 1))
                per = self._share(pod.share_requests.get(CORES, 0), pod.share_requests.get(MEM_MIB, 0), pod, node, None, by_uuid)
                share = per * units
                ids = ()
                hami_nodes.setdefault(pod.node_name or "", set())
                note = f"HAMi share from the pod's requests ({units} x {_pct(per)}); device not named ({ALLOCATED_ANNOTATION} absent)"
            own = any(pod.key in _workloads(by_uuid.get(i.uuid, [])) for i in ids)
            holdings.append(
                Holding(
                    pod=pod,
                    node=pod.node_name,
                    share=share,
                    mechanism="HAMi",
                    devices=ids,
                    per_pod_activity=own,
                    **held(pod),
                    note=note + ("" if own else "; activity is device-level, not attributable"),
                )
            )
            handled_now.add(pod.identity)
        notes: list[str] = []
        for node_name in sorted(n for n in hami_nodes if n):
            node = nodes.get(node_name)
            advertised = node.capacity_gpu.get(SHARE_RESOURCE) if node is not None else None
            physical = len(seen_on.get(node_name, set())) or (node.gpu_count_label if node is not None else None)
            if advertised and physical and advertised != physical:
                seen = "DCGM sees" if seen_on.get(node_name) else "GPU Feature Discovery says"
                notes.append(f"node {node_name} advertises {advertised} {SHARE_RESOURCE}, {seen} {physical} GPUs: HAMi shares")
        return AllocationResult(holdings=tuple(holdings), handled_pods=frozenset(handled_now), notes=tuple(notes))

    def _share(self, cores: int, mem_mib: int, pod: Pod, node: Node | None, uuid: str | None, by_uuid: dict[str, list[GpuTelemetry]]) -> Decimal:
        """Physical-GPU share of one HAMi device grant: cores %, else memory % / MiB over the model's memory, else 1/split."""
        if cores and cores > 0:
            return min(Decimal(1), Decimal(cores) / 100)
        pct = pod.share_requests.get(MEM_PERCENT)
        if pct:
            return min(Decimal(1), Decimal(pct) / 100)
        spec = model_of(uuid, node, by_uuid, self.catalog)
        if mem_mib and spec is not None:
            return min(Decimal(1), Decimal(mem_mib) / Decimal(spec.memory_mib))
        if node is not None and node.capacity_gpu.get(SHARE_RESOURCE) and node.gpu_count_label:
            return Decimal(node.gpu_count_label) / Decimal(node.capacity_gpu[SHARE_RESOURCE])  # one of deviceSplitCount shares
        return Decimal(1)


def _is_hami(pod: Pod) -> bool:
    return bool(set(pod.share_requests) & {CORES, MEM_MIB, MEM_PERCENT}) or ALLOCATED_ANNOTATION in pod.annotations


def _workloads(devs: list[GpuTelemetry]) -> set[tuple[str, str]]:
    return {w for d in devs for w in d.workloads}


def _pct(share: Decimal) -> str:
    return f"{(share * 100).normalize():f} %"

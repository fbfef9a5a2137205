"""Allocation resolver: NVIDIA vGPU guests (vSphere / VKS VMs given a slice of a physical GPU) (pure).

Inside a vGPU guest the GPU is named after its vGPU type: "GRID A100-40C", "NVIDIA H100-20C", "A100-3-20C"
(MIG-backed). The guest's one "GPU" is then `<framebuffer GB> / <board framebuffer GB>` of a physical GPU (or
`<slices>/7` for a MIG-backed type), not a whole one. Pods on such nodes request `nvidia.com/gpu` as usual;
this resolver charges each unit at the vGPU type's fraction instead of one physical GPU.
"""

from __future__ import annotations

import re
from decimal import Decimal

from gpuwaste.allocation._index import held, live_pods
from gpuwaste.allocation.base import AllocationResult, Holding
from gpuwaste.models.cluster import ClusterState, Node, PodIdentity
from gpuwaste.models.gpu_models import GpuModelCatalog
from gpuwaste.models.telemetry import GpuTelemetry

#: vGPU type board prefix → the physical board's framebuffer (GB): the whole-board C-series type of each board
#: in NVIDIA's "Virtual GPU Types for Supported GPUs" (vGPU software user guide): A100-40C, A100D-80C,
#: H100-80C, H100L-94C, H200X-141C, L40S-48C, L40-48C, A40-48C, A30-24C, A10-24C, L4-24C, T4-16C, V100D-32C.
BOARD_FRAMEBUFFER_GB: dict[str, int] = {
    "A100": 40,
    "A100D": 80,
    "A100X": 80,
    "H100": 80,
    "H100XM": 80,
    "H100L": 94,
    "H200X": 141,
    "L40S": 48,
    "L40": 48,
    "A40": 48,
    "A30": 24,
    "A10": 24,
    "L4": 24,
    "T4": 16,
    "V100D": 32,
}

# "GRID A100-40C", "NVIDIA H100-20C", "A100-3-20C", "NVIDIA-A100-40C" (GFD); series C (compute), Q, B, A.
_VGPU_TYPE = re.compile(r"^(?:(?:NVIDIA|GRID)[ _-])?(?P<board>[A-Z][A-Z0-9]*?)-(?:(?P<slices>\d)-)?(?P<fb>\d+)(?P<series>[CQBA])$")

GPU_RESOURCE = "nvidia.com/gpu"


def vgpu_fraction(name: str | None) -> tuple[Decimal, str] | None:
    """(fraction of a physical GPU, explanation) for a vGPU type name; None when `name` is not a vGPU type.

    Examples: "GRID A100-40C" → 1 (a whole A100 40GB), "H100-20C" → 0.25, "A100-3-20C" → 3/7 (MIG-backed).
    An unknown board gives None (the unit then counts as one GPU, as before).
    """
    if not name:
        return None
    match = _VGPU_TYPE.match(name.strip().upper())
    if match is None:
        return None
    board, fb = match.group("board"), int(match.group("fb"))
    if match.group("slices"):
        slices = int(match.group("slices"))
        return Decimal(slices) / 7, f"MIG-backed vGPU {name}: {slices}/7 of a {board}"
    total = BOARD_FRAMEBUFFER_GB.get(board)
    if total is None or fb <= 0 or fb > total:
        return None
    return Decimal(fb) / Decimal(total), f"vGPU {name}: {fb} GB of a {total} GB {board}"


class VgpuResolver:
    """Pods on vGPU guest nodes, each `nvidia.com/gpu` unit charged at its vGPU type's fraction."""

    name = "vGPU"

    def __init__(self, catalog: GpuModelCatalog | None = None) -> None:
        self.catalog = catalog or GpuModelCatalog.bundled()

    def applies(self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...]) -> bool:
        """True when a node's GPU product or a device's `modelName` is a vGPU type."""
        return any(vgpu_fraction(n.gpu_product) for n in cluster.nodes) or any(vgpu_fraction(d.model_name) for d in devices)

    def resolve(
        self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...], *, handled: frozenset[PodIdentity]
    ) -> AllocationResult:
        """Holdings of live pods on vGPU nodes: units x the vGPU fraction."""
        types = self._node_types(cluster, devices)
        holdings: list[Holding] = []
        handled_now: set[PodIdentity] = set()
        for pod in live_pods(cluster, handled):
            found = types.get(pod.node_name or "")
            units = sum(c for r, c in pod.gpu_requests.items() if r == GPU_RESOURCE or r.endswith("/gpu.shared"))
            if found is None or not units:
                continue
            fraction, why = found
            labelled = tuple(d.device for d in devices if pod.key in d.workloads)
            holdings.append(
                Holding(
                    pod=pod,
                    node=pod.node_name,
                    share=fraction * units,
                    mechanism="vGPU",
                    devices=labelled,
                    per_pod_activity=True,
                    **held(pod),
                    note=f"{why}; {units} unit(s)",
                )
            )
            handled_now.add(pod.identity)
        notes = tuple(f"node {n} is a vGPU guest ({why}): its GPU is a fraction of a physical one" for n, (_, why) in sorted(types.items()))
        return AllocationResult(holdings=tuple(holdings), handled_pods=frozenset(handled_now), notes=notes)

    def _node_types(self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...]) -> dict[str, tuple[Decimal, str]]:
        out: dict[str, tuple[Decimal, str]] = {}
        by_host = {n.name: n for n in cluster.nodes}
        for n in cluster.nodes:
            found = vgpu_fraction(n.gpu_product)
            if found:
                out[n.name] = found
        for d in devices:
            node: Node | None = by_host.get(d.hostname or "")
            found = vgpu_fraction(d.model_name)
            if node is not None and found and node.name not in out:
                out[node.name] = found
        return out

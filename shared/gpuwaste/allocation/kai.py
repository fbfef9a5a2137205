"""Allocation resolver: KAI Scheduler / Run:ai GPU fractions (pure; field guide B28).

A fractional pod asks with an annotation (`gpu-fraction: "0.5"`, or `gpu-memory` in MiB, optionally
`gpu-fraction-num-devices`) and requests no GPU. KAI binds a reservation pod in `runai-reservation` that requests
`nvidia.com/gpu: 1`, names the device in `run.ai/reserve_for_gpu_index`, and shares the `runai-gpu-group` label
with the fractional pods; dcgm-exporter therefore labels the GPU with the reservation pod. Reservation pods are
infrastructure — never owners, never charged; the fractional pods (and so their team) hold the GPU by their
fractions. Fractions are time-sliced, not enforced (KAI#274), so activity is device-level.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from gpuwaste.allocation._index import decimal_or_none, held, live_pods, model_of, physical_devices
from gpuwaste.allocation.base import AllocationResult, Holding
from gpuwaste.models.cluster import ClusterState, Node, Pod, PodIdentity
from gpuwaste.models.gpu_models import GpuModelCatalog
from gpuwaste.models.telemetry import DeviceId, GpuTelemetry

RESERVATION_NAMESPACE = "runai-reservation"
GROUP_LABEL = "runai-gpu-group"
RESERVED_GPU_ANNOTATION = "run.ai/reserve_for_gpu_index"
FRACTION_ANNOTATION = "gpu-fraction"
MEMORY_ANNOTATION = "gpu-memory"
DEVICES_ANNOTATION = "gpu-fraction-num-devices"


class KaiResolver:
    """Fractional pods of KAI Scheduler / Run:ai, charged through their group's reservation pod.

    Args:
        reservation_namespace: where KAI/Run:ai puts reservation pods.
        catalog: GPU model catalogue (memory of a model, for `gpu-memory` requests); default the bundled one.
    """

    name = "KAI"

    def __init__(self, reservation_namespace: str = RESERVATION_NAMESPACE, catalog: GpuModelCatalog | None = None) -> None:
        self.reservation_namespace = reservation_namespace
        self.catalog = catalog or GpuModelCatalog.bundled()

    def applies(self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...]) -> bool:
        """True when a pod carries a fraction annotation or runs in the reservation namespace."""
        return any(self._is_reservation(p) or _is_fractional(p) for p in cluster.pods)

    def resolve(
        self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...], *, handled: frozenset[PodIdentity]
    ) -> AllocationResult:
        """Fractional pods hold fraction x devices of their group's reserved GPUs; reservation pods hold nothing."""
        by_uuid = physical_devices(devices)
        nodes = {n.name: n for n in cluster.nodes}
        pods = live_pods(cluster, handled)
        reservations = [p for p in pods if self._is_reservation(p)]
        by_group: dict[tuple[str, str], list[Pod]] = defaultdict(list)  # (node, group) → reservation pods
        for r in reservations:
            by_group[(r.node_name or "", r.labels.get(GROUP_LABEL, ""))].append(r)
        holdings: list[Holding] = []
        handled_now: set[PodIdentity] = {r.identity for r in reservations}
        used_groups: set[tuple[str, str]] = set()
        notes: list[str] = []
        for pod in pods:
            if self._is_reservation(pod) or not _is_fractional(pod):
                continue
            group = pod.labels.get(GROUP_LABEL, "")
            key = (pod.node_name or "", group)
            held_by = by_group.get(key, []) if group else []
            if not held_by:
                on_node = [r for (n, _), rs in by_group.items() if n == key[0] for r in rs]
                held_by = on_node if len(on_node) == 1 else []  # one reservation on the node: it must be this one
            ids = tuple(dict.fromkeys(DeviceId(uuid=u) for r in held_by for u in _reserved_uuids(r, by_uuid)))
            fraction = self._fraction(pod, ids, nodes, by_uuid)
            count = int(decimal_or_none(pod.annotations.get(DEVICES_ANNOTATION)) or 1)
            share = fraction * max(1, count)
            if held_by:
                used_groups.add((held_by[0].node_name or "", held_by[0].labels.get(GROUP_LABEL, "")))
                names = ", ".join(f"{r.namespace}/{r.name}" for r in held_by)
                note = f"gpu-fraction {_fmt(fraction)} of {', '.join(i.uuid for i in ids) or 'a GPU'} reserved by {names}"
            else:
                note = f"gpu-fraction {_fmt(fraction)}; no reservation pod found for group {group or '(none)'}: device unknown"
            holdings.append(
                Holding(
                    pod=pod,
                    node=pod.node_name,
                    share=share,
                    mechanism="KAI",
                    devices=ids,
                    per_pod_activity=False,
                    **held(pod),
                    note=note + "; activity is device-level, not attributable",
                )
            )
            handled_now.add(pod.identity)
        for (node, group), rs in sorted(by_group.items()):
            if (node, group) not in used_groups:
                names = ", ".join(f"{r.namespace}/{r.name}" for r in rs)
                notes.append(f"reservation pod {names} holds a GPU on {node} for group {group or '(none)'} and no running pod uses it")
        return AllocationResult(
            holdings=tuple(holdings),
            handled_pods=frozenset(handled_now),
            infrastructure_pods=frozenset(r.key for r in reservations),
            notes=tuple(notes),
        )

    def _is_reservation(self, pod: Pod) -> bool:
        return pod.namespace == self.reservation_namespace

    def _fraction(self, pod: Pod, ids: tuple[DeviceId, ...], nodes: dict[str, Node], by_uuid: dict[str, list[GpuTelemetry]]) -> Decimal:
        fraction = decimal_or_none(pod.annotations.get(FRACTION_ANNOTATION))
        if fraction is not None and 0 < fraction <= 1:
            return fraction
        mem = decimal_or_none(pod.annotations.get(MEMORY_ANNOTATION))
        spec = model_of(ids[0].uuid if ids else None, nodes.get(pod.node_name or ""), by_uuid, self.catalog)
        if mem is not None and mem > 0 and spec is not None:
            return min(Decimal(1), mem / Decimal(spec.memory_mib))
        return Decimal(1)


def _is_fractional(pod: Pod) -> bool:
    return FRACTION_ANNOTATION in pod.annotations or MEMORY_ANNOTATION in pod.annotations


def _reserved_uuids(pod: Pod, by_uuid: dict[str, list[GpuTelemetry]]) -> list[str]:
    """GPU UUIDs a reservation pod holds: from its annotation, else the devices the exporter labels with it."""
    raw = pod.annotations.get(RESERVED_GPU_ANNOTATION, "")
    named = [u.strip() for u in raw.split(",") if u.strip().upper().startswith("GPU-")]
    if named:
        return named
    return sorted(u for u, devs in by_uuid.items() if any(pod.key in d.workloads for d in devs))


def _fmt(value: Decimal) -> str:
    return f"{value.normalize():f}"

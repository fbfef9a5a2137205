"""Allocation: the resolver interface and the holdings it returns (pure; no I/O, no SDKs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Protocol

from gpuwaste.models.cluster import ClusterState, Pod, PodIdentity, PodPhase
from gpuwaste.models.telemetry import DeviceId, GpuTelemetry


@dataclass(frozen=True)
class Holding:
    """One pod's share of physical GPUs on one node, over a time span.

    Attributes:
        pod: the pod charged for the share (never an infrastructure pod such as a KAI reservation pod).
        node: node name the pod runs on (None when unscheduled; an unscheduled pod holds nothing).
        share: physical-GPU equivalents held in total (MIG slice N/S, a time-slice 1/replicas,
            a HAMi or KAI fraction, a DRA claim split between the pods sharing it).
        mechanism: "device-plugin", "mig", "time-slicing", "mps", "dra", "hami", "kai", "vgpu", ...
        devices: devices the resolver knows the pod holds (physical UUID, + GPU_I_ID for MIG); empty when
            it cannot tell which (the join then uses exporter labels or elimination).
        per_pod_activity: True when the exporter reports this pod's own activity (per-process / per-pod
            series); False when activity is device-level only and so "not attributable" to one sharer.
        held_from, held_until: the span in which the pod held the share (None: before/after the window).
        note: a short explanation shown with the finding ("gpu-fraction 0.5 on reservation pod runai-…").
    """

    pod: Pod
    node: str | None
    share: Decimal
    mechanism: str
    devices: tuple[DeviceId, ...] = ()
    per_pod_activity: bool = True
    held_from: datetime | None = None
    held_until: datetime | None = None
    note: str = ""


@dataclass(frozen=True)
class AllocationResult:
    """What one resolver found.

    Attributes:
        holdings: the pods' holdings this resolver is responsible for.
        handled_pods: (namespace, name) of pods this resolver accounted for, so that resolvers asked after
            it do not count them again (e.g. a HAMi pod's `nvidia.com/gpu` request is shares, not GPUs).
        infrastructure_pods: pods that hold devices on behalf of others (KAI/Run:ai reservation pods): never
            owners, never charged.
        physical_gpus: node → physical GPUs the resolver knows are there (e.g. from ResourceSlices), used
            when DCGM does not show them; never node capacity.
        unmonitored: devices the resolver knows are held but that the exporter does not report.
        notes: data-quality notes in users' words ("node advertises 40 nvidia.com/gpu, DCGM sees 4 GPUs:
            HAMi shares").
        physical_uuids: node → the physical GPU UUIDs the resolver knows are there (DRA ResourceSlices' devices,
            a MIG device counted as its parent), whether or not the exporter reports them.
        claimed_uuids: of those, the physical GPUs an allocated claim holds (the rest are unclaimed: free capacity
            that an exporter showing claimed GPUs only hides).
    """

    holdings: tuple[Holding, ...] = ()
    handled_pods: frozenset[PodIdentity] = frozenset()
    infrastructure_pods: frozenset[tuple[str, str]] = frozenset()
    physical_gpus: dict[str, int] = field(default_factory=dict)
    unmonitored: tuple[DeviceId, ...] = ()
    notes: tuple[str, ...] = ()
    physical_uuids: dict[str, frozenset[str]] = field(default_factory=dict)
    claimed_uuids: frozenset[str] = frozenset()


class AllocationResolver(Protocol):
    """One way GPUs are handed out. Implementations are pure and registered in `gpuwaste.allocation`."""

    name: str

    def applies(self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...]) -> bool:
        """True when the cluster shows this mechanism (resource names, annotations, claims, exporter labels)."""
        ...

    def resolve(
        self,
        cluster: ClusterState,
        devices: tuple[GpuTelemetry, ...],
        *,
        handled: frozenset[PodIdentity],
    ) -> AllocationResult:
        """The holdings of the pods this mechanism accounts for, skipping pods in `handled`."""
        ...


def hold_span(pod: Pod) -> tuple[datetime | None, datetime | None] | None:
    """When a pod holds its GPUs: (from, until), None for an open end; None when it holds none at all.

    A pod holds GPUs only while it is scheduled and not terminal (field guide B11): a bound pod that is
    Running, Pending (bound, not started: it holds its devices) or Unknown holds from its start (else its
    creation) on; a Succeeded/Failed pod held them from its start until its last container finished — when
    that time is known; a pod deleted in the window (`gone_at`) held them until then. A terminal pod whose end is
    unknown, or an unscheduled pod, holds nothing.
    """
    if not pod.node_name or not pod.gpu_requests:
        return None
    start = pod.started_at or pod.created_at
    if pod.gone_at is not None:  # deleted in the window (kube-state-metrics history): held until it was last seen
        return start, pod.gone_at
    if pod.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED):
        if pod.finished_at is None:
            return None
        return start, pod.finished_at
    return start, None


def requests_of(pod: Pod, prefixes: tuple[str, ...]) -> dict[str, int]:
    """The pod's effective GPU requests whose resource name starts with one of `prefixes`.

    `Pod.gpu_requests` is already the effective request per resource: max(largest init container, sum of
    the app containers) (the sources compute it; field guide B11).
    """
    return {r: c for r, c in pod.gpu_requests.items() if r.startswith(prefixes) and c > 0}

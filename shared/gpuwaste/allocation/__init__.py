"""Allocation: pure resolvers that answer "which pod holds which share of which physical GPU, from when to when".

Each way Kubernetes hands out a GPU (device-plugin requests, MIG profiles, time-slicing/MPS replicas,
DRA ResourceClaims, HAMi shares, KAI/Run:ai fractions, vGPU guests) is one resolver module in this package
implementing `AllocationResolver` (see `base.py`). The join (`gpuwaste.join`) asks every resolver, in the
fixed order of `resolvers()`, whether it applies to the cluster, and merges their holdings: a pod one
resolver accounted for is skipped by the ones asked after it (a HAMi pod's `nvidia.com/gpu` request is
shares, not GPUs). Adding the next scheduler is one new resolver, listed once in `resolvers()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from gpuwaste.allocation.base import AllocationResolver, AllocationResult, Holding, hold_span
from gpuwaste.allocation.device_plugin import DevicePluginResolver
from gpuwaste.allocation.dra import DraResolver
from gpuwaste.allocation.hami import HamiResolver
from gpuwaste.allocation.kai import KaiResolver
from gpuwaste.allocation.mig import MigResolver
from gpuwaste.allocation.sharing import SharingResolver
from gpuwaste.allocation.vgpu import VgpuResolver
from gpuwaste.models.cluster import ClusterState, PodIdentity
from gpuwaste.models.telemetry import DeviceId, GpuTelemetry


def resolvers() -> tuple[AllocationResolver, ...]:
    """Every resolver, in the order they are asked: the specific mechanisms first, the device plugin last.

    Mechanisms that re-use `nvidia.com/gpu` for something other than whole GPUs (DRA, HAMi shares, KAI
    fractions, vGPU guests) must come before MIG, sharing and the device plugin.
    """
    return (DraResolver(), HamiResolver(), KaiResolver(), VgpuResolver(), MigResolver(), SharingResolver(), DevicePluginResolver())


@dataclass(frozen=True)
class MechanismUse:
    """What one mechanism accounted for in a scan: pods, physical-GPU equivalents held now, and in total."""

    pods: int = 0
    share: Decimal = Decimal(0)


@dataclass(frozen=True)
class Resolved:
    """The merged answer of every resolver that applied.

    Attributes:
        holdings: every pod's holding (each pod at most once).
        applied: names of the resolvers that applied, in the order asked.
        mix: mechanism → pods and physical-GPU equivalents (for the scan header: "device plugin 212 GPUs, MIG 14 slices").
        physical_uuids / claimed_uuids: see `AllocationResult` (merged: the first resolver naming a node wins).
    """

    holdings: tuple[Holding, ...] = ()
    infrastructure_pods: frozenset[tuple[str, str]] = frozenset()
    physical_gpus: dict[str, int] = field(default_factory=dict)
    unmonitored: tuple[DeviceId, ...] = ()
    notes: tuple[str, ...] = ()
    applied: tuple[str, ...] = ()
    mix: dict[str, MechanismUse] = field(default_factory=dict)
    physical_uuids: dict[str, frozenset[str]] = field(default_factory=dict)
    claimed_uuids: frozenset[str] = frozenset()


def resolve(cluster: ClusterState, devices: tuple[GpuTelemetry, ...] | Sequence[GpuTelemetry],
            chain: Sequence[AllocationResolver] | None = None) -> Resolved:
    """Ask each resolver of `chain` (default `resolvers()`) that applies; merge, skipping pods already handled."""
    devs = tuple(devices)
    handled: set[PodIdentity] = set()
    holdings: list[Holding] = []
    infra: set[tuple[str, str]] = set()
    physical: dict[str, int] = {}
    physical_uuids: dict[str, frozenset[str]] = {}
    claimed: set[str] = set()
    unmonitored: list[DeviceId] = []
    notes: list[str] = []
    applied: list[str] = []
    for r in chain if chain is not None else resolvers():
        if not r.applies(cluster, devs):
            continue
        applied.append(r.name)
        result: AllocationResult = r.resolve(cluster, devs, handled=frozenset(handled))
        for h in result.holdings:
            if h.pod.identity in handled or h.pod.key in infra or h.pod.key in result.infrastructure_pods:
                continue
            holdings.append(h)
            handled.add(h.pod.identity)
        handled |= result.handled_pods | {p.identity for p in cluster.pods if p.key in result.infrastructure_pods}
        infra |= result.infrastructure_pods
        for node, n in result.physical_gpus.items():
            physical.setdefault(node, n)
        for node, uuids in result.physical_uuids.items():
            physical_uuids.setdefault(node, uuids)
        claimed |= result.claimed_uuids
        unmonitored.extend(result.unmonitored)
        notes.extend(result.notes)
    mix: dict[str, MechanismUse] = {}
    for h in holdings:
        m = mix.get(h.mechanism, MechanismUse())
        mix[h.mechanism] = MechanismUse(m.pods + 1, m.share + h.share)
    return Resolved(tuple(holdings), frozenset(infra), physical, tuple(unmonitored), tuple(notes), tuple(applied), mix,
                    physical_uuids=physical_uuids, claimed_uuids=frozenset(claimed))


def mix_text(mix: dict[str, MechanismUse]) -> str:
    """The allocation mix in words: "device plugin 212 GPUs (90 pods), MIG 2 GPUs (14 pods), time-slicing 0.75 GPU (3 pods)"."""
    parts = []
    for name, use in sorted(mix.items(), key=lambda kv: (-kv[1].share, kv[0])):
        share = use.share.quantize(Decimal("0.01")).normalize()
        gpus = f"{share:f} GPU" + ("s" if share > 1 else "")
        parts.append(f"{name} {gpus} ({use.pods} pod{'s' if use.pods != 1 else ''})")
    return ", ".join(parts) or "no pod holds a GPU"


__all__ = ["AllocationResolver", "AllocationResult", "Holding", "MechanismUse", "Resolved", "hold_span", "mix_text", "resolve", "resolvers"]

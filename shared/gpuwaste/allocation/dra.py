"""Allocation resolver: Dynamic Resource Allocation — GPUs held through ResourceClaims (pure; field guide B25).

A pod asks for GPUs through `spec.resourceClaims`; the node advertises no `nvidia.com/gpu` and the pod requests
none. The claim's `status.allocation.devices.results` name (driver, pool, device); the driver's ResourceSlice
maps that device to a GPU UUID (or a MIG device with its parent UUID and profile). A claim shared by several
pods (`status.reservedFor`) is split equally between the live ones. When the claims cannot be read (RBAC), the
exporter's `dra_*` labels still say which claim and pod a device belongs to. Devices a claim holds that the
exporter does not report are returned as unmonitored (billed, never dropped, never judged idle).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

from gpuwaste.allocation._index import held, live_pods, physical_devices
from gpuwaste.allocation.base import AllocationResult, Holding
from gpuwaste.errors import InputFormatError
from gpuwaste.models.cluster import ClusterState, Pod, PodIdentity
from gpuwaste.models.dra import ClaimDeviceResult, ResourceClaim, ResourceSlice, SliceDevice
from gpuwaste.models.gpu_models import DEFAULT_MIG_TOTAL_SLICES, GpuModelCatalog, parse_mig_profile
from gpuwaste.models.telemetry import DeviceId, GpuTelemetry

#: Drivers whose devices are GPUs (NVIDIA's DRA driver; its device classes are gpu.nvidia.com / mig.nvidia.com).
GPU_DRIVERS: tuple[str, ...] = ("gpu.nvidia.com",)


@dataclass(frozen=True)
class _Located:
    device: SliceDevice | None
    node: str | None
    share: Decimal
    ids: tuple[DeviceId, ...]
    physical_uuid: str | None


class DraResolver:
    """Pods holding GPUs through allocated ResourceClaims of a GPU driver.

    Args:
        gpu_drivers: DRA driver names whose devices are GPUs.
        catalog: GPU model catalogue (MIG slices per model); default the bundled one.
    """

    name = "DRA"

    def __init__(self, gpu_drivers: tuple[str, ...] = GPU_DRIVERS, catalog: GpuModelCatalog | None = None) -> None:
        self.gpu_drivers = gpu_drivers
        self.catalog = catalog or GpuModelCatalog.bundled()

    def applies(self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...]) -> bool:
        """True when the cluster shows ResourceClaims of a GPU driver, pods with claims, or `dra_*` exporter labels."""
        return (
            any(self._is_gpu_claim(c, cluster) for c in cluster.resource_claims)
            or any(p.resource_claims for p in cluster.pods)
            or any(d.dra for d in devices)
            or any(s.driver in self.gpu_drivers and s.node_name for s in cluster.resource_slices)
        )

    def resolve(
        self, cluster: ClusterState, devices: tuple[GpuTelemetry, ...], *, handled: frozenset[PodIdentity]
    ) -> AllocationResult:
        """Holdings of the live pods that use allocated GPU claims, split between the pods sharing a claim."""
        by_uuid = physical_devices(devices)
        by_dra = _devices_by_dra_label(devices)
        slices = _slice_index(cluster.resource_slices)
        claims = {c.key: c for c in cluster.resource_claims}
        pods = live_pods(cluster, handled)
        users: dict[tuple[str, str], list[Pod]] = defaultdict(list)
        for pod in pods:
            for ref in pod.resource_claims:
                if ref.claim_name:
                    users[(pod.namespace, ref.claim_name)].append(pod)
        holdings: list[Holding] = []
        handled_now: set[PodIdentity] = set()
        unmonitored: dict[DeviceId, None] = {}
        notes: list[str] = []
        claimed: set[str] = set()
        for claim in cluster.resource_claims:
            if not claim.allocated or not self._is_gpu_claim(claim, cluster):
                continue
            consumers = _consumers(claim, users.get(claim.key, []), pods)
            located = [self._locate(r, slices, by_uuid, by_dra) for r in claim.results if r.driver in self.gpu_drivers]
            claimed.update(loc.physical_uuid for loc in located if loc.physical_uuid)
            total = sum((loc.share for loc in located), Decimal(0))
            for loc in located:
                if loc.physical_uuid and loc.physical_uuid not in by_uuid:
                    unmonitored[DeviceId(uuid=loc.physical_uuid)] = None
            if not consumers:
                notes.append(
                    f"ResourceClaim {claim.namespace}/{claim.name} holds {_fmt(total)} GPU(s) and no running pod uses it"
                )
                continue
            ids = tuple(dict.fromkeys(i for loc in located for i in loc.ids))
            missing = [loc.physical_uuid for loc in located if loc.physical_uuid and loc.physical_uuid not in by_uuid]
            share = total / len(consumers)
            shared = len(consumers) > 1
            for pod in consumers:
                note = f"ResourceClaim {claim.name}: {_fmt(total)} GPU(s)"
                if shared:
                    note += f" shared by {len(consumers)} pods (1/{len(consumers)} each; activity is device-level, not attributable)"
                if missing:
                    note += f"; {len(missing)} not reported by the exporter (unmonitored)"
                holdings.append(
                    Holding(
                        pod=pod,
                        node=pod.node_name or next((loc.node for loc in located if loc.node), None),
                        share=share,
                        mechanism="DRA",
                        devices=ids,
                        per_pod_activity=not shared,
                        **held(pod, claim.allocated_at),
                        note=note,
                    )
                )
                handled_now.add(pod.identity)
        # claims named by pods but absent from the cluster read (no RBAC, or not created yet)
        for pod in pods:
            if pod.identity in handled_now or not pod.resource_claims:
                continue
            unread = [r.claim_name for r in pod.resource_claims if r.claim_name and (pod.namespace, r.claim_name) not in claims]
            if not unread:
                continue
            from_labels = self._from_exporter_labels(pod, unread, by_dra, users)
            if from_labels is not None:
                holdings.append(from_labels)
                handled_now.add(pod.identity)
            elif not cluster.dra_listed:
                notes.append(
                    f"pod {pod.namespace}/{pod.name} uses ResourceClaim {', '.join(unread)}, which the scan could not read: "
                    "grant get/list on resourceclaims, resourceslices and deviceclasses (resource.k8s.io) with deploy/rbac.yaml"
                )
        physical: dict[str, set[str]] = defaultdict(set)
        for s in cluster.resource_slices:
            if s.driver not in self.gpu_drivers or not s.node_name:
                continue
            for d in s.devices:
                if d.physical_uuid:
                    physical[s.node_name].add(d.physical_uuid)
        return AllocationResult(
            holdings=tuple(holdings),
            handled_pods=frozenset(handled_now),
            physical_gpus={n: len(u) for n, u in physical.items()},
            unmonitored=tuple(unmonitored),
            notes=tuple(notes),
            physical_uuids={n: frozenset(u) for n, u in physical.items()},
            claimed_uuids=frozenset(claimed),
        )

    # -- helpers -------------------------------------------------------------------------------------------
    def _is_gpu_claim(self, claim: ResourceClaim, cluster: ClusterState) -> bool:
        if any(r.driver in self.gpu_drivers for r in claim.results):
            return True
        gpu_classes = {c.name for c in cluster.device_classes if set(c.drivers) & set(self.gpu_drivers)} | set(self.gpu_drivers)
        gpu_classes |= {f"mig.{d.split('.', 1)[-1]}" for d in self.gpu_drivers}
        return bool(set(claim.device_classes) & gpu_classes)

    def _locate(
        self,
        result: ClaimDeviceResult,
        slices: dict[tuple[str, str, str], tuple[ResourceSlice, SliceDevice]],
        by_uuid: dict[str, list[GpuTelemetry]],
        by_dra: dict[tuple[str, str], list[GpuTelemetry]],
    ) -> _Located:
        found = slices.get((result.driver, result.pool, result.device))
        labelled = by_dra.get((result.pool, result.device), [])
        ids = tuple(d.device for d in labelled)
        if found is None:
            # no slice: trust the exporter's dra labels when present, else one whole GPU
            share = self._mig_share(labelled[0].mig_profile, labelled[0].model_name) if labelled and labelled[0].device.gpu_i_id else Decimal(1)
            return _Located(None, result.pool, share, ids, labelled[0].device.uuid if labelled else None)
        slc, dev = found
        physical = dev.physical_uuid
        if dev.kind == "mig" or dev.mig_profile:
            model = dev.product_name or _product_of_parent(slc, physical) or next((d.model_name for d in by_uuid.get(physical or "", [])), None)
            share = self._mig_share(dev.mig_profile, model)
            if not ids and physical:
                same = [d for d in by_uuid.get(physical, []) if d.device.gpu_i_id is not None and _same_profile(d.mig_profile, dev.mig_profile)]
                ids = tuple(d.device for d in same) if len(same) == 1 else ()
        else:
            share = Decimal(1)
            if not ids and physical:
                ids = (DeviceId(uuid=physical),)
        return _Located(dev, slc.node_name, share, ids, physical)

    def _mig_share(self, profile: str | None, model: str | None) -> Decimal:
        if not profile:
            return Decimal(1)
        spec = self.catalog.resolve(model)
        total = spec.mig_total_slices if spec is not None and spec.mig_total_slices else DEFAULT_MIG_TOTAL_SLICES
        try:
            return parse_mig_profile(profile, total_slices=total).fraction
        except InputFormatError:
            return Decimal(1)

    def _from_exporter_labels(self, pod: Pod, claim_names: list[str], by_dra: dict[tuple[str, str], list[GpuTelemetry]],
                              users: dict[tuple[str, str], list[Pod]]) -> Holding | None:
        """The pod's holding from the exporter's `dra_*` labels when its claims could not be read. A claim that several
        live pods name (`users`: (namespace, claim) → pods) is split equally between them, as a read claim is."""
        found: dict[DeviceId, tuple[GpuTelemetry, int]] = {}
        for devs in by_dra.values():
            for d in devs:
                named = [lbl.claim_name for lbl in d.dra if lbl.claim_namespace == pod.namespace and lbl.claim_name in claim_names]
                if named:
                    found[d.device] = (d, max(1, len(users.get((pod.namespace, named[0]), ()))))
        if not found:
            return None
        shared = any(n > 1 for _, n in found.values())
        share = sum(((self._mig_share(d.mig_profile, d.model_name) if d.device.gpu_i_id else Decimal(1)) / n
                     for d, n in found.values()), Decimal(0))
        return Holding(
            pod=pod,
            node=pod.node_name,
            share=share,
            mechanism="DRA",
            devices=tuple(found),
            per_pod_activity=not shared,
            **held(pod),
            note=f"ResourceClaim {', '.join(claim_names)} from the exporter's dra_* labels (the claim itself was not readable)"
                 + ("; shared with other pods naming the same claim (an equal part each)" if shared else ""),
        )


def _consumers(claim: ResourceClaim, referencing: list[Pod], live: list[Pod]) -> list[Pod]:
    """Live pods using the claim: those in `status.reservedFor`, plus pods whose spec names it."""
    by_name = {(p.namespace, p.name): p for p in live}
    out: dict[tuple[str, str], Pod] = {}
    for ref in claim.reserved_for:
        if ref.resource == "pods":
            pod = by_name.get((claim.namespace, ref.name))
            if pod is not None and (not ref.uid or not pod.uid or ref.uid == pod.uid):
                out[pod.key] = pod
    for pod in referencing:
        out.setdefault(pod.key, pod)
    return list(out.values())


def _slice_index(slices: tuple[ResourceSlice, ...]) -> dict[tuple[str, str, str], tuple[ResourceSlice, SliceDevice]]:
    out: dict[tuple[str, str, str], tuple[ResourceSlice, SliceDevice]] = {}
    for s in slices:
        for d in s.devices:
            out[(s.driver, s.pool, d.name)] = (s, d)
    return out


def _devices_by_dra_label(devices: tuple[GpuTelemetry, ...]) -> dict[tuple[str, str], list[GpuTelemetry]]:
    out: dict[tuple[str, str], list[GpuTelemetry]] = defaultdict(list)
    for d in devices:
        for lbl in d.dra:
            if lbl.pool and lbl.device and d not in out[(lbl.pool, lbl.device)]:
                out[(lbl.pool, lbl.device)].append(d)
    return dict(out)


def _product_of_parent(slc: ResourceSlice, parent: str | None) -> str | None:
    return next((d.product_name for d in slc.devices if parent and d.uuid == parent and d.product_name), None)


def _same_profile(a: str | None, b: str | None) -> bool:
    """Same MIG compute size: DCGM and the driver may disagree on the memory figure (B07)."""
    if not a or not b:
        return False
    return a.split("g.", 1)[0] == b.split("g.", 1)[0]


def _fmt(value: Decimal) -> str:
    return f"{value.normalize():f}"

"""Detectors: unallocated GPU capacity (GPUs on a node that no running pod holds)."""

from __future__ import annotations

from decimal import Decimal

from pydantic import Field

from gpuwaste.detectors.registry import DetectorOutput, NoVerdict, detector
from gpuwaste.join import ScanContext
from gpuwaste.models.base import SettingsModel
from gpuwaste.models.findings import Confidence, Evidence, Finding, IdleMode, WasteKind
from gpuwaste.models.telemetry import Signal


class UnallocatedSettings(SettingsModel):
    """Unallocated capacity.

    Attributes:
        min_free_gpus: smallest free physical-GPU share reported (MIG slices are 1/7 ≈ 0.143).
        busy_ratio: activity ratio 0–1 above which a free GPU is said to be used outside Kubernetes.
    """

    min_free_gpus: Decimal = Field(Decimal("0.14"), gt=0)
    busy_ratio: float = Field(0.05, ge=0, le=1)


@detector("unallocated_capacity", settings=UnallocatedSettings, optional=(Signal.GR_ENGINE_ACTIVE.value, Signal.GPU_UTIL.value))
def detect_unallocated_capacity(ctx: ScanContext, settings: UnallocatedSettings) -> DetectorOutput:
    """Flag nodes whose physical GPUs exceed what scheduled, non-terminal pods request."""
    for inv in ctx.nodes.values():
        node = inv.node
        if node is not None and node.created_at is not None and (ctx.eval_time - node.created_at).total_seconds() < ctx.common.node_grace_s:
            yield NoVerdict("unallocated_capacity", inv.name, "node younger than grace period")
            continue
        capacity = inv.capacity_gpus()
        if capacity == 0:
            continue
        if node is not None and inv.devices and not inv.gpus_known_otherwise and not _known_gpu_resource(node.allocatable_gpu, node.capacity_gpu):
            # B20: the device plugin advertises a resource we do not know, so requests are unknown;
            # data quality warns (unknown_gpu_resource) instead of a made-up free share.
            yield NoVerdict("unallocated_capacity", inv.name, "node advertises no known GPU resource")
            continue
        free = Decimal(capacity) - inv.requested_share
        if free < settings.min_free_gpus:
            continue
        devices = inv.unheld_devices
        evidence: list[Evidence] = [
            Evidence(signal="physical_gpus", unit="count", window_s=ctx.window_s, avg=float(capacity),
                     note="distinct DCGM UUIDs" if inv.devices else "node capacity (no DCGM series)"),
            Evidence(signal="requested_gpus", unit="count", window_s=ctx.window_s, avg=float(inv.requested_share),
                     note="pods scheduled on the node and not terminal, in physical-GPU equivalents"),
        ]
        busy = False
        if devices:
            act = ctx.activity(devices)
            if act is not None:
                evidence.append(act.evidence(ctx.window_s))
                busy = act.p95 >= settings.busy_ratio
        confidence = Confidence.HIGH if inv.devices else Confidence.MEDIUM
        if busy:
            confidence = Confidence.LOW
        yield Finding(
            kind=WasteKind.UNALLOCATED,
            detector="unallocated_capacity",
            subject=ctx.node_subject(inv, devices, free),
            title=f"{_fmt(free)} of {capacity} GPU(s) on node {inv.name} requested by no pod",
            recommendation=(
                "Nobody requested this capacity: let the autoscaler remove the node, shrink the node group, "
                "or schedule pending GPU work here."
            ),
            evidence=tuple(evidence),
            confidence=confidence,
            idle_mode=IdleMode.PROVISIONING,
            observed_at=ctx.eval_time,
            window_s=ctx.window_s,
            wasted_gpu_share=free,
            scope_key=inv.name,
            details={"used_outside_kubernetes": busy, "unheld_devices": len(devices),
                     **({"stranded_by_fragmentation": True} if ctx.stranded_by_fragmentation(free) else {})},
        )


def _known_gpu_resource(*resources: dict[str, int]) -> bool:
    from gpuwaste.detectors.data_quality import KNOWN_GPU_RESOURCE_PREFIXES

    return any(r.startswith(KNOWN_GPU_RESOURCE_PREFIXES) for res in resources for r in res)


def _fmt(value: Decimal) -> str:
    return f"{value.normalize():f}" if value == value.to_integral() else f"{value:.2f}"

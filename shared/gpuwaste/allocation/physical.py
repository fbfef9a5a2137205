"""Allocation: how many physical GPUs a node has — never from node capacity (pure; field guide B08, B20, B23, B27).

Order: distinct DCGM UUIDs seen on the node; else physical GPUs a resolver knows (DRA ResourceSlices); else GPU
Feature Discovery labels (`nvidia.com/gpu.count`, corrected for MIG by `nvidia.com/mig.config`); else the
instance type's entry in the price book. Node capacity (`nvidia.com/gpu: 40` under HAMi, 14 MIG devices under
the single strategy, replicas under time-slicing) is only compared, and a disagreement becomes a data-quality
note in users' words. The join calls `physical_gpu_count` once per node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpuwaste.errors import InputFormatError
from gpuwaste.models.cluster import Node
from gpuwaste.models.gpu_models import GpuModelCatalog, parse_mig_profile
from gpuwaste.pricing.catalog import PriceBook

CountBasis = Literal["dcgm", "resource-slices", "gfd", "gfd-mig-config", "instance-type", "unknown"]


@dataclass(frozen=True)
class PhysicalCount:
    """Physical GPUs on one node and where the number comes from.

    Attributes:
        gpus: physical GPUs (None when nothing tells).
        basis: "dcgm" (distinct UUIDs), "resource-slices", "gfd" (`nvidia.com/gpu.count`), "gfd-mig-config"
            (`gpu.count` ÷ MIG devices per GPU of `nvidia.com/mig.config`), "instance-type" (price book), "unknown".
        expected: what the node's own description says (GFD / ResourceSlices / instance type), for the
            unmonitored-GPU check (B23); None when unknown.
        notes: data-quality notes ("node n1 advertises 40 nvidia.com/gpu, DCGM sees 4 GPUs: HAMi shares").
    """

    gpus: int | None
    basis: CountBasis
    expected: int | None = None
    notes: tuple[str, ...] = ()

    @property
    def unmonitored(self) -> int:
        """GPUs the node should have that DCGM does not report (0 when not counted from DCGM or unknown)."""
        if self.basis != "dcgm" or self.expected is None or self.gpus is None:
            return 0
        return max(0, self.expected - self.gpus)


def physical_gpu_count(
    node: Node | None,
    dcgm_uuids: int,
    *,
    known_by_resolvers: int | None = None,
    share_reason: str | None = None,
    price_book: PriceBook | None = None,
    catalog: GpuModelCatalog | None = None,
) -> PhysicalCount:
    """Physical GPUs on `node`.

    Args:
        node: the node (None when only telemetry names it).
        dcgm_uuids: distinct physical UUIDs DCGM reports for the node (0 when none).
        known_by_resolvers: physical GPUs an allocation resolver knows (e.g. DRA ResourceSlices), or None.
        share_reason: why capacity may exceed the physical count on this node ("HAMi shares",
            "time-slicing replicas"), named in the note; None adds no reason.
        price_book: for the instance-type fallback (default: the bundled book).
        catalog: GPU model catalogue for MIG geometry (default: the bundled one).
    """
    described, described_basis = _described_count(node, known_by_resolvers, price_book, catalog)
    if dcgm_uuids > 0:
        count, basis = dcgm_uuids, "dcgm"
    elif described is not None:
        count, basis = described, described_basis
    else:
        count, basis = None, "unknown"
    notes: list[str] = []
    if node is not None and count is not None:
        advertised = _advertised(node)
        if advertised is not None:
            resource, units = advertised
            per_gpu = max(1, node.gpu_replicas)
            mig_single = node.mig_strategy == "single" or bool(node.gpu_product and "-MIG-" in node.gpu_product.upper())
            if units != count * per_gpu and not mig_single:
                seen = "DCGM sees" if basis == "dcgm" else f"{_basis_words(basis)} says"
                reason = f": {share_reason}" if share_reason else ""
                notes.append(f"node {node.name} advertises {units} {resource}, {seen} {count} GPUs{reason}")
    if basis == "dcgm" and described is not None and described > count:
        name = node.name if node is not None else "?"
        notes.append(
            f"node {name}: {_basis_words(described_basis)} says {described} GPUs, DCGM reports {count}: "
            f"{described - count} unmonitored (billed, not judged idle)"
        )
    return PhysicalCount(gpus=count, basis=basis, expected=described, notes=tuple(notes))


def _basis_words(basis: str) -> str:
    return {
        "resource-slices": "its ResourceSlices",
        "gfd": "GPU Feature Discovery (nvidia.com/gpu.count)",
        "gfd-mig-config": "GPU Feature Discovery (nvidia.com/gpu.count with nvidia.com/mig.config)",
        "instance-type": "its instance type",
    }.get(basis, basis)


def _advertised(node: Node) -> tuple[str, int] | None:
    for resource in ("nvidia.com/gpu", "nvidia.com/gpu.shared"):
        units = node.capacity_gpu.get(resource)
        if units:
            return resource, units
    others = [(r, c) for r, c in node.capacity_gpu.items() if c and "mig-" not in r]
    return others[0] if others else None


def _described_count(
    node: Node | None, known_by_resolvers: int | None, price_book: PriceBook | None, catalog: GpuModelCatalog | None
) -> tuple[int | None, CountBasis]:
    if known_by_resolvers:
        return known_by_resolvers, "resource-slices"
    if node is None:
        return None, "unknown"
    gfd = _gfd_count(node, catalog or GpuModelCatalog.bundled())
    if gfd is not None:
        return gfd
    if node.instance_type:
        book = price_book or PriceBook.bundled()
        rows = [p for p in book.prices if p.instance_type == node.instance_type or p.instance_type.casefold() == node.instance_type.casefold()]
        counts = {p.gpus for p in rows if p.priced_unit == "instance"}
        if len(counts) == 1:
            return counts.pop(), "instance-type"
    return None, "unknown"


def _gfd_count(node: Node, catalog: GpuModelCatalog) -> tuple[int, CountBasis] | None:
    count = node.gpu_count_label
    if not count:
        return None
    product = node.gpu_product or ""
    mig_single = node.mig_strategy == "single" or "-MIG-" in product.upper()
    if not mig_single:
        return count, "gfd"
    # MIG single: gpu.count counts MIG devices (B08). `all-<profile>` in mig.config says how many per GPU.
    config = node.labels.get("nvidia.com/mig.config", "")
    profile_text = config.removeprefix("all-") if config.startswith("all-") else None
    if profile_text is None and "-MIG-" in product.upper():
        profile_text = product.upper().split("-MIG-", 1)[1].lower()
    spec = catalog.resolve(product)
    if profile_text is None or spec is None or not spec.mig_total_slices:
        return None
    try:
        profile = parse_mig_profile(profile_text, total_slices=spec.mig_total_slices)
    except InputFormatError:
        return None
    per_gpu = spec.mig_total_slices // profile.compute_slices
    if profile.memory_gb:
        per_gpu = min(per_gpu, max(1, round(spec.memory_mib / 1024 / profile.memory_gb)))
    if per_gpu < 1 or count % per_gpu:
        return None
    return count // per_gpu, "gfd-mig-config"

"""Pricing (pure): GPU model catalog, MIG slice fractions and the dated price book (USD per GPU-hour)."""

from __future__ import annotations

from gpuwaste.pricing.catalog import (
    DEFAULT_MIG_TOTAL_SLICES,
    GfdProduct,
    GpuModelCatalog,
    GpuModelSpec,
    MigProfile,
    MigProfileSpec,
    PriceBook,
    ResolvedProduct,
    normalise_model_name,
    parse_mig_profile,
    split_gfd_product,
)
from gpuwaste.pricing.prices import (
    GpuHourRate,
    InstanceOverride,
    InstancePrice,
    PriceOverrides,
    Unpriced,
    normalise_capacity_type,
)

__all__ = [
    "DEFAULT_MIG_TOTAL_SLICES",
    "GfdProduct",
    "GpuHourRate",
    "GpuModelCatalog",
    "GpuModelSpec",
    "InstanceOverride",
    "InstancePrice",
    "MigProfile",
    "MigProfileSpec",
    "PriceBook",
    "PriceOverrides",
    "ResolvedProduct",
    "Unpriced",
    "normalise_capacity_type",
    "normalise_model_name",
    "parse_mig_profile",
    "split_gfd_product",
]

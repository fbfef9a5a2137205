"""Pricing (pure): bundled board power limits per GPU model, for detectors that compare power with its limit."""

from __future__ import annotations

from collections.abc import Iterable

from gpuwaste.pricing.catalog import GpuModelCatalog


def power_limits_w(names: Iterable[str | None], catalog: GpuModelCatalog | None = None) -> dict[str, float]:
    """Model name as spelled in telemetry (DCGM `modelName`, GFD product) → bundled board power limit (W).

    Names the catalog does not know, or whose model has no published limit, are left out (never guessed).
    """
    catalog = catalog or GpuModelCatalog.bundled()
    out: dict[str, float] = {}
    for name in names:
        if not name or name in out:
            continue
        spec = catalog.resolve(name)
        if spec is not None and spec.power_limit_w:
            out[name] = float(spec.power_limit_w)
    return out


__all__ = ["power_limits_w"]

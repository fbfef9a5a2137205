"""Detectors: the joined view, re-exported from `gpuwaste.join` (where the GPU ↔ pod ↔ node join lives)."""

from gpuwaste.join import (
    ActivityReading,
    Allocation,
    CommonSettings,
    NodeInventory,
    ScanContext,
    build_context,
    gpu_ref,
    join,
)

__all__ = ["ActivityReading", "Allocation", "CommonSettings", "NodeInventory", "ScanContext", "build_context", "gpu_ref", "join"]

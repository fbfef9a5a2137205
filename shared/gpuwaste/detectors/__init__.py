"""Detectors: pure functions from a joined scan context to findings; importing this package imports and registers every detector module in it."""

from __future__ import annotations

from gpuwaste.detectors.registry import REGISTRY, DetectionResult, NoVerdict, check_registry, run_detectors
from gpuwaste.detectors.settings import DetectorSettings
from gpuwaste.join import ScanContext, build_context

# importing the settings document imported every detector module (registry.discover); every superseded_by name and
# the settings document are checked against the registry
check_registry(DetectorSettings.detector_fields())

__all__ = ["REGISTRY", "DetectionResult", "DetectorSettings", "NoVerdict", "ScanContext", "build_context", "run_detectors", "detect"]


def detect(cluster, telemetry, settings: DetectorSettings | None = None, *, power_limits_w: dict[str, float] | None = None) -> DetectionResult:  # type: ignore[no-untyped-def]
    """Join cluster state and telemetry, then run the enabled detectors (power limits: model name → W)."""
    settings = settings or DetectorSettings()
    ctx = build_context(cluster, telemetry, settings.common, power_limits_w=power_limits_w)
    return run_detectors(ctx, settings.by_name(), settings.enabled)

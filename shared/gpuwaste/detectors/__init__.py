"""Detectors: pure functions from a joined scan context to findings; importing this package imports and registers every detector module in it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuwaste.detectors.registry import REGISTRY, DetectionResult, NoVerdict, check_registry, run_detectors
from gpuwaste.detectors.settings import DetectorSettings
from gpuwaste.join import ScanContext, join

if TYPE_CHECKING:
    from gpuwaste.models.cluster import ClusterState
    from gpuwaste.models.telemetry import TelemetryWindow

# importing the settings document imported every detector module (registry.discover); every superseded_by name and
# the settings document are checked against the registry
check_registry(DetectorSettings.detector_fields())

__all__ = ["REGISTRY", "DetectionResult", "DetectorSettings", "NoVerdict", "ScanContext", "detect", "run_detectors"]


def detect(cluster: ClusterState, telemetry: TelemetryWindow, settings: DetectorSettings | None = None, *,
           power_limits_w: dict[str, float] | None = None) -> DetectionResult:
    """Join cluster state and telemetry, then run the enabled detectors (power limits: model name → W).

    What `ScanService` does between reading and supersession, for tests and benches that start from the two inputs.
    """
    settings = settings or DetectorSettings()
    ctx = join(cluster, telemetry, settings.common, power_limits_w=power_limits_w)
    return run_detectors(ctx, settings.by_name(), settings.enabled)

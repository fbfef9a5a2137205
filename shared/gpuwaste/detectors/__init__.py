"""Detectors: pure functions from a joined scan context to findings; importing this package imports and registers every detector module in it."""

from __future__ import annotations

from gpuwaste.detectors.registry import REGISTRY, DetectionResult, NoVerdict, check_registry, run_detectors
from gpuwaste.detectors.settings import DetectorSettings
from gpuwaste.join import ScanContext

# importing the settings document imported every detector module (registry.discover); every superseded_by name and
# the settings document are checked against the registry
check_registry(DetectorSettings.detector_fields())

__all__ = ["REGISTRY", "DetectionResult", "DetectorSettings", "NoVerdict", "ScanContext", "run_detectors"]

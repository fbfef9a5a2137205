"""Detectors: the settings of every registered detector, in one validated model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gpuwaste.detectors.allocation import IdleSettings, UnderusedSettings
from gpuwaste.detectors.capacity import UnallocatedSettings
from gpuwaste.detectors.context import CommonSettings
from gpuwaste.detectors.data_quality import DataQualitySettings


class DetectorSettings(BaseModel):
    """Per-detector settings, keyed by detector name, plus the shared ones.

    Attributes:
        enabled: detector names to run; None runs every registered detector.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: list[str] | None = None
    common: CommonSettings = Field(default_factory=CommonSettings)
    idle_allocation: IdleSettings = Field(default_factory=IdleSettings)
    underused_allocation: UnderusedSettings = Field(default_factory=UnderusedSettings)
    unallocated_capacity: UnallocatedSettings = Field(default_factory=UnallocatedSettings)
    data_quality: DataQualitySettings = Field(default_factory=DataQualitySettings)

    def by_name(self) -> dict[str, BaseModel]:
        """Detector name → its settings model."""
        return {name: getattr(self, name) for name in type(self).model_fields if name not in ("enabled", "common")}

"""Detectors: the settings of every registered detector, in one validated model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gpuwaste.detectors.allocation import IdleSettings, UnderusedSettings
from gpuwaste.detectors.capacity import UnallocatedSettings
from gpuwaste.detectors.data_quality import DataQualitySettings
from gpuwaste.detectors.efficiency import LowBandwidthSettings, PowerAnomalySettings
from gpuwaste.detectors.hardware import WrongHardwareSettings
from gpuwaste.detectors.inference import InferenceIdleSettings, KvCachePressureSettings
from gpuwaste.detectors.orphaned import OrphanedSettings
from gpuwaste.detectors.stalled import StalledSettings
from gpuwaste.detectors.starvation import CpuBoundSettings
from gpuwaste.join import CommonSettings


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
    power_anomaly: PowerAnomalySettings = Field(default_factory=PowerAnomalySettings)
    low_memory_bandwidth: LowBandwidthSettings = Field(default_factory=LowBandwidthSettings)
    stalled: StalledSettings = Field(default_factory=StalledSettings)
    wrong_hardware: WrongHardwareSettings = Field(default_factory=WrongHardwareSettings)
    cpu_bound: CpuBoundSettings = Field(default_factory=CpuBoundSettings)
    kv_cache_pressure: KvCachePressureSettings = Field(default_factory=KvCachePressureSettings)
    inference_idle: InferenceIdleSettings = Field(default_factory=InferenceIdleSettings)
    orphaned: OrphanedSettings = Field(default_factory=OrphanedSettings)

    def by_name(self) -> dict[str, BaseModel]:
        """Detector name → its settings model."""
        return {name: getattr(self, name) for name in type(self).model_fields if name not in SHARED_FIELDS}

    @classmethod
    def detector_fields(cls) -> dict[str, type[BaseModel]]:
        """Field name → settings model of each per-detector field (what `registry.check_registry` compares)."""
        out: dict[str, type[BaseModel]] = {}
        for name, info in cls.model_fields.items():
            if name not in SHARED_FIELDS and isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
                out[name] = info.annotation
        return out


#: DetectorSettings fields that are not one detector's settings.
SHARED_FIELDS = ("enabled", "common")

"""Models: the DCGM fields (dcgm-exporter metric names) gpuwaste reads, with their units.

The one copy of the signal names: plain Python (no pydantic), so the command line (`gpuwaste doctor`) names them
without loading the telemetry models; `gpuwaste.models.telemetry` builds on it.
"""

from __future__ import annotations

from enum import StrEnum


class Signal(StrEnum):
    """DCGM fields (dcgm-exporter metric names) the detectors read."""

    SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
    GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
    TENSOR_ACTIVE = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
    DRAM_ACTIVE = "DCGM_FI_PROF_DRAM_ACTIVE"
    MEM_COPY_UTIL = "DCGM_FI_DEV_MEM_COPY_UTIL"
    FB_USED = "DCGM_FI_DEV_FB_USED"
    FB_FREE = "DCGM_FI_DEV_FB_FREE"
    POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
    POWER_LIMIT = "DCGM_FI_DEV_ENFORCED_POWER_LIMIT"
    POWER_MGMT_LIMIT = "DCGM_FI_DEV_POWER_MGMT_LIMIT"
    TOTAL_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"

    @property
    def words(self) -> str:
        """The field as people say it ("SM activity", "graphics engine activity", "GPU utilisation").

        What was measured, named the same in a finding's title and in its evidence (`people.signal_name`).
        """
        return _WORDS[self]

    @property
    def unit(self) -> str:
        """Unit of the exported value: "ratio", "percent", "MiB", "W" or "mJ"."""
        return _UNITS[self]

    def to_ratio(self, value: float) -> float:
        """Convert an activity value to a 0–1 ratio (percent fields ÷ 100, PROF ratios as-is)."""
        return value / 100.0 if self.unit == "percent" else value

    @property
    def per_gpu_instance(self) -> bool:
        """True when DCGM reports the field per MIG instance (FE_GPU_I/FE_GPU_CI), False for whole-GPU fields."""
        return self in _PER_INSTANCE


_UNITS: dict[Signal, str] = {
    Signal.SM_ACTIVE: "ratio",
    Signal.GR_ENGINE_ACTIVE: "ratio",
    Signal.GPU_UTIL: "percent",
    Signal.TENSOR_ACTIVE: "ratio",
    Signal.DRAM_ACTIVE: "ratio",
    Signal.MEM_COPY_UTIL: "percent",
    Signal.FB_USED: "MiB",
    Signal.FB_FREE: "MiB",
    Signal.POWER_USAGE: "W",
    Signal.POWER_LIMIT: "W",
    Signal.POWER_MGMT_LIMIT: "W",
    Signal.TOTAL_ENERGY: "mJ",
}

_WORDS: dict[Signal, str] = {
    Signal.SM_ACTIVE: "SM activity",
    Signal.GR_ENGINE_ACTIVE: "graphics engine activity",
    Signal.GPU_UTIL: "GPU utilisation",
    Signal.TENSOR_ACTIVE: "tensor core activity",
    Signal.DRAM_ACTIVE: "memory bandwidth use",
    Signal.MEM_COPY_UTIL: "memory copy utilisation",
    Signal.FB_USED: "GPU memory used",
    Signal.FB_FREE: "GPU memory free",
    Signal.POWER_USAGE: "power draw",
    Signal.POWER_LIMIT: "power limit",
    Signal.POWER_MGMT_LIMIT: "power management limit",
    Signal.TOTAL_ENERGY: "energy used",
}

_PER_INSTANCE = frozenset({Signal.SM_ACTIVE, Signal.GR_ENGINE_ACTIVE, Signal.TENSOR_ACTIVE, Signal.DRAM_ACTIVE,
                           Signal.FB_USED, Signal.FB_FREE})

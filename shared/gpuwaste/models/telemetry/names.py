"""The names a signal is exported under and the statistics kept of it.

`DCGM_ALIASES` (every other name of a `Signal`, in the same unit), the readable range of each unit, which signals
are summarised over time and with which statistics, and the activity signals in order of preference.
"""

from __future__ import annotations

import math

from gpuwaste.models.signals import Signal

#: Every other name an exporter may publish a `Signal` under, with the value in the same unit (one table, read by the
#: plan, the recording path, the recording rules, `doctor` and the Grafana dashboard). Sources:
#: * DCGM 4.x field names (DCGM 4.6.0 `dcgmlib/dcgm_fields.h`, its block of deprecated aliases, e.g.
#:   `#define DCGM_FI_PROF_SM_ACTIVE DCGM_FI_PROF_SM_UTIL_RATIO // 1002`; go-dcgm 4.6.1 `pkg/dcgm/const_fields.go`): the
#:   same field id, so the same type and unit. `DCGM_FI_DEV_GPU_UTIL_RATIO` is field 203, INT64 **percent** 0–100
#:   (`dcgm_fields.cpp` declares it `DCGM_FT_INT64`), despite its name; the `_RATIO` profiling fields are the
#:   0–1 ratios they always were. A dcgm-exporter CSV row names the metric, so a CSV written with the new names
#:   exports them (the shipped `default-counters.csv` still uses the old ones).
#: * dcgm-exporter 1.x compatibility names (`dcgm_gpu_utilization`, …; go-dcgm's lower-case legacy map).
#: Lower-cased spellings of each (Azure Managed Prometheus) are added by the plan.
DCGM_ALIASES: dict[Signal, tuple[str, ...]] = {
    Signal.SM_ACTIVE: ("DCGM_FI_PROF_SM_UTIL_RATIO",),
    Signal.GR_ENGINE_ACTIVE: ("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",),
    Signal.GPU_UTIL: ("DCGM_FI_DEV_GPU_UTIL_RATIO", "dcgm_gpu_utilization"),
    Signal.TENSOR_ACTIVE: ("DCGM_FI_PROF_TENSOR_UTIL_RATIO",),
    Signal.DRAM_ACTIVE: ("DCGM_FI_PROF_DRAM_UTIL_RATIO",),
    Signal.MEM_COPY_UTIL: ("dcgm_mem_copy_utilization",),
    Signal.FB_USED: ("dcgm_fb_used",),
    Signal.FB_FREE: ("dcgm_fb_free",),
    Signal.POWER_USAGE: ("DCGM_FI_DEV_BOARD_POWER_WATTS", "dcgm_power_usage"),
    Signal.POWER_LIMIT: ("DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS",),
    Signal.POWER_MGMT_LIMIT: ("DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS",),
    Signal.TOTAL_ENERGY: ("dcgm_total_energy_consumption",),
}


def exported_names(signal: Signal) -> tuple[str, ...]:
    """Every metric name `signal` may be exported under: its name, the `DCGM_ALIASES`, and each lower-cased, without repeats."""
    names: list[str] = []
    for n in (signal.value, *DCGM_ALIASES.get(signal, ())):
        names.extend((n, n.lower()))
    return tuple(dict.fromkeys(names))


#: Readable values per unit (inclusive; a small tolerance above the nominal maximum): ratio 0–1 (DCGM PROF
#: ratios can read a hair above 1), percent 0–100, plausible physical ceilings for MiB and W, and below
#: the DCGM double blank (2**47) for the energy counter. Outside: the sample is unreadable.
READABLE_RANGE: dict[str, tuple[float, float]] = {
    "ratio": (0.0, 1.01),
    "percent": (0.0, 101.0),
    "MiB": (0.0, 16_777_216.0),
    "W": (0.0, 10_000.0),
    "mJ": (0.0, 140737488355328.0),
}


def readable(unit: str, value: float) -> bool:
    """True when `value` is a usable sample of a field in `unit` (finite and inside `READABLE_RANGE`)."""
    if value != value or value in (math.inf, -math.inf):
        return False
    lo, hi = READABLE_RANGE.get(unit, (-math.inf, math.inf))
    return lo <= value <= hi


#: DCGM fields read time-resolved (`WindowStats.buckets`): the activity signals and what tells work from a
#: stall (tensor, DRAM, power). Their window statistics are derived from the buckets.
TIME_RESOLVED: frozenset[Signal] = frozenset(
    {Signal.SM_ACTIVE, Signal.GR_ENGINE_ACTIVE, Signal.GPU_UTIL, Signal.TENSOR_ACTIVE, Signal.DRAM_ACTIVE, Signal.POWER_USAGE}
)
_RESOLVED_STATS = ("count", "sum", "max", "p95", "max_avg_10m", "recent", "changes")

#: The window statistics summarised per DCGM field. The Prometheus plan and the recording path compute
#: exactly these; evidence shows only these (a statistic not summarised is shown as unknown, never as a
#: made-up number). `min` is summarised for none (the plan asks for count, sum and max only).
SUMMARY_STATS: dict[Signal, tuple[str, ...]] = {
    **dict.fromkeys(TIME_RESOLVED, _RESOLVED_STATS),
    Signal.MEM_COPY_UTIL: ("count", "sum", "max"),
    Signal.FB_USED: ("count", "sum", "max"),
    Signal.FB_FREE: ("count", "sum", "max"),
    Signal.POWER_LIMIT: ("count", "sum", "max"),
    Signal.POWER_MGMT_LIMIT: ("count", "sum", "max"),
    Signal.TOTAL_ENERGY: ("count", "changes"),
}


def summarises(signal: Signal, stat: str) -> bool:
    """True when `stat` ("p95", "min", …) is computed for `signal` (see `SUMMARY_STATS`)."""
    stats = SUMMARY_STATS.get(signal)
    return stats is None or stat in stats


#: Activity signals in order of preference (field guide B04, B15): SM_ACTIVE, GR_ENGINE_ACTIVE, GPU_UTIL.
ACTIVITY_SIGNALS: tuple[Signal, ...] = (Signal.SM_ACTIVE, Signal.GR_ENGINE_ACTIVE, Signal.GPU_UTIL)

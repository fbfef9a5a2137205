"""What the fleet generator generates: `FleetSpec`, the instance types, the scenarios and their mix.

The constants the builder, the series and the benches share: `BASE_TS` (the generated history's origin), the
driver version and `INSTANCES` (instance type → GPUs, model, GFD product, memory, power limit).
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, Field

BASE_TS = 1704067200  # 2024-01-01T00:00:00Z, a multiple of 2 h (promtool block boundary)
DRIVER = "550.144.03"

# instance type → (GPUs, dcgm modelName, GFD product, FB MiB, power limit W, provider)
INSTANCES: dict[str, tuple[int, str, str, int, float]] = {
    "p4d.24xlarge": (8, "NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB", 40960, 400.0),
    "p5.48xlarge": (8, "NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3", 81559, 700.0),
    "g5.12xlarge": (4, "NVIDIA A10G", "NVIDIA-A10G", 23028, 300.0),
    "g6.xlarge": (1, "NVIDIA L4", "NVIDIA-L4", 23034, 72.0),
    "g6e.12xlarge": (4, "NVIDIA L40S", "NVIDIA-L40S", 46068, 350.0),
    "g4dn.12xlarge": (4, "Tesla T4", "Tesla-T4", 15360, 70.0),
    "x9.gpu-mystery": (2, "NVIDIA L4", "NVIDIA-L4", 23034, 72.0),
}

# scenario → (kind expected, description)
SCENARIOS = {
    "busy": None,
    "idle": "idle_allocation",
    "underused": "underused_allocation",
    "bursty": None,  # bursty inference: low average, 10-minute peaks above 20 % — must not be flagged
    "checkpoint_pause": None,  # busy with a 6-minute pause — must not be flagged
    "gap": "data_quality:partial_coverage",
    "frozen": "data_quality:frozen_exporter",
}

#: Catalogue scenarios of the "scorecard" layout → the kind expected (None: a look-alike that must not be flagged).
CATALOGUE_SCENARIOS: dict[str, str | None] = {
    "power_hog": "power_anomaly",  # SM ~10 %, DRAM 75 %, power 88 % of the limit: memory-bound, not idle
    "low_bandwidth": "low_memory_bandwidth",  # SM ~35 %, DRAM ~12 %: neither compute- nor memory-bound
    "stalled": "stalled",  # GPU_UTIL 100 %, GR_ENGINE 0.97, tensor/DRAM 0, power 17 % of the limit (B14)
    "oversized": "wrong_hardware",  # 20 % of the framebuffer, ~10 % activity for the whole look-back
    "cpu_starved": "cpu_bound",  # spiky GPU activity, CFS throttles 60 % of periods
    "kv_pressure": "kv_cache_pressure",  # busy vLLM, KV cache 96 %, requests waiting, preemptions
    "serving_idle": "inference_idle",  # vLLM, no requests, flat token counters, GPU ~8 % (warm-up probes)
    "data_stall": None,  # busy with a 4-minute data-loading stall (CPU briefly busy): must not be flagged
    "serving_ok": None,  # vLLM with steady traffic and KV cache at 50 %: must not be flagged
    "power_moderate": "underused_allocation",  # SM ~10 % at 70 % of the power limit: under-used, not a power anomaly
    "throttle_mild": None,  # spiky GPU with CFS throttling at 15 %: under the CPU-bound threshold
}


class FleetSpec(BaseModel):
    """What to generate.

    Attributes:
        layout: "demo" (a hand-designed fleet that shows every finding kind of the main job),
            "random" (`nodes` nodes drawn from `instance_types` with the scenario mix `weights`), "allocation"
            (one cluster mixing device-plugin GPUs, DRA claims, HAMi shares, KAI fractions and Blackwell MIG, with
            its allocation ground truth: `fleet.allocation_kinds`), or
            "scorecard" (every waste kind of the catalogue several times, plus look-alikes that must not
            be flagged; `nodes` is the number of repetitions).
        history_s: seconds of history before `eval_time` (window + 10 min so the first 10-minute
            average is complete). step_s: seconds between samples (dcgm-exporter collects every 30 s).
        label_style: "pod" (honorLabels: true), "exported" (Helm default), or "mixed".
        metrics: "full" (activity, tensor, DRAM, FB, power, energy) or "lean" (activity, FB, power).
        ksm_step_s: the cluster is also written as kube-state-metrics v2 series (scraped every `ksm_step_s`), so a
            recording scanned without cluster.json finds the same; 0 leaves them out.
    """

    layout: str = Field("demo", pattern="^(demo|random|scorecard|allocation)$")
    cluster: str = "demo"
    seed: int = 7
    nodes: int = Field(6, ge=1)
    instance_types: tuple[str, ...] = ("p4d.24xlarge", "g5.12xlarge", "g6.xlarge", "p5.48xlarge")
    weights: dict[str, float] = Field(default_factory=lambda: {"busy": 0.45, "idle": 0.2, "underused": 0.15, "bursty": 0.1, "free": 0.1})
    eval_time: datetime = datetime.fromtimestamp(BASE_TS + 4800, tz=UTC)
    history_s: int = Field(4800, gt=600)
    step_s: int = Field(30, gt=0)
    label_style: str = Field("mixed", pattern="^(pod|exported|mixed)$")
    metrics: str = Field("full", pattern="^(full|lean)$")
    inference_metrics: bool = True
    ksm_step_s: int = Field(60, ge=0, description="seconds between kube-state-metrics samples; 0: no KSM series")

"""Fleet generator: realistic recordings (DCGM, kube-state-metrics, vLLM, cluster state) with their ground truth."""

from gpuwaste.fleet.generator import BASE_TS, Fleet, FleetSpec, TruthItem, generate_fleet, write_recording

__all__ = ["BASE_TS", "Fleet", "FleetSpec", "TruthItem", "generate_fleet", "write_recording"]

"""Fleet generator: realistic recordings (DCGM, kube-state-metrics, vLLM, cluster state) with their ground truth."""

from gpuwaste.fleet.generator import generate_fleet
from gpuwaste.fleet.parts import TruthItem
from gpuwaste.fleet.recording import Fleet, write_recording
from gpuwaste.fleet.spec import BASE_TS, FleetSpec

__all__ = ["BASE_TS", "Fleet", "FleetSpec", "TruthItem", "generate_fleet", "write_recording"]

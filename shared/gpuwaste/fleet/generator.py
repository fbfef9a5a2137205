"""Fleet generator: a deterministic synthetic GPU fleet — telemetry series, cluster objects and the true answer.

The series carry dcgm-exporter's real label sets (`UUID`, `pci_bus_id`, `modelName`, `Hostname` or
`hostname`, `DCGM_FI_DRIVER_VERSION`, workload labels as `pod`/`namespace`/`container` or, with the
Helm default `honorLabels: false`, as `exported_*` next to the exporter's own `pod`), MIG instances
with `GPU_I_PROFILE`/`GPU_I_ID`, vLLM series, the cluster objects a
`kubectl get pods,nodes,replicasets,jobs,namespaces -A -o json` would return, and the same cluster as
kube-state-metrics v2 series (`fleet.ksm_series`), so the recording is complete without cluster.json. Every GPU's scenario is
recorded as ground truth, so tests and the demo check the scan against what was generated.

Randomness comes from `random.Random(seed)` only: the same spec always gives the same fleet.

By concern: `fleet.spec` (what to generate: `FleetSpec`, instance types, scenarios), `fleet.builder` (the cluster
objects and the truth of each layout), `fleet.recording` (`Fleet`, its series and `write_recording`); this module
composes them (`generate_fleet`).
"""

from __future__ import annotations

from gpuwaste.fleet import allocation_kinds
from gpuwaste.fleet.builder import _Builder
from gpuwaste.fleet.recording import Fleet, _pod_series, _vllm_series
from gpuwaste.fleet.spec import FleetSpec


def generate_fleet(spec: FleetSpec | None = None) -> Fleet:
    """Build a fleet (objects and truth now; telemetry lazily via `Fleet.iter_series`)."""
    spec = spec or FleetSpec()
    b = _Builder(spec)
    allocation = None
    if spec.layout == "demo":
        b.demo()
    elif spec.layout == "scorecard":
        b.scorecard()
    elif spec.layout == "allocation":
        allocation = allocation_kinds.build(b)
    else:
        b.random()
    fleet = Fleet(spec, b.gpus, b.objects, b.truth, allocation=allocation)
    if spec.inference_metrics:
        fleet.extra_series.extend(_vllm_series(fleet))
    if b.pod_metrics:  # scorecard and demo: cAdvisor and serving series of the catalogue pods
        fleet.extra_series.extend(_pod_series(fleet, b.pod_metrics))
    return fleet

"""Service (pure): showback that adds up — every physical GPU-hour of a scan window charged once, to whoever held it.

`conserve(nodes)` is the arithmetic; `scan_ledger(ctx, book)` feeds it from a scan's join (`ScanContext`) and the price
book. For each physical GPU (its UUID; GPUs the node has but DCGM does not report get a placeholder name) over the
window of `H` hours:

    Σ holders' GPU-hours on it + its unsold slices + its unallocated GPU-hours = H       (and the same in USD × rate)

Rules (stated once, used everywhere):

* A holder (a pod the allocation resolvers charge: device plugin, MIG slice by profile, time-slicing / MPS replica,
  HAMi cores/memory, KAI / Run:ai fraction, DRA claim split between the pods sharing it, vGPU profile) holds
  `share × hours held in the window` GPU-hours. The share is placed on the physical GPUs its devices name, evenly,
  at most 1 GPU per physical GPU; a holding whose devices the telemetry cannot tell (or the part above 1 per GPU)
  is placed on the node's GPUs with time left — whole unheld GPUs first — and never beyond the node's GPU-hours.
* A physical GPU whose holders take more than `H` (conflicting data: two claims on one GPU) charges each holder
  pro rata, so no GPU is ever charged above 100 %; the scaling is named in `notes`.
* What is left of a GPU that some holder holds only a fraction of (< 1 GPU: a MIG slice, a replica, a HAMi/KAI
  share, a shared DRA claim, a vGPU) is that GPU's **unsold slices**; what is left of any other GPU is
  **unallocated**. Nothing is ever negative.
* USD = GPU-hours × the node's USD per GPU-hour (the price book's rate, as findings are priced). Cents: each GPU's
  cost is rounded to the cent once and apportioned to its lines by largest remainder, so printed lines add up to the
  printed GPU cost exactly (`Conservation` re-checks this independently).
"""

from gpuwaste.services.showback.conservation import (
    CENT,
    ONE,
    PRECISION,
    RESIDUE,
    ZERO,
    Conservation,
    GpuCost,
    Hold,
    Ledger,
    LedgerLine,
    LineKind,
    NodeGpus,
    check_conservation,
    conserve,
)
from gpuwaste.services.showback.groups import (
    FUNNEL_RULE,
    HEALTH_STAGES,
    NOT_HELD,
    UNMATCHED,
    FunnelRow,
    ShowbackRow,
    conservation_figures,
    funnel,
    funnel_figures,
    group_key,
    health_figures,
    showback,
    subject_team,
    waste_by_holder,
)
from gpuwaste.services.showback.holdings import (
    ACTIVE_FLOOR,
    HolderInfo,
    ScanLedger,
    UnmetRequest,
    holder_key,
    scan_ledger,
    unmet_by_resource,
    unmet_requests,
)

__all__ = [
    "ACTIVE_FLOOR",
    "CENT",
    "HEALTH_STAGES",
    "LineKind",
    "ONE",
    "PRECISION",
    "RESIDUE",
    "UNMATCHED",
    "ZERO",
    "health_figures",
    "ShowbackRow",
    "showback",
    "FUNNEL_RULE",
    "NOT_HELD",
    "Conservation",
    "conservation_figures",
    "funnel_figures",
    "group_key",
    "subject_team",
    "FunnelRow",
    "GpuCost",
    "Hold",
    "HolderInfo",
    "Ledger",
    "LedgerLine",
    "NodeGpus",
    "ScanLedger",
    "UnmetRequest",
    "check_conservation",
    "conserve",
    "funnel",
    "holder_key",
    "scan_ledger",
    "unmet_by_resource",
    "unmet_requests",
    "waste_by_holder",
]

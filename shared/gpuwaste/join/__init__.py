"""Join: GPU ↔ pod ↔ node ↔ owner over the window (pure; between sources and detectors, design §3.4).

Inputs are the cluster state (with each pod's holding span) and the time-resolved telemetry; the
allocation resolvers (`gpuwaste.allocation`) say who holds which share of which physical GPU. The output,
`ScanContext`, is the joined view every detector reads: its data (`view.JoinedView`: allocations, node
inventories, the window's buckets, finding subjects) and the readings detectors take of it (`readings`: signals,
coverage, activity, evidence, data problems).
"""

from gpuwaste.join.build import join
from gpuwaste.join.readings import BOUND_EPS, ActivityReading, ScanContext
from gpuwaste.join.view import Allocation, CommonSettings, JoinedView, NodeInventory, SubjectKey, gpu_ref

__all__ = ["BOUND_EPS", "ActivityReading", "Allocation", "CommonSettings", "JoinedView", "NodeInventory", "ScanContext", "SubjectKey", "gpu_ref", "join"]

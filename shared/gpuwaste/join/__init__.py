"""Join: GPU ↔ pod ↔ node ↔ owner over the window (pure; between sources and detectors, design §3.4).

Inputs are the cluster state (with each pod's holding span) and the time-resolved telemetry; the
allocation resolvers (`gpuwaste.allocation`) say who holds which share of which physical GPU.
"""

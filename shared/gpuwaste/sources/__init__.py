"""Adapters in: Prometheus, Kubernetes, and recordings (exposition files + kubectl JSON)."""

"""Nodes: a Kubernetes Node object → `Node`, with its GPU capacity, capacity type and GPU Feature Discovery labels.

`node_model` builds the `Node` from labels and capacities; the kube-state-metrics reader uses it too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from gpuwaste.models.cluster import Node
from gpuwaste.models.settings import ClusterReadSettings
from gpuwaste.sources.k8s_objects.fields import _int_quantity, _meta, _ts, is_gpu_resource


def _label_int(labels: Mapping[str, str], key: str) -> int | None:
    v = labels.get(key)
    try:
        return int(v) if v not in (None, "") else None
    except ValueError:
        return None


def node_from_dict(obj: Mapping[str, Any], settings: ClusterReadSettings | None = None) -> Node:
    """Build a `Node` from a Kubernetes Node JSON object.

    Raises:
        InputFormatError: when metadata.name is missing or a GPU capacity is malformed.
    """
    settings = settings or ClusterReadSettings()
    meta = _meta(obj, "Node")
    name = str(meta["name"])
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}

    def gpu_map(section: str) -> dict[str, int]:
        raw = status.get(section) or {}
        return {
            k: _int_quantity(v, f"Node {name}.status.{section}[{k!r}]")
            for k, v in raw.items()
            if is_node_gpu_resource(k, settings.gpu_resource_names)
        }

    ips = tuple(a.get("address", "") for a in status.get("addresses") or [] if a.get("type") == "InternalIP")
    return node_model(name, labels, settings, capacity_gpu=gpu_map("capacity"), allocatable_gpu=gpu_map("allocatable"),
                      provider_id=spec.get("providerID") or None, internal_ips=ips,
                      created_at=_ts(meta.get("creationTimestamp"), f"Node {name}.metadata.creationTimestamp"),
                      unschedulable=bool(spec.get("unschedulable", False)))


def is_node_gpu_resource(name: str, patterns: Iterable[str]) -> bool:
    """A node capacity/allocatable resource kept on `Node`: a configured GPU resource, any `nvidia.com/` one, AWS vGPU."""
    return is_gpu_resource(name, patterns) or name.startswith(("nvidia.com/", "k8s.amazonaws.com/vgpu"))


def capacity_type_of(labels: Mapping[str, str], keys: Iterable[str]) -> str | None:
    """"spot", "on-demand", another provider's word, or None, from the first capacity-type label present (`keys` in order)."""
    capacity_type = None
    for key in keys:
        v = labels.get(key)
        if v:
            low = v.lower()
            if low == "false":  # e.g. GKE `gke-spot: "false"`: not spot, but a later label may still say preemptible
                capacity_type = "on-demand"
                continue
            capacity_type = "spot" if low in ("spot", "true", "preemptible") else "on-demand" if low in ("on_demand", "on-demand", "ondemand", "regular") else low
            break
    return capacity_type


def node_model(name: str, labels: dict[str, str], settings: ClusterReadSettings, *, capacity_gpu: dict[str, int],
               allocatable_gpu: dict[str, int], provider_id: str | None, internal_ips: tuple[str, ...],
               created_at: datetime | None, unschedulable: bool, gone_at: datetime | None = None) -> Node:
    """A `Node` from its parts (the API's Node object or kube-state-metrics' node series): labels give the instance
    type, capacity type, region/zone and the GFD facts."""
    return Node(
        name=name,
        labels=labels,
        instance_type=labels.get("node.kubernetes.io/instance-type") or labels.get("beta.kubernetes.io/instance-type") or labels.get("nvidia.com/gpu.machine"),
        capacity_type=capacity_type_of(labels, settings.capacity_type_labels),
        region=labels.get("topology.kubernetes.io/region"),
        zone=labels.get("topology.kubernetes.io/zone"),
        provider_id=provider_id,
        internal_ips=internal_ips,
        gpu_product=labels.get("nvidia.com/gpu.product") or labels.get("cloud.google.com/gke-accelerator"),
        gpu_count_label=_label_int(labels, "nvidia.com/gpu.count"),
        gpu_memory_mib=_label_int(labels, "nvidia.com/gpu.memory"),
        # NVIDIA device-plugin time-slicing (GFD), or GKE GPU time-sharing clients per GPU
        gpu_replicas=_label_int(labels, "nvidia.com/gpu.replicas") or _label_int(labels, "cloud.google.com/gke-max-shared-clients-per-gpu") or 1,
        mig_strategy=labels.get("nvidia.com/mig.strategy"),
        capacity_gpu=capacity_gpu,
        allocatable_gpu=allocatable_gpu,
        created_at=created_at,
        unschedulable=unschedulable,
        gone_at=gone_at,
    )

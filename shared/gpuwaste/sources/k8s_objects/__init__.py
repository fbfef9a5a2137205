"""Adapter helper: Kubernetes JSON objects (API responses or `kubectl get -o json`) → cluster-state models.

Used by the live Kubernetes adapter and by recordings, so both produce the same `ClusterState`.
Malformed or partial objects raise `InputFormatError` naming the object and field.

The package, by concern: `fields` (resource names, quantities, times, metadata: what every parser reads), `pods`
(Pod objects and their owners), `dra` (ResourceClaim, ResourceSlice, DeviceClass), `nodes` (Node objects) and
`state` (a list of objects → `ClusterState`). The names other modules use are re-exported here.
"""

from gpuwaste.sources.k8s_objects.dra import device_class_from_dict, resource_claim_from_dict, resource_slice_from_dict
from gpuwaste.sources.k8s_objects.fields import (
    DROPPED_ANNOTATIONS,
    SHARE_ANNOTATION_PREFIXES,
    SHARE_ANNOTATIONS,
    SHARE_LABELS,
    SHARE_RESOURCES,
    cpu_cores,
    effective_requests,
    is_gpu_relevant_pod,
    is_gpu_resource,
)
from gpuwaste.sources.k8s_objects.nodes import capacity_type_of, is_node_gpu_resource, node_from_dict, node_model
from gpuwaste.sources.k8s_objects.pods import (
    CONTROLLER_KINDS,
    first_hop,
    pod_from_dict,
    resolve_owners,
    resolve_workload,
)
from gpuwaste.sources.k8s_objects.state import cluster_state_from_objects

__all__ = [
    "CONTROLLER_KINDS",
    "DROPPED_ANNOTATIONS",
    "SHARE_ANNOTATIONS",
    "SHARE_ANNOTATION_PREFIXES",
    "SHARE_LABELS",
    "SHARE_RESOURCES",
    "capacity_type_of",
    "cluster_state_from_objects",
    "cpu_cores",
    "device_class_from_dict",
    "effective_requests",
    "first_hop",
    "is_gpu_relevant_pod",
    "is_gpu_resource",
    "is_node_gpu_resource",
    "node_from_dict",
    "node_model",
    "pod_from_dict",
    "resolve_owners",
    "resolve_workload",
    "resource_claim_from_dict",
    "resource_slice_from_dict",
]

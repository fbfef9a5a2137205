"""A list of Kubernetes objects (an API answer or a `kubectl get -o json` List) → `ClusterState`.

Malformed objects raise `InputFormatError` naming the item.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from gpuwaste.errors import InputFormatError
from gpuwaste.models.cluster import ClusterState, Node, Pod
from gpuwaste.models.dra import (
    DeviceClass,
    ResourceClaim,
    ResourceSlice,
)
from gpuwaste.models.settings import ClusterReadSettings
from gpuwaste.sources.k8s_objects.dra import device_class_from_dict, resource_claim_from_dict, resource_slice_from_dict
from gpuwaste.sources.k8s_objects.fields import DRA_KINDS, _annotations, _meta, is_gpu_relevant_pod
from gpuwaste.sources.k8s_objects.nodes import node_from_dict
from gpuwaste.sources.k8s_objects.pods import CONTROLLER_KINDS, pod_from_dict


def _malformed(i: int, obj: Mapping[str, Any], exc: Exception) -> InputFormatError:
    kind = obj.get("kind")
    name = (obj.get("metadata") or {}).get("name") if isinstance(obj.get("metadata"), Mapping) else None
    return InputFormatError(f"items[{i}] ({kind} {name or '?'}): malformed object, a field has the wrong type: {exc}")


def cluster_state_from_objects(
    items: Iterable[Mapping[str, Any]],
    *,
    cluster: str,
    observed_at: datetime,
    settings: ClusterReadSettings | None = None,
    listed_kinds: Iterable[str] | None = None,
    source: str = "",
    dra_listed: bool | None = None,
) -> ClusterState:
    """Build `ClusterState` from a mixed list of Pod, Node, Namespace, controller and DRA objects.

    Args:
        listed_kinds: controller kinds that were listed completely (so a missing owner of that
            kind means it is gone); defaults to the kinds present in `items`.
        dra_listed: True when the source listed the DRA kinds (ResourceClaim/ResourceSlice/DeviceClass), so
            their absence means the cluster has none; defaults to "any DRA object present".

    Raises:
        InputFormatError: on an object without `kind`, or a malformed Pod/Node.
    """
    settings = settings or ClusterReadSettings()
    exporter_re = re.compile(settings.exporter_pod_pattern)
    pod_objs: list[tuple[int, Mapping[str, Any]]] = []
    nodes: list[Node] = []
    controllers: dict[str, Mapping[str, Any]] = {}
    ns_labels: dict[str, dict[str, str]] = {}
    ns_annotations: dict[str, dict[str, str]] = {}
    exporters: dict[str, str] = {}
    exporter_ips: dict[str, str] = {}
    kinds_seen: set[str] = set()
    claims: list[ResourceClaim] = []
    slices: list[ResourceSlice] = []
    classes: list[DeviceClass] = []
    for i, obj in enumerate(items):
        if not isinstance(obj, Mapping):
            raise InputFormatError(f"items[{i}] is not an object")
        kind = obj.get("kind")
        if not kind:
            raise InputFormatError(f"items[{i}] has no kind (expected the output of kubectl get -o json)")
        kinds_seen.add(str(kind))
        try:
            if kind == "Pod":
                _meta(obj, "Pod")
                pod_objs.append((i, obj))  # built once the controllers are known: owners resolved at once
            elif kind == "Node":
                nodes.append(node_from_dict(obj, settings))
            elif kind == "ResourceClaim":
                claims.append(resource_claim_from_dict(obj))
            elif kind == "ResourceSlice":
                slices.append(resource_slice_from_dict(obj))
            elif kind == "DeviceClass":
                classes.append(device_class_from_dict(obj))
            elif kind == "Namespace":
                meta = _meta(obj, "Namespace")
                ns_labels[str(meta["name"])] = dict(meta.get("labels") or {})
                ns_annotations[str(meta["name"])] = _annotations(meta)
            elif kind in CONTROLLER_KINDS or "ownerReferences" in (obj.get("metadata") or {}) or str(obj.get("apiVersion", "")).count("/"):
                meta = _meta(obj, str(kind))
                controllers[f"{kind}/{meta.get('namespace') or 'default'}/{meta['name']}"] = obj
        except (AttributeError, TypeError, ValueError) as exc:  # a field of the wrong JSON type (list for a map, ...)
            raise _malformed(i, obj, exc) from exc
    listed = frozenset(listed_kinds) if listed_kinds is not None else frozenset(k for k in kinds_seen if k not in ("Pod", "Node", "Namespace", *DRA_KINDS))
    pods: list[Pod] = []
    for i, obj in pod_objs:
        try:
            name = str(obj["metadata"]["name"])
            is_exporter = exporter_re.search(name) is not None
            relevant = is_gpu_relevant_pod(obj, settings.gpu_resource_names)
            if relevant or not is_exporter:  # every pod but a GPU-less exporter is built: a malformed one is a clear error
                pod = pod_from_dict(obj, settings.gpu_resource_names, owners_of=(controllers, listed))
                if relevant:
                    pods.append(pod)
            if is_exporter:  # an exporter pod: its node and IP are what the scan needs of it
                node = (obj.get("spec") or {}).get("nodeName") or None
                ip = (obj.get("status") or {}).get("podIP") or None
                if node:
                    exporters[name] = str(node)
                    if ip:
                        exporter_ips[str(ip)] = str(node)
        except (AttributeError, TypeError, ValueError) as exc:
            raise _malformed(i, obj, exc) from exc
    resolved = pods
    used_nodes = {p.node_name for p in pods} | set(exporters.values()) | {s.node_name for s in slices if s.node_name}
    gpu_nodes = [n for n in nodes if n.capacity_gpu or n.allocatable_gpu or n.gpu_product or n.gpu_count_label or n.name in used_nodes]
    return ClusterState(
        cluster=cluster,
        observed_at=observed_at,
        pods=tuple(resolved),
        nodes=tuple(gpu_nodes),
        exporter_pods=exporters,
        exporter_pod_ips=exporter_ips,
        namespace_labels=ns_labels,
        namespace_annotations=ns_annotations,
        workloads_known=frozenset(controllers),
        owner_kinds_listed=listed,
        source=source,
        resource_claims=tuple(claims),
        resource_slices=tuple(slices),
        device_classes=tuple(classes),
        dra_listed=bool(dra_listed) if dra_listed is not None else bool(kinds_seen & set(DRA_KINDS)),
    )

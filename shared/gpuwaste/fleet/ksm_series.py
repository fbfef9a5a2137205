"""Kubernetes objects → the series kube-state-metrics would export for them (v2 names and label sets; v1 optional).

The fleet generator writes its cluster this way next to the DCGM series, so a recording is complete without
`cluster.json`; the field-guide tests build each minimal input's cluster the same way to run it through the KSM
source. Label and annotation series carry only allow-listed keys, as KSM v2 does (`ALLOWLIST`, or what the
caller passes); KSM v1 exported every label and named GPU resources per metric
(`kube_pod_container_resource_requests_nvidia_gpu_devices`, `kube_node_status_capacity_nvidia_gpu_cards`).

A pod's series exist from its creation (or the first time) to the last time; its phase series follow its life:
Pending before `status.startTime`, Running until the last container's `finishedAt`, then the final phase
(`kube_pod_completion_time` appears then).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuwaste.sources.exposition import RecordedSeries
from gpuwaste.sources.ksm import ALLOWLIST, CONTROLLER_CREATED, sanitize

PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
_BINARY = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4}
_DECIMAL = {"k": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4, "m": 0.001}


@dataclass(frozen=True)
class KsmExport:
    """How the simulated kube-state-metrics is configured.

    Attributes:
        version: 2 (current names, allow-listed labels) or 1 (per-resource GPU names, every label exported).
        labels / annotations: allow-listed keys per resource ("nodes", "pods", "namespaces"); None: `ALLOWLIST`.
        owners: export `kube_replicaset_owner`, `kube_job_owner` and `kube_<kind>_created` (replicasets, jobs…
            collectors on).
    """

    version: int = 2
    labels: Mapping[str, Sequence[str]] | None = None
    annotations: Mapping[str, Sequence[str]] | None = None
    owners: bool = True
    exclude: frozenset[str] = field(default_factory=frozenset)


def _seconds(ts: str | None) -> float | None:
    if not ts:
        return None
    return datetime.fromisoformat(str(ts).replace("Z", "+00:00")).timestamp()


def quantity(text: Any) -> float:
    """A Kubernetes quantity ("8", "500m", "1152Gi") as a number in base units (cores, bytes, count)."""
    s = str(text).strip()
    for suffix, mult in _BINARY.items():
        if s.endswith(suffix):
            return float(s[: -len(suffix)]) * mult
    if s and s[-1] in _DECIMAL:
        return float(s[:-1]) * _DECIMAL[s[-1]]
    return float(s)


def _unit(resource: str) -> str:
    return {"cpu": "core", "memory": "byte", "ephemeral-storage": "byte"}.get(resource, "integer")


class _Series:
    def __init__(self) -> None:
        self.series: dict[tuple[str, tuple[tuple[str, str], ...]], RecordedSeries] = {}

    def put(self, name: str, labels: Mapping[str, str], t_ms: int, value: float) -> None:
        key = (name, tuple(sorted(labels.items())))
        s = self.series.get(key)
        if s is None:
            s = self.series[key] = RecordedSeries(name, dict(labels))
        s.timestamps_ms.append(t_ms)
        s.values.append(float(value))


def _allowed(meta: Mapping[str, Any], section: str, resource: str, allow: Mapping[str, Sequence[str]] | None,
             prefix: str, everything: bool) -> dict[str, str]:
    values = meta.get(section) or {}
    keys = values.keys() if everything else (allow or {}).get(resource, ())
    return {f"{prefix}{sanitize(k)}": str(values[k]) for k in keys if k in values}


def ksm_series(objects: Iterable[Mapping[str, Any]], times_ms: Sequence[int], *, export: KsmExport | None = None,
               gone_ms: Mapping[tuple[str, str], int] | None = None) -> list[RecordedSeries]:
    """The KSM series of `objects` (kubectl JSON: Pods, Nodes, Namespaces, controllers) sampled at `times_ms`.

    Args:
        gone_ms: (namespace, pod) → Unix ms after which the pod object no longer exists (deleted).
    """
    export = export or KsmExport()
    v1 = export.version == 1
    labels_allow = export.labels if export.labels is not None else ALLOWLIST["labels"]
    ann_allow = export.annotations if export.annotations is not None else ALLOWLIST["annotations"]
    out = _Series()
    gone = dict(gone_ms or {})
    for obj in objects:
        kind = obj.get("kind")
        meta = obj.get("metadata") or {}
        name, ns = str(meta.get("name", "")), str(meta.get("namespace") or "default")
        created = _seconds(meta.get("creationTimestamp"))
        if kind == "Node":
            _node(out, obj, name, created, times_ms, export, labels_allow, v1)
        elif kind == "Namespace":
            for t in times_ms:
                out.put("kube_namespace_created", {"namespace": name}, t, created or 0.0)
                if export.version == 2 or meta.get("labels"):
                    out.put("kube_namespace_labels", {"namespace": name, **_allowed(meta, "labels", "namespaces", labels_allow, "label_", v1)}, t, 1)
                if export.version == 2:
                    out.put("kube_namespace_annotations", {"namespace": name, **_allowed(meta, "annotations", "namespaces", ann_allow, "annotation_", False)}, t, 1)
        elif kind == "Pod":
            _pod(out, obj, name, ns, created, times_ms, export, labels_allow, ann_allow, v1, gone.get((ns, name)))
        elif kind in CONTROLLER_CREATED and export.owners:
            metric, key = CONTROLLER_CREATED[kind]
            owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind")]
            for t in times_ms:
                out.put(metric, {"namespace": ns, key: name}, t, created or 0.0)
                if kind in ("ReplicaSet", "Job"):
                    owner_metric = "kube_replicaset_owner" if kind == "ReplicaSet" else "kube_job_owner"
                    for o in owners or [{"kind": "<none>", "name": "<none>", "controller": None}]:
                        ctrl = "<none>" if o.get("controller") is None else str(bool(o.get("controller"))).lower()
                        out.put(owner_metric, {"namespace": ns, key: name, "owner_kind": o["kind"], "owner_name": o.get("name", ""),
                                               "owner_is_controller": ctrl}, t, 1)
    return [s for s in out.series.values() if s.name not in export.exclude]


def _node(out: _Series, obj: Mapping[str, Any], name: str, created: float | None, times_ms: Sequence[int], export: KsmExport,
          labels_allow: Mapping[str, Sequence[str]], v1: bool) -> None:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    ip = next((a.get("address", "") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"), "")
    info = {"node": name, "container_runtime_version": "containerd://1.7.27", "kernel_version": "6.1.134", "kubelet_version": "v1.31.7",
            "kubeproxy_version": "deprecated", "os_image": "Amazon Linux 2023", "pod_cidr": "", "provider_id": str(spec.get("providerID", "")),
            "system_uuid": "", "internal_ip": ip}
    labels = {"node": name, **_allowed(meta, "labels", "nodes", labels_allow, "label_", v1)}
    for t in times_ms:
        out.put("kube_node_info", info, t, 1)
        out.put("kube_node_labels", labels, t, 1)
        out.put("kube_node_created", {"node": name}, t, created or 0.0)
        out.put("kube_node_spec_unschedulable", {"node": name}, t, 1 if spec.get("unschedulable") else 0)
        for section, metric in (("capacity", "kube_node_status_capacity"), ("allocatable", "kube_node_status_allocatable")):
            for resource, q in (status.get(section) or {}).items():
                if v1 and resource == "nvidia.com/gpu":
                    out.put(f"{metric}_nvidia_gpu_cards", {"node": name}, t, quantity(q))
                    continue
                out.put(metric, {"node": name, "resource": sanitize(resource), "unit": _unit(resource)}, t, quantity(q))


def _phase_at(t_s: float, phase: str, started: float | None, finished: float | None) -> str:
    if started is not None and t_s < started:
        return "Pending"
    if phase in ("Succeeded", "Failed") and finished is not None and t_s < finished:
        return "Running"
    return phase


def _pod(out: _Series, obj: Mapping[str, Any], name: str, ns: str, created: float | None, times_ms: Sequence[int],
         export: KsmExport, labels_allow: Mapping[str, Sequence[str]], ann_allow: Mapping[str, Sequence[str]], v1: bool,
         gone: int | None) -> None:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    uid = str(meta.get("uid") or f"uid-{ns}-{name}")
    node = str(spec.get("nodeName") or "")
    base = {"namespace": ns, "pod": name, "uid": uid}
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind")]
    ctrl = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
    info = {**base, "host_ip": str(status.get("hostIP", "")), "pod_ip": str(status.get("podIP", "")), "node": node,
            "created_by_kind": ctrl["kind"] if ctrl else "<none>", "created_by_name": ctrl.get("name", "") if ctrl else "<none>",
            "priority_class": "", "host_network": "false"}
    started = _seconds(status.get("startTime"))
    finished = None
    for cs in status.get("containerStatuses") or []:
        fin = _seconds(((cs or {}).get("state") or {}).get("terminated", {}).get("finishedAt"))
        if fin is not None and (finished is None or fin > finished):
            finished = fin
    phase = str(status.get("phase") or "Unknown")
    labels = {**base, **_allowed(meta, "labels", "pods", labels_allow, "label_", v1)}
    annotations = {**base, **_allowed(meta, "annotations", "pods", ann_allow, "annotation_", False)}
    rows: list[tuple[str, dict[str, str], float]] = []
    for section, init in (("containers", False), ("initContainers", True)):
        for c in spec.get(section) or []:
            cname = str(c.get("name", ""))
            if not init:
                image = str(c.get("image", ""))
                rows.append(("kube_pod_container_info", {**base, "container": cname, "image_spec": image, "image": image,
                                                         "image_id": "", "container_id": ""}, 1))
            res = c.get("resources") or {}
            for kind in ("requests", "limits"):
                values = dict(res.get(kind) or {})
                if kind == "requests":  # a limit alone implies an equal request (extended resources, cpu)
                    values = {**(res.get("limits") or {}), **values}
                for resource, q in values.items():
                    if v1 and resource == "nvidia.com/gpu":
                        rows.append((f"kube_pod_container_resource_{kind}_nvidia_gpu_devices", {**base, "container": cname, "node": node}, quantity(q)))
                        continue
                    metric = f"kube_pod_{'init_' if init else ''}container_resource_{kind}"
                    rows.append((metric, {**base, "container": cname, "node": node, "resource": sanitize(resource), "unit": _unit(resource)}, quantity(q)))
    rows.append(("kube_pod_info", info, 1))
    if not v1:  # KSM v2.20+: one series per spec.resourceClaims entry (DRA), the claim it resolved to
        generated = {str(x.get("name")): x.get("resourceClaimName") for x in status.get("resourceClaimStatuses") or []}
        for entry in spec.get("resourceClaims") or []:
            local = str(entry.get("name", ""))
            claim = entry.get("resourceClaimName") or generated.get(local) or ""
            rows.append(("kube_pod_resourceclaim_info", {**base, "claim_name": local, "resourceclaim_name": str(claim),
                                                         "resourceclaim_template_name": str(entry.get("resourceClaimTemplateName") or "")}, 1))
    if ctrl or not v1:
        for o in owners or [{"kind": "<none>", "name": "<none>", "controller": None}]:
            flag = "<none>" if o.get("controller") is None else str(bool(o.get("controller"))).lower()
            rows.append(("kube_pod_owner", {**base, "owner_kind": o["kind"], "owner_name": o.get("name", ""), "owner_is_controller": flag}, 1))
    rows.append(("kube_pod_labels", labels, 1))
    if not v1:
        rows.append(("kube_pod_annotations", annotations, 1))
    if created is not None:
        rows.append(("kube_pod_created", base, created))
    if meta.get("deletionTimestamp"):
        rows.append(("kube_pod_deletion_timestamp", base, _seconds(meta["deletionTimestamp"]) or 0.0))
    for t in times_ms:
        t_s = t / 1000
        if (created is not None and t_s < created) or (gone is not None and t > gone):
            continue
        for metric, lab, value in rows:
            out.put(metric, lab, t, value)
        if started is not None and t_s >= started:
            out.put("kube_pod_start_time", base, t, started)
        now = _phase_at(t_s, phase, started, finished)
        for p in PHASES:
            out.put("kube_pod_status_phase", {**base, "phase": p}, t, 1 if p == now else 0)
        if finished is not None and t_s >= finished:
            out.put("kube_pod_completion_time", base, t, finished)


__all__ = ["KsmExport", "ksm_series", "quantity"]

"""Pods: a Kubernetes Pod object → `Pod`, and its owners resolved up to the top controller.

The first-hop owner (`first_hop`), the pod's DRA claims, and the owner chain through the listed controllers or,
where they are not listed, the names' hash suffixes (`resolve_owners`, `resolve_workload`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gpuwaste.errors import InputFormatError
from gpuwaste.models.cluster import OwnerRef, Pod, PodPhase, Workload
from gpuwaste.models.dra import (
    PodClaimRef,
)
from gpuwaste.models.settings import DEFAULT_GPU_RESOURCES
from gpuwaste.sources.k8s_objects.fields import SHARE_RESOURCES, _annotations, _cpu_limit, _gpu_requests, _meta, _ts

_HASH_SUFFIX = re.compile(r"^(?P<base>.+)-(?P<hash>[a-z0-9]{5,10})$")
_CRON_SUFFIX = re.compile(r"^(?P<base>.+)-(?P<minutes>\d{8,10})$")


def first_hop(owners: tuple[OwnerRef, ...], namespace: str, name: str) -> Workload:
    """The pod's own owner (the controller reference, else the first one) as a first-hop workload; a bare pod owns itself."""
    ctrl = next((o for o in owners if o.controller), owners[0] if owners else None)
    if ctrl is None:
        return Workload(kind="Pod", name=name, namespace=namespace, resolution="api", exists=True)
    return Workload(kind=ctrl.kind, name=ctrl.name, namespace=namespace, api_version=ctrl.api_version, resolution="first-hop",
                    chain=(f"{ctrl.kind}/{ctrl.name}",))


def pod_from_dict(obj: Mapping[str, Any], patterns: tuple[str, ...] = DEFAULT_GPU_RESOURCES,
                  owners_of: tuple[Mapping[str, Mapping[str, Any]], frozenset[str]] | None = None) -> Pod:
    """Build a `Pod` from a Kubernetes Pod JSON object.

    The workload is the first hop (see `resolve_owners`), or with `owners_of` = (controllers, listed kinds) the
    top controller, resolved at once.

    Raises:
        InputFormatError: when metadata.name is missing or a GPU quantity or time is malformed.
    """
    meta = _meta(obj, "Pod")
    ns = meta.get("namespace") or "default"
    name = str(meta["name"])
    where = f"Pod {ns}/{name}"
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    phase_raw = status.get("phase") or "Unknown"
    try:
        phase = PodPhase(phase_raw)
    except ValueError as exc:
        raise InputFormatError(f"{where}: unknown status.phase {phase_raw!r}") from exc
    owners = tuple(
        OwnerRef(
            api_version=str(o.get("apiVersion", "")),
            kind=str(o.get("kind", "")),
            name=str(o.get("name", "")),
            uid=str(o.get("uid", "")),
            controller=bool(o.get("controller", False)),
        )
        for o in meta.get("ownerReferences") or []
        if isinstance(o, Mapping) and o.get("kind") and o.get("name")
    )
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    workload = first_hop(owners, ns, name)
    if owners_of is not None:
        workload = resolve_workload(workload, labels, *owners_of)
    finished: datetime | None = None
    for cs in status.get("containerStatuses") or []:
        term = ((cs or {}).get("state") or {}).get("terminated") or {}
        t = _ts(term.get("finishedAt"), f"{where}.status.containerStatuses.state.terminated.finishedAt")
        if t is not None and (finished is None or t > finished):
            finished = t
    containers = spec.get("containers") or []
    return Pod(
        namespace=ns,
        name=name,
        uid=str(meta.get("uid", "")),
        phase=phase,
        node_name=spec.get("nodeName") or None,
        labels=labels,
        annotations=_annotations(meta),
        owner_refs=owners,
        workload=workload,
        gpu_requests=_gpu_requests(spec, patterns, where),
        containers=tuple(str(c.get("name", "")) for c in containers),
        container_images=tuple(str(c.get("image", "")) for c in containers),
        container_args=tuple(" ".join(map(str, (c.get("command") or []) + (c.get("args") or []))) for c in containers),
        cpu_limit_cores=_cpu_limit(containers),
        share_requests=_gpu_requests(spec, SHARE_RESOURCES, where),
        resource_claims=_pod_claims(spec, status),
        scheduler_name=spec.get("schedulerName") or None,
        created_at=_ts(meta.get("creationTimestamp"), f"{where}.metadata.creationTimestamp"),
        started_at=_ts(status.get("startTime"), f"{where}.status.startTime"),
        finished_at=finished,
        deletion_requested=bool(meta.get("deletionTimestamp")),
        pod_ip=status.get("podIP") or None,
        host_ip=status.get("hostIP") or None,
    )


def _pod_claims(spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[PodClaimRef, ...]:
    """`spec.resourceClaims` with each entry's claim name (generated names from `status.resourceClaimStatuses`).

    Reads the GA shape (`resourceClaimName` / `resourceClaimTemplateName` on the entry) and the 1.27-1.30 alpha
    shape (`source.resourceClaimName`).
    """
    generated = {
        str(s.get("name")): s.get("resourceClaimName") or None
        for s in status.get("resourceClaimStatuses") or []
        if isinstance(s, Mapping) and s.get("name")
    }
    out: list[PodClaimRef] = []
    for entry in spec.get("resourceClaims") or []:
        if not isinstance(entry, Mapping) or not entry.get("name"):
            continue
        source = entry.get("source")
        src = source if isinstance(source, Mapping) else entry
        name = str(entry["name"])
        template = src.get("resourceClaimTemplateName") or None
        claim = src.get("resourceClaimName") or generated.get(name)
        out.append(PodClaimRef(name=name, claim_name=str(claim) if claim else None, template=str(template) if template else None))
    return tuple(out)


def resolve_owners(pod: Pod, controllers: Mapping[str, Mapping[str, Any]], listed_kinds: frozenset[str]) -> Workload:
    """Walk the pod's owner chain to its top controller.

    `controllers` maps "Kind/namespace/name" → object (ReplicaSets, Jobs, ... that were listed). When
    a hop is missing from a listed kind, the owner is gone (orphan); when the kind was not listed, the
    hop is inferred from naming conventions (ReplicaSet `<deployment>-<hash>`, Job `<cronjob>-<minutes>`).
    """
    return resolve_workload(pod.workload, pod.labels, controllers, listed_kinds)


def resolve_workload(w: Workload, labels: Mapping[str, str], controllers: Mapping[str, Mapping[str, Any]],
                     listed_kinds: frozenset[str]) -> Workload:
    """`resolve_owners` from a pod's first-hop workload and its labels (`pod-template-hash` names the Deployment)."""
    if w.kind == "Pod":
        return w
    namespace = w.namespace
    chain = [f"{w.kind}/{w.name}"]
    kind, name, api = w.kind, w.name, w.api_version
    resolution = "api"
    exists: bool | None = None
    for _ in range(8):
        key = f"{kind}/{namespace}/{name}"
        obj = controllers.get(key)
        if obj is None:
            if kind in listed_kinds:
                exists = False
                break
            inferred = _infer_parent(kind, name, labels)
            if inferred is None:
                resolution = "api" if resolution == "api" and kind not in ("ReplicaSet", "Job") else resolution
                break
            kind, name = inferred
            api = ""
            resolution = "inferred"
            chain.append(f"{kind}/{name}")
            continue
        exists = True
        owners = [o for o in (obj.get("metadata") or {}).get("ownerReferences") or [] if o.get("kind") and o.get("name")]
        ctrl = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
        if ctrl is None:
            break
        kind, name, api = str(ctrl["kind"]), str(ctrl["name"]), str(ctrl.get("apiVersion", ""))
        chain.append(f"{kind}/{name}")
        exists = None
    else:
        resolution = "first-hop"
    if exists is None and kind in listed_kinds:
        exists = f"{kind}/{namespace}/{name}" in controllers
    return Workload(kind=kind, name=name, namespace=namespace, api_version=api, resolution=resolution, exists=exists, chain=tuple(chain))


def _infer_parent(kind: str, name: str, labels: Mapping[str, str]) -> tuple[str, str] | None:
    if kind == "ReplicaSet":
        h = labels.get("pod-template-hash")
        if h and name.endswith(f"-{h}"):
            return ("Deployment", name[: -len(h) - 1])
        m = _HASH_SUFFIX.match(name)
        return ("Deployment", m.group("base")) if m else None
    if kind == "Job":
        m = _CRON_SUFFIX.match(name)
        return ("CronJob", m.group("base")) if m else None
    return None


CONTROLLER_KINDS = ("ReplicaSet", "Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob")

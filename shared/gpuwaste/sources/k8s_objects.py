"""Adapter helper: Kubernetes JSON objects (API responses or `kubectl get -o json`) → cluster-state models.

Used by the live Kubernetes adapter and by recordings, so both produce the same `ClusterState`.
Malformed or partial objects raise `InputFormatError` naming the object and field.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from gpuwaste.errors import InputFormatError
from gpuwaste.models.cluster import ClusterState, Node, OwnerRef, Pod, PodPhase, Workload
from gpuwaste.models.dra import (
    ClaimDeviceResult,
    ConsumerRef,
    DeviceClass,
    PodClaimRef,
    ResourceClaim,
    ResourceSlice,
    SliceDevice,
)
from gpuwaste.models.settings import DEFAULT_GPU_RESOURCES, ClusterReadSettings

_HASH_SUFFIX = re.compile(r"^(?P<base>.+)-(?P<hash>[a-z0-9]{5,10})$")
_CRON_SUFFIX = re.compile(r"^(?P<base>.+)-(?P<minutes>\d{8,10})$")
_EXPORTER_RE = re.compile(r"dcgm-exporter")


# Annotations never kept: kubectl's copy of the whole applied manifest (it can hold plain-text env values and
# be up to 256 KiB, which would ride along in every queue message, lifecycle record and alert of the pod).
DROPPED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})


def _annotations(meta: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (meta.get("annotations") or {}).items() if k not in DROPPED_ANNOTATIONS}


def is_gpu_resource(name: str, patterns: Iterable[str]) -> bool:
    """True when a resource name matches one of the GPU resource patterns."""
    return _matches_any(name, patterns if isinstance(patterns, tuple) else tuple(patterns))


@functools.lru_cache(maxsize=4096)
def _matches_any(name: str, patterns: tuple[str, ...]) -> bool:
    # a cluster has a handful of resource names and one pattern set: remembered, not matched again per container
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


#: Resources that size a GPU share without being GPUs (HAMi: percent of SMs, MiB or percent of memory; B27).
SHARE_RESOURCES = ("nvidia.com/gpucores", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage")
#: Pod annotations / labels that ask for a GPU share without any GPU request (KAI/Run:ai fractions, B28; HAMi, B27).
SHARE_ANNOTATIONS = ("gpu-fraction", "gpu-memory")
SHARE_ANNOTATION_PREFIXES = ("hami.io/",)
SHARE_LABELS = ("runai-gpu-group",)
#: DRA object kinds read from `resource.k8s.io` (v1; v1beta1/v1beta2 read the same way).
DRA_KINDS = ("ResourceClaim", "ResourceSlice", "DeviceClass")


def is_gpu_relevant_pod(obj: Mapping[str, Any], patterns: Iterable[str]) -> bool:
    """True for a pod JSON object that may hold a GPU: a GPU or GPU-share resource in any container, a DRA
    `spec.resourceClaims` entry, or a fraction/HAMi annotation or KAI group label."""
    patterns = tuple(patterns)
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        return False
    if spec.get("resourceClaims"):
        return True
    annotations = meta.get("annotations") or {}
    if isinstance(annotations, Mapping) and any(
        k in SHARE_ANNOTATIONS or str(k).startswith(SHARE_ANNOTATION_PREFIXES) for k in annotations
    ):
        return True
    labels = meta.get("labels") or {}
    if isinstance(labels, Mapping) and any(k in SHARE_LABELS for k in labels):
        return True
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = (container or {}).get("resources") or {} if isinstance(container, Mapping) else {}
        for section in ("limits", "requests"):
            for key in resources.get(section) or {}:
                if is_gpu_resource(str(key), patterns) or str(key) in SHARE_RESOURCES:
                    return True
    return False


def _ts(value: Any, where: str) -> datetime | None:
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError as exc:
        raise InputFormatError(f"{where}: not an RFC 3339 time: {value!r}") from exc


def _int_quantity(value: Any, where: str) -> int:
    try:
        text = str(value).strip()
        if text.endswith("k"):
            return int(text[:-1]) * 1000
        return int(float(text))
    except (TypeError, ValueError) as exc:
        raise InputFormatError(f"{where}: GPU quantity must be an integer, got {value!r}") from exc


def effective_requests(app: Iterable[Mapping[str, int]], init: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Effective request per resource of a pod from its containers' requests (each already "limits first, else
    requests"): max(largest init container, sum of app containers); resources whose effective request is 0 dropped.
    The one rule for the API, recordings and kube-state-metrics."""
    total: dict[str, int] = {}
    for c in app:
        for k, v in c.items():
            total[k] = total.get(k, 0) + v
    init_max: dict[str, int] = {}
    for c in init:
        for k, v in c.items():
            init_max[k] = max(init_max.get(k, 0), v)
    eff = {k: max(total.get(k, 0), init_max.get(k, 0)) for k in {*total, *init_max}}
    return {k: v for k, v in eff.items() if v > 0}


def _gpu_requests(spec: Mapping[str, Any], patterns: tuple[str, ...], where: str) -> dict[str, int]:
    def per_container(c: Mapping[str, Any], idx: str) -> dict[str, int]:
        res = c.get("resources") or {}
        limits = res.get("limits") or {}
        requests = res.get("requests") or {}
        out: dict[str, int] = {}
        for name in {*limits, *requests}:
            if is_gpu_resource(name, patterns):
                raw = limits.get(name, requests.get(name))
                out[name] = _int_quantity(raw, f"{where}.{idx}.resources[{name!r}]")
        return out

    return effective_requests((per_container(c, f"spec.containers[{i}]") for i, c in enumerate(spec.get("containers") or [])),
                              (per_container(c, f"spec.initContainers[{i}]") for i, c in enumerate(spec.get("initContainers") or [])))


def cpu_cores(quantity: Any) -> float | None:
    """A Kubernetes CPU quantity ("2", "1.5", "500m") in cores; None when absent or unreadable."""
    if quantity in (None, ""):
        return None
    text = str(quantity).strip()
    try:
        return float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        return None


def _cpu_limit(containers: Any) -> float | None:
    """Sum of the app containers' CPU limits (cores); None when any container is unlimited."""
    total = 0.0
    for c in containers if isinstance(containers, list) else []:
        limit = cpu_cores(((c or {}).get("resources") or {}).get("limits", {}).get("cpu")) if isinstance(c, Mapping) else None
        if limit is None:
            return None
        total += limit
    return total or None


def _meta(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not meta.get("name"):
        raise InputFormatError(f"{kind} object without metadata.name")
    return meta


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


def _attr_value(raw: Any) -> str | None:
    """A DRA device attribute (`{"string": "GPU-…"}`, `{"int": 0}`, `{"version": "12.4.0"}`, `{"bool": true}`) as text."""
    if not isinstance(raw, Mapping):
        return None if raw is None else str(raw)
    for key in ("string", "int", "version", "bool"):
        if key in raw and raw[key] is not None:
            value = raw[key]
            return ("true" if value else "false") if isinstance(value, bool) else str(value)
    return None


def resource_claim_from_dict(obj: Mapping[str, Any]) -> ResourceClaim:
    """Build a `ResourceClaim` from `resource.k8s.io/v1` JSON (v1beta1/v1beta2 tolerated).

    Raises:
        InputFormatError: when metadata.name is missing, an allocation result lacks driver/pool/device, or a
            time is malformed.
    """
    meta = _meta(obj, "ResourceClaim")
    ns = str(meta.get("namespace") or "default")
    name = str(meta["name"])
    where = f"ResourceClaim {ns}/{name}"
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    classes: list[str] = []
    for req in (spec.get("devices") or {}).get("requests") or []:
        if not isinstance(req, Mapping):
            continue
        exact = req.get("exactly")
        exactly = exact if isinstance(exact, Mapping) else req  # v1 / v1beta1
        if exactly.get("deviceClassName"):
            classes.append(str(exactly["deviceClassName"]))
        for sub in req.get("firstAvailable") or []:
            if isinstance(sub, Mapping) and sub.get("deviceClassName"):
                classes.append(str(sub["deviceClassName"]))
    allocation = status.get("allocation") or {}
    results: list[ClaimDeviceResult] = []
    for i, r in enumerate((allocation.get("devices") or {}).get("results") or []):
        if not isinstance(r, Mapping) or not all(r.get(k) for k in ("driver", "pool", "device")):
            raise InputFormatError(f"{where}.status.allocation.devices.results[{i}]: needs driver, pool and device")
        results.append(
            ClaimDeviceResult(
                request=str(r.get("request", "")),
                driver=str(r["driver"]),
                pool=str(r["pool"]),
                device=str(r["device"]),
                share_id=str(r["shareID"]) if r.get("shareID") else None,
            )
        )
    reserved = tuple(
        ConsumerRef(resource=str(c.get("resource", "pods")), name=str(c["name"]), uid=str(c.get("uid", "")))
        for c in status.get("reservedFor") or []
        if isinstance(c, Mapping) and c.get("name")
    )
    return ResourceClaim(
        namespace=ns,
        name=name,
        uid=str(meta.get("uid", "")),
        api_version=str(obj.get("apiVersion") or "resource.k8s.io/v1"),
        device_classes=tuple(dict.fromkeys(classes)),
        results=tuple(results),
        reserved_for=reserved,
        created_at=_ts(meta.get("creationTimestamp"), f"{where}.metadata.creationTimestamp"),
        allocated_at=_ts(allocation.get("allocationTimestamp"), f"{where}.status.allocation.allocationTimestamp"),
        deletion_requested=bool(meta.get("deletionTimestamp")),
    )


def resource_slice_from_dict(obj: Mapping[str, Any]) -> ResourceSlice:
    """Build a `ResourceSlice` from `resource.k8s.io/v1` JSON (v1beta1's `devices[].basic` tolerated).

    Attribute names are kept without their domain (`gpu.nvidia.com/uuid` → `uuid`).

    Raises:
        InputFormatError: when metadata.name, spec.driver or spec.pool.name is missing.
    """
    meta = _meta(obj, "ResourceSlice")
    name = str(meta["name"])
    spec = obj.get("spec") or {}
    pool = (spec.get("pool") or {}).get("name") if isinstance(spec.get("pool"), Mapping) else None
    if not spec.get("driver") or not pool:
        raise InputFormatError(f"ResourceSlice {name}: spec.driver and spec.pool.name are required")
    devices: list[SliceDevice] = []
    for d in spec.get("devices") or []:
        if not isinstance(d, Mapping) or not d.get("name"):
            continue
        basic = d.get("basic")
        body = basic if isinstance(basic, Mapping) else d  # v1beta1 wraps attributes in `basic`
        attrs: dict[str, str] = {}
        for key, raw in (body.get("attributes") or {}).items():
            value = _attr_value(raw)
            if value is not None:
                attrs[str(key).rsplit("/", 1)[-1]] = value
        devices.append(SliceDevice(name=str(d["name"]), attributes=attrs))
    return ResourceSlice(name=name, driver=str(spec["driver"]), pool=str(pool), node_name=spec.get("nodeName") or None, devices=tuple(devices))


_CEL_DRIVER = re.compile(r"device\.driver\s*==\s*['\"](?P<driver>[^'\"]+)['\"]")


def device_class_from_dict(obj: Mapping[str, Any]) -> DeviceClass:
    """Build a `DeviceClass` (its name, and the drivers its CEL selectors compare `device.driver` with).

    Raises:
        InputFormatError: when metadata.name is missing.
    """
    meta = _meta(obj, "DeviceClass")
    expressions = tuple(
        str(((s or {}).get("cel") or {}).get("expression", ""))
        for s in (obj.get("spec") or {}).get("selectors") or []
        if isinstance(s, Mapping)
    )
    drivers = tuple(dict.fromkeys(m.group("driver") for e in expressions for m in _CEL_DRIVER.finditer(e)))
    return DeviceClass(name=str(meta["name"]), drivers=drivers, expressions=expressions)


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

"""Adapter: kube-state-metrics (KSM) series → `ClusterState`, live (a fixed handful of PromQL queries) or from a recording.

Many clusters give a waste tool nothing but Prometheus: dcgm-exporter plus KSM. Every fact the scan needs is in
the KSM series (formats.md §b): pods (`kube_pod_info`, `kube_pod_status_phase`, `kube_pod_owner`, start,
completion, creation and deletion times), GPU requests and limits per container and init container, owners up to
the top controller (`kube_replicaset_owner`, `kube_job_owner`, `kube_<kind>_created`), allow-listed labels and
annotations, nodes (`kube_node_labels`, `kube_node_info`, capacity/allocatable) and namespaces.

The facts of the series are gathered per pod, node, namespace and controller and the cluster model (`Pod`, `Node`,
`Workload`) is built from them directly, no Kubernetes objects in between, with the rules of `sources.k8s_objects`
(the parser of the API and of recorded Lists): one set of rules for effective requests (max(largest init container,
sum of app containers), limits first), owners and their resolution, capacity types and GFD labels.

KSM's quirks, handled as a kind:
- requests of Succeeded/Failed and unscheduled (`node=""`) pods are exported but are not holdings (B11): the phase
  and node come with the pod, and `Pod.holds_gpus` judges them;
- a pod seen in the window but gone at its end (deleted) keeps its last state and `gone_at` (its GPUs were held
  until then); a pod that completed has `finished_at` from `kube_pod_completion_time` (B10);
- label and annotation series exist only for allow-listed keys (KSM v2): what is missing is said in
  `ClusterState.notes`, with what it costs;
- KSM v2 names (`kube_pod_container_resource_requests{resource="nvidia_com_gpu"}`) and the v1 per-resource names
  (`kube_pod_container_resource_requests_nvidia_gpu_devices`, `kube_node_status_capacity_nvidia_gpu_cards`) are
  both read; label names are sanitised by KSM (`nvidia.com/gpu` → `nvidia_com_gpu`) and mapped back here.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from gpuwaste.errors import InputFormatError
from gpuwaste.models.cluster import ClusterState, Node, OwnerRef, Pod, PodPhase
from gpuwaste.models.dra import PodClaimRef
from gpuwaste.models.settings import ClusterReadSettings
from gpuwaste.sources.k8s_objects import (
    DROPPED_ANNOTATIONS,
    SHARE_ANNOTATION_PREFIXES,
    SHARE_ANNOTATIONS,
    SHARE_LABELS,
    SHARE_RESOURCES,
    effective_requests,
    first_hop,
    is_gpu_resource,
    node_model,
    resolve_workload,
)

logger = logging.getLogger(__name__)

# -- names (KSM v2; v1 per-resource names where they differ) --------------------------------------------------
POD_INFO = "kube_pod_info"
POD_PHASE = "kube_pod_status_phase"
POD_OWNER = "kube_pod_owner"
POD_START = "kube_pod_start_time"
POD_COMPLETION = "kube_pod_completion_time"
POD_CREATED = "kube_pod_created"
POD_DELETION = "kube_pod_deletion_timestamp"
POD_LABELS = "kube_pod_labels"
POD_ANNOTATIONS = "kube_pod_annotations"
CONTAINER_INFO = "kube_pod_container_info"
#: A pod's DRA ResourceClaim references (KSM v2.20, PR #3005, experimental): `claim_name` (pod-local), `resourceclaim_name`
#: (the ResourceClaim object), `resourceclaim_template_name`; one series per `spec.resourceClaims` entry.
POD_RESOURCECLAIM = "kube_pod_resourceclaim_info"
REQUESTS = "kube_pod_container_resource_requests"
LIMITS = "kube_pod_container_resource_limits"
INIT_REQUESTS = "kube_pod_init_container_resource_requests"
INIT_LIMITS = "kube_pod_init_container_resource_limits"
V1_REQUESTS = "kube_pod_container_resource_requests_nvidia_gpu_devices"
V1_LIMITS = "kube_pod_container_resource_limits_nvidia_gpu_devices"
NODE_LABELS = "kube_node_labels"
NODE_INFO = "kube_node_info"
NODE_CAPACITY = "kube_node_status_capacity"
NODE_ALLOCATABLE = "kube_node_status_allocatable"
NODE_CREATED = "kube_node_created"
NODE_UNSCHEDULABLE = "kube_node_spec_unschedulable"
V1_NODE_CAPACITY = "kube_node_status_capacity_nvidia_gpu_cards"
V1_NODE_ALLOCATABLE = "kube_node_status_allocatable_nvidia_gpu_cards"
NS_LABELS = "kube_namespace_labels"
NS_ANNOTATIONS = "kube_namespace_annotations"
NS_CREATED = "kube_namespace_created"
RS_OWNER = "kube_replicaset_owner"
JOB_OWNER = "kube_job_owner"
#: controller kind → (its `_created` metric, the label naming the object)
CONTROLLER_CREATED: dict[str, tuple[str, str]] = {
    "ReplicaSet": ("kube_replicaset_created", "replicaset"),
    "Deployment": ("kube_deployment_created", "deployment"),
    "StatefulSet": ("kube_statefulset_created", "statefulset"),
    "DaemonSet": ("kube_daemonset_created", "daemonset"),
    "Job": ("kube_job_created", "job_name"),
    "CronJob": ("kube_cronjob_created", "cronjob"),
}
#: The resource a v1 per-resource metric stands for (the alpha accelerator resource, read as an NVIDIA GPU).
V1_GPU_RESOURCE = "nvidia.com/gpu"
V1_NAMES = (V1_REQUESTS, V1_LIMITS, V1_NODE_CAPACITY, V1_NODE_ALLOCATABLE)
POD_METRICS = (POD_INFO, POD_PHASE, POD_OWNER, POD_START, POD_COMPLETION, POD_CREATED, POD_DELETION, POD_LABELS,
               POD_ANNOTATIONS, CONTAINER_INFO, POD_RESOURCECLAIM)
RESOURCE_METRICS = (REQUESTS, LIMITS, INIT_REQUESTS, INIT_LIMITS, V1_REQUESTS, V1_LIMITS)
NODE_METRICS = (NODE_LABELS, NODE_INFO, NODE_CAPACITY, NODE_ALLOCATABLE, NODE_CREATED, NODE_UNSCHEDULABLE,
                V1_NODE_CAPACITY, V1_NODE_ALLOCATABLE)
OTHER_METRICS = (NS_LABELS, NS_ANNOTATIONS, NS_CREATED, RS_OWNER, JOB_OWNER, *(m for m, _ in CONTROLLER_CREATED.values()))
#: Every KSM metric this source reads.
KSM_METRICS: tuple[str, ...] = (*POD_METRICS, *RESOURCE_METRICS, *NODE_METRICS, *OTHER_METRICS)
_KSM_SET = frozenset(KSM_METRICS)

#: Label and annotation keys the scan reads; KSM sanitises them (`node.kubernetes.io/instance-type` →
#: `label_node_kubernetes_io_instance_type`) and they are mapped back. Unknown keys keep their sanitised form.
NODE_LABEL_KEYS = (
    "kubernetes.io/hostname", "node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type",
    "topology.kubernetes.io/region", "topology.kubernetes.io/zone", "karpenter.sh/capacity-type",
    "eks.amazonaws.com/capacityType", "node.kubernetes.io/capacity-type", "cloud.google.com/gke-spot",
    "cloud.google.com/gke-preemptible", "kubernetes.azure.com/scalesetpriority", "cloud.google.com/gke-accelerator",
    "cloud.google.com/gke-max-shared-clients-per-gpu", "nvidia.com/gpu.product", "nvidia.com/gpu.count",
    "nvidia.com/gpu.memory", "nvidia.com/gpu.replicas", "nvidia.com/gpu.machine", "nvidia.com/gpu.family",
    "nvidia.com/mig.strategy", "nvidia.com/mig.config", "nvidia.com/gpu.sharing-strategy", "nvidia.com/mig.capable",
)
#: Node labels whose absence costs the scan something (said in the notes).
NODE_LABELS_NEEDED = {
    "node.kubernetes.io/instance-type": "no instance type: GPUs cannot be priced",
    "karpenter.sh/capacity-type": "no capacity type: spot nodes are priced on demand",
    "nvidia.com/gpu.product": "no GFD product: MIG-single slices and GPU models are not known from the node",
    "nvidia.com/gpu.count": "no GFD GPU count: unmonitored GPUs are only counted from capacity",
    "nvidia.com/gpu.replicas": "no time-slicing replicas: shared GPUs count as whole GPUs",
}
POD_KEYS = (
    "pod-template-hash", "app", "app.kubernetes.io/name", "app.kubernetes.io/instance", "team",
    "gpuwaste.io/team", "gpuwaste.io/slack-channel", "gpuwaste.io/slack-user", "gpuwaste.io/jira-project",
    "gpuwaste.io/snooze-until", "gpuwaste.io/model-weights-mib", "notebooks.kubeflow.org/last-activity",
    "gpuwaste.io/reclaim",
    "batch.kubernetes.io/job-name", "job-name", "controller-uid",
    # GPU shares (issue 11): KAI/Run:ai fractions, group and reserved device (B28), HAMi's device grant (B27)
    "gpu-fraction", "gpu-memory", "gpu-fraction-num-devices", "runai-gpu-group", "run.ai/reserve_for_gpu_index",
    "hami.io/vgpu-devices-allocated",
)

#: The labels and annotations the scan reads, per kind: what KSM's allow-lists should export (`gpuwaste doctor`
#: prints them as Helm values; the fleet generator exports exactly these).
ALLOWLIST: dict[str, dict[str, tuple[str, ...]]] = {
    "labels": {
        "nodes": ("node.kubernetes.io/instance-type", "karpenter.sh/capacity-type", "eks.amazonaws.com/capacityType",
                  "topology.kubernetes.io/region", "topology.kubernetes.io/zone", "kubernetes.io/hostname",
                  "nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory", "nvidia.com/gpu.replicas",
                  "nvidia.com/mig.strategy", "cloud.google.com/gke-accelerator", "cloud.google.com/gke-spot"),
        "pods": ("pod-template-hash", "app", "app.kubernetes.io/name", "team", "gpuwaste.io/team",
                 "runai-gpu-group"),  # KAI/Run:ai: fractional pods and their reservation pod (B28)
        "namespaces": ("team",),
    },
    "annotations": {
        "pods": ("gpuwaste.io/team", "gpuwaste.io/slack-channel", "gpuwaste.io/slack-user", "gpuwaste.io/jira-project",
                 "gpuwaste.io/snooze-until", "notebooks.kubeflow.org/last-activity", "gpuwaste.io/model-weights-mib",
                 "gpuwaste.io/reclaim",
                 # GPU shares (issue 11): KAI/Run:ai fractions and reserved device (B28), HAMi's device grant (B27)
                 "gpu-fraction", "gpu-memory", "gpu-fraction-num-devices", "run.ai/reserve_for_gpu_index",
                 "hami.io/vgpu-devices-allocated"),
        "namespaces": ("gpuwaste.io/team", "gpuwaste.io/slack-channel", "gpuwaste.io/slack-user", "gpuwaste.io/jira-project",
                       "gpuwaste.io/reclaim"),
    },
}
KSM_COLLECTORS = ("pods", "nodes", "namespaces", "replicasets", "deployments", "statefulsets", "daemonsets", "jobs", "cronjobs")


def helm_values(kinds: Iterable[str] = ("labels", "annotations")) -> str:
    """The kube-state-metrics Helm chart values that export what the scan reads (`metricLabelsAllowlist`, ...)."""
    lines = ["# prometheus-community/kube-state-metrics chart values (under `kube-state-metrics:` in kube-prometheus-stack)"]
    for kind in kinds:
        key = "metricLabelsAllowlist" if kind == "labels" else "metricAnnotationsAllowlist"
        lines.append(f"{key}:")
        lines += [f"  - {res}=[{','.join(keys)}]" for res, keys in ALLOWLIST[kind].items()]
    lines.append(f"collectors: [{', '.join(KSM_COLLECTORS)}]")
    return "\n".join(lines)


_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_MIG = re.compile(r"^(?P<vendor>[a-z0-9_]+?)_mig_(?P<c>\d+c_)?(?P<g>\d+)g_(?P<m>\d+)gb(?P<rest>.*)$")
_STALE_FACTOR = 1.5


def sanitize(name: str) -> str:
    """KSM's `SanitizeLabelName`: every character outside `[a-zA-Z0-9_]` becomes `_` (`nvidia.com/gpu` → `nvidia_com_gpu`)."""
    return _INVALID.sub("_", name)


def _unsanitize_table(keys: Iterable[str]) -> dict[str, str]:
    return {sanitize(k): k for k in keys}


@functools.lru_cache(maxsize=1024)
def resource_name(sanitized: str, patterns: tuple[str, ...] = ()) -> str:
    """The Kubernetes resource name behind a sanitised KSM `resource` label.

    Exact configured names win (`k8s_amazonaws_com_vgpu` → `k8s.amazonaws.com/vgpu` when configured); MIG
    profiles keep their shape (`nvidia_com_mig_1g_10gb` → `nvidia.com/mig-1g.10gb`, `…_me` → `…+me`);
    otherwise the domain is rebuilt (`<domain>_com_<name>` → `<domain>.com/<name>`, other `_` → `.`).
    """
    if "_" not in sanitized or "/" in sanitized:
        return sanitized  # cpu, memory, pods — or already a real name
    for p in (*patterns, "nvidia.com/gpu", "nvidia.com/gpu.shared", "k8s.amazonaws.com/vgpu", "amd.com/gpu",
              "aws.amazon.com/neuron", "nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpumem-percentage"):
        if "*" not in p and sanitize(p) == sanitized:
            return p
    m = _MIG.match(sanitized)
    if m:
        vendor = m.group("vendor").replace("_com", ".com").replace("_", ".")
        rest = m.group("rest").replace("_me", "+me").replace("_", ".")
        compute = m.group("c").replace("_", ".") if m.group("c") else ""
        return f"{vendor}/mig-{compute}{m.group('g')}g.{m.group('m')}gb{rest}"
    for tld in ("_com_", "_io_", "_org_", "_net_", "_ai_"):
        head, sep, tail = sanitized.partition(tld)
        if sep:
            return f"{head.replace('_', '.')}{tld[:-1].replace('_', '.')}/{tail.replace('_', '.')}"
    return sanitized


def _is_gpu_resource(name: str, patterns: Sequence[str]) -> bool:
    """A configured GPU resource, or one the node parser keeps anyway (`node_from_dict`: NVIDIA and AWS vGPU names)."""
    return is_gpu_resource(name, patterns) or name.startswith(("nvidia.com/", "k8s.amazonaws.com/vgpu"))


def promql_resource_regex(patterns: Sequence[str]) -> str:
    """A PromQL regex matching the sanitised `resource` label of every GPU resource pattern (and any `nvidia_com_*`)."""
    parts = {".*".join(sanitize(piece) for piece in p.split("*")) for p in patterns}
    parts.add("nvidia_com_.*")
    return "|".join(sorted(parts))


class KsmSample(NamedTuple):
    """One KSM series as the builder needs it (a named tuple: a fleet has a hundred thousand of them).

    Attributes:
        name: metric name.
        labels: its labels (without `__name__`).
        value: the last value in the window.
        last_ms: when it was last seen, Unix ms; None when it is still exported at the evaluation time.
    """

    name: str
    labels: Mapping[str, str]
    value: float
    last_ms: int | None = None


@dataclass(slots=True)
class _PodFacts:
    uid: str = ""
    node: str = ""
    pod_ip: str = ""
    host_ip: str = ""
    phase: str = ""
    phase_ms: int = -1
    gone_ms: int | None = None
    seen: bool = False
    owners: list[dict[str, Any]] = field(default_factory=list)
    start: float | None = None
    completion: float | None = None
    created: float | None = None
    deletion: float | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    images: dict[str, str] = field(default_factory=dict)
    # (init?, container) → {"limits"|"requests": {resource: quantity}}
    resources: dict[tuple[bool, str], dict[str, dict[str, float]]] = field(default_factory=dict)
    has_gpu: bool = False
    claims: dict[str, PodClaimRef] = field(default_factory=dict)  # pod-local claim name → its reference (DRA)


@dataclass(slots=True)
class _NodeFacts:
    labels: dict[str, str] = field(default_factory=dict)
    capacity: dict[str, float] = field(default_factory=dict)
    allocatable: dict[str, float] = field(default_factory=dict)
    provider_id: str = ""
    internal_ip: str = ""
    created: float | None = None
    unschedulable: bool = False
    exported: bool = False  # a node series still exported at the evaluation time
    last_ms: int = 0  # the newest last sample of its series that are no longer exported

    def seen(self, last: int | None) -> None:
        """One of the node's own series (info, capacity, allocatable), last seen at `last` (None: still exported)."""
        if last is None:
            self.exported = True
        elif last > self.last_ms:
            self.last_ms = last


def _time(seconds: float | None) -> datetime | None:
    """A KSM timestamp value (Unix seconds) as a UTC time to the second, as the API gives it; None when unset (≤ 0)."""
    if seconds is None or seconds <= 0:
        return None
    return datetime.fromtimestamp(seconds, tz=UTC).replace(microsecond=0)


def _count(value: float, where: str) -> int:
    """A GPU quantity from a KSM value (the API's rule: a whole number of units; fractions truncated)."""
    if not math.isfinite(value):
        raise InputFormatError(f"{where}: GPU quantity must be an integer, got {value!r}")
    return int(value)


def _prefixed(labels: Mapping[str, str], prefix: str, table: Mapping[str, str]) -> dict[str, str]:
    n = len(prefix)
    return {table.get(k[n:], k[n:]): v for k, v in labels.items() if v != "" and k.startswith(prefix)}


def _owner(kind: str, name: str, controller: str) -> dict[str, Any] | None:
    if not kind or kind == "<none>" or not name or name == "<none>":
        return None
    group = "batch/v1" if kind in ("Job", "CronJob") else "apps/v1" if kind in CONTROLLER_CREATED else ""  # KSM has no group
    return {"apiVersion": group, "kind": kind, "name": name, "controller": controller == "true"}


_TIME_ATTR = {POD_START: "start", POD_COMPLETION: "completion", POD_CREATED: "created", POD_DELETION: "deletion"}
_INIT = frozenset((INIT_REQUESTS, INIT_LIMITS))
_LIMIT_NAMES = frozenset((LIMITS, INIT_LIMITS, V1_LIMITS))
_V1_POD = frozenset((V1_REQUESTS, V1_LIMITS))
_CREATED_BY_METRIC = {metric: (kind, key) for kind, (metric, key) in CONTROLLER_CREATED.items()}


class _Builder:
    """Gathers the facts of KSM samples per pod, node, namespace and controller, then builds the cluster model from
    them directly (`state`): the rules of `sources.k8s_objects` (effective requests, first-hop owners and their
    resolution, node labels → instance/capacity type and GFD facts) applied to the facts, no Kubernetes objects."""

    def __init__(self, settings: ClusterReadSettings, exporter: re.Pattern[str]) -> None:
        self.settings = settings
        self.exporter = exporter
        self.patterns = tuple(settings.gpu_resource_names)
        self.node_keys = _unsanitize_table((*NODE_LABEL_KEYS, *settings.capacity_type_labels))
        self.pod_keys = _unsanitize_table(POD_KEYS)
        self.pods: dict[tuple[str, ...], _PodFacts] = {}  # (namespace, pod), or (namespace, pod, uid) for an earlier uid
        self.nodes: dict[str, _NodeFacts] = {}
        self.namespaces: dict[str, tuple[dict[str, str], dict[str, str]]] = {}
        self.controllers: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        self.kinds_listed: set[str] = set()
        self.present: set[str] = set()  # metric names with at least one series
        self.keyed: dict[str, set[str]] = {POD_LABELS: set(), POD_ANNOTATIONS: set(), NODE_LABELS: set(),
                                           NS_LABELS: set(), NS_ANNOTATIONS: set()}
        self._resources: dict[str, str] = {}  # sanitised `resource` label → resource name ("" when not read)
        self.current_uids: dict[tuple[str, str], str] = {}  # (namespace, pod) → uid of the pod that exists now
        handlers: dict[str, Callable[[str, Mapping[str, str], float, int | None], None]] = {
            POD_INFO: self._pod_info, POD_PHASE: self._pod_phase, POD_OWNER: self._pod_owner,
            POD_LABELS: self._pod_keyed, POD_ANNOTATIONS: self._pod_keyed, CONTAINER_INFO: self._container_info,
            POD_RESOURCECLAIM: self._pod_claim,
            NODE_LABELS: self._node_labels, NODE_INFO: self._node_info, NODE_CREATED: self._node_created,
            NODE_UNSCHEDULABLE: self._node_unschedulable, NS_LABELS: self._namespace, NS_ANNOTATIONS: self._namespace,
            NS_CREATED: self._namespace, RS_OWNER: self._controller_owner, JOB_OWNER: self._controller_owner,
        }
        handlers.update(dict.fromkeys(RESOURCE_METRICS, self._pod_resource))
        handlers.update(dict.fromkeys(_TIME_ATTR, self._pod_time))
        handlers.update(dict.fromkeys((NODE_CAPACITY, NODE_ALLOCATABLE, V1_NODE_CAPACITY, V1_NODE_ALLOCATABLE), self._node_resource))
        handlers.update(dict.fromkeys(_CREATED_BY_METRIC, self._controller_created))
        self.handlers = handlers  # metric name → handler(name, labels, value, last_ms)

    # -- facts ------------------------------------------------------------------------------------------
    def add(self, s: KsmSample) -> None:
        """Take one sample's facts."""
        self.present.add(s.name)
        handler = self.handlers.get(s.name)
        if handler is not None:
            handler(*s)

    def pod(self, labels: Mapping[str, str]) -> _PodFacts | None:
        """The facts of the pod a series belongs to; None for a series without namespace and pod. An earlier pod of the
        same name (another uid than the pod's current one: a StatefulSet pod recreated in the window, maybe on another
        node) is a pod of its own, keyed by its uid too (issue 21 §4)."""
        ns, name = labels.get("namespace", ""), labels.get("pod", "")
        if not ns or not name:
            return None
        key: tuple[str, ...] = (ns, name)
        uid = labels.get("uid")
        if uid and self.current_uids.get((ns, name), uid) != uid:
            key = (ns, name, uid)
        facts = self.pods.get(key)
        if facts is None:
            facts = self.pods[key] = _PodFacts()
        if uid:
            facts.uid = uid
        return facts

    def node(self, name: str) -> _NodeFacts:
        facts = self.nodes.get(name)
        if facts is None:
            facts = self.nodes[name] = _NodeFacts()
        return facts

    def _resource(self, sanitized: str) -> str:
        """The resource a sanitised `resource` label stands for when it is read ("cpu" or a GPU resource), else ""."""
        known = self._resources.get(sanitized)
        if known is None:
            name = resource_name(sanitized, self.patterns)
            known = self._resources[sanitized] = name if name and (name == "cpu" or _is_gpu_resource(name, self.patterns)) else ""
        return known

    def _pod_resource(self, name: str, lab: Mapping[str, str], v: float, _last: int | None) -> None:
        facts = self.pod(lab)
        if facts is None:
            return
        init = name in _INIT
        section = "limits" if name in _LIMIT_NAMES else "requests"
        resource = V1_GPU_RESOURCE if name in _V1_POD else self._resource(lab.get("resource", ""))
        if not resource:
            return
        if resource == "cpu":
            if init or section != "limits":
                return
        else:
            facts.has_gpu = True
        facts.resources.setdefault((init, lab.get("container", "")), {}).setdefault(section, {})[resource] = v
        if not facts.node:
            facts.node = lab.get("node", "")

    def _pod_info(self, _name: str, lab: Mapping[str, str], _v: float, last: int | None) -> None:
        facts = self.pod(lab)
        if facts is None:
            return
        facts.seen = True
        facts.node = lab.get("node", "") or facts.node
        facts.pod_ip = lab.get("pod_ip", "")
        facts.host_ip = lab.get("host_ip", "")
        facts.gone_ms = last
        kind = lab.get("created_by_kind")
        if not facts.owners and kind and kind != "<none>":
            ref = _owner(kind, lab.get("created_by_name", ""), "true")
            if ref:
                facts.owners.append({**ref, "_from_info": True})

    def _pod_phase(self, _name: str, lab: Mapping[str, str], v: float, last: int | None) -> None:
        facts = self.pod(lab)
        if facts is None or v != 1:
            return
        when = last if last is not None else 1 << 62
        if when >= facts.phase_ms:
            facts.phase, facts.phase_ms = lab.get("phase", ""), when
        if facts.gone_ms is None and not facts.seen:
            facts.gone_ms = last

    def _pod_owner(self, _name: str, lab: Mapping[str, str], _v: float, _last: int | None) -> None:
        facts = self.pod(lab)
        if facts is None:
            return
        ref = _owner(lab.get("owner_kind", ""), lab.get("owner_name", ""), lab.get("owner_is_controller", ""))
        facts.owners = [o for o in facts.owners if not o.get("_from_info")]
        if ref and ref not in facts.owners:
            facts.owners.append(ref)

    def _pod_time(self, name: str, lab: Mapping[str, str], v: float, _last: int | None) -> None:
        facts = self.pod(lab)
        if facts is not None:
            setattr(facts, _TIME_ATTR[name], v)

    def _pod_keyed(self, name: str, lab: Mapping[str, str], _v: float, _last: int | None) -> None:
        facts = self.pod(lab)
        if facts is None:
            return
        kv = _prefixed(lab, "label_" if name == POD_LABELS else "annotation_", self.pod_keys)
        if kv:
            self.keyed[name].update(kv)
            (facts.labels if name == POD_LABELS else facts.annotations).update(kv)

    def _pod_claim(self, _name: str, lab: Mapping[str, str], _v: float, _last: int | None) -> None:
        facts = self.pod(lab)
        if facts is None or not lab.get("claim_name"):
            return
        facts.claims[lab["claim_name"]] = PodClaimRef(name=lab["claim_name"], claim_name=lab.get("resourceclaim_name") or None,
                                                      template=lab.get("resourceclaim_template_name") or None)

    def _container_info(self, _name: str, lab: Mapping[str, str], _v: float, _last: int | None) -> None:
        facts = self.pod(lab)
        if facts is not None and lab.get("container"):
            facts.images[lab["container"]] = lab.get("image_spec") or lab.get("image", "")

    def _node_resource(self, name: str, lab: Mapping[str, str], v: float, last: int | None) -> None:
        node = lab.get("node")
        if not node:
            return
        self.node(node).seen(last)
        if name in (V1_NODE_CAPACITY, V1_NODE_ALLOCATABLE):
            resource = V1_GPU_RESOURCE
        else:
            resource = self._resource(lab.get("resource", ""))
            if not resource or resource == "cpu":
                return
        facts = self.node(node)
        (facts.capacity if name in (NODE_CAPACITY, V1_NODE_CAPACITY) else facts.allocatable)[resource] = v

    def _node_labels(self, name: str, lab: Mapping[str, str], _v: float, _last: int | None) -> None:
        if lab.get("node"):
            kv = _prefixed(lab, "label_", self.node_keys)
            self.keyed[name].update(kv)
            self.node(lab["node"]).labels.update(kv)

    def _node_info(self, _name: str, lab: Mapping[str, str], _v: float, last: int | None) -> None:
        if lab.get("node"):
            facts = self.node(lab["node"])
            facts.seen(last)
            if lab.get("provider_id"):
                facts.provider_id = lab["provider_id"]
            if lab.get("internal_ip"):
                facts.internal_ip = lab["internal_ip"]

    def _node_created(self, _name: str, lab: Mapping[str, str], v: float, _last: int | None) -> None:
        if lab.get("node"):
            self.node(lab["node"]).created = v

    def _node_unschedulable(self, _name: str, lab: Mapping[str, str], v: float, _last: int | None) -> None:
        if lab.get("node") and v == 1:
            self.node(lab["node"]).unschedulable = True

    def _namespace(self, name: str, lab: Mapping[str, str], _v: float, _last: int | None) -> None:
        ns = lab.get("namespace")
        if not ns:
            return
        known = self.namespaces.get(ns)
        if known is None:
            known = self.namespaces[ns] = ({}, {})
        if name != NS_CREATED:
            kv = _prefixed(lab, "label_" if name == NS_LABELS else "annotation_", self.pod_keys)
            self.keyed[name].update(kv)
            known[0 if name == NS_LABELS else 1].update(kv)

    def _controller_owner(self, name: str, lab: Mapping[str, str], _v: float, _last: int | None) -> None:
        kind, key = ("ReplicaSet", "replicaset") if name == RS_OWNER else ("Job", "job_name")
        if lab.get("namespace") and lab.get(key):
            refs = self.controllers.setdefault((kind, lab["namespace"], lab[key]), [])
            ref = _owner(lab.get("owner_kind", ""), lab.get("owner_name", ""), lab.get("owner_is_controller", ""))
            if ref and ref not in refs:
                refs.append(ref)

    def _controller_created(self, name: str, lab: Mapping[str, str], _v: float, _last: int | None) -> None:
        kind, key = _CREATED_BY_METRIC[name]
        if lab.get("namespace") and lab.get(key):
            self.controllers.setdefault((kind, lab["namespace"], lab[key]), [])
            self.kinds_listed.add(kind)

    # -- the model --------------------------------------------------------------------------------------
    def state(self, *, cluster: str, observed_at: datetime, source: str, notes: bool) -> ClusterState:
        """The cluster model from the facts gathered.

        Raises:
            InputFormatError: a non-finite GPU quantity, or a phase Kubernetes does not have.
        """
        if self.settings.namespace:
            self.pods = {k: v for k, v in self.pods.items() if k[0] == self.settings.namespace}
        listed = self.listed_kinds()
        controllers = {f"{kind}/{ns}/{name}": {"metadata": {"ownerReferences": refs}} for (kind, ns, name), refs in self.controllers.items()}
        owners_of = (controllers, listed)
        pods: list[Pod] = []
        exporters: dict[str, str] = {}
        exporter_ips: dict[str, str] = {}
        for key, f in self.pods.items():
            ns, name = key[0], key[1]
            is_exporter = self.exporter.search(name) is not None
            asks_share = _asks_share(f)
            if is_exporter and f.node:  # an exporter pod: only its node and IP are read
                exporters[name] = f.node
                if f.pod_ip:
                    exporter_ips[f.pod_ip] = f.node
            if not f.has_gpu and not asks_share and not f.claims:
                continue
            pod = self._pod(ns, name, f, owners_of)
            if asks_share or f.claims or any(is_gpu_resource(r, self.patterns) or r in SHARE_RESOURCES
                                     for sections in f.resources.values() for section in sections.values() for r in section):
                pods.append(pod)
        used = {p.node_name for p in pods} | set(exporters.values())
        nodes = [n for n in (self._node(name, f) for name, f in self.nodes.items())
                 if n.capacity_gpu or n.allocatable_gpu or n.gpu_product or n.gpu_count_label or n.name in used]
        missing = tuple(self.notes(sum(1 for p in pods if p.gpu_requests))) if notes else ()
        return ClusterState(
            cluster=cluster,
            observed_at=observed_at,
            pods=tuple(pods),
            nodes=tuple(nodes),
            exporter_pods=exporters,
            exporter_pod_ips=exporter_ips,
            namespace_labels={ns: dict(labels) for ns, (labels, _) in self.namespaces.items()},
            namespace_annotations={ns: {k: v for k, v in ann.items() if k not in DROPPED_ANNOTATIONS} for ns, (_, ann) in self.namespaces.items()},
            workloads_known=frozenset(controllers),
            owner_kinds_listed=listed,
            source=source,
            notes=missing,
        )

    def _pod(self, ns: str, name: str, f: _PodFacts, owners_of: tuple[Mapping[str, Mapping[str, Any]], frozenset[str]]) -> Pod:
        where = f"Pod {ns}/{name}"
        try:
            phase = PodPhase(f.phase or "Unknown")
        except ValueError as exc:
            raise InputFormatError(f"{where}: unknown status.phase {f.phase!r}") from exc
        app = [c for (init, c) in f.resources if not init]
        app += [c for c in f.images if c not in app]
        inits = [c for (init, c) in f.resources if init]
        gpu_app: list[dict[str, int]] = []
        gpu_init: list[dict[str, int]] = []
        share_app: list[dict[str, int]] = []
        share_init: list[dict[str, int]] = []
        cpu_total: float | None = 0.0
        for init, names in ((False, app), (True, inits)):
            for i, c in enumerate(names):
                sections = f.resources.get((init, c), {})
                limits, requests = sections.get("limits", {}), sections.get("requests", {})
                at = f"{where}.spec.{'initContainers' if init else 'containers'}[{i}].resources"
                gpus: dict[str, int] = {}
                shares: dict[str, int] = {}
                for r in {*limits, *requests}:
                    raw = limits[r] if r in limits else requests[r]  # limits first
                    if is_gpu_resource(r, self.patterns):
                        gpus[r] = _count(raw, f"{at}[{r!r}]")
                    if r in SHARE_RESOURCES:
                        shares[r] = _count(raw, f"{at}[{r!r}]")
                (gpu_init if init else gpu_app).append(gpus)
                (share_init if init else share_app).append(shares)
                if not init and cpu_total is not None:
                    cpu = limits.get("cpu")
                    cpu_total = None if cpu is None else cpu_total + cpu
        owners = tuple(OwnerRef(api_version=o["apiVersion"], kind=o["kind"], name=o["name"], controller=o["controller"]) for o in f.owners)
        workload = resolve_workload(first_hop(owners, ns, name), f.labels, *owners_of)
        finished = _time(f.completion)
        gone_at = None if f.gone_ms is None else datetime.fromtimestamp(f.gone_ms / 1000, tz=UTC)
        return Pod(
            namespace=ns,
            name=name,
            uid=f.uid,
            phase=phase,
            node_name=f.node or None,
            labels=dict(f.labels),
            annotations={k: v for k, v in f.annotations.items() if k not in DROPPED_ANNOTATIONS},
            owner_refs=owners,
            workload=workload,
            gpu_requests=effective_requests(gpu_app, gpu_init),
            containers=tuple(app),
            container_images=tuple(f.images.get(c, "") for c in app),
            container_args=("",) * len(app),
            cpu_limit_cores=cpu_total or None,
            share_requests=effective_requests(share_app, share_init),
            created_at=_time(f.created),
            started_at=_time(f.start),
            finished_at=finished or gone_at,
            deletion_requested=_time(f.deletion) is not None,
            pod_ip=f.pod_ip or None,
            host_ip=f.host_ip or None,
            gone_at=gone_at,
            resource_claims=tuple(f.claims[k] for k in sorted(f.claims)),
        )

    def _node(self, name: str, f: _NodeFacts) -> Node:
        def counts(section: str, values: Mapping[str, float]) -> dict[str, int]:
            return {r: _count(v, f"Node {name}.status.{section}[{r!r}]") for r, v in values.items()}

        return node_model(name, dict(f.labels), self.settings, capacity_gpu=counts("capacity", f.capacity),
                          allocatable_gpu=counts("allocatable", f.allocatable), provider_id=f.provider_id or None,
                          internal_ips=(f.internal_ip,) if f.internal_ip else (), created_at=_time(f.created),
                          unschedulable=f.unschedulable,
                          gone_at=None if f.exported or not f.last_ms else datetime.fromtimestamp(f.last_ms / 1000, tz=UTC))

    def listed_kinds(self) -> frozenset[str]:
        """Controller kinds KSM exported completely: `_created` present; ReplicaSet/Job: their owner series present (KSM
        exports one per object, so the live read skips their `_created` series)."""
        listed = set(self.kinds_listed)
        for metric, kind in ((RS_OWNER, "ReplicaSet"), (JOB_OWNER, "Job")):  # one owner series per object (live reads skip `_created`)
            if metric in self.present:
                listed.add(kind)
            else:
                listed.discard(kind)
        return frozenset(listed)

    def notes(self, pods_kept: int) -> list[str]:
        """What the KSM series lack and what it costs (data-quality notes)."""
        out: list[str] = []
        if not pods_kept:
            return out
        if POD_INFO not in self.present:
            out.append("KSM: kube_pod_info is missing: no pod IPs (exporter pods cannot be joined by IP) and nodes "
                       "come only from the request series")
        if POD_PHASE not in self.present:
            out.append("KSM: kube_pod_status_phase is missing: every pod's phase is Unknown (taken as holding its GPUs)")
        owned = {o.get("kind") for f in self.pods.values() if f.has_gpu for o in f.owners}
        missing = [m for m, kind in ((RS_OWNER, "ReplicaSet"), (JOB_OWNER, "Job")) if kind in owned and m not in self.present]
        if missing:
            out.append(f"KSM: {' and '.join(missing)} missing (replicasets/jobs collectors off): Deployment and CronJob "
                       "owners are inferred from ReplicaSet/Job names (Workload.resolution=inferred)")
        if not self.keyed[NODE_LABELS]:
            out.append("KSM: kube_node_labels carries no node labels (metricLabelsAllowlist nodes=[...] not set): no "
                       "instance type (GPUs cannot be priced), capacity type or GFD labels; run `gpuwaste doctor` for the Helm values")
        else:
            for key, cost in NODE_LABELS_NEEDED.items():
                if key not in self.keyed[NODE_LABELS] and not (key == "karpenter.sh/capacity-type" and self.keyed[NODE_LABELS] & set(self.settings.capacity_type_labels)):
                    out.append(f"KSM: no node has the label {key} in kube_node_labels (not allow-listed, or not set): {cost}")
        if not self.keyed[POD_LABELS]:
            out.append("KSM: kube_pod_labels carries no pod labels (metricLabelsAllowlist pods=[...] not set, or no pod has "
                       "an allow-listed label): labels are "
                       "not shown on findings and Deployment owners are inferred from names only")
        if not self.keyed[POD_ANNOTATIONS] and not self.keyed[NS_ANNOTATIONS]:
            out.append("KSM: no pod or namespace annotations exported (metricAnnotationsAllowlist): routing annotations "
                       "(gpuwaste.io/team, slack-channel) and snoozes are not seen; findings go to the configured routes")
        return out


def _asks_share(f: _PodFacts) -> bool:
    """A pod that asks for a GPU share without a GPU request: KAI/Run:ai fraction or group (B28), HAMi grant (B27)."""
    return any(k in SHARE_ANNOTATIONS or k.startswith(SHARE_ANNOTATION_PREFIXES) for k in f.annotations) or any(
        k in SHARE_LABELS for k in f.labels)


def family_note(exported_series: int) -> str:
    """What a cluster-state source string adds when `exported_series` KSM series named their object by `exported_*`."""
    if not exported_series:
        return ""
    return (" (objects named by exported_namespace/exported_pod/exported_container: KSM scraped with honorLabels: false, "
            "its namespace/pod labels name the KSM pod)")


def cluster_state_from_ksm(
    samples: Iterable[KsmSample],
    *,
    cluster: str,
    observed_at: datetime,
    settings: ClusterReadSettings | None = None,
    source: str = "",
    notes: bool = True,
) -> ClusterState:
    """Build `ClusterState` from KSM series (the last value of each in the window); `notes`: say what is missing.

    Pods that request a GPU resource (any phase) and exporter pods are kept; a pod whose `kube_pod_info` was last
    seen before the evaluation time is gone: it keeps its last phase, `gone_at` and `finished_at` say when.

    Raises:
        InputFormatError: a series describes a malformed object (e.g. a non-integer GPU quantity).
    """
    settings = settings or ClusterReadSettings()
    b = _Builder(settings, re.compile(settings.exporter_pod_pattern))
    samples = samples if isinstance(samples, list) else list(samples)
    b.current_uids = _current_uids(samples)
    present, handlers = b.present, b.handlers
    for s in samples:
        present.add(s.name)
        handler = handlers.get(s.name)
        if handler is not None:
            handler(*s)
    return b.state(cluster=cluster, observed_at=observed_at, source=source, notes=notes)


def _current_uids(samples: Sequence[KsmSample]) -> dict[tuple[str, str], str]:
    """(namespace, pod) → the uid of the pod object that exists now (else the one seen last), from `kube_pod_info`."""
    best: dict[tuple[str, str], tuple[int, str]] = {}
    for s in samples:
        if s.name != POD_INFO or not s.labels.get("uid"):
            continue
        key = (s.labels.get("namespace", ""), s.labels.get("pod", ""))
        rank = (1 << 62) if s.last_ms is None else s.last_ms
        if key not in best or rank > best[key][0]:
            best[key] = (rank, s.labels["uid"])
    return {k: uid for k, (_, uid) in best.items()}


# -- recordings -------------------------------------------------------------------------------------------------
def is_ksm_metric(name: str) -> bool:
    """True for the KSM series this source reads."""
    return name in _KSM_SET


def samples_from_series(series: Iterable[Any], *, at: datetime, window: timedelta) -> list[KsmSample]:
    """The last sample of each recorded KSM series in `[at − window, at]` (`RecordedSeries`-like objects).

    A series whose last sample is older than the newest KSM sample by more than 1.5 of its own spacing was no
    longer exported: its `last_ms` says when it was last seen (a pod deleted mid-window).
    """
    at_ms = int(at.timestamp() * 1000)
    start_ms = at_ms - int(window.total_seconds() * 1000)
    picked: list[tuple[Any, int, float, int]] = []
    newest = None
    for s in series:
        if s.name not in _KSM_SET:
            continue
        ts = s.timestamps_ms
        j = _last_index_at_or_before(ts, at_ms)
        if j < 0 or ts[j] < start_ms:
            continue
        spacing = (ts[j] - ts[j - 1]) if j > 0 else 60_000
        picked.append((s, ts[j], s.values[j], spacing))
        newest = ts[j] if newest is None or ts[j] > newest else newest
    out = []
    for s, last, value, spacing in picked:
        gone = newest is not None and newest - last > _STALE_FACTOR * max(spacing, 1000)
        out.append(KsmSample(s.name, object_labels(s.labels)[0], value, last if gone else None))
    return out


def _last_index_at_or_before(ts: Sequence[int], at_ms: int) -> int:
    lo, hi = 0, len(ts)
    while lo < hi:
        mid = (lo + hi) // 2
        if ts[mid] <= at_ms:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


class KsmRecordingSource:
    """`ClusterStateSource` over the KSM series inside a recording (the same file or directory as the DCGM series).

    Args:
        path: a recording directory or a telemetry file.
        window: how far back pods are looked for (pods that finished or were deleted in the window are kept).
    """

    def __init__(self, path: Path, *, cluster: str | None = None, settings: ClusterReadSettings | None = None,
                 window: timedelta = timedelta(hours=1)) -> None:
        from gpuwaste.sources.recording import RecordingTelemetrySource  # noqa: PLC0415 - the telemetry file rules

        self._tel = RecordingTelemetrySource(path, cluster=cluster)
        self.path = Path(path)
        self.cluster = cluster or self._tel.cluster
        self.settings = settings or ClusterReadSettings()
        self.window = window
        self._series: list[Any] | None = None
        self._dated_ms: int | None = None  # the time given to samples without a timestamp when parsed (None: all dated)

    @property
    def cluster_file(self) -> Path:
        """The file the cluster state is read from (the telemetry file: the KSM series sit next to the DCGM ones)."""
        return self._tel.telemetry_file

    def series(self) -> list[Any]:
        """The KSM series of the telemetry file (parsed once).

        Raises:
            InputFormatError: the telemetry file is malformed.
        """
        if self._series is None:
            self._series = self._parse()
        return self._series

    def _parse(self, at: datetime | None = None) -> list[Any]:
        from gpuwaste.sources.exposition import parse_exposition  # noqa: PLC0415
        from gpuwaste.sources.limits import RecordingLimits, read_recording  # noqa: PLC0415
        from gpuwaste.sources.prom_api_json import looks_like_api_json, parse_api_json  # noqa: PLC0415

        f = self._tel.telemetry_file
        data = read_recording(f, RecordingLimits.from_env())  # the same size/NUL/line limits as the telemetry parse
        fmt = self._tel.fmt
        if fmt == "auto" and f.name.endswith((".om", ".om.gz")):
            fmt = "openmetrics"
        if fmt == "auto" and looks_like_api_json(data):  # a saved /api/v1/query(_range) answer
            return list(parse_api_json(data, source=str(f), metric_filter=is_ksm_metric).series.values())
        default_ms = int(self._tel._default_time(at).timestamp() * 1000)
        parsed = parse_exposition(data, fmt=fmt, source=str(f), default_timestamp_ms=default_ms, metric_filter=is_ksm_metric)
        self._dated_ms = default_ms if any(w.kind == "no_timestamp" for w in parsed.warnings) else None
        return list(parsed.series.values())

    def has_ksm(self) -> bool:
        """True when the recording holds KSM pod series (kube_pod_info or GPU request series)."""
        return any(s.name in (POD_INFO, *RESOURCE_METRICS) for s in self.series())

    def cluster_state(self, *, at: datetime) -> ClusterState:
        """The cluster as the recorded KSM series show it at `at` (history over `window`).

        Raises:
            InputFormatError: the telemetry file is malformed.
        """
        series = self.series()
        if self._dated_ms is not None and self._dated_ms != int(self._tel._default_time(at).timestamp() * 1000):
            # samples without a timestamp were dated before the evaluation time was known (the file's mtime): an undated
            # file is dated by `at` (--at), the KSM series as the DCGM ones (issue 21 §9)
            series = self._series = self._parse(at)
        samples = samples_from_series(series, at=at, window=self.window)
        exported = sum(1 for s in series if s.name in _KSM_SET and object_labels(s.labels)[1])
        return cluster_state_from_ksm(samples, cluster=self.cluster, observed_at=at, settings=self.settings,
                                      source=f"kube-state-metrics series in recording {self._tel.telemetry_file}{family_note(exported)}")


# -- live -------------------------------------------------------------------------------------------------------
class InstantQuery(Protocol):
    """What the live source needs from a Prometheus client (`PrometheusGpuMetricsSource.instant_query`)."""

    url: str
    matchers: dict[str, str]

    def instant_query(self, promql: str, *, at: datetime | None, what: str = "query") -> list[dict[str, Any]]:
        """Run one instant query at `at`."""
        ...


TAG = "ksm_metric"


def _sel(metric: str, matchers: Mapping[str, str], extra: str = "") -> str:
    inner = [f'{k}="{_esc(v)}"' for k, v in sorted(matchers.items())]
    if extra:
        inner.append(extra)
    return f"{metric}{{{','.join(inner)}}}"


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _tag(expr: str, metric: str) -> str:
    return f'label_replace({expr}, "{TAG}", "{metric}", "", "")'


#: Prefix Prometheus gives a series' own label that clashes with a target label (`honor_labels: false`, the default of a
#: ServiceMonitor without `honorLabels: true`, and of managed collectors): KSM's `namespace`/`pod`/`container` of the
#: object become `exported_namespace`/`exported_pod`/`exported_container`, while `namespace`/`pod` name the KSM pod.
EXPORTED_PREFIX = "exported_"
#: The label families of KSM's object identity: (namespace label, pod label) per family (as `sources.dcgm` for DCGM).
KSM_FAMILIES: dict[str, tuple[str, str]] = {"pod": ("namespace", "pod"), "exported_pod": ("exported_namespace", "exported_pod")}


def object_labels(labels: dict[str, str]) -> tuple[dict[str, str], bool]:
    """The object's own labels of a KSM series, and whether they came from the `exported_*` family.

    A series scraped with `honor_labels: false` carries the object's labels as `exported_<name>` and the scrape target's
    (the KSM pod's) under the plain names: every `exported_<name>` then replaces `<name>` (the KSM pod's namespace, pod
    and container are dropped, never read as the object's). Detected per series from the data, as for dcgm-exporter's
    `exported_pod` (`sources.dcgm.workload_labels`). A series without `exported_*` labels is returned as is (node series
    of such a scrape carry the KSM pod's `namespace`/`pod`, which node facts never read).
    """
    if not any(k.startswith(EXPORTED_PREFIX) for k in labels):
        return labels, False
    out = {k: v for k, v in labels.items() if not k.startswith(EXPORTED_PREFIX)}
    for k, v in labels.items():
        if k.startswith(EXPORTED_PREFIX) and v:
            out[k[len(EXPORTED_PREFIX):]] = v
    return out, True


def _gpu_series(settings: ClusterReadSettings, m: Mapping[str, str]) -> list[str]:
    res = f'resource=~"{promql_resource_regex(settings.gpu_resource_names)}"'
    return [_sel(n, m, res) for n in (REQUESTS, LIMITS, INIT_REQUESTS, INIT_LIMITS)] + [_sel(n, m) for n in (V1_REQUESTS, V1_LIMITS)]


def _pod_sets(w: str, settings: ClusterReadSettings, m: Mapping[str, str], by: str = "(namespace, pod)") -> tuple[str, str]:
    """(GPU pods, GPU pods or exporter pods) over the range `w`, as `group by <by>` expressions (exporter pods by `pod`
    or, where KSM was scraped with honor_labels: false, by `exported_pod`)."""
    gpu_pods = f"group by {by} (" + " or ".join(f"last_over_time({s}{w})" for s in _gpu_series(settings, m)) + ")"
    pattern = f'=~".*(?:{_esc(settings.exporter_pod_pattern)}).*"'
    exporter = f"last_over_time({_sel(POD_INFO, m, 'pod' + pattern)}{w})"
    if "exported_pod" in by:
        exporter += f" or last_over_time({_sel(POD_INFO, m, 'exported_pod' + pattern)}{w})"
    return gpu_pods, f"({gpu_pods} or group by {by} ({exporter}))"


#: Annotations/labels by which a pod asks for a GPU share without any GPU resource request (KAI/Run:ai fractions, B28).
SHARE_KEYS = (("annotations", "gpu-fraction"), ("annotations", "gpu-memory"), ("labels", "runai-gpu-group"))


def _share_pods(m: Mapping[str, str], by: str = "(namespace, pod)") -> str:
    """Pods that exist now and ask for a GPU share by annotation or label (no GPU request series to find them by)."""
    parts = [_sel(POD_ANNOTATIONS if kind == "annotations" else POD_LABELS, m,
                  f'{"annotation" if kind == "annotations" else "label"}_{sanitize(key)}!=""') for kind, key in SHARE_KEYS]
    return f"group by {by} (" + " or ".join(parts) + ")"


def _regex_literal(text: str) -> str:
    """`text` as an RE2 literal (pod names are DNS names: only `.` needs escaping, but any metacharacter is)."""
    return re.sub(r"([.\\+*?()|\[\]{}^$])", r"\\\1", text)


def _names(metrics: Iterable[str], m: Mapping[str, str]) -> str:
    """An instant selector of several metric names (instant selectors keep `__name__`: no tags needed)."""
    inner = [f'__name__=~"{"|".join(metrics)}"', *(f'{k}="{_esc(v)}"' for k, v in sorted(m.items()))]
    return "{" + ",".join(inner) + "}"


#: Pod metrics read at the evaluation time for pods that still exist (phase separately: only its current value).
_POD_NOW = tuple(n for n in POD_METRICS if n != POD_PHASE)
#: ... in two queries of about the same cost to Prometheus: identity, owner and times (with the phase, five series
#: per pod to read) ...
_POD_IDENTITY = (POD_INFO, POD_OWNER, POD_START, POD_COMPLETION, POD_DELETION)
#: ... and creation time, labels, annotations and containers (with the CPU limits).
_POD_DETAILS = tuple(n for n in _POD_NOW if n not in _POD_IDENTITY)
#: The GPU request series read over the window (the limits equal them for extended resources).
_REQUEST_METRICS = frozenset((REQUESTS, INIT_REQUESTS, V1_REQUESTS))
#: Gone pods per history query (a `pod=~` regex); more are read in further queries.
HISTORY_PODS_PER_QUERY = 500


def ksm_queries(*, window_s: int, settings: ClusterReadSettings, matchers: Mapping[str, str] | None = None,
                history_only: bool = False, family: str = "pod") -> dict[str, str]:
    """The live plan: six instant queries, whatever the pod count (plus `ksm_history_query` when pods ended);
    `history_only` (next to the Kubernetes API): three — GPU requests over the window, current phases, pods gone.

    Pods that exist at the evaluation time are read with instant selectors (one sample per series; the metric
    name kept), only for GPU pods (one join on namespace, pod; exporter pods: only `kube_pod_info`), in two queries of about the same
    cost that Prometheus evaluates and encodes in parallel (the pod series are most of the answer). GPU requests
    are read over the window (`last_over_time`), and so is the list of pods that were exported in the window but
    are gone now, with their sample counts (`pods gone`); their last state is read by `ksm_history_query`.
    `family`: the labels that name the object (`KSM_FAMILIES`): "exported_pod" where KSM was scraped with
    `honor_labels: false` (the pods are then joined and grouped by `exported_namespace`, `exported_pod`).
    """
    m = dict(matchers or {})
    w = f"[{int(window_s)}s]"
    ns_l, pod_l = KSM_FAMILIES[family]
    by = f"({ns_l}, {pod_l})"
    gpu = _gpu_series(settings, m)
    # the requests only: for extended resources (GPUs, GPU shares) Kubernetes refuses a request that differs from the
    # limit and defaults a missing request to the limit, so KSM exports both with one value; reading the limits
    # too would double the window read (`last_over_time` over every sample of the window)
    resources = " or ".join(_tag(f"last_over_time({s}{w})", n) for s, n in zip(gpu, RESOURCE_METRICS, strict=True)
                            if n in _REQUEST_METRICS)
    exporter = _sel(POD_INFO, m, f'{pod_l}=~".*(?:{_esc(settings.exporter_pod_pattern)}).*"')
    # pods that hold or ask for a GPU now: by their GPU request series (Kubernetes defaults an extended resource's
    # request to its limit, so KSM exports a request for every GPU limit: the limit series would only double the
    # join) or a share annotation/label
    gpu_now = f"group by {by} (" + " or ".join(s for s, n in zip(gpu, RESOURCE_METRICS, strict=True) if n in _REQUEST_METRICS) + ")"
    keep_now = f"({gpu_now} or {_share_pods(m, by)} or group by {by} ({_sel(POD_RESOURCECLAIM, m)}))"
    cpu = _sel(LIMITS, m, 'resource="cpu"')
    # exporter pods need only their node and IP (`kube_pod_info`), not the other pod series
    pods = f"(({_names(_POD_IDENTITY, m)} or {_sel(POD_PHASE, m)} == 1) and on {by} {keep_now}) or {exporter}"
    pod_details = f"({_names(_POD_DETAILS, m)} or {cpu}) and on {by} {keep_now}"
    gone = f"count_over_time({_sel(POD_INFO, m)}{w}) unless on {by} {_sel(POD_INFO, m)}"
    node_res = f'resource=~"{promql_resource_regex(settings.gpu_resource_names)}"'
    node_names = (NODE_LABELS, NODE_INFO, NODE_CREATED, NODE_UNSCHEDULABLE, V1_NODE_CAPACITY, V1_NODE_ALLOCATABLE)
    # one selector per label shape: set operators match series ignoring the metric name, so capacity and
    # allocatable (same labels) must come from one selector, not from `a or b`
    capacity = _names((NODE_CAPACITY, NODE_ALLOCATABLE), m).replace("}", f",{node_res}}}")
    nodes = f"{_names(node_names, m)} or {capacity}"
    # ReplicaSets and Jobs are known from their owner series (KSM exports one per object, `<none>` when unowned):
    # their `_created` series would say the same again
    owners = _names((NS_LABELS, NS_ANNOTATIONS, RS_OWNER, JOB_OWNER,
                     *(metric for kind, (metric, _) in CONTROLLER_CREATED.items() if kind not in ("ReplicaSet", "Job"))), m)
    if history_only:
        phases = f"{_sel(POD_PHASE, m)} == 1 and on {by} {gpu_now}"
        return {"resources": resources, "phases": phases, "pods gone": gone}
    return {"pods": pods, "pod labels and containers": pod_details, "resources": resources, "namespaces and owners": owners,
            "nodes": nodes, "pods gone": gone}


def ksm_history_query(pods: Sequence[str], *, window_s: int, matchers: Mapping[str, str] | None = None, family: str = "pod") -> str:
    """The last state in the window of pods that are gone now (tagged: range functions drop the metric name)."""
    m = dict(matchers or {})
    w = f"[{int(window_s)}s]"
    regex = KSM_FAMILIES[family][1] + '=~"' + _esc("|".join(_regex_literal(p) for p in sorted(set(pods)))) + '"'
    parts = [_tag(f"last_over_time({_sel(n, m, regex)}{w})", n) for n in _POD_NOW]
    parts.append(_tag(f"last_over_time({_sel(POD_PHASE, m, regex)}{w}) == 1", POD_PHASE))
    parts.append(_tag(f'last_over_time({_sel(LIMITS, m, regex + ",resource=" + chr(34) + "cpu" + chr(34))}{w})', LIMITS))
    return " or ".join(parts)


class PrometheusKsmSource:
    """`ClusterStateSource` over the KSM series of a live Prometheus (Prometheus, Thanos, Mimir, AMP).

    Args:
        prometheus: the telemetry source's client (`instant_query`, retries, auth, error translation reused).
        window: the scan window: pods seen in it are read with their last state.
        scrape_interval_s: KSM's scrape interval, used to place the end of a pod deleted in the window.
        concurrency: queries in flight at once.
        history_only: next to the Kubernetes API (`ApiWithKsmHistory`): read only what the API cannot give — GPU
            requests over the window, current phases, the pods gone in the window and their last state — in three
            queries (+ the history query); pods' metadata, nodes and owners come from the API.
    """

    def __init__(self, prometheus: InstantQuery, *, cluster: str, settings: ClusterReadSettings | None = None,
                 window: timedelta = timedelta(hours=1), scrape_interval_s: float = 30.0, concurrency: int = 4,
                 progress: Callable[[str], None] | None = None, history_only: bool = False) -> None:
        self.prometheus = prometheus
        self.cluster = cluster
        self.settings = settings or ClusterReadSettings()
        self.window = window
        self.scrape_interval_s = scrape_interval_s
        self.concurrency = concurrency
        self._progress = progress
        self.history_only = history_only
        self.query_count = 0

    @property
    def url(self) -> str:
        """The Prometheus base URL (credentials stripped)."""
        return self.prometheus.url

    #: The label family naming KSM's objects (`KSM_FAMILIES`), learnt from the data of the first read: "exported_pod" once
    #: a read's GPU request series carry `exported_pod` (KSM scraped with `honor_labels: false`).
    family = "pod"

    def queries(self) -> dict[str, str]:
        """The PromQL of one read (what → query)."""
        return ksm_queries(window_s=int(self.window.total_seconds()), settings=self.settings, matchers=self.prometheus.matchers,
                           history_only=self.history_only, family=self.family)

    @staticmethod
    def _key(item: Mapping[str, Any]) -> tuple[str, str]:
        labels, _ = object_labels(item.get("metric") or {})
        return labels.get("namespace", ""), labels.get("pod", "")

    def cluster_state(self, *, at: datetime) -> ClusterState:
        """Read the KSM series over the window ending at `at` and build the state.

        Raises:
            SourceUnavailableError, SourceAuthError, PermanentError: from the Prometheus client.
        """
        t0 = time.perf_counter()
        plan = self.queries()
        answers = self._run(list(plan.items()), at)
        asked = len(plan)
        named = dict(zip(plan, answers, strict=True))
        if self.family == "pod" and any(i.get("metric", {}).get("exported_pod") for i in named["resources"]):
            # KSM scraped with honor_labels: false: its pods are named by exported_namespace/exported_pod (the plain labels
            # name the KSM pod, so the joins by them grouped every pod into one): read again joined by the exported ones
            self.family = "exported_pod"
            plan = self.queries()
            named = dict(zip(plan, self._run(list(plan.items()), at), strict=True))
            asked += len(plan)
        gpu_pods = {self._key(i) for i in named["resources"]}
        exporter = re.compile(self.settings.exporter_pod_pattern)
        gone = {self._key(i): float(i["value"][1]) for i in named["pods gone"]}
        gone = {k: v for k, v in gone.items() if k in gpu_pods or exporter.search(k[1])}
        window_s = int(self.window.total_seconds())
        names = sorted({p for _, p in gone})
        history = [(f"kube-state-metrics history {i // HISTORY_PODS_PER_QUERY + 1}",
                    ksm_history_query(names[i:i + HISTORY_PODS_PER_QUERY], window_s=window_s, matchers=self.prometheus.matchers,
                                      family=self.family))
                   for i in range(0, len(names), HISTORY_PODS_PER_QUERY)]
        past = self._run(history, at) if history else []
        self.query_count = asked + len(history)
        current = [named.get(k, []) for k in ("resources", "pods", "pod labels and containers", "phases", "nodes", "namespaces and owners")]
        self.exported_series = 0
        samples = self.samples([*current, *past], gone=gone, at=at)
        state = cluster_state_from_ksm(samples, cluster=self.cluster, observed_at=at, settings=self.settings,
                                       source=f"kube-state-metrics at {self.url}{family_note(self.exported_series)}",
                                       notes=not self.history_only)
        state = state.model_copy(update={"query_count": self.query_count})
        logger.info("kube-state-metrics cluster state read", extra={"cluster": self.cluster, "queries": self.query_count,
                                                                    "pods": len(state.pods), "seconds": round(time.perf_counter() - t0, 3)})
        return state

    def _run(self, jobs: list[tuple[str, str]], at: datetime) -> list[list[dict[str, Any]]]:
        if len(jobs) <= 1 or self.concurrency <= 1:
            return [self.prometheus.instant_query(q, at=at, what=f"kube-state-metrics {w}") for w, q in jobs]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(jobs)), thread_name_prefix="ksm") as pool:
            return list(pool.map(lambda job: self.prometheus.instant_query(job[1], at=at, what=f"kube-state-metrics {job[0]}"), jobs))

    exported_series = 0  # series of the last read whose object was named by `exported_*` labels (`object_labels`)

    def samples(self, answers: Iterable[list[dict[str, Any]]], *, gone: Mapping[tuple[str, str], float] | None = None,
                at: datetime) -> list[KsmSample]:
        """Decode answers (instant series carry `__name__`, range results a tag); pods in `gone` ((namespace, pod) →
        samples in the window) get a last-seen time estimated from their sample count and creation time."""
        gone = gone or {}
        window_ms = int(self.window.total_seconds() * 1000)
        at_ms = int(at.timestamp() * 1000)
        out: list[KsmSample] = []
        for result in answers:
            for item in result:
                labels = item.get("metric") or {}  # the decoded answer is ours: its label dicts are consumed here
                metric = labels.pop(TAG, "") or labels.pop("__name__", "")
                labels.pop("__name__", None)
                labels, exported = object_labels(labels)
                self.exported_series += exported
                out.append(KsmSample(metric, labels, float(item["value"][1])))
        if not gone:
            return out
        created: dict[tuple[str, str], float] = {}
        for s in out:
            if s.name in (POD_CREATED, POD_START):
                key = (s.labels.get("namespace", ""), s.labels.get("pod", ""))
                created[key] = max(created.get(key, 0.0), s.value)
        step_ms = int(self.scrape_interval_s * 1000)
        for i, s in enumerate(out):
            key = (s.labels.get("namespace", ""), s.labels.get("pod", ""))
            if key in gone and (s.name in POD_METRICS or s.name in RESOURCE_METRICS):
                first = max(at_ms - window_ms, int(created.get(key, 0.0) * 1000))
                out[i] = KsmSample(s.name, s.labels, s.value, min(at_ms, first + int(max(gone[key] - 1, 0)) * step_ms))
        return out

    def raw_series(self, *, at: datetime, range_s: int, chunk_s: int = 3600, pods_per_query: int = 100,
                   progress: Callable[[str], None] | None = None) -> list[Any]:
        """The raw KSM samples in `[at − range_s, at]`, for `gpuwaste record` (so a recording needs no cluster JSON).

        Node, namespace and controller series are fetched whole; pod series only for GPU pods and exporter pods
        (found first with one instant query), `pods_per_query` pods per query, in chunks of `chunk_s`.

        Raises:
            SourceUnavailableError, SourceAuthError, PermanentError: from the Prometheus client.
        """
        from gpuwaste.sources.raw_samples import SeriesSamples, add_matrix, chunk_ends, recorded  # noqa: PLC0415

        m = dict(self.prometheus.matchers)
        # grouped by both label families: a KSM scraped with honor_labels: false names its pods by exported_namespace/
        # exported_pod (its namespace/pod are the KSM pod's), and their series are then selected by those labels
        _, keep = _pod_sets(f"[{int(range_s)}s]", self.settings, m, "(namespace, pod, exported_namespace, exported_pod)")
        pods = set()
        for item in self.prometheus.instant_query(keep, at=at, what="kube-state-metrics pods"):
            lab = item.get("metric") or {}
            family = "exported_pod" if lab.get("exported_pod") else "pod"
            ns_l, pod_l = KSM_FAMILIES[family]
            pods.add((family, lab.get(ns_l, ""), lab.get(pod_l, "")))
        selectors = ["{" + ",".join([f'__name__=~"{"|".join((*NODE_METRICS, *OTHER_METRICS))}"', *(f'{k}="{_esc(v)}"' for k, v in sorted(m.items()))]) + "}"]
        by_ns: dict[tuple[str, str], list[str]] = {}
        for family, ns, pod in sorted(pods):
            by_ns.setdefault((family, ns), []).append(pod)
        names = "|".join((*POD_METRICS, *RESOURCE_METRICS))
        for (family, ns), members in sorted(by_ns.items()):
            ns_l, pod_l = KSM_FAMILIES[family]
            for i in range(0, len(members), pods_per_query):
                regex = "|".join(_regex_literal(p) for p in members[i:i + pods_per_query])
                inner = [f'__name__=~"{names}"', f'{ns_l}="{_esc(ns)}"', f'{pod_l}=~"{_esc(regex)}"',
                         *(f'{k}="{_esc(v)}"' for k, v in sorted(m.items()))]
                selectors.append("{" + ",".join(inner) + "}")
        series: SeriesSamples = {}
        ends = chunk_ends(at, range_s, chunk_s)
        total, done = len(selectors) * len(ends), 0
        for sel in selectors:
            for chunk_end, step in ends:
                result = self.prometheus.instant_query(f"{sel}[{step}s]", at=chunk_end, what="kube-state-metrics samples")
                done += 1
                if progress:
                    progress(f"[{done}/{total}] kube-state-metrics: {len(result)} series")
                add_matrix(series, result)
        return recorded(series)


# -- the API now, KSM for the window's history ------------------------------------------------------------------
class ApiWithKsmHistory:
    """`ClusterStateSource`: the Kubernetes API for what exists now, KSM for what happened in the window.

    The API's pods, nodes and owners win. From KSM come the pods the API no longer lists (finished and deleted in
    the window: their GPUs were held until `finished_at`/`gone_at`), start/finish times the API lacks, and the
    nodes the API no longer lists. Where both know a pod and disagree (node, phase, GPU requests), or one knows a
    holding pod the other does not, a data-quality note says so. KSM failing costs the history, not the scan.
    """

    def __init__(self, api: Any | None, ksm: Any, *, max_listed: int = 5, api_optional: bool = False, api_error: str = "") -> None:
        """
        Args:
            api: the Kubernetes source; None when it could not be built (`api_error` says why).
            api_optional: when the API cannot be read (unreachable, credentials refused, no kubeconfig), use KSM
                alone and say so in a note, instead of failing the scan ("auto" mode).
        """
        self.api = api
        self.ksm = ksm
        self.max_listed = max_listed
        self.api_optional = api_optional
        self.api_error = api_error

    def cluster_state(self, *, at: datetime) -> ClusterState:
        """Read both and merge them.

        Raises:
            SourceUnavailableError, SourceAuthError, PermanentError, InputFormatError: from the API read (unless
                `api_optional`), or from KSM when the API is not there.
        """
        from gpuwaste.errors import GpuWasteError  # noqa: PLC0415

        error = self.api_error
        now: ClusterState | None = None
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ksm-history") as pool:
            later = pool.submit(self.ksm.cluster_state, at=at)  # both reads wait on the network: overlap them
            if self.api is not None:
                try:
                    now = self.api.cluster_state(at=at)
                except GpuWasteError as exc:
                    if not self.api_optional:
                        later.cancel()
                        raise
                    error = str(exc)
            if now is None:
                state: ClusterState = later.result()
                note = f"Kubernetes API not used ({error}): cluster state from kube-state-metrics only"
                return state.model_copy(update={"notes": (note, *state.notes)})
            try:
                history: ClusterState = later.result()
            except GpuWasteError as exc:
                note = f"kube-state-metrics history unavailable ({exc}); pods that ended in the window are not seen"
                return now.model_copy(update={"notes": (*now.notes, note)})
        return merge_states(now, history, max_listed=self.max_listed)


def merge_states(now: ClusterState, history: ClusterState, *, max_listed: int = 5) -> ClusterState:
    """Merge an API read (`now`) with a KSM read over the window (`history`); see `ApiWithKsmHistory`."""
    by_key = {p.key: p for p in history.pods}
    pods = []
    disagree: list[str] = []
    for p in now.pods:
        k = by_key.pop(p.key, None)
        if k is None:
            if p.holds_gpus and history.pods:
                disagree.append(f"{p.namespace}/{p.name} holds GPUs per the API but has no KSM series")
            pods.append(p)
            continue
        fill = {f: getattr(k, f) for f in ("started_at", "finished_at", "created_at") if getattr(p, f) is None and getattr(k, f) is not None}
        pods.append(p.model_copy(update=fill) if fill else p)
        what = []
        if (p.node_name or "") != (k.node_name or ""):
            what.append(f"node {p.node_name or 'none'} (API) vs {k.node_name or 'none'} (KSM)")
        if p.phase != k.phase and k.gone_at is None:
            what.append(f"phase {p.phase.value} (API) vs {k.phase.value} (KSM)")
        if p.gpu_requests != k.gpu_requests:
            what.append(f"GPU requests {p.gpu_requests} (API) vs {k.gpu_requests} (KSM)")
        if what:
            disagree.append(f"{p.namespace}/{p.name}: " + ", ".join(what))
    ended = []
    for k in by_key.values():
        if k.gone_at is not None or not k.holds_gpus:
            ended.append(k)  # finished or deleted in the window: history the API cannot give
        else:
            disagree.append(f"{k.namespace}/{k.name} holds GPUs per KSM but the API does not list it")
    nodes = list(now.nodes)
    known = {n.name for n in now.nodes}
    extra_nodes = [n for n in history.nodes if n.name not in known]
    notes = list(now.notes)
    if disagree:
        shown = "; ".join(disagree[:max_listed]) + (f"; and {len(disagree) - max_listed} more" if len(disagree) > max_listed else "")
        notes.append(f"Kubernetes API and kube-state-metrics disagree on {len(disagree)} pod(s) (the API is used): {shown}")
    if extra_nodes:
        notes.append(f"{len(extra_nodes)} node(s) seen by kube-state-metrics in the window are gone from the API: "
                     + ", ".join(sorted(n.name for n in extra_nodes)[:max_listed]))
    return now.model_copy(update={
        "pods": tuple(pods + ended),
        "nodes": tuple(nodes + extra_nodes),
        "exporter_pods": {**history.exporter_pods, **now.exporter_pods},
        "exporter_pod_ips": {**history.exporter_pod_ips, **now.exporter_pod_ips},
        "source": f"{now.source} (now) + {history.source} (history over the window)",
        "notes": tuple(notes),
        "query_count": now.query_count + history.query_count,
    })


__all__ = [
    "ALLOWLIST", "KSM_METRICS", "ApiWithKsmHistory", "KsmRecordingSource", "KsmSample", "PrometheusKsmSource",
    "cluster_state_from_ksm", "helm_values", "is_ksm_metric", "ksm_history_query", "ksm_queries", "merge_states",
    "promql_resource_regex", "resource_name", "samples_from_series", "sanitize",
]

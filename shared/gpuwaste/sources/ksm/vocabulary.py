"""KSM vocabulary.

The series names this adapter reads, the label/annotation allowlist and Helm values, and KSM's sanitised label names
mapped back to Kubernetes resource names.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence

from gpuwaste.sources.k8s_objects import (
    is_gpu_resource,
)

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

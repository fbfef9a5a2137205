"""`gpuwaste doctor`'s kube-state-metrics diagnosis: can a Prometheus-only scan read the cluster state?

The KSM series and the allow-listed label/annotation keys the cluster state reads (`gpuwaste.sources.ksm`), what
is lost without each, and the kube-state-metrics Helm values that export them. `diagnose_ksm` is pure;
`probe_ksm` asks the Prometheus.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource

#: KSM series the cluster state reads → what is lost without them ("" for series whose absence can be normal).
KSM_SERIES: dict[str, str] = {
    "kube_pod_info": "no pod nodes or IPs: exporter pods cannot be joined by IP",
    "kube_pod_status_phase": "no phases: finished pods count as holding their GPUs",
    "kube_pod_container_resource_limits": ("no GPU requests (nor the v1 …_nvidia_gpu_devices): without the Kubernetes "
                                           "API no GPU is tied to a pod"),
    "kube_pod_container_resource_requests": "",  # the limits carry GPU requests (extended resources: request = limit)
    "kube_pod_owner": "no owners: findings name pods, not their Deployment/Job",
    "kube_pod_start_time": "no start times: a pod's age (young pods are not judged) is unknown",
    "kube_pod_completion_time": "",
    "kube_pod_labels": "no pod labels",
    "kube_pod_annotations": "no pod annotations: routing annotations and snoozes are not seen",
    "kube_pod_container_info": "no container images: serving engines are not recognised by image",
    "kube_replicaset_owner": "ReplicaSet → Deployment inferred from names (collector `replicasets` off)",
    "kube_job_owner": "Job → CronJob inferred from names (collector `jobs` off, or no Jobs exist)",
    "kube_node_labels": "no node labels: instance type (pricing), capacity type, GFD labels unknown",
    "kube_node_status_allocatable": "no node GPU allocatable: unallocated GPUs counted from DCGM only",
    "kube_node_status_capacity": "",
    "kube_node_info": "no provider IDs or internal IPs: exporters naming an instance id are not placed",
    "kube_namespace_labels": "",
    "kube_namespace_annotations": "no namespace annotations: team routing by namespace annotation is off",
}
#: KSM v1 per-resource names that stand in for the v2 ones.
KSM_V1_ALIASES: dict[str, str] = {
    "kube_pod_container_resource_limits": "kube_pod_container_resource_limits_nvidia_gpu_devices",
    "kube_pod_container_resource_requests": "kube_pod_container_resource_requests_nvidia_gpu_devices",
    "kube_node_status_allocatable": "kube_node_status_allocatable_nvidia_gpu_cards",
    "kube_node_status_capacity": "kube_node_status_capacity_nvidia_gpu_cards",
}


@dataclass
class KsmStatus:
    """What kube-state-metrics exports of what the cluster state reads."""

    series: dict[str, int]
    missing: dict[str, str]
    keys: dict[str, int]
    missing_keys: list[str]
    helm_values: str

    @property
    def usable(self) -> bool:
        """Whether a Prometheus-only scan can tie GPUs to pods (pods, phases and GPU requests exported)."""
        return all(self.series.get(n, 0) > 0 for n in ("kube_pod_info", "kube_pod_status_phase")) and (
            self.series.get("kube_pod_container_resource_limits", 0)
            + self.series.get("kube_pod_container_resource_requests", 0) > 0)


def ksm_key_checks() -> dict[str, str]:
    """"<kind> <resource> <key>" → PromQL counting the series that carry that allow-listed label or annotation."""
    from gpuwaste.sources.ksm import ALLOWLIST, sanitize

    metric = {"nodes": "kube_node_labels", "pods": "kube_pod_labels", "namespaces": "kube_namespace_labels"}
    out = {}
    for kind, per_resource in ALLOWLIST.items():
        prefix = "label_" if kind == "labels" else "annotation_"
        for resource, keys in per_resource.items():
            name = metric[resource] if kind == "labels" else metric[resource].replace("_labels", "_annotations")
            for key in keys:
                out[f"{kind} {resource} {key}"] = f'count({name}{{{prefix}{sanitize(key)}!=""}})'
    return out


def diagnose_ksm(series: dict[str, int], keys: dict[str, int]) -> KsmStatus:
    """Series counts and allow-listed key counts → what is missing, what it costs, and the Helm values (pure)."""
    from gpuwaste.sources.ksm import helm_values

    merged = {n: series.get(n, 0) + series.get(KSM_V1_ALIASES.get(n, ""), 0) for n in KSM_SERIES}
    missing = {n: cost for n, cost in KSM_SERIES.items() if cost and merged[n] == 0}
    missing_keys = sorted(k for k, c in keys.items() if c == 0)
    kinds = [kind for kind in ("labels", "annotations") if any(k.startswith(kind + " ") for k in missing_keys)]
    return KsmStatus(merged, missing, dict(keys), missing_keys, helm_values(kinds) if (kinds or missing) else "")


def probe_ksm(source: PrometheusGpuMetricsSource, when: datetime | None) -> KsmStatus:
    """Probe a Prometheus for the KSM series and allow-listed keys.

    Raises:
        GpuWasteError: from the Prometheus client.
    """
    series = source.probe([*KSM_SERIES, *KSM_V1_ALIASES.values()], at=when)
    keys: dict[str, int] = {}
    for key, query in ksm_key_checks().items():
        result = source.instant_query(query, at=when, what="doctor kube-state-metrics")
        keys[key] = int(float(result[0]["value"][1])) if result else 0
    return diagnose_ksm(series, keys)

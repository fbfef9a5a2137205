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

The package, by concern: `vocabulary` (the series names, the allowlist, sanitised names), `facts` and `state`
(series → `ClusterState`), `recording` (the KSM series of a recording), `queries` (the live PromQL), `live`
(`PrometheusKsmSource`) and `merge` (the API now + KSM history). The names other modules use are re-exported here.
"""

from gpuwaste.sources.ksm.facts import KsmSample
from gpuwaste.sources.ksm.live import PrometheusKsmSource
from gpuwaste.sources.ksm.merge import ApiWithKsmHistory, merge_states
from gpuwaste.sources.ksm.queries import ksm_history_query, ksm_queries
from gpuwaste.sources.ksm.recording import KsmRecordingSource, is_ksm_metric, samples_from_series
from gpuwaste.sources.ksm.state import cluster_state_from_ksm
from gpuwaste.sources.ksm.vocabulary import (
    ALLOWLIST,
    CONTROLLER_CREATED,
    KSM_METRICS,
    POD_KEYS,
    helm_values,
    promql_resource_regex,
    resource_name,
    sanitize,
)

__all__ = [
    "ALLOWLIST", "CONTROLLER_CREATED", "KSM_METRICS", "POD_KEYS", "ApiWithKsmHistory", "KsmRecordingSource",
    "KsmSample", "PrometheusKsmSource", "cluster_state_from_ksm", "helm_values", "is_ksm_metric", "ksm_history_query",
    "ksm_queries", "merge_states", "promql_resource_regex", "resource_name", "samples_from_series", "sanitize",
]

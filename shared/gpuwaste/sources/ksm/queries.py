"""The live KSM queries.

The PromQL (one fixed handful per scan, the history in batches of pods) that reads the KSM series of a live
Prometheus.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from gpuwaste.models.settings import ClusterReadSettings
from gpuwaste.sources.ksm.vocabulary import (
    CONTROLLER_CREATED,
    INIT_LIMITS,
    INIT_REQUESTS,
    JOB_OWNER,
    LIMITS,
    NODE_ALLOCATABLE,
    NODE_CAPACITY,
    NODE_CREATED,
    NODE_INFO,
    NODE_LABELS,
    NODE_UNSCHEDULABLE,
    NS_ANNOTATIONS,
    NS_LABELS,
    POD_ANNOTATIONS,
    POD_COMPLETION,
    POD_DELETION,
    POD_INFO,
    POD_LABELS,
    POD_METRICS,
    POD_OWNER,
    POD_PHASE,
    POD_RESOURCECLAIM,
    POD_START,
    REQUESTS,
    RESOURCE_METRICS,
    RS_OWNER,
    V1_LIMITS,
    V1_NODE_ALLOCATABLE,
    V1_NODE_CAPACITY,
    V1_REQUESTS,
    promql_resource_regex,
    sanitize,
)


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


def _names(metrics: Iterable[str], m: Mapping[str, str], extra: str = "") -> str:
    """An instant selector of several metric names (instant selectors keep `__name__`: no tags needed)."""
    inner = [f'__name__=~"{"|".join(metrics)}"', *(f'{k}="{_esc(v)}"' for k, v in sorted(m.items()))]
    if extra:
        inner.append(extra)
    return "{" + ",".join(inner) + "}"


#: The longest node regex a shard's KSM read sends (bytes); past it the shard reads the cluster state whole.
MAX_NODE_REGEX_BYTES = 64 * 1024


def node_regex(nodes: Iterable[str]) -> str:
    """The RE2 alternation of a shard's node names (each a literal), for `ksm_queries(nodes=…)`.

    Raises:
        ValueError: no node, an empty name, or a regex longer than `MAX_NODE_REGEX_BYTES`.
    """
    names = sorted(set(nodes))
    if not names or any(not n for n in names):
        raise ValueError("a shard's node matcher needs at least one node, none empty")
    regex = "|".join(_regex_literal(n) for n in names)
    if len(regex.encode()) > MAX_NODE_REGEX_BYTES:
        raise ValueError(f"{len(names)} nodes make a {len(regex.encode())}-byte regex, over {MAX_NODE_REGEX_BYTES}")
    return regex


def _scope(w: str, m: Mapping[str, str], by: str, nodes: str, *, first: bool) -> str:
    """The pods a shard reads, as a `group by <by>` expression: those `kube_pod_info` puts on its `nodes` in the window,
    and those on no node now (Pending: every shard needs them, they tell free capacity apart); the `first` shard also
    reads the pods that were on no node at any time of the window (gone before they were scheduled), once."""
    on_nodes = f"group by {by} (last_over_time({_sel(POD_INFO, m, f'node=~{chr(34)}{_esc(nodes)}{chr(34)}')}{w}))"
    unscheduled = _sel(POD_INFO, m, 'node=""')
    pending = f"group by {by} (last_over_time({unscheduled}{w}))" if first else f"group by {by} ({unscheduled})"
    return f"({on_nodes} or {pending})"


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
                history_only: bool = False, family: str = "pod", nodes: str | None = None,
                first_shard: bool = True) -> dict[str, str]:
    """The live plan: six instant queries, whatever the pod count (plus `ksm_history_query` when pods ended);
    `history_only` (next to the Kubernetes API): three — GPU requests over the window, current phases, pods gone.

    Pods that exist at the evaluation time are read with instant selectors (one sample per series; the metric
    name kept), only for GPU pods (one join on namespace, pod; exporter pods: only `kube_pod_info`), in two queries of about the same
    cost that Prometheus evaluates and encodes in parallel (the pod series are most of the answer). GPU requests
    are read over the window (`last_over_time`), and so is the list of pods that were exported in the window but
    are gone now, with their sample counts (`pods gone`); their last state is read by `ksm_history_query`.
    `family`: the labels that name the object (`KSM_FAMILIES`): "exported_pod" where KSM was scraped with
    `honor_labels: false` (the pods are then joined and grouped by `exported_namespace`, `exported_pod`).

    `nodes` (`node_regex`): a scan shard's read — node series (`kube_node_*`) with `node=~"…"`, and every pod series
    joined on the pods `kube_pod_info` places on those nodes in the window, plus the pods on no node now (every
    shard) and, for the `first_shard`, those on no node in the window (`_scope`); namespaces and owners whole.
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
    nodes_q = f"{_names(node_names, m)} or {capacity}"
    # ReplicaSets and Jobs are known from their owner series (KSM exports one per object, `<none>` when unowned):
    # their `_created` series would say the same again
    owners = _names((NS_LABELS, NS_ANNOTATIONS, RS_OWNER, JOB_OWNER,
                     *(metric for kind, (metric, _) in CONTROLLER_CREATED.items() if kind not in ("ReplicaSet", "Job"))), m)
    if nodes is not None:  # a shard's read
        scope = _scope(w, m, by, nodes, first=first_shard)
        resources = f"({resources}) and on {by} {scope}"
        exporter = _sel(POD_INFO, m, f'{pod_l}=~".*(?:{_esc(settings.exporter_pod_pattern)}).*",node=~"{_esc(nodes)}"')
        pods = f"(((({_names(_POD_IDENTITY, m)} or {_sel(POD_PHASE, m)} == 1) and on {by} {keep_now}) and on {by} {scope}) or {exporter})"
        pod_details = f"(({pod_details}) and on {by} {scope})"
        gone = f"({gone}) and on {by} {scope}"
        on_nodes = f'node=~"{_esc(nodes)}"'
        capacity = _names((NODE_CAPACITY, NODE_ALLOCATABLE), m, on_nodes).replace("}", f",{node_res}}}")
        nodes_q = f"{_names(node_names, m, on_nodes)} or {capacity}"
    if history_only:
        phases = f"{_sel(POD_PHASE, m)} == 1 and on {by} {gpu_now}"
        return {"resources": resources, "phases": phases, "pods gone": gone}
    return {"pods": pods, "pod labels and containers": pod_details, "resources": resources, "namespaces and owners": owners,
            "nodes": nodes_q, "pods gone": gone}


def ksm_planning_queries(*, window_s: int, settings: ClusterReadSettings, matchers: Mapping[str, str] | None = None,
                         family: str = "pod") -> dict[str, str]:
    """What a sharded scan reads whole to plan its shards (`services.shards.plan_shards`): every input the plan and
    the node index use, and nothing else — the GPU requests over the window (which pods hold GPUs), nodes, owners,
    and of the GPU, share, claim and exporter pods of the window their last `kube_pod_info` (node, owner, IP),
    `kube_pod_owner` and labels (a workload is resolved from them exactly as in the full read), and the share
    annotations (`SHARE_KEYS`) of the pods that carry one. The pods' containers, CPU limits, other annotations, phases
    and times, and the history of gone pods, are left to each shard's own read (`ksm_queries(nodes=…)`), which uses
    the nodes and owners answers as they are (`live.REUSED`)."""
    full = ksm_queries(window_s=window_s, settings=settings, matchers=matchers, family=family)
    m = dict(matchers or {})
    w = f"[{int(window_s)}s]"
    ns_l, pod_l = KSM_FAMILIES[family]
    by = f"({ns_l}, {pod_l})"
    _, gpu_or_exporter = _pod_sets(w, settings, m, by)
    keep = f"({gpu_or_exporter} or {_share_pods(m, by)} or group by {by} ({_sel(POD_RESOURCECLAIM, m)}))"
    parts = " or ".join(_tag(f"last_over_time({_sel(n, m)}{w})", n) for n in (POD_INFO, POD_OWNER, POD_LABELS, POD_RESOURCECLAIM))
    # annotations only of the pods that ask for a GPU share by one (the plan keeps them; no other annotation counts)
    for kind, key in SHARE_KEYS:
        if kind == "annotations":
            share = _sel(POD_ANNOTATIONS, m, f'annotation_{sanitize(key)}!=""')
            parts += " or " + _tag(f"last_over_time({share}{w})", POD_ANNOTATIONS)
    return {"resources": full["resources"], "planning pods": f"({parts}) and on {by} {keep}", "nodes": full["nodes"],
            "namespaces and owners": full["namespaces and owners"]}


def ksm_history_query(pods: Sequence[str], *, window_s: int, matchers: Mapping[str, str] | None = None, family: str = "pod") -> str:
    """The last state in the window of pods that are gone now (tagged: range functions drop the metric name)."""
    m = dict(matchers or {})
    w = f"[{int(window_s)}s]"
    regex = KSM_FAMILIES[family][1] + '=~"' + _esc("|".join(_regex_literal(p) for p in sorted(set(pods)))) + '"'
    parts = [_tag(f"last_over_time({_sel(n, m, regex)}{w})", n) for n in _POD_NOW]
    parts.append(_tag(f"last_over_time({_sel(POD_PHASE, m, regex)}{w}) == 1", POD_PHASE))
    parts.append(_tag(f'last_over_time({_sel(LIMITS, m, regex + ",resource=" + chr(34) + "cpu" + chr(34))}{w})', LIMITS))
    return " or ".join(parts)

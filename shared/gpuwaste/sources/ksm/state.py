"""KSM series → `ClusterState`.

The facts of the series gathered per pod, node, namespace and controller, and the cluster model built from them with
the rules of `sources.k8s_objects`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

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
from gpuwaste.sources.ksm.facts import KsmSample, _count, _NodeFacts, _owner, _PodFacts, _prefixed, _time
from gpuwaste.sources.ksm.vocabulary import (
    CONTAINER_INFO,
    CONTROLLER_CREATED,
    INIT_LIMITS,
    INIT_REQUESTS,
    JOB_OWNER,
    LIMITS,
    NODE_ALLOCATABLE,
    NODE_CAPACITY,
    NODE_CREATED,
    NODE_INFO,
    NODE_LABEL_KEYS,
    NODE_LABELS,
    NODE_LABELS_NEEDED,
    NODE_UNSCHEDULABLE,
    NS_ANNOTATIONS,
    NS_CREATED,
    NS_LABELS,
    POD_ANNOTATIONS,
    POD_COMPLETION,
    POD_CREATED,
    POD_DELETION,
    POD_INFO,
    POD_KEYS,
    POD_LABELS,
    POD_OWNER,
    POD_PHASE,
    POD_RESOURCECLAIM,
    POD_START,
    RESOURCE_METRICS,
    RS_OWNER,
    V1_GPU_RESOURCE,
    V1_LIMITS,
    V1_NODE_ALLOCATABLE,
    V1_NODE_CAPACITY,
    V1_REQUESTS,
    _is_gpu_resource,
    _unsanitize_table,
    resource_name,
)

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

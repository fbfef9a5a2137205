"""The live KSM source: `PrometheusKsmSource`.

The cluster state from the KSM series of a live Prometheus (Prometheus, Thanos, Mimir, AMP).
"""

from __future__ import annotations

import copy
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from gpuwaste.models.cluster import ClusterState
from gpuwaste.models.settings import ClusterReadSettings
from gpuwaste.sources.ksm.facts import KsmSample
from gpuwaste.sources.ksm.queries import (
    HISTORY_PODS_PER_QUERY,
    KSM_FAMILIES,
    TAG,
    InstantQuery,
    _esc,
    _pod_sets,
    _regex_literal,
    ksm_history_query,
    ksm_planning_queries,
    ksm_queries,
    node_regex,
    object_labels,
)
from gpuwaste.sources.ksm.state import cluster_state_from_ksm, family_note
from gpuwaste.sources.ksm.vocabulary import (
    NODE_METRICS,
    OTHER_METRICS,
    POD_CREATED,
    POD_METRICS,
    POD_START,
    RESOURCE_METRICS,
)

# the package's logger (one name for the whole KSM adapter, as before the split)
logger = logging.getLogger("gpuwaste.sources.ksm")
#: The planning read's answers a shard's read uses as they are (the whole cluster's, as in a whole read).
REUSED = ("nodes", "namespaces and owners")


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
        #: a scan shard's read (`for_nodes`): the regex of its nodes, and whether it is the first shard
        self.nodes: str | None = None
        self.first_shard = True
        #: answers of the planning read that hold for a shard's read too (nodes, owners: the same series at the same
        #: time), handed to the copies `for_nodes` makes so that a shard does not ask for them twice
        self._planned: dict[str, list[dict[str, Any]]] = {}

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
                           history_only=self.history_only, family=self.family, nodes=self.nodes,
                           first_shard=self.first_shard)

    def for_nodes(self, nodes: Sequence[str], *, first: bool) -> PrometheusKsmSource:
        """A copy of this source that reads only what a scan shard of `nodes` needs (`ksm_queries(nodes=…)`): the
        node series of those nodes, the pods `kube_pod_info` places on them in the window, the pods on no node now and,
        when `first` (shard 0), the pods on no node in the window.

        Raises:
            ValueError: no node, or too many for one matcher (`queries.MAX_NODE_REGEX_BYTES`): the caller reads whole.
        """
        narrowed = copy.copy(self)
        narrowed.nodes = node_regex(nodes)
        narrowed.first_shard = first
        narrowed._planned = self._planned
        return narrowed

    def planning_state(self, *, at: datetime) -> ClusterState:
        """The cluster state a sharded scan plans its shards from (`ksm_planning_queries`: nodes, owners, and the GPU
        and exporter pods' node, owner, labels and annotations), read whole; every shard of a scan reads the same.

        Raises:
            SourceUnavailableError, SourceAuthError, PermanentError: from the Prometheus client.
        """
        window_s = int(self.window.total_seconds())

        def read() -> dict[str, list[dict[str, Any]]]:
            plan = ksm_planning_queries(window_s=window_s, settings=self.settings, matchers=self.prometheus.matchers,
                                        family=self.family)
            return dict(zip(plan, self._run(list(plan.items()), at), strict=True))

        named = read()
        if self.family == "pod" and any(i.get("metric", {}).get("exported_pod") for i in named["resources"]):
            self.family = "exported_pod"  # as `cluster_state`: KSM scraped with honor_labels: false
            named = read()
        # kept undecoded for the shard's own read (`samples` consumes the label dicts it decodes)
        self._planned = {k: copy.deepcopy(named[k]) for k in REUSED}
        samples = self.samples(named.values(), at=at)
        return cluster_state_from_ksm(samples, cluster=self.cluster, observed_at=at, settings=self.settings,
                                      source=f"kube-state-metrics at {self.url} (shard plan)", notes=False)

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
        reused = {k: copy.deepcopy(self._planned[k]) for k in REUSED if self.nodes is not None and k in self._planned and k in plan}
        asking = [(k, q) for k, q in plan.items() if k not in reused]
        named = {**dict(zip((k for k, _ in asking), self._run(asking, at), strict=True)), **reused}
        asked = len(asking)
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

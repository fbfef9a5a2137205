"""The Prometheus telemetry source.

`PrometheusGpuMetricsSource`, the window summaries of the plan's metrics from a Prometheus HTTP API (Prometheus,
Thanos, Mimir, AMP).
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import requests
import urllib3
from prometheus_api_client import PrometheusConnect

from gpuwaste.errors import (
    PermanentError,
    SourceAnswerError,
)
from gpuwaste.models.settings import PrometheusSettings, TelemetryLabels
from gpuwaste.models.telemetry import (
    MAX_WINDOW_S,
    MIN_WINDOW_S,
    BucketGrid,
    TelemetryWindow,
    WindowStats,
)
from gpuwaste.sources.exposition import RecordedSeries
from gpuwaste.sources.metrics_plan import (
    DROPPED_LABELS,
    PLAN,
    MetricSpec,
    SeriesSummary,
    assemble,
    clean_labels,
    droppable_labels,
    neutral_stats,
    rate_stats,
)
from gpuwaste.sources.prometheus.auth import safe_url
from gpuwaste.sources.prometheus.client import QueryResult, _HttpStatusError, make_client, parse_duration_s
from gpuwaste.sources.prometheus.queries import PrometheusQueries
from gpuwaste.sources.prometheus.readers import _ItemReader, _RecordedReader, _Router, _StatFeed
from gpuwaste.sources.promql import (
    COUNT_REFERENCE,
    METRIC_LABEL,
    READABLE_RULES_VERSIONS,
    RULE_INTERVAL_S,
    RULES_VERSION,
    STAT_LABEL,
    OneOf,
    PlannedQuery,
    dcgm_fields_query,
    dcgm_presence_query,
    raw_samples_query,
    rules_probe_query,
    scan_queries,
    series_count_query,
)
from gpuwaste.sources.window import bucket_problem

# the package's logger (one name for the whole Prometheus adapter, as before the split)
logger = logging.getLogger("gpuwaste.sources.prometheus")


class PrometheusGpuMetricsSource(PrometheusQueries):
    """Telemetry port over a Prometheus HTTP API (Prometheus, Thanos, Mimir, AMP).

    Args:
        client: a configured `PrometheusConnect` (its own urllib3 retries must be off: retries live here).
        url: the base URL (for messages; credentials are stripped).
        labels: label-name settings for the DCGM series.
        matchers: extra `label="value"` matchers added to every selector (e.g. `cluster` on a shared
            Prometheus); values are escaped.
        timeout_s: per-request timeout. max_retries: retries after the first attempt on transient errors.
        backoff_s: base of the exponential backoff between retries (seconds).
        max_series: refuse a result with more distinct series than this.
        concurrency: queries in flight at once.
        use_rules: "auto" reads the shipped recording rules' buckets when they cover the window,
            "never" always queries the raw series.
    """

    def __init__(
        self,
        client: PrometheusConnect,
        *,
        url: str,
        cluster: str,
        labels: TelemetryLabels | None = None,
        scrape_interval_s: float = 30.0,
        matchers: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 2,
        backoff_s: float = 0.25,
        max_series: int = 500_000,
        concurrency: int = 4,
        plan: Sequence[MetricSpec] = PLAN,
        use_rules: str = "auto",
    ) -> None:
        self.client = client
        self.url = safe_url(url)
        self.cluster = cluster
        self.labels = labels or TelemetryLabels()
        self.scrape_interval_s = scrape_interval_s
        self.matchers = dict(matchers or {})
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_series = max_series
        self.concurrency = concurrency
        self.plan = tuple(plan)
        self.use_rules = use_rules
        self.node_matchers: dict[str, str] = {}

    def for_hostnames(self, values: Sequence[str]) -> PrometheusGpuMetricsSource:
        """A copy of this source whose GPU queries read only series whose host label is one of `values` (a scan
        shard's nodes: `services.shards.hostnames`): `<label>=~"v1|v2|…|"` on each of `labels.hostname_labels`
        (the empty alternative lets a series carrying the other spelling through: `promql.OneOf`).

        Raises:
            ValueError: no values, or too many for one matcher (`sources.promql.MAX_ONE_OF_BYTES`).
        """
        narrowed = copy.copy(self)
        one = OneOf(values, or_absent=True)
        narrowed.node_matchers = dict.fromkeys(self.labels.hostname_labels, one)
        return narrowed

    @classmethod
    def from_settings(
        cls,
        settings: PrometheusSettings,
        *,
        cluster: str,
        labels: TelemetryLabels | None = None,
        scrape_interval_s: float = 30.0,
        matchers: Mapping[str, str] | None = None,
        backoff_s: float = 0.25,
    ) -> PrometheusGpuMetricsSource:
        """Build the source from validated settings (no I/O).

        Raises:
            ConfigError: when the auth settings are incomplete.
        """
        client = make_client(settings)
        return cls(
            client,
            url=settings.url,
            cluster=cluster,
            labels=labels,
            scrape_interval_s=scrape_interval_s,
            matchers=matchers,
            timeout_s=settings.timeout_s,
            max_retries=settings.max_retries,
            backoff_s=backoff_s,
            max_series=settings.max_series,
            concurrency=settings.concurrency,
        )


    # -- the port -------------------------------------------------------------------------------------
    def telemetry(self, *, at: datetime, window: timedelta) -> TelemetryWindow:
        """Window summaries of every plan metric over `(at − window, at]`, evaluated at `at`, time-resolved where the plan says.

        Raises:
            SourceUnavailableError, SourceAuthError, PermanentError: see `instant_query`; PermanentError
            also when a metric returns more than `max_series` series, and when the window is outside
            10 minutes – 7 days or reaches beyond Prometheus's retention.
        """
        window_s = int(window.total_seconds())
        if not MIN_WINDOW_S <= window_s <= MAX_WINDOW_S:
            raise PermanentError(f"window {window_s} s: a scan window must be between 10 minutes and 7 days")
        self._check_retention(at, window_s)
        grid = BucketGrid(at, window_s)
        drop = droppable_labels(self.labels)
        t0 = time.perf_counter()
        rules = self.rules_cover(at=at, window_s=window_s, drop=drop, bucket_s=grid.bucket_s)
        queries = scan_queries(window_s=window_s, matchers=self.matchers, plan=self.plan, drop=drop, bucket_s=grid.bucket_s, rules=rules,
                               node_matchers=self.node_matchers)
        self._labels_cache = {}
        self._keys_cache = {}
        jobs = {str(i): q for i, q in enumerate(queries)}
        # each answer is summarised as soon as it arrives, so only the answers in flight are held decoded
        per_query = self._run_planned(list(jobs.items()), at, grid)
        summaries: list[SeriesSummary] = [s for part in per_query for s in part]
        self._labels_cache = None
        self._keys_cache = None
        # the instant and recorded answers come with the dropped labels aggregated away; the raw time-resolved reads are merged
        # over them while they are read (`_ItemReader`)
        parts = assemble(summaries, self.labels, drop=False, grid=grid)
        other_gpus, other_hosts, other_fields, asked = self._other_gpus(at, window_s, {g.device.uuid for g in parts.gpus})
        count = len(queries) + (1 if self._probed else 0) + asked
        logger.info(
            "prometheus telemetry read",
            extra={"cluster": self.cluster, "queries": count, "plan": "recording rules" if rules else "raw", "gpus": len(parts.gpus),
                   "seconds": round(time.perf_counter() - t0, 3)},
        )
        return TelemetryWindow(
            cluster=self.cluster,
            eval_time=at,
            window_s=window_s,
            recent_s=min(grid.recent_s, window_s),
            scrape_interval_s=parts.spacing_s or self.scrape_interval_s,
            scrape_interval_inferred=parts.spacing_s is not None,
            gpus=parts.gpus,
            pods=parts.pods,
            metrics_present=parts.metrics_present | other_fields,
            query_count=count,
            source=f"prometheus {self.url}",
            single_instant=parts.single_instant,
            bucket_s=grid.bucket_s,
            problems=parts.problems,
            plan="recording rules" if rules else "raw",
            other_gpus=other_gpus,
            other_gpu_hosts=other_hosts,
        )

    _probed = False

    def _other_gpus(self, at: datetime, window_s: int, seen: set[str]
                    ) -> tuple[tuple[str, ...], dict[str, str], frozenset[str], int]:
        """GPUs on DCGM series in the window that the plan's answers did not show (only unread fields: clocks,
        temperatures), as the recording path counts them (`TelemetryWindow.other_gpus`, issue 21 §9): one presence
        query (one row per GPU), and only when such GPUs exist a second for the DCGM field names present.

        Returns:
            (their UUIDs sorted, UUID → the exporter's hostname label where the series carry one, the DCGM field names
            present — canonical upper-case — when they exist, queries asked).

        Raises:
            SourceUnavailableError, SourceAuthError, PermanentError: see `instant_query`; PermanentError also when the
            presence answer holds more than `max_series` GPUs.
        """
        uuid_labels = self.labels.uuid_labels
        matchers = {**(self.matchers or {}), **self.node_matchers}  # a shard asks for its own nodes' GPUs only
        host_labels = self.labels.hostname_labels
        result = self.instant_query(dcgm_presence_query(uuid_labels, window_s=window_s, matchers=matchers,
                                                        host_labels=host_labels), at=at, what="DCGM presence")
        if len(result) > self.max_series:
            raise SourceAnswerError(f"Prometheus at {self.url}: DCGM presence has more than max_series={self.max_series} GPUs")
        hosts: dict[str, str] = {}
        for item in result:
            labels = item["metric"]
            uuid = next((v for k in uuid_labels if (v := labels.get(k))), None)
            if uuid:
                host = next((v for k in host_labels if (v := labels.get(k))), "")
                if host or uuid not in hosts:
                    hosts[uuid] = host
        other = tuple(sorted(set(hosts) - seen))
        if not other:
            return (), {}, frozenset(), 1
        fields = self.instant_query(dcgm_fields_query(window_s=window_s, matchers=matchers), at=at, what="DCGM fields")
        names = {str(item["metric"].get(METRIC_LABEL, "")) for item in fields}
        where = {u: hosts[u] for u in other if hosts[u]}
        return other, where, frozenset(n.upper() if n.startswith("dcgm_fi_") else n for n in names if n), 2

    def rules_cover(self, *, at: datetime, window_s: int, drop: Sequence[str] | None = None, bucket_s: int | None = None) -> bool:
        """True when the shipped recording rules ran over the whole window and can serve its buckets.

        They can when: the source may use them (`use_rules`), the dropped labels are the rules' own
        (a custom label setting needs a label the rules aggregate away), the bucket width is a multiple of
        the rules' 5 minutes, the plan reads the count reference field (`promql.COUNT_REFERENCE`), and the
        marker of a readable rules version (`promql.READABLE_RULES_VERSIONS`: the current one or version 1, whose
        full counts read the same) was evaluated once per 5 minutes of the whole window (one probe query). Rule evaluation runs at its own offset δ < 5 min from the scan's grid, so each
        bucket read from the rules covers `(end − B − δ, end − δ]`: never outside the window, the last δ
        before the evaluation time unread.
        """
        self._probed = False
        if self.use_rules == "never":
            return False
        if tuple(drop if drop is not None else droppable_labels(self.labels)) != DROPPED_LABELS:
            return False
        if bucket_s is not None and bucket_s % RULE_INTERVAL_S:
            return False
        if not any(s.name == COUNT_REFERENCE and s.scope == "gpu" and s.summary == "buckets" for s in self.plan):
            return False  # the fields' shared count comes with the reference field's read
        self._probed = True
        result = self.instant_query(rules_probe_query(window_s=window_s), at=at, what="recording rules probe")
        # every readable version counts: a window may span an upgrade of the rules (each version's buckets are read alike)
        evaluations = sum(float(r["value"][1]) for r in result if r.get("metric", {}).get("version") in READABLE_RULES_VERSIONS)
        return evaluations >= window_s // RULE_INTERVAL_S

    def rules_status(self, *, at: datetime | None = None) -> dict[str, Any]:
        """Whether the shipped recording rules are installed and running (for `gpuwaste doctor`).

        Returns:
            {"installed": bool, "version": str | None, "current_version": str, "outdated": bool, "evaluations_last_hour": int,
            "expected_last_hour": int} read from the rules' marker series over the last hour before `at` (None: now):
            installed when a version scans read ran (`promql.READABLE_RULES_VERSIONS`), outdated when that is not the
            current one (scans still read it, at a larger read).

        Raises:
            SourceUnavailableError, SourceAuthError, PermanentError: see `instant_query`.
        """
        result = self.instant_query(rules_probe_query(window_s=3600), at=at, what="recording rules probe")
        best = max(result, key=lambda r: float(r["value"][1]), default=None)
        evaluations = int(float(best["value"][1])) if best else 0
        version = best.get("metric", {}).get("version") if best else None
        installed = evaluations > 0 and version in READABLE_RULES_VERSIONS
        return {"installed": installed, "version": version, "current_version": RULES_VERSION,
                "outdated": installed and version != RULES_VERSION, "evaluations_last_hour": evaluations,
                "expected_last_hour": 3600 // RULE_INTERVAL_S}

    def _check_retention(self, at: datetime, window_s: int) -> None:
        """Refuse a window that starts before Prometheus's retention (where `/api/v1/status/flags` answers; AMP does not)."""
        start = at - timedelta(seconds=window_s)
        age_s = (datetime.now(tz=UTC) - start).total_seconds()
        if age_s < 86400:
            return  # every retention setting keeps a day
        try:
            session = self.client._session
            response = session.request(method="GET", url=f"{self.client.url}/api/v1/status/flags", verify=session.verify,
                                       headers=self.client.headers, auth=self.client.auth, timeout=self.timeout_s)
            flags = response.json().get("data", {})
        except (_HttpStatusError, requests.RequestException, urllib3.exceptions.HTTPError, ValueError, AttributeError):
            return  # not every Prometheus-compatible API has it (AMP, Mimir): no check then
        retention = parse_duration_s(str(flags.get("storage.tsdb.retention.time") or flags.get("storage.tsdb.retention") or ""))
        if retention and age_s > retention:
            raise PermanentError(
                f"the window starts {start:%Y-%m-%d %H:%M} UTC, {age_s / 86400:.1f} days ago, beyond what Prometheus at {self.url} "
                f"keeps (storage.tsdb.retention.time = {retention / 86400:g} days): scan a shorter window or a later time"
            )

    def _run_planned(self, jobs: Sequence[tuple[str, PlannedQuery]], at: datetime, grid: BucketGrid) -> list[list[SeriesSummary]]:
        """Send the plan's queries (`concurrency` at a time) and summarise each answer as it arrives.

        The three single-statistic range queries of one field feed one shared `_ItemReader` (summarised once
        all three are in); a query reading several plan entries (`PlannedQuery.group`) is split by `METRIC_LABEL`.
        """
        start = at - timedelta(seconds=grid.window_s - grid.bucket_s)
        shared: dict[str, _ItemReader] = {}
        # a recorded field is resolved and summarised once its own answer and the count reference's are in
        # (`_RecordedReader.resolve`): the reference is sent first and the other recorded fields last, after the instant
        # queries, so that they seldom wait for it holding their buckets
        jobs = sorted(jobs, key=lambda job: 0 if job[1].spec.name == COUNT_REFERENCE else 2 if job[1].kind == "recorded" else 1)
        pending: list[_RecordedReader] = []
        reference: list[_RecordedReader] = []
        expects_reference = any(q.kind == "recorded" and q.spec.name == COUNT_REFERENCE for _, q in jobs)
        lock = threading.Lock()

        def finish(reader: _RecordedReader) -> list[SeriesSummary]:
            with lock:
                if reader.reference:
                    reference.append(reader)
                    ready = [reader, *pending]
                    pending.clear()
                elif expects_reference and not reference:
                    pending.append(reader)
                    return []
                else:
                    ready = [reader]
            out: list[SeriesSummary] = []
            for r in ready:
                r.resolve(reference[0] if reference else None)
                out.extend(r.summaries())
                if r.reference:  # the others need its counts only
                    r.groups = {k: [rows[0]] for k, rows in r.groups.items()}
            return out

        drop = droppable_labels(self.labels)
        for _, q in jobs:
            if q.kind == "range" and q.stat is not None and q.spec.name not in shared:
                shared[q.spec.name] = _ItemReader(self, q.spec, grid, recorded=False, drop=drop)

        def one(q: PlannedQuery) -> list[SeriesSummary]:
            what = q.spec.name if not q.group else "pod metrics"
            if q.kind == "range":
                params = {"query": q.promql, "start": f"{start.timestamp():.3f}", "end": f"{at.timestamp():.3f}",
                          "step": str(int(q.step_s or grid.bucket_s))}
                if q.stat is not None:
                    reader = shared[q.spec.name]
                    self._get_result("query_range", params, what, lambda: _StatFeed(reader, q.stat or ""))
                    return []
                if q.group:
                    router = self._get_result("query_range", params, what,
                                              lambda: _Router({s.name: _ItemReader(self, s, grid, recorded=False) for s in q.group}))
                    return [x for r in router.readers.values() for x in r.summaries()]
                reader = self._get_result("query_range", params, what, lambda: _ItemReader(self, q.spec, grid, recorded=False))
                summaries: list[SeriesSummary] = reader.summaries()
                return summaries
            if q.kind == "recorded":
                params = {"query": q.promql, "time": f"{at.timestamp():.3f}"}
                return finish(self._get_result("query", params, what, lambda: _RecordedReader(
                    self, q.spec, grid, reference=q.spec.name == COUNT_REFERENCE)))
            result = self.instant_query(q.promql, at=at, what=what)
            if not q.group:
                return self._summaries(q.spec, result)
            by_metric: dict[str, QueryResult] = {}
            for item in result:
                by_metric.setdefault(item.get("metric", {}).pop(METRIC_LABEL, ""), []).append(item)
            return [x for s in q.group for x in self._summaries(s, by_metric.get(s.name, []))]

        if self.concurrency <= 1 or len(jobs) <= 1:
            out = [one(q) for _, q in jobs]
        else:
            with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="promql") as pool:
                futures = [pool.submit(one, q) for _, q in jobs]
                try:
                    out = [f.result() for f in futures]
                except BaseException:
                    for f in futures:
                        f.cancel()
                    raise
        return [*out, *(r.summaries() for r in shared.values())]

    def _shared_labels(self, key: frozenset[tuple[str, str]]) -> dict[str, str]:
        """The cleaned labels of a result series, one dict per distinct label set for the whole read (read only).

        Every field of one GPU comes with the same labels: sharing the dict (and its strings) instead of one per
        series keeps a 10,000-GPU scan's summaries about 1 KB per series smaller.
        """
        cache = self._labels_cache
        if cache is None:
            return clean_labels(dict(key))
        labels = cache.get(key)
        if labels is None:
            labels = cache.setdefault(key, clean_labels(dict(key)))
        return labels

    _labels_cache: dict[frozenset[tuple[str, str]], dict[str, str]] | None = None  # one per read, while it runs (`telemetry`)
    #: one key object per distinct label set for the whole read (every field of a GPU has the same labels; the readers'
    #: keys then share it and its strings instead of holding a copy each while they wait to be summarised)
    _keys_cache: dict[frozenset[tuple[str, str]], frozenset[tuple[str, str]]] | None = None

    def _guard(self, spec: MetricSpec, n: int) -> None:
        if n > self.max_series:
            raise SourceAnswerError(
                f"Prometheus at {self.url}: the {spec.name} query returned more than max_series={self.max_series} "
                "series; narrow it with label matchers or raise prometheus.max_series"
            )

    def _summaries(self, spec: MetricSpec, result: QueryResult) -> list[SeriesSummary]:
        groups: dict[frozenset[tuple[str, str]], dict[str, float]] = {}
        for item in result:
            labels = item.get("metric", {})  # the decoded answer is ours: its label dicts are consumed here
            stat = labels.pop(STAT_LABEL, "")
            labels.pop("__name__", None)
            key = frozenset(labels.items())
            groups.setdefault(key, {})[stat] = float(item["value"][1])
            self._guard(spec, len(groups))
        out: list[SeriesSummary] = []
        required = [k for k in ("sum", "max") if k in spec.computed]
        for key, st in groups.items():
            count = int(st.get("count", 0))
            if count <= 0:
                continue
            labels = self._shared_labels(key)
            stats: WindowStats | None
            problem = None
            if spec.summary == "rate":
                rate = st.get("rate")
                stats = None if rate is None else rate_stats(
                    rate, count=count, resets=int(st.get("resets", 0)), recent_count=int(st.get("recent", 0))
                )
            else:
                missing = [k for k in required if k not in st]
                if missing:
                    raise SourceAnswerError(
                        f"Prometheus at {self.url}: incomplete answer to the {spec.name} query (no {', '.join(missing)} "
                        "for a series that has samples); is a proxy dropping series?"
                    )
                why = bucket_problem(spec.unit, count, st.get("sum", 0.0), st.get("max", 0.0))
                if why is not None:
                    problem = ("", why)
                    st = {"count": 0, "unreadable": count}
                stats = neutral_stats(spec, st)
            out.append(SeriesSummary(spec, labels, count, stats, problem))
        return out

    def probe(self, metric_names: Sequence[str], *, at: datetime | None = None) -> dict[str, int]:
        """Series count per metric name at `at` (None: the server's current time), for `gpuwaste doctor`.

        Raises:
            SourceUnavailableError, SourceAuthError, PermanentError: see `instant_query`.
        """
        names = list(dict.fromkeys(metric_names))
        results = self._run_all([(n, series_count_query(n, self.matchers)) for n in names], at)
        out: dict[str, int] = {}
        for name, result in zip(names, results, strict=True):
            out[name] = int(float(result[0]["value"][1])) if result else 0
        return out

    def raw_series(
        self,
        *,
        at: datetime,
        range_s: int,
        chunk_s: int = 3600,
        progress: Callable[[str], None] | None = None,
    ) -> list[RecordedSeries]:
        """The raw samples of every plan metric in `[at − range_s, at]` (instant queries of range vectors).

        The range is fetched in chunks of `chunk_s` (each ending at a chunk boundary); boundary samples
        returned twice are kept once.

        Raises:
            SourceUnavailableError, SourceAuthError, PermanentError: see `instant_query`.
        """
        from gpuwaste.sources.raw_samples import SeriesSamples, add_matrix, chunk_ends, recorded

        series: SeriesSamples = {}
        ends = chunk_ends(at, range_s, chunk_s)
        total = len(self.plan) * len(ends)
        done = 0
        for spec in self.plan:
            for chunk_end, step in ends:
                result = self.instant_query(raw_samples_query(spec, range_s=step, matchers=self.matchers), at=chunk_end, what=f"{spec.name} samples")
                done += 1
                if progress:
                    progress(f"[{done}/{total}] {spec.name}: {len(result)} series")
                if len(result) > self.max_series:
                    raise SourceAnswerError(f"Prometheus at {self.url}: {spec.name} has more than max_series={self.max_series} series")
                add_matrix(series, result, default_name=spec.name)
        return recorded(series)

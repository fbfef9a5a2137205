"""Adapter: Prometheus (prometheus-api-client) → `TelemetryWindow`, with a fixed query plan per scan.

Every query is an instant query with an explicit evaluation time (the scan's `at`, never the wall
clock), built by `sources.promql` from `sources.metrics_plan.PLAN`: one query per metric (26 with the
bundled plan), whatever the fleet size. Results are summarised into the same `SeriesSummary` units the
recording adapter computes, and assembled by the same code, so both paths give identical windows.

Auth: none, bearer token, basic, or AWS SigV4 (Amazon Managed Service for Prometheus, service "aps",
signed per request with the caller's IAM credentials via botocore). Every request has a timeout;
timeouts, connection errors, HTTP 429 and 5xx are retried (tenacity, bounded, exponential backoff) and
then raised as `SourceUnavailableError`; 401/403 as `SourceAuthError`; 400/422 (a refused query) and a
result larger than `max_series` as `PermanentError`. Credentials never appear in messages or logs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests
import urllib3
from prometheus_api_client import PrometheusConnect
from requests.auth import AuthBase, HTTPBasicAuth
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential
from urllib3.util.retry import Retry

from gpuwaste.errors import ConfigError, GpuWasteError, PermanentError, SourceAuthError, SourceUnavailableError
from gpuwaste.models.telemetry import TelemetryWindow, WindowStats
from gpuwaste.settings import PrometheusSettings, TelemetryLabels
from gpuwaste.sources.exposition import RecordedSeries
from gpuwaste.sources.metrics_plan import (
    PLAN,
    MetricSpec,
    SeriesSummary,
    assemble,
    clean_labels,
    droppable_labels,
    neutral_stats,
    rate_stats,
)
from gpuwaste.sources.promql import RECENT_S, STAT_LABEL, raw_samples_query, scan_queries, series_count_query

logger = logging.getLogger(__name__)

QueryResult = list[dict[str, Any]]


class _HttpStatusError(Exception):
    """A non-200 answer, raised from the session's response hook (carries the status, not the text)."""

    def __init__(self, status: int, error: str) -> None:
        super().__init__(status)
        self.status = status
        self.error = error


def _raise_for_status(response: requests.Response, *_args: Any, **_kwargs: Any) -> requests.Response:
    if response.status_code != 200:
        error = ""
        try:
            body = response.json()
            if isinstance(body, dict):
                error = str(body.get("error", ""))[:300]
        except ValueError:
            error = ""
        raise _HttpStatusError(response.status_code, error)
    return response


class BearerAuth(AuthBase):
    """`Authorization: Bearer <token>` on every request."""

    def __init__(self, token: str) -> None:
        self._token = token

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        r.headers["Authorization"] = f"Bearer {self._token}"
        return r


class SigV4Auth(AuthBase):
    """AWS Signature Version 4 on every request (Amazon Managed Service for Prometheus).

    Credentials come from botocore's default chain (env, profile, web identity, instance/Lambda role)
    and are re-read for each request, so rotated role credentials keep working.

    Args:
        region: the workspace's region. service: "aps" for AMP.
    """

    def __init__(self, region: str, service: str = "aps", session: Any = None) -> None:
        import botocore.session

        self.region = region
        self.service = service
        self._session = session or botocore.session.get_session()

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        from botocore.auth import SigV4Auth as _BotoSigV4
        from botocore.awsrequest import AWSRequest

        creds = self._session.get_credentials()
        if creds is None:
            raise SourceAuthError("SigV4: no AWS credentials found (set AWS credentials or a role for the caller)")
        body = r.body or b""
        aws_req = AWSRequest(method=r.method, url=r.url, data=body)
        _BotoSigV4(creds.get_frozen_credentials(), self.service, self.region).add_auth(aws_req)
        for name in ("Authorization", "X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-SHA256"):
            if name in aws_req.headers:
                r.headers[name] = aws_req.headers[name]
        return r


def safe_url(url: str) -> str:
    """The URL without user-info, query or fragment (fit for messages and logs)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def auth_from_settings(settings: PrometheusSettings) -> AuthBase | None:
    """The requests auth object for the settings (secrets must already be resolved into the settings).

    Raises:
        ConfigError: when a secret is only referenced by ARN (the bootstrap resolves it) or SigV4 has no region.
    """
    a = settings.auth
    if a.kind == "bearer":
        if a.bearer_token is None:
            raise ConfigError("prometheus.auth.bearer_token: not resolved (bearer_token_secret_arn must be fetched by the bootstrap)")
        return BearerAuth(a.bearer_token.get_secret_value())
    if a.kind == "basic":
        if a.password is None or a.username is None:
            raise ConfigError("prometheus.auth.password: not resolved (password_secret_arn must be fetched by the bootstrap)")
        return HTTPBasicAuth(a.username, a.password.get_secret_value())
    if a.kind == "sigv4":
        import botocore.session

        session = botocore.session.get_session()
        region = a.sigv4_region or session.get_config_variable("region")
        if not region:
            raise ConfigError("prometheus.auth.sigv4_region: required for SigV4 (or set AWS_REGION)")
        return SigV4Auth(region, a.sigv4_service, session)
    return None


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, _HttpStatusError):
        return exc.status >= 500 or exc.status == 429
    return isinstance(exc, requests.Timeout | requests.ConnectionError | urllib3.exceptions.HTTPError)


class PrometheusGpuMetricsSource:
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

    # -- queries --------------------------------------------------------------------------------------
    def instant_query(self, promql: str, *, at: datetime | None, what: str = "query") -> QueryResult:
        """Run one instant query at `at` (None: the server's current time), with retries and error translation.

        Raises:
            SourceUnavailableError: unreachable, timed out, or HTTP 429/5xx after the retries.
            SourceAuthError: HTTP 401/403.
            PermanentError: the query was refused (HTTP 400/422, other 4xx) or the answer is not the Prometheus API.
        """
        params = {} if at is None else {"time": f"{at.timestamp():.3f}"}
        retrying = Retrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=wait_exponential(multiplier=self.backoff_s, max=max(self.backoff_s * 8, 0.0)),
            retry=retry_if_exception(_transient),
            reraise=True,
        )
        try:
            result = retrying(self.client.custom_query, promql, params=params, timeout=self.timeout_s)
        except (_HttpStatusError, requests.RequestException, urllib3.exceptions.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise self._translate(exc, what) from exc
        if not isinstance(result, list):
            raise PermanentError(f"Prometheus at {self.url}: unexpected answer to the {what} query (not a result list)")
        return result

    def _translate(self, exc: BaseException, what: str) -> GpuWasteError:
        tries = self.max_retries + 1
        if isinstance(exc, _HttpStatusError):
            s = exc.status
            if s in (401, 403):
                return SourceAuthError(
                    f"Prometheus at {self.url} rejected the credentials (HTTP {s}); check prometheus.auth "
                    "(bearer token, user/password, or for AMP the IAM permission aps:QueryMetrics and sigv4_region)"
                )
            if s >= 500 or s == 429:
                return SourceUnavailableError(
                    f"Prometheus at {self.url} answered HTTP {s} to the {what} query after {tries} attempt(s); "
                    "check that Prometheus is healthy and not overloaded"
                )
            detail = f": {exc.error}" if exc.error else ""
            return PermanentError(f"Prometheus at {self.url} refused the {what} query (HTTP {s}){detail}")
        if isinstance(exc, requests.Timeout):
            return SourceUnavailableError(
                f"Prometheus at {self.url} did not answer the {what} query within {self.timeout_s:g} s "
                f"({tries} attempt(s)); check the network path, or raise prometheus.timeout_s"
            )
        if isinstance(exc, requests.ConnectionError | urllib3.exceptions.HTTPError):
            return SourceUnavailableError(
                f"cannot connect to Prometheus at {self.url} ({tries} attempt(s)); check the URL, "
                "DNS, network path and that Prometheus is running"
            )
        if isinstance(exc, ValueError | KeyError | TypeError):
            return PermanentError(
                f"{self.url} did not answer like a Prometheus HTTP API (the {what} query); check the URL "
                "(AMP: https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>)"
            )
        return SourceUnavailableError(f"Prometheus at {self.url}: request failed ({type(exc).__name__})")

    def _run_all(
        self, jobs: Sequence[tuple[str, str]], at: datetime | None, transform: Callable[[str, QueryResult], Any] | None = None
    ) -> list[Any]:
        """Run (what, promql) jobs with `concurrency` workers; results (or `transform(what, result)`) in job order."""

        def one(what: str, promql: str) -> Any:
            result = self.instant_query(promql, at=at, what=what)
            return result if transform is None else transform(what, result)

        if self.concurrency <= 1 or len(jobs) <= 1:
            return [one(w, q) for w, q in jobs]
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="promql") as pool:
            futures = [pool.submit(one, w, q) for w, q in jobs]
            try:
                return [f.result() for f in futures]
            except BaseException:
                for f in futures:
                    f.cancel()
                raise

    # -- the port -------------------------------------------------------------------------------------
    def telemetry(self, *, at: datetime, window: timedelta) -> TelemetryWindow:
        """Window summaries of every plan metric over `[at − window, at]`, evaluated at `at`.

        Raises:
            SourceUnavailableError, SourceAuthError, PermanentError: see `instant_query`; PermanentError
            also when a metric returns more than `max_series` series.
        """
        window_s = int(window.total_seconds())
        recent_s = min(RECENT_S, window_s)
        queries = scan_queries(window_s=window_s, matchers=self.matchers, plan=self.plan, drop=droppable_labels(self.labels))
        t0 = time.perf_counter()
        specs = {spec.name: spec for spec, _q in queries}
        # each answer is summarised as soon as it arrives, so only the answers in flight are held decoded
        per_query = self._run_all([(spec.name, q) for spec, q in queries], at,
                                  transform=lambda what, result: self._summaries(specs[what], result))
        summaries: list[SeriesSummary] = [s for part in per_query for s in part]
        parts = assemble(summaries, self.labels, drop=False)  # the queries already aggregated the dropped labels
        logger.info(
            "prometheus telemetry read",
            extra={"cluster": self.cluster, "queries": len(queries), "gpus": len(parts.gpus), "seconds": round(time.perf_counter() - t0, 3)},
        )
        return TelemetryWindow(
            cluster=self.cluster,
            eval_time=at,
            window_s=window_s,
            recent_s=recent_s,
            scrape_interval_s=self.scrape_interval_s,
            gpus=parts.gpus,
            pods=parts.pods,
            metrics_present=parts.metrics_present,
            query_count=len(queries),
            source=f"prometheus {self.url}",
            single_instant=parts.single_instant,
        )

    def _summaries(self, spec: MetricSpec, result: QueryResult) -> list[SeriesSummary]:
        groups: dict[frozenset[tuple[str, str]], dict[str, float]] = {}
        for item in result:
            labels = item.get("metric", {})  # the decoded answer is ours: its label dicts are consumed here
            stat = labels.pop(STAT_LABEL, "")
            labels.pop("__name__", None)
            key = frozenset(labels.items())
            groups.setdefault(key, {})[stat] = float(item["value"][1])
            if len(groups) > self.max_series:
                raise PermanentError(
                    f"Prometheus at {self.url}: the {spec.name} query returned more than max_series={self.max_series} "
                    "series; narrow it with label matchers or raise prometheus.max_series"
                )
        out: list[SeriesSummary] = []
        required = [k for k in ("sum", "max", "min", "p95") if k in spec.computed]
        for key, st in groups.items():
            count = int(st.get("count", 0))
            if count <= 0:
                continue  # e.g. a 10-minute average from samples just before the window
            labels = clean_labels(dict(key))
            stats: WindowStats | None
            if spec.summary == "rate":
                rate = st.get("rate")
                stats = None if rate is None else rate_stats(
                    rate, count=count, resets=int(st.get("resets", 0)), recent_count=int(st.get("recent", 0))
                )
            else:
                missing = [k for k in required if k not in st]
                if missing:
                    raise PermanentError(
                        f"Prometheus at {self.url}: incomplete answer to the {spec.name} query (no {', '.join(missing)} "
                        "for a series that has samples); is a proxy dropping series?"
                    )
                stats = neutral_stats(spec, st)
            out.append(SeriesSummary(spec, labels, count, stats))
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
        series: dict[tuple[str, tuple[tuple[str, str], ...]], dict[int, float]] = {}
        ends: list[tuple[datetime, int]] = []
        remaining = int(range_s)
        end = at
        while remaining > 0:
            step = min(chunk_s, remaining)
            ends.append((end, step))
            end -= timedelta(seconds=step)
            remaining -= step
        total = len(self.plan) * len(ends)
        done = 0
        for spec in self.plan:
            for chunk_end, step in ends:
                result = self.instant_query(raw_samples_query(spec, range_s=step, matchers=self.matchers), at=chunk_end, what=f"{spec.name} samples")
                done += 1
                if progress:
                    progress(f"[{done}/{total}] {spec.name}: {len(result)} series")
                if len(result) > self.max_series:
                    raise PermanentError(f"Prometheus at {self.url}: {spec.name} has more than max_series={self.max_series} series")
                for item in result:
                    labels = dict(item.get("metric", {}))
                    name = labels.pop("__name__", spec.name)
                    key = (name, tuple(sorted(labels.items())))
                    samples = series.setdefault(key, {})
                    for ts, value in item.get("values", []):
                        samples[round(float(ts) * 1000)] = float(value)
        out = []
        for (name, pairs), samples in series.items():
            ordered = sorted(samples.items())
            out.append(RecordedSeries(name, dict(pairs), [t for t, _ in ordered], [v for _, v in ordered]))
        out.sort(key=lambda s: (s.name, tuple(sorted(s.labels.items()))))
        return out


def make_client(settings: PrometheusSettings) -> PrometheusConnect:
    """A `PrometheusConnect` with auth, headers, TLS verification and timeout; its own retries are off.

    Raises:
        ConfigError: when the auth settings are incomplete.
    """
    session = requests.Session()
    session.verify = settings.verify_tls
    session.hooks["response"].append(_raise_for_status)
    return PrometheusConnect(
        url=settings.url.rstrip("/"),
        headers=dict(settings.headers) or None,
        disable_ssl=not settings.verify_tls,
        retry=Retry(total=0, read=False),  # no urllib3 retries (tenacity retries here); read timeouts stay ReadTimeout
        auth=auth_from_settings(settings),
        session=session,
        timeout=settings.timeout_s,
    )


__all__ = ["BearerAuth", "PrometheusGpuMetricsSource", "SigV4Auth", "auth_from_settings", "make_client", "safe_url"]

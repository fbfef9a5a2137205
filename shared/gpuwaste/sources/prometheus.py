"""Adapter: Prometheus (prometheus-api-client) → `TelemetryWindow`, with a fixed query plan per scan.

Every query has an explicit evaluation time (the scan's `at`, never the wall clock) and is built by
`sources.promql` from `sources.metrics_plan.PLAN` (`scan_queries`: 26 queries with the bundled plan read raw, 14
through the recording rules) plus one probe for the shipped recording rules, whatever the fleet size. Time-resolved metrics come from the
recorded 5-minute buckets when the rules cover the window ("plan: recording rules"), else from a
`query_range` at the bucket step ("plan: raw"). Results are summarised into the same `SeriesSummary`
units the recording adapter computes, and assembled by the same code, so both paths give identical
windows. Windows beyond Prometheus's retention (`/api/v1/status/flags`, where the server answers it) are
refused with a clear error.

Auth: none, bearer token, basic, or AWS SigV4 (Amazon Managed Service for Prometheus, service "aps",
signed per request with the caller's IAM credentials via botocore). Every request has a timeout;
timeouts, connection errors, HTTP 429 and 5xx are retried (tenacity, bounded, exponential backoff) and
then raised as `SourceUnavailableError`; 401/403 as `SourceAuthError`; 400/422 (a refused query) and a
result larger than `max_series` as `PermanentError`. Credentials never appear in messages or logs.

prometheus-api-client is used through its public API where it can do what the scan needs: the client is built with
its `session=`, `auth=`, `headers=`, `retry=` and `timeout=` parameters (`make_client`: the session is ours, with the
bounded-answer adapter mounted), and instant queries go through `PrometheusConnect.custom_query`. Two requests go
through that same session directly (`_get_result`, `_check_retention`, which read it back as `client._session`)
because the public API cannot do them: (1) `query_range` and the planned queries decode each result item as it
arrives (`json.loads(object_hook=…)` into a summarising reader), so a fleet-scale answer is never held decoded —
`custom_query` / `custom_query_range` return the whole decoded list; (2) `/api/v1/status/flags` (the retention
check) has no public method. Both use the client's URL, headers, auth and TLS setting, so they are the requests the
library would send.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import re
import socket
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests
import urllib3
from prometheus_api_client import PrometheusConnect
from requests.adapters import HTTPAdapter
from requests.auth import AuthBase, HTTPBasicAuth
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential
from urllib3.util.retry import Retry

from gpuwaste.errors import (
    ConfigError,
    GpuWasteError,
    PermanentError,
    SourceAnswerError,
    SourceAuthError,
    SourceUnavailableError,
)
from gpuwaste.models.settings import PrometheusSettings, TelemetryLabels
from gpuwaste.models.telemetry import (
    MAX_WINDOW_S,
    MIN_WINDOW_S,
    READABLE_RANGE,
    Bucket,
    BucketGrid,
    TelemetryWindow,
    WindowStats,
    stats_from_columns,
)
from gpuwaste.sources.exposition import RecordedSeries
from gpuwaste.sources.metrics_plan import (
    DROPPED_LABELS,
    PLAN,
    MetricSpec,
    SeriesSummary,
    assemble,
    bucketed_stats,
    clean_labels,
    droppable_labels,
    neutral_stats,
    rate_stats,
)
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

logger = logging.getLogger(__name__)

QueryResult = list[dict[str, Any]]


class _HttpStatusError(Exception):
    """A non-200 answer, raised from the session's response hook (carries the status, not the text)."""

    def __init__(self, status: int, error: str) -> None:
        super().__init__(status)
        self.status = status
        self.error = error


class _AnswerBoundError(requests.RequestException):
    """An answer the bounded adapter stopped reading (caught wherever a requests error is; never retried)."""


class _AnswerTooLarge(_AnswerBoundError):
    """The answer grew past `max_answer_mb` (received, or decoded from gzip/deflate)."""

    def __init__(self, limit_mb: float, *, decoded: bool) -> None:
        super().__init__(limit_mb)
        self.limit_mb = limit_mb
        self.decoded = decoded


class _AnswerTooSlow(_AnswerBoundError):
    """The answer was not complete within `answer_deadline_s` of its request."""

    def __init__(self, deadline_s: float, received: int) -> None:
        super().__init__(deadline_s)
        self.deadline_s = deadline_s
        self.received = received


class _AnswerUndecodable(_AnswerBoundError):
    """An encoding this client did not ask for, or a corrupt gzip/deflate stream."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


#: A non-200 answer's body is read up to this many bytes (for its `error` field), the rest is dropped unread.
_ERROR_BODY_BYTES = 64 << 10
_READ_BYTES = 64 << 10


class _Watch:
    """One request's deadline watchdog: the connection it uses (noted by the pool), and whether the deadline fired."""

    def __init__(self) -> None:
        self.conn: Any = None
        self.fired = False
        self.done = False
        self.received = 0
        self.lock = threading.Lock()

    def cut(self) -> None:
        """At the deadline: shut the request's socket down (a blocked read returns at once), unless it finished."""
        with self.lock:
            if self.done:
                return
            self.fired = True
            sock = getattr(self.conn, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed
                sock.shutdown(socket.SHUT_RDWR)

    def finish(self) -> None:
        """The answer is read (or failed): the watchdog must not touch the connection any more."""
        with self.lock:
            self.done = True


#: the watch of the request this thread is sending (set by `BoundedAdapter.send`, read by the pools)
_WATCHED = threading.local()


def _note_connection(conn: Any) -> None:
    watch = getattr(_WATCHED, "watch", None)
    if watch is not None:
        with watch.lock:
            watch.conn = conn
            late = watch.fired
        if late:  # the deadline passed while connecting: cut now
            watch.cut()
            raise urllib3.exceptions.ProtocolError("answer deadline passed")


class _WatchedHTTPPool(urllib3.HTTPConnectionPool):
    """An HTTP pool that tells the request's watch which connection it uses."""

    def _make_request(self, conn: Any, *args: Any, **kwargs: Any) -> Any:
        _note_connection(conn)
        return super()._make_request(conn, *args, **kwargs)


class _WatchedHTTPSPool(urllib3.HTTPSConnectionPool):
    """An HTTPS pool that tells the request's watch which connection it uses."""

    def _make_request(self, conn: Any, *args: Any, **kwargs: Any) -> Any:
        _note_connection(conn)
        return super()._make_request(conn, *args, **kwargs)


class BoundedAdapter(HTTPAdapter):
    """An `HTTPAdapter` that reads each answer itself: at most `max_bytes` (as received and after decoding), complete
    within `deadline_s` of the request (headers included: a watchdog shuts the connection down at the deadline), each
    read waiting no longer than what is left of the deadline.

    The body is read in 64 KiB pieces with `read1` (a dripping server returns what it has, so the deadline is checked
    between pieces); gzip and deflate are decoded here with `zlib` and a bounded output (`max_length`), so a
    compression bomb stops at the cap instead of being inflated whole. urllib3 retries are off (retries are the
    source's). A non-200 answer's body is read up to 64 KiB and truncated (only its `error` field is used).

    Raises (from `send`):
        _AnswerTooLarge, _AnswerTooSlow, _AnswerUndecodable: subclasses of `requests.RequestException`.
    """

    def __init__(self, *, max_bytes: int, deadline_s: float, limit_mb: float) -> None:
        super().__init__(max_retries=Retry(total=0, read=False))
        self.max_bytes = max_bytes
        self.deadline_s = deadline_s
        self.limit_mb = limit_mb

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any) -> None:
        """requests' pool manager, its pools noting the connection each request uses (for the deadline's watchdog)."""
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}

    def send(self, request: requests.PreparedRequest, stream: bool = False, timeout: Any = None, verify: Any = True,
             cert: Any = None, proxies: Any = None) -> requests.Response:
        """Send the request and read its whole answer within the bounds (the answer comes back already read).

        A watchdog shuts the request's socket down at the deadline, so headers that trickle in (each byte within
        the per-read timeout) are cut too; between body pieces the deadline is also checked directly.
        """
        t0 = time.monotonic()
        connect, read = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        read = self.deadline_s if read is None else min(float(read), self.deadline_s)
        watch = _Watch()
        _WATCHED.watch = watch
        timer = threading.Timer(self.deadline_s, watch.cut)
        timer.daemon = True
        timer.start()
        try:
            response = super().send(request, stream=True, timeout=(connect, read), verify=verify, cert=cert, proxies=proxies)
            try:
                body = self._read(response, t0 + self.deadline_s, read, truncate=response.status_code != 200, watch=watch)
            except BaseException:
                watch.finish()
                response.close()  # never reuse a connection left mid-answer
                raise
            watch.finish()  # before the connection goes back to the pool: the watchdog never cuts it after this
        except _AnswerBoundError:
            raise
        except Exception as exc:
            if watch.fired:
                raise _AnswerTooSlow(self.deadline_s, watch.received) from exc
            raise
        finally:
            watch.finish()
            timer.cancel()
            _WATCHED.watch = None
        response._content = body
        response._content_consumed = True  # type: ignore[attr-defined]
        response.raw.release_conn()
        return response

    def _read(self, response: requests.Response, deadline: float, read_timeout: float, *, truncate: bool, watch: _Watch) -> bytes:
        raw = response.raw
        cap = _ERROR_BODY_BYTES if truncate else self.max_bytes
        encoding = response.headers.get("Content-Encoding", "").strip().lower()
        decoder: Any = None
        if encoding in ("gzip", "x-gzip"):
            decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            decoder = zlib.decompressobj()
        elif encoding not in ("", "identity"):
            raise _AnswerUndecodable(f"Content-Encoding {encoding[:40]!r} (asked for gzip, deflate or identity)")
        parts: list[bytes] = []
        received = 0
        size = 0
        sock = getattr(getattr(raw, "_connection", None), "sock", None)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _AnswerTooSlow(self.deadline_s, received)
            if isinstance(sock, socket.socket):
                sock.settimeout(max(0.01, min(read_timeout, left)))
            try:
                chunk = raw.read1(_READ_BYTES, decode_content=False)
            except urllib3.exceptions.ReadTimeoutError as exc:
                if time.monotonic() >= deadline:
                    raise _AnswerTooSlow(self.deadline_s, received) from exc
                raise requests.exceptions.ReadTimeout(exc) from exc
            except (urllib3.exceptions.ProtocolError, urllib3.exceptions.HTTPError, OSError) as exc:
                raise requests.exceptions.ConnectionError(exc) from exc
            if not chunk:
                break
            received += len(chunk)
            watch.received = received
            if received > self.max_bytes and not truncate:
                raise _AnswerTooLarge(self.limit_mb, decoded=False)
            if decoder is not None:  # decoded no further than the cap: a bomb stops here, never inflated whole
                decoded: list[bytes] = []
                room = cap + 1 - size
                data = chunk
                try:
                    while data and room > 0:
                        piece = decoder.decompress(data, room)
                        decoded.append(piece)
                        room -= len(piece)
                        if decoder.unconsumed_tail:
                            if not truncate:
                                raise _AnswerTooLarge(self.limit_mb, decoded=True)
                            break
                        data = decoder.unused_data if decoder.eof else b""
                        if data:  # another gzip member follows (RFC 1952 allows several)
                            decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
                except zlib.error as exc:
                    raise _AnswerUndecodable(f"corrupt {encoding} stream") from exc
                chunk = b"".join(decoded)
            size += len(chunk)
            if size > cap:
                if truncate:
                    parts.append(chunk[: cap - (size - len(chunk))])
                    break
                raise _AnswerTooLarge(self.limit_mb, decoded=decoder is not None)
            parts.append(chunk)
            if truncate and size >= cap:
                break
        return b"".join(parts)


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
            raise SourceAnswerError(f"Prometheus at {self.url}: unexpected answer to the {what} query (not a result list)")
        return result

    def _translate(self, exc: BaseException, what: str) -> GpuWasteError:
        tries = self.max_retries + 1
        if isinstance(exc, _AnswerTooLarge):
            how = "decoded from its compression" if exc.decoded else "received"
            return SourceAnswerError(
                f"Prometheus answer over {exc.limit_mb:g} MB ({how}) to the {what} query from {self.url} — raise "
                "prometheus.max_answer_mb or use recording rules / shards (`gpuwaste doctor` checks the rules)"
            )
        if isinstance(exc, _AnswerTooSlow):
            return SourceUnavailableError(
                f"Prometheus at {self.url} did not finish its answer to the {what} query within {exc.deadline_s:g} s "
                f"({exc.received:,} bytes received); a slow or stalled Prometheus or proxy — raise "
                "prometheus.answer_deadline_s if the answer is genuinely that slow"
            )
        if isinstance(exc, _AnswerUndecodable):
            return SourceAnswerError(f"Prometheus at {self.url}: unusable answer to the {what} query ({exc.reason})")
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
            if s == 404 and not exc.error:  # no Prometheus API at this URL
                detail = (": no Prometheus API here (/api/v1/query not found) — check the URL: a path prefix such as "
                          "/prometheus, or for Amazon Managed Service for Prometheus .../workspaces/WORKSPACE_ID")
            if 300 <= s < 400:
                return SourceAnswerError(
                    f"Prometheus at {self.url} redirected the {what} query (HTTP {s}); redirects are not followed "
                    "(credentials would travel with them): set the URL to the address it redirects to"
                )
            return SourceAnswerError(f"Prometheus at {self.url} refused the {what} query (HTTP {s}){detail}")
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
            return SourceAnswerError(
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

    def range_query(self, promql: str, *, start: datetime, end: datetime, step_s: int, what: str = "query") -> QueryResult:
        """Run one `query_range` (start, end and step in exact seconds), with the retries and error translation of `instant_query`."""
        params = {"query": promql, "start": f"{start.timestamp():.3f}", "end": f"{end.timestamp():.3f}", "step": str(int(step_s))}
        result: QueryResult = self._get_result("query_range", params, what)
        return result

    def _get_result(self, endpoint: str, params: Mapping[str, str], what: str, reader: Callable[[], Any] | None = None) -> Any:
        """GET `/api/v1/<endpoint>` and decode its result, with the retries and error translation of `instant_query`.

        With a `reader` factory, each result item (`{"metric": …, "values"/"value": …}`) is handed to a fresh
        reader while the JSON is decoded (`object_pairs_hook`) and dropped at once, so a fleet-scale answer is
        never held decoded as a whole; the reader is returned instead of the result list.
        """

        def call() -> Any:
            session = self.client._session
            response = session.request(method="GET", url=f"{self.client.url}/api/v1/{endpoint}", params=params, verify=session.verify,
                                       headers=self.client.headers, auth=self.client.auth, timeout=self.timeout_s)
            if reader is None:
                return response.json()["data"]["result"]
            r = reader()

            def hook(obj: dict[str, Any]) -> Any:
                labels = obj.get("metric")
                if type(labels) is dict and len(obj) == 2:  # a result item (a label set's values are strings, never objects)
                    points = obj.get("values")
                    r.item(labels, points if points is not None else [obj.get("value")])  # a vector answer: one point
                    return None
                return obj

            doc = json.loads(response.content, object_hook=hook)
            if not isinstance(doc["data"]["result"], list):
                raise TypeError("result is not a list")
            return r

        retrying = Retrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=wait_exponential(multiplier=self.backoff_s, max=max(self.backoff_s * 8, 0.0)),
            retry=retry_if_exception(_transient),
            reraise=True,
        )
        try:
            result = retrying(call)
        except (_HttpStatusError, requests.RequestException, urllib3.exceptions.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise self._translate(exc, what) from exc
        if reader is None and not isinstance(result, list):
            raise SourceAnswerError(f"Prometheus at {self.url}: unexpected answer to the {what} query (not a result list)")
        return result

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
        other_gpus, other_fields, asked = self._other_gpus(at, window_s, {g.device.uuid for g in parts.gpus})
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
        )

    _probed = False

    def _other_gpus(self, at: datetime, window_s: int, seen: set[str]) -> tuple[tuple[str, ...], frozenset[str], int]:
        """GPUs on DCGM series in the window that the plan's answers did not show (only unread fields: clocks,
        temperatures), as the recording path counts them (`TelemetryWindow.other_gpus`, issue 21 §9): one presence
        query (one row per GPU), and only when such GPUs exist a second for the DCGM field names present.

        Returns:
            (their UUIDs sorted, the DCGM field names present — canonical upper-case — when they exist, queries asked).

        Raises:
            SourceUnavailableError, SourceAuthError, PermanentError: see `instant_query`; PermanentError also when the
            presence answer holds more than `max_series` GPUs.
        """
        uuid_labels = self.labels.uuid_labels
        matchers = {**(self.matchers or {}), **self.node_matchers}  # a shard asks for its own nodes' GPUs only
        result = self.instant_query(dcgm_presence_query(uuid_labels, window_s=window_s, matchers=matchers), at=at,
                                    what="DCGM presence")
        if len(result) > self.max_series:
            raise SourceAnswerError(f"Prometheus at {self.url}: DCGM presence has more than max_series={self.max_series} GPUs")
        uuids = {u for item in result if (u := next((v for k in uuid_labels if (v := item["metric"].get(k))), None))}
        other = tuple(sorted(uuids - seen))
        if not other:
            return (), frozenset(), 1
        fields = self.instant_query(dcgm_fields_query(window_s=window_s, matchers=matchers), at=at, what="DCGM fields")
        names = {str(item["metric"].get(METRIC_LABEL, "")) for item in fields}
        return other, frozenset(n.upper() if n.startswith("dcgm_fi_") else n for n in names if n), 2

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


class _ItemReader:
    """Buckets of one time-resolved metric, fed one result item at a time while its answer is decoded.

    A `query_range` answer has one point per bucket end; recorded 5-minute buckets are added up into the
    scan's buckets (counts and sums add, max of maxima). The hot loop of a fleet-scale scan: every series
    shares the same timestamps, so each timestamp's bucket index is computed once; NaN/±Inf and
    out-of-range values are checked per bucket afterwards.
    """

    def __init__(self, source: PrometheusGpuMetricsSource, spec: MetricSpec, grid: BucketGrid, *, recorded: bool,
                 drop: Sequence[str] = ()) -> None:
        self.source = source
        self.drop = tuple(drop)
        self.spec = spec
        self.grid = grid
        self.recorded = recorded
        self.n = len(grid.ends)
        self.step_ms = grid.bucket_s * 1000
        self.start_ms = round(grid.eval_time.timestamp() * 1000) - self.n * self.step_ms
        self.index: dict[Any, int] = {}
        self.groups: dict[frozenset[tuple[str, str]], list[list[float]]] = {}
        self.suffix = len(f"{RULE_INTERVAL_S // 60}m")
        self.lock = threading.Lock()

    def _target(self, labels: dict[str, str], values: Any, stat: str | None) -> tuple[frozenset[tuple[str, str]], int, list[float]] | None:
        """A result series' key (its labels, consumed), statistic column and bucket row; None when the series is ignored."""
        name = labels.pop("__name__", "")
        stat = stat or labels.pop(STAT_LABEL, "") or name.rsplit(":", 1)[-1][: -self.suffix]
        col = _COLS.get(stat)
        if col is None or not isinstance(values, list):
            return None
        for label in self.drop:  # series differing only in labels nobody reads are added up here, as `sum/max without` would
            labels.pop(label, None)
        key = frozenset(labels.items())
        with self.lock:  # the three single-statistic answers of one field may be decoded at the same time
            acc = self.groups.get(key)
            if acc is None:
                keys = self.source._keys_cache
                if keys is not None:
                    key = keys.setdefault(key, key)
                n = self.n
                acc = self.groups[key] = [[0.0] * n, [0.0] * n, [-math.inf] * n]
                self.source._guard(self.spec, len(self.groups))
        return key, col, acc[col]

    def item(self, labels: dict[str, str], values: Any, stat: str | None = None) -> None:
        """One result series: its labels (consumed), its `[t, "v"]` points and, for an untagged answer, its statistic."""
        target = self._target(labels, values, stat)
        if target is None:
            return
        _key, col, row = target
        get = self.index.get
        # several series of one group (recorded buckets, dropped labels) add up: counts and sums add, max of maxima
        if col == 2:
            for t, v in values:
                k = get(t)
                if k is None:
                    k = self._slot(t)
                if k >= 0:
                    x = float(v)
                    if x > row[k] or x != x:
                        row[k] = x
        else:
            for t, v in values:
                k = get(t)
                if k is None:
                    k = self._slot(t)
                if k >= 0:
                    row[k] += float(v)

    def _slot(self, t: Any) -> int:
        """The bucket index of a point's timestamp (seconds), −1 outside the window; computed once per timestamp."""
        k = (round(float(t) * 1000) - self.start_ms - 1) // self.step_ms
        k = k if 0 <= k < self.n else -1
        self.index[t] = k
        return k

    def summaries(self) -> list[SeriesSummary]:
        """One summary per series, its bucket statistics checked (an unreadable bucket is emptied and counted)."""
        spec, grid = self.spec, self.grid
        out: list[SeriesSummary] = []
        lo, hi = READABLE_RANGE.get(spec.unit or "", (-math.inf, math.inf))
        shared_labels = self.source._shared_labels
        for key, (counts, totals, maxes) in self.groups.items():
            filled = False
            for c, t, m in zip(counts, totals, maxes, strict=True):
                if c > 0:
                    if not (lo <= m <= hi and t >= 0 and t - t == 0.0):  # NaN fails every comparison
                        break
                    filled = True
            else:  # every bucket readable: the common case, in one pass
                if filled:
                    stats = stats_from_columns(grid, counts, totals, maxes)
                    out.append(SeriesSummary(spec, shared_labels(key), stats.count, stats, None))
                continue
            out.extend(self._checked(key, counts, totals, maxes))
        return out

    def _checked(self, key: frozenset[tuple[str, str]], counts: list[float], totals: list[float], maxes: list[float]) -> list[SeriesSummary]:
        """The summary of a series with an unreadable bucket: that bucket is emptied and its samples counted."""
        spec, grid = self.spec, self.grid
        buckets: list[Bucket] = []
        unreadable = 0
        problem: str | None = None
        for e, c, t, m in zip(grid.ends, counts, totals, maxes, strict=True):
            why = bucket_problem(spec.unit, c, t, m) if c > 0 else None
            if c <= 0 or why is not None:
                if why is not None:
                    unreadable += int(c)
                    problem = problem or why
                buckets.append(Bucket(e, 0, 0.0, 0.0))
            else:
                buckets.append(Bucket(e, int(c), t, m))
        if not unreadable and not any(b[1] for b in buckets):
            return []
        stats = bucketed_stats(buckets, grid, unreadable=unreadable)
        return [SeriesSummary(spec, self.source._shared_labels(key), stats.count + unreadable, stats, ("", problem) if problem else None)]


_COLS = {"count": 0, "sum": 1, "max": 2}
_Key = frozenset[tuple[str, str]]


class _RecordedReader(_ItemReader):
    """The recorded 5-minute buckets of one field (rules plan): `_ItemReader`, and the counts the rules left unrecorded.

    Rules version 2 record a field's count only where it differs from the reference field's (`promql.COUNT_REFERENCE`,
    recorded in full; version 1 recorded every count). The rules run every 5 minutes, so each recorded sample of a
    series falls in its own 5-minute slot of the window: per series the slots holding a count and those holding a sum
    are kept as bit masks (and, for the reference field, its count per slot), and `resolve` adds the reference's count
    for each slot where a sum came without its count. A slot whose count cannot be told (no reference count there, or
    two samples in one slot) empties its bucket: no data, never idle.
    """

    def __init__(self, source: PrometheusGpuMetricsSource, spec: MetricSpec, grid: BucketGrid, *, reference: bool) -> None:
        super().__init__(source, spec, grid, recorded=True)
        self.reference = reference
        self.slot_ms = RULE_INTERVAL_S * 1000
        self.slots = grid.window_s // RULE_INTERVAL_S
        self.per_bucket = max(1, grid.bucket_s // RULE_INTERVAL_S)
        #: timestamp → its 5-minute slot of the window (−1 outside); bucket = slot // per_bucket (the buckets tile the window)
        self.slot_of: dict[Any, int] = {}
        #: key → [slots with a count, slots with a sum, slots seen twice in one series]
        self.masks: dict[_Key, list[int]] = {}
        #: reference field only: key → (the first count, {slot: count} where another count was recorded)
        self.counts: dict[_Key, tuple[float, dict[int, float]]] = {}

    def item(self, labels: dict[str, str], values: Any, stat: str | None = None) -> None:
        """One recorded series (see `_ItemReader.item`), its count or sum slots noted."""
        target = self._target(labels, values, stat)
        if target is None:
            return
        key, col, row = target
        get = self.slot_of.get
        per = self.per_bucket
        if col == 2:
            for t, v in values:
                j = get(t)
                if j is None:
                    j = self._slot_index(t)
                if j >= 0:
                    k = j // per
                    x = float(v)
                    if x > row[k] or x != x:
                        row[k] = x
            return
        mask = 0
        dup = 0
        keep = self.reference and col == 0
        first: float | None = None
        other: dict[int, float] = {}
        for t, v in values:
            j = get(t)
            if j is None:
                j = self._slot_index(t)
            if j < 0:
                continue
            bit = 1 << j
            if mask & bit:
                dup |= bit
            mask |= bit
            x = float(v)
            row[j // per] += x
            if keep:
                if first is None:
                    first = x
                elif x != first:
                    other[j] = x
        with self.lock:
            masks = self.masks.setdefault(key, [0, 0, 0])
            dup |= masks[col] & mask
            masks[col] |= mask
            masks[2] |= dup
            if keep and first is not None:
                self.counts[key] = (first, other)

    def _slot_index(self, t: Any) -> int:
        """The 5-minute slot of a recorded sample's timestamp (seconds) in the window, −1 outside; computed once per timestamp."""
        j = (round(float(t) * 1000) - self.start_ms - 1) // self.slot_ms
        j = j if 0 <= j < self.slots else -1
        self.slot_of[t] = j
        return j

    def resolve(self, reference: _RecordedReader | None) -> None:
        """Add the reference field's count where a sum came without its own count (call once every answer is in)."""
        if reference is self:
            return
        ref_groups = reference.groups if reference is not None else {}
        ref_masks = reference.masks if reference is not None else {}
        ref_counts = reference.counts if reference is not None else {}
        per = self.per_bucket
        for key, (have, summed, dup) in self.masks.items():
            need = summed & ~have
            if not need:
                continue
            counts = self.groups[key][0]
            ref_mask = ref_masks.get(key, (0, 0, 0))
            bad = need & (dup | ref_mask[2])
            if need == ref_mask[0] and not bad:  # the usual case: the reference counted every slot this field summed
                for k, c in enumerate(ref_groups[key][0]):
                    counts[k] += c
                continue
            first, other = ref_counts.get(key, (0.0, {}))
            unresolved: set[int] = set()
            while need:
                low = need & -need
                need ^= low
                j = low.bit_length() - 1
                if ref_mask[0] & low and not bad & low:
                    counts[j // per] += other.get(j, first)
                else:
                    unresolved.add(j // per)
            for k in unresolved:  # no count for part of this bucket's samples: the bucket holds no data
                counts[k] = 0.0


class _StatFeed:
    """Feeds one single-statistic answer (`PlannedQuery.stat`) into the field's shared `_ItemReader`."""

    def __init__(self, reader: _ItemReader, stat: str) -> None:
        self.reader = reader
        self.stat = stat

    def item(self, labels: dict[str, str], values: Any) -> None:
        """One result series (see `_ItemReader.item`)."""
        self.reader.item(labels, values, self.stat)


class _Router:
    """Hands each series of a query that reads several plan entries to the reader of its entry (`METRIC_LABEL`)."""

    def __init__(self, readers: dict[str, _ItemReader]) -> None:
        self.readers = readers

    def item(self, labels: dict[str, str], values: Any) -> None:
        """One result series; a series naming no entry of the query is ignored."""
        reader = self.readers.get(labels.pop(METRIC_LABEL, ""))
        if reader is not None:
            reader.item(labels, values)


_DURATION = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def parse_duration_s(text: str) -> float | None:
    """A Prometheus duration ("15d", "100y", "1w2d", "0s") in seconds; None when absent, zero or not a duration."""
    parts = _DURATION.findall(text.strip())
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        return None
    total = sum(int(n) * _UNIT_S[u] for n, u in parts)
    return total or None


def make_client(settings: PrometheusSettings) -> PrometheusConnect:
    """A `PrometheusConnect` with auth, headers, TLS verification and timeout; its own retries are off.

    Raises:
        ConfigError: when the auth settings are incomplete.
    """
    session = requests.Session()
    session.verify = settings.verify_tls
    if urlsplit(settings.url).scheme == "http":
        # plain HTTP is a Prometheus next to the scan (in-cluster, loopback): gzip would cost its CPU and ours for no
        # bandwidth worth saving (measured in bench/RESULTS.md); https (AMP, remote) keeps requests' gzip. A header in
        # prometheus.headers overrides either.
        session.headers["Accept-Encoding"] = "identity"
    else:
        session.headers["Accept-Encoding"] = "gzip, deflate"  # what BoundedAdapter decodes (bounded); never br/zstd
    session.hooks["response"].append(_raise_for_status)
    client = PrometheusConnect(
        url=settings.url.rstrip("/"),
        headers=dict(settings.headers) or None,
        disable_ssl=not settings.verify_tls,
        retry=Retry(total=0, read=False),  # no urllib3 retries (tenacity retries here); read timeouts stay ReadTimeout
        auth=auth_from_settings(settings),
        session=session,
        timeout=settings.timeout_s,
    )
    # every answer through this session is read bounded (replacing the adapter PrometheusConnect mounted for its URL)
    adapter = BoundedAdapter(max_bytes=int(settings.max_answer_mb * 1_000_000), deadline_s=settings.answer_deadline_s,
                             limit_mb=settings.max_answer_mb)
    for prefix in (client.url, "http://", "https://"):
        session.mount(prefix, adapter)
    return client


__all__ = ["BearerAuth", "PrometheusGpuMetricsSource", "SigV4Auth", "auth_from_settings", "make_client", "parse_duration_s", "safe_url"]

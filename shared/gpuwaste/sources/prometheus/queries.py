"""The Prometheus queries.

Instant and range queries with retries, bounded answers and error translation (the base of
`PrometheusGpuMetricsSource`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import requests
import urllib3
from prometheus_api_client import PrometheusConnect
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from gpuwaste.errors import (
    GpuWasteError,
    SourceAnswerError,
    SourceAuthError,
    SourceUnavailableError,
)
from gpuwaste.sources.prometheus.client import (
    QueryResult,
    _AnswerTooLarge,
    _AnswerTooSlow,
    _AnswerUndecodable,
    _HttpStatusError,
    _transient,
)


class PrometheusQueries:
    """The base of `PrometheusGpuMetricsSource`: its Prometheus HTTP API queries.

    Instant and range queries with the retries, the bounded answers and the error translation (see the package
    docstring); the attributes are set by the source.
    """

    client: PrometheusConnect
    url: str
    timeout_s: float
    max_retries: int
    backoff_s: float
    concurrency: int

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

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

The package, by concern: `client` (the bounded-answer HTTP transport, HTTP errors, `make_client`), `auth` (bearer,
basic, SigV4; URLs without credentials), `queries` (instant and range queries with retries and error translation, the
base of the source), `source` (`PrometheusGpuMetricsSource`, the telemetry port) and `readers` (the result readers
that summarise an answer while it is decoded). The names other modules use are re-exported here.
"""

from gpuwaste.sources.prometheus.auth import BearerAuth, SigV4Auth, auth_from_settings, safe_url
from gpuwaste.sources.prometheus.client import make_client, parse_duration_s
from gpuwaste.sources.prometheus.source import PrometheusGpuMetricsSource

__all__ = [
    "BearerAuth", "PrometheusGpuMetricsSource", "SigV4Auth", "auth_from_settings", "make_client", "parse_duration_s",
    "safe_url",
]

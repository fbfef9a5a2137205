"""Bootstrap: composition root of scan_gpu_waste (scan request or schedule → findings queue).

A cluster is scanned from its live Prometheus (+ the Kubernetes API when access is configured; without it the
cluster state comes from the kube-state-metrics series of the same Prometheus, e.g. AMP with SigV4), or from
`recording` when the config names one (offline runs, tests). Prometheus secrets given by ARN are fetched from Secrets Manager
(Powertools parameters, cached `max_age`) and held as SecretStr, never logged.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import cache
from pathlib import Path

from pydantic import SecretStr

from gpuwaste.bootstrap import pipeline, sources
from gpuwaste.bootstrap.batch import process_batch
from gpuwaste.bootstrap.cloudwatch import NAMESPACE as METRICS_NAMESPACE
from gpuwaste.bootstrap.cloudwatch import record_scan
from gpuwaste.bootstrap.pipeline import LOG_HANDLER as LOG_HANDLER  # the function's log handler
from gpuwaste.models.messages import ScanRequest
from gpuwaste.models.settings import ClusterConfig
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.services.dispatch import scan_id_for
from gpuwaste.services.scan import ScanReport, ScanService

SECRET_MAX_AGE_S = 300


def _secret(arn: str) -> SecretStr:
    from aws_lambda_powertools.utilities import parameters

    text = str(parameters.get_secret(arn, max_age=SECRET_MAX_AGE_S))
    pipeline.remember_secret_text(text)
    return SecretStr(text)


def _with_secrets(cluster: ClusterConfig) -> ClusterConfig:
    prom = cluster.prometheus
    if prom is None:
        return cluster
    auth = prom.auth
    update: dict[str, SecretStr] = {}
    if auth.bearer_token_secret_arn and auth.bearer_token is None:
        update["bearer_token"] = _secret(auth.bearer_token_secret_arn)
    if auth.password_secret_arn and auth.password is None:
        update["password"] = _secret(auth.password_secret_arn)
    if not update:
        return cluster
    return cluster.model_copy(update={"prometheus": prom.model_copy(update={"auth": auth.model_copy(update=update)})})


@cache
def scan_service(cluster_name: str) -> ScanService:
    """The scan service of one configured cluster, sending to FINDINGS_QUEUE_URL (unpriced: pricing is its own stage).

    The allocation ledger its completion carries is priced with the price book the pricing stage uses.

    Raises:
        ConfigError: unknown cluster, missing Prometheus URL, or FINDINGS_QUEUE_URL not set.
    """
    cfg = pipeline.config()
    cluster = cfg.cluster(cluster_name)
    window_s = cfg.scan.window_s
    if cluster.recording:
        only = cfg.model_copy(update={"clusters": [cluster]})  # the recording is read with this cluster's labels
        inputs = sources.recording_sources(Path(cluster.recording), only, cluster_name=cluster.name)
        if inputs.recording is not None and inputs.recording.meta.window_s:
            window_s = inputs.recording.meta.window_s
    else:
        # the cluster state comes from kube-state-metrics when no Kubernetes access is configured (cluster_state "auto")
        inputs = sources.live_sources(_with_secrets(cluster), cfg, window_s=window_s)
    return ScanService(
        cluster_source=inputs.cluster,
        telemetry_source=inputs.telemetry,
        settings=cfg.detectors,
        window=timedelta(seconds=window_s),
        queue=pipeline.queue("findings_queue_url", pipeline.environment(pipeline.ScanEnvironment).findings_queue_url),
        # the share ledger the completion carries to the store (issue 24) is priced as the pricing stage prices
        ledger_price_book=PriceBook.bundled().with_overrides(cfg.pricing),
        delivery=cfg.delivery,
    )


def scan(request: ScanRequest) -> ScanReport:
    """Scan the requested cluster at the request's scheduled time.

    Raises:
        ConfigError, SourceUnavailableError, SourceAuthError, InputFormatError, RetryableError: from the scan.
    """
    return scan_service(request.cluster).scan(at=request.scheduled_time, scan_id=request.scan_id, shard=request.shard,
                                              shard_count=request.shard_count)


def scan_all(scheduled_time: datetime) -> list[ScanReport]:
    """Scan every configured cluster at `scheduled_time` (a schedule invoking the scan directly)."""
    return [
        scan(ScanRequest(cluster=c.name, scheduled_time=scheduled_time, scan_id=scan_id_for(c.name, scheduled_time), shard=k,
                         shard_count=c.scan_shards))
        for c in pipeline.config().clusters for k in range(c.scan_shards)
    ]


__all__ = ["METRICS_NAMESPACE", "process_batch", "record_scan", "scan", "scan_all", "scan_service"]

"""Bootstrap: composition root of export_focus (daily schedule → each cluster's FOCUS rows of the day before, in S3).

Each configured cluster is scanned over the UTC day (window 24 h, evaluated at the next midnight), shard by shard,
with the ledger and findings priced by the pipeline's price book (`bootstrap.price.price_book`: bundled prices, the
config's rate card, and the bill named by BILL_S3_URI), and its rows written to
s3://FOCUS_EXPORT_BUCKET/FOCUS_EXPORT_PREFIX`cluster=<name>/day=<YYYY-MM-DD>/focus.csv` (`services.focus_export`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import cache
from pathlib import Path

from gpuwaste.bootstrap import pipeline, sources
from gpuwaste.bootstrap import price as price_root
from gpuwaste.bootstrap import scan as scan_root
from gpuwaste.bootstrap.pipeline import LOG_HANDLER as LOG_HANDLER  # the function's log handler
from gpuwaste.services.focus_export import FocusExportService, day_before
from gpuwaste.services.scan import ScanReport, ScanService
from gpuwaste.sinks.s3_objects import S3ObjectWriter


def _scan(cluster_name: str, at: datetime, window: timedelta, shard: int, shard_count: int) -> ScanReport:
    """One priced scan of a cluster shard over `window` ending at `at` (no queue: the findings stay here)."""
    cfg = pipeline.config()
    cluster = cfg.cluster(cluster_name)
    window_s = int(window.total_seconds())
    if cluster.recording:
        only = cfg.model_copy(update={"clusters": [cluster]})
        inputs = sources.recording_sources(Path(cluster.recording), only, cluster_name=cluster.name)
    else:
        inputs = sources.live_sources(scan_root._with_secrets(cluster), cfg, window_s=window_s)
    sources.window_for_history(inputs, window_s)
    book = price_root.price_book(price_root.bill_epoch())
    service = ScanService(cluster_source=inputs.cluster, telemetry_source=inputs.telemetry, settings=cfg.detectors,
                          window=window, price_book=book)
    return service.scan(at=at, shard=shard, shard_count=shard_count)


@cache
def export_service() -> FocusExportService:
    """The export service over every configured cluster, writing under FOCUS_EXPORT_BUCKET / FOCUS_EXPORT_PREFIX.

    Raises:
        ConfigError: no configuration, or FOCUS_EXPORT_BUCKET is not set.
    """
    cfg = pipeline.config()
    env = pipeline.environment(pipeline.ExportEnvironment)
    writer = S3ObjectWriter(client=pipeline.client("s3"), bucket=env.focus_export_bucket,
                            prefix=env.focus_export_prefix)
    return FocusExportService(scan=_scan, writer=writer, clusters=[(c.name, c.scan_shards) for c in cfg.clusters],
                              delivery=cfg.delivery, account=env.focus_export_account)


__all__ = ["LOG_HANDLER", "day_before", "export_service"]

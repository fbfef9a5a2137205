"""Bootstrap: composition root of dispatch_scans (schedule → one ScanRequest per configured cluster)."""

from __future__ import annotations

from functools import cache

from gpuwaste.bootstrap import pipeline
from gpuwaste.bootstrap.pipeline import LOG_HANDLER as LOG_HANDLER  # the function's log handler
from gpuwaste.services.dispatch import DispatchService, Pacing


@cache
def dispatch_service() -> DispatchService:
    """The dispatch service for this container (config and queue resolved on first use).

    Raises:
        ConfigError: no configuration, or SCAN_REQUESTS_QUEUE_URL is not set.
    """
    cfg = pipeline.config()
    return DispatchService(clusters=[c.name for c in cfg.clusters], queue=pipeline.queue(
        "scan_requests_queue_url", pipeline.environment(pipeline.DispatchEnvironment).scan_requests_queue_url),
                           shards={c.name: c.scan_shards for c in cfg.clusters},
                           endpoints={c.name: c.prometheus.url.rstrip("/") for c in cfg.clusters
                                      if c.prometheus is not None},
                           pacing=Pacing(spread_s=cfg.scan.dispatch_spread_s, per_endpoint=cfg.scan.scans_per_endpoint,
                                         wave_s=cfg.scan.wave_s))


__all__ = ["dispatch_service"]

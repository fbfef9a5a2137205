"""Service: fan a schedule tick out into one scan request per configured cluster."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime

from gpuwaste.models.base import ensure_utc
from gpuwaste.models.messages import ScanRequest
from gpuwaste.ports import ScanRequestQueue

logger = logging.getLogger(__name__)


def scan_id_for(cluster: str, scheduled_time: datetime) -> str:
    """A deterministic scan id: the same tick for the same cluster gives the same id.

    A schedule fired twice (EventBridge delivers at least once) therefore produces scans that the
    lifecycle recognises as one, and alerts once.
    """
    key = f"{cluster}\x1f{ensure_utc(scheduled_time).isoformat()}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


class DispatchService:
    """One `ScanRequest` per cluster shard at the tick's time (one per cluster unless it is sharded).

    Args:
        clusters: configured cluster names.
        queue: the scan requests queue (scan_gpu_waste).
        shards: cluster name → `ClusterConfig.scan_shards` (absent: 1).
    """

    def __init__(self, *, clusters: Sequence[str], queue: ScanRequestQueue, shards: Mapping[str, int] | None = None) -> None:
        self.clusters = tuple(clusters)
        self.queue = queue
        self.shards = dict(shards or {})

    def dispatch(self, scheduled_time: datetime) -> list[ScanRequest]:
        """Send the requests for `scheduled_time` (the schedule's time, never the wall clock).

        Raises:
            ValueError: `scheduled_time` is naive.
            RetryableError: the queue could not take them.
        """
        at = ensure_utc(scheduled_time)
        requests = [ScanRequest(cluster=c, scheduled_time=at, scan_id=scan_id_for(c, at), shard=k, shard_count=self.shards.get(c, 1))
                    for c in self.clusters for k in range(self.shards.get(c, 1))]
        if requests:
            self.queue.send_scan_requests(requests)
        logger.info("scans dispatched", extra={"clusters": len(requests), "scheduled_time": at.isoformat()})
        return requests


__all__ = ["DispatchService", "scan_id_for"]

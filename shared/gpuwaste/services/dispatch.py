"""Service: fan a schedule tick out into one scan request per configured cluster."""

from __future__ import annotations

import hashlib
import logging
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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


#: SQS's largest DelaySeconds.
MAX_DELAY_S = 900


@dataclass(frozen=True)
class Pacing:
    """How a tick's scan requests are spread (`ScanSettings.dispatch_spread_s`, `scans_per_endpoint`, `wave_s`)."""

    spread_s: int = 0
    per_endpoint: int = 0
    wave_s: int = 60


def pace(requests: Sequence[ScanRequest], endpoints: Mapping[str, str], pacing: Pacing) -> list[ScanRequest]:
    """`requests` with their `start_after_s`, paced per endpoint.

    Per endpoint (cluster → Prometheus URL; a cluster without one is its own), the requests in (cluster, shard) order
    start in waves of `per_endpoint`, `wave_s` apart, each request a stable 0 … `spread_s` seconds (CRC-32 of scan id
    and shard) into its wave — capped at SQS's 900 s (a warning says how many were capped: those start with the last
    wave, over the budget).
    """
    if not pacing.spread_s and not pacing.per_endpoint:
        return list(requests)
    index: dict[str, int] = {}
    out: list[ScanRequest] = []
    capped = 0
    for r in sorted(requests, key=lambda r: (endpoints.get(r.cluster, r.cluster), r.cluster, r.shard)):
        endpoint = endpoints.get(r.cluster, r.cluster)
        i = index.get(endpoint, 0)
        index[endpoint] = i + 1
        wave = i // pacing.per_endpoint if pacing.per_endpoint else 0
        jitter = zlib.crc32(f"{r.scan_id}:{r.shard}".encode()) % (pacing.spread_s + 1) if pacing.spread_s else 0
        delay = wave * pacing.wave_s + jitter
        if delay > MAX_DELAY_S:
            capped += 1
            delay = MAX_DELAY_S
        out.append(r.model_copy(update={"start_after_s": delay}))
    if capped:
        logger.warning("scan waves past SQS's 900 s delay",
                       extra={"capped": capped, "per_endpoint": pacing.per_endpoint, "wave_s": pacing.wave_s})
    order = {(r.cluster, r.shard): k for k, r in enumerate(requests)}
    return sorted(out, key=lambda r: order[(r.cluster, r.shard)])


class DispatchService:
    """One `ScanRequest` per cluster shard at the tick's time (one per cluster unless it is sharded).

    Args:
        clusters: configured cluster names.
        queue: the scan requests queue (scan_gpu_waste).
        shards: cluster name → `ClusterConfig.scan_shards` (absent: 1).
        endpoints: cluster name → its Prometheus URL (the query budget is per endpoint). pacing: see `pace`.
    """

    def __init__(self, *, clusters: Sequence[str], queue: ScanRequestQueue, shards: Mapping[str, int] | None = None,
                 endpoints: Mapping[str, str] | None = None, pacing: Pacing | None = None) -> None:
        self.clusters = tuple(clusters)
        self.queue = queue
        self.shards = dict(shards or {})
        self.endpoints = dict(endpoints or {})
        self.pacing = pacing or Pacing()

    def dispatch(self, scheduled_time: datetime) -> list[ScanRequest]:
        """Send the requests for `scheduled_time` (the schedule's time, never the wall clock).

        Raises:
            ValueError: `scheduled_time` is naive.
            RetryableError: the queue could not take them.
        """
        at = ensure_utc(scheduled_time)
        requests = [ScanRequest(cluster=c, scheduled_time=at, scan_id=scan_id_for(c, at), shard=k,
                                shard_count=self.shards.get(c, 1))
                    for c in self.clusters for k in range(self.shards.get(c, 1))]
        requests = pace(requests, self.endpoints, self.pacing)
        if requests:
            self.queue.send_scan_requests(requests)
        logger.info("scans dispatched", extra={"clusters": len(requests), "scheduled_time": at.isoformat()})
        return requests


__all__ = ["DispatchService", "Pacing", "pace", "scan_id_for"]

"""Bootstrap: composition root of dedupe_findings (priced queue → lifecycle in DynamoDB → alerts/tickets)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from functools import cache
from typing import Any

from gpuwaste.bootstrap import cloudwatch, pipeline
from gpuwaste.bootstrap.batch import deferred_queue, each_message, process_batch
from gpuwaste.bootstrap.cloudwatch import NAMESPACE as METRICS_NAMESPACE
from gpuwaste.bootstrap.cloudwatch import record_lifecycle
from gpuwaste.bootstrap.pipeline import LOG_HANDLER as LOG_HANDLER  # the function's log handler
from gpuwaste.errors import StoreError
from gpuwaste.services.lifecycle import LifecycleService, Outcome
from gpuwaste.store.dynamodb import DynamoDbFindingStore

logger = logging.getLogger(__name__)


@cache
def lifecycle_service() -> LifecycleService:
    """The lifecycle over FINDINGS_TABLE_NAME, alerting to ALERTS_QUEUE_URL and TICKETS_QUEUE_URL (optional).

    Raises:
        ConfigError: no configuration, or FINDINGS_TABLE_NAME / ALERTS_QUEUE_URL is not set.
    """
    env = pipeline.environment(pipeline.DedupeEnvironment)
    store = DynamoDbFindingStore(client=pipeline.client("dynamodb"), table_name=env.findings_table_name)
    return LifecycleService(
        store=store,
        alerts=deferred_queue("alerts_queue_url", env.alerts_queue_url),  # sent per batch; outbox cleared once sent
        tickets=deferred_queue("tickets_queue_url", env.tickets_queue_url) if env.tickets_queue_url else None,
        settings=pipeline.config().lifecycle,
        clock=pipeline.SystemClock(),
        delivery=pipeline.config().delivery,
    )


def process(event: dict[str, Any], context: Any, *, model: Any, record_handler: Callable[[Any], Any]) -> dict[str, Any]:
    """dedupe_findings' batch: the records of every finding of the batch read in one batch read, the records
    handled (`process_batch`), then the outboxes whose messages went out cleared in one batch write."""
    service = lifecycle_service()
    fingerprints: list[str] = []
    for raw in event.get("Records", []):
        try:
            doc = json.loads(raw.get("body") or "{}")
            items = doc.get("findings") if isinstance(doc.get("findings"), list) else [doc]  # a packed batch or one
            fps = [item.get("finding", {}).get("fingerprint") for item in items]
        except (ValueError, AttributeError, RecursionError):  # RecursionError: nested deeper than json goes
            continue  # a poison body: process_batch dead-letters it
        fingerprints.extend(fp for fp in fps if isinstance(fp, str))
    service.defer_clears = True
    try:
        service.prefetch(fingerprints)
        return process_batch(event, context, model=model, record_handler=record_handler)
    finally:
        try:
            service.clear_outboxes()  # a failure leaves outboxes set: the next decision carries them (keys dedupe)
        except StoreError:
            logger.warning("outboxes not cleared; the next sighting re-sends them (delivered once by their keys)")
        service.defer_clears = False


def record_open_waste(cluster: str) -> None:
    """Emit the cluster's open waste (CloudWatch EMF) after its scan completion was applied."""
    service = lifecycle_service()
    cloudwatch.record_open_waste(cluster, service.store, service.delivery)


__all__ = ["Outcome", "each_message", "METRICS_NAMESPACE", "lifecycle_service", "process", "process_batch", "record_lifecycle", "record_open_waste"]

"""Bootstrap: composition root of dedupe_findings (priced queue → lifecycle in DynamoDB → alerts/tickets)."""

from __future__ import annotations

from functools import cache

from gpuwaste.bootstrap import pipeline
from gpuwaste.bootstrap.batch import deferred_queue, process_batch
from gpuwaste.services.lifecycle import LifecycleService
from gpuwaste.store.dynamodb import DynamoDbFindingStore


@cache
def lifecycle_service() -> LifecycleService:
    """The lifecycle over FINDINGS_TABLE_NAME, alerting to ALERTS_QUEUE_URL and TICKETS_QUEUE_URL (optional).

    Raises:
        ConfigError: no configuration, or FINDINGS_TABLE_NAME / ALERTS_QUEUE_URL is not set.
    """
    env = pipeline.env()
    store = DynamoDbFindingStore(client=pipeline.client("dynamodb"), table_name=env.require("findings_table_name"))
    return LifecycleService(
        store=store,
        alerts=deferred_queue("alerts_queue_url"),  # sent per batch of records; outbox cleared once sent
        tickets=deferred_queue("tickets_queue_url") if env.tickets_queue_url else None,
        settings=pipeline.config().lifecycle,
        clock=pipeline.SystemClock(),
        delivery=pipeline.config().delivery,
    )


__all__ = ["process_batch", "lifecycle_service"]

"""Bootstrap: composition root of dedupe_findings (priced queue → lifecycle in DynamoDB → alerts/tickets)."""

from __future__ import annotations

from functools import cache

from gpuwaste.bootstrap import cloudwatch, pipeline
from gpuwaste.bootstrap.batch import DeadLetterBatchProcessor, deferred_queue
from gpuwaste.bootstrap.cloudwatch import NAMESPACE as METRICS_NAMESPACE
from gpuwaste.bootstrap.cloudwatch import record_lifecycle
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


def record_open_waste(cluster: str) -> None:
    """Emit the cluster's open waste (CloudWatch EMF) after its scan completion was applied."""
    service = lifecycle_service()
    cloudwatch.record_open_waste(cluster, service.store, service.delivery)


__all__ = ["METRICS_NAMESPACE", "DeadLetterBatchProcessor", "lifecycle_service", "record_lifecycle", "record_open_waste"]

"""Bootstrap: composition root of dedupe_findings (priced queue → lifecycle in DynamoDB → alerts/tickets)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from functools import cache
from typing import Any

from gpuwaste.bootstrap import cloudwatch, pipeline
from gpuwaste.bootstrap.batch import each_message, process_batch
from gpuwaste.bootstrap.cloudwatch import NAMESPACE as METRICS_NAMESPACE
from gpuwaste.bootstrap.cloudwatch import record_lifecycle
from gpuwaste.bootstrap.pipeline import LOG_HANDLER as LOG_HANDLER  # the function's log handler
from gpuwaste.errors import StoreError
from gpuwaste.ports import AlertQueue
from gpuwaste.queue.batching import DeferredQueue, SendBatch
from gpuwaste.queue.envelopes import EnvelopeSender
from gpuwaste.services.lifecycle import LifecycleBatch, LifecycleService, Outcome
from gpuwaste.store.dynamodb import DynamoDbFindingStore

logger = logging.getLogger(__name__)


@cache
def lifecycle_service() -> LifecycleService:
    """The lifecycle over FINDINGS_TABLE_NAME, alerting to ALERTS_QUEUE_URL and TICKETS_QUEUE_URL (optional).

    Its queues send at once; a batch (`process`) sends through its own, which hold the invocation's outputs.

    Raises:
        ConfigError: no configuration, or FINDINGS_TABLE_NAME / ALERTS_QUEUE_URL is not set.
    """
    env = pipeline.environment(pipeline.DedupeEnvironment)
    store = DynamoDbFindingStore(client=pipeline.client("dynamodb"), table_name=env.findings_table_name)
    return LifecycleService(
        store=store,
        alerts=pipeline.queue("alerts_queue_url", env.alerts_queue_url),
        tickets=pipeline.queue("tickets_queue_url", env.tickets_queue_url) if env.tickets_queue_url else None,
        settings=pipeline.config().lifecycle,
        clock=pipeline.SystemClock(),
        delivery=pipeline.config().delivery,
    )


def fingerprints_of(event: dict[str, Any]) -> list[str]:
    """The fingerprints of every finding of an SQS event's records (a packed batch or single messages); a body that
    cannot be read is skipped (`process_batch` dead-letters it)."""
    fingerprints: list[str] = []
    for raw in event.get("Records", []):
        try:
            doc = json.loads(raw.get("body") or "{}")
            items = doc.get("findings") if isinstance(doc.get("findings"), list) else [doc]  # a packed batch or one
            fps = [item.get("finding", {}).get("fingerprint") for item in items]
        except (ValueError, AttributeError, RecursionError):  # RecursionError: nested deeper than json goes
            continue
        fingerprints.extend(fp for fp in fps if isinstance(fp, str))
    return fingerprints


def time_left(context: Any) -> Callable[[], float] | None:
    """Seconds left in the invocation (`context.get_remaining_time_in_millis`); None without a Lambda context."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return None
    return lambda: float(remaining()) / 1000.0


def _held(queue: AlertQueue, sends: SendBatch) -> AlertQueue:
    """`queue` with its sends held in the invocation's `sends` until the batch is flushed (a queue that is no envelope
    sender, a test's, is used as it is: it sends at once)."""
    return DeferredQueue(queue, sends) if isinstance(queue, EnvelopeSender) else queue


def process(event: dict[str, Any], context: Any, *, model: Any,
            record_handler: Callable[[Any, LifecycleBatch], Any]) -> dict[str, Any]:
    """dedupe_findings' invocation as one `LifecycleBatch`: the records of every finding of the event read in one
    batch read, the records handled (`process_batch`, each with the batch), their messages sent together through
    the batch's queues (one `SendBatch`), then the outboxes whose messages went out cleared in one batch write."""
    service = lifecycle_service()
    sends = SendBatch()
    batch = service.begin(
        fingerprints_of(event),
        alerts=_held(service.alerts, sends),
        tickets=None if service.tickets is None else _held(service.tickets, sends),
        time_left=time_left(context),
    )
    try:
        return process_batch(event, context, model=model, record_handler=lambda record: record_handler(record, batch),
                             outbox=sends)
    finally:
        try:
            batch.close()  # a failure leaves outboxes set: the next decision carries them (keys dedupe)
        except StoreError:
            logger.warning("outboxes not cleared; the next sighting re-sends them (delivered once by their keys)")


def record_open_waste(cluster: str) -> None:
    """Emit the cluster's open waste (CloudWatch EMF) after its scan completion was applied."""
    service = lifecycle_service()
    cloudwatch.record_open_waste(cluster, service.store, service.delivery)


__all__ = ["LifecycleBatch", "METRICS_NAMESPACE", "Outcome", "each_message", "fingerprints_of", "lifecycle_service", "process",
           "process_batch", "record_lifecycle", "record_open_waste", "time_left"]

"""Bootstrap: composition root of notify_slack (alerts queue → every configured chat sink: Slack, Teams, a JSON
webhook); the local chain's notifiers are in `bootstrap.local_delivery`."""

from __future__ import annotations

from functools import cache
from typing import Any

from gpuwaste.bootstrap import delivery, pipeline
from gpuwaste.bootstrap.batch import each_message, process_batch
from gpuwaste.bootstrap.cloudwatch import NAMESPACE as METRICS_NAMESPACE
from gpuwaste.bootstrap.cloudwatch import record_delivery
from gpuwaste.bootstrap.pipeline import LOG_HANDLER as LOG_HANDLER  # the function's log handler
from gpuwaste.services.notify import DeliveryPlan, NotifyService


@cache
def notify_service() -> NotifyService:
    """NotifyService over every configured chat sink (secrets from the config or Secrets Manager) and the DynamoDB
    lifecycle store. Each sink records its own deliveries: a failure of one brings the message back for that one only.

    Raises:
        ConfigError: no configuration, no chat sink, or FINDINGS_TABLE_NAME not set.
    """
    settings = pipeline.config().delivery
    return NotifyService(notifiers=delivery.chat_notifiers(settings), store=delivery.lambda_store(),
                         settings=settings, now=pipeline.SystemClock().now)


def delivery_plan(event: dict[str, Any], context: Any) -> DeliveryPlan:
    """The invocation's delivery plan over its SQS records.

    Records received before (`ApproximateReceiveCount` > 1: a failure or a timeout of an earlier invocation) are
    looked up in Slack before they are posted; in-process waits (429 `Retry-After`) and new groups are bounded by
    the invocation's remaining time (`context.get_remaining_time_in_millis`), the rest is deferred to the queue.
    """
    service = notify_service()
    remaining = getattr(context, "get_remaining_time_in_millis", None)

    def time_left() -> float:
        return float(remaining()) / 1000.0 if remaining is not None else float("inf")

    service.time_left = time_left if remaining is not None else None
    for notifier in service.notifiers:
        notifier.set_time_left(service.time_left)
    records = event.get("Records", [])
    bodies = [str(r.get("body", "")) for r in records]
    again = [str(r.get("body", "")) for r in records
             if int((r.get("attributes") or {}).get("ApproximateReceiveCount", "1") or 1) > 1]
    return service.plan_bodies(bodies, redelivered=again)


__all__ = ["each_message", "METRICS_NAMESPACE", "delivery_plan", "notify_service", "process_batch", "record_delivery"]

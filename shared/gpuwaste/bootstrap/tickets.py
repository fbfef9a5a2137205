"""Bootstrap: composition root of create_tickets (tickets queue → Jira Cloud)."""

from __future__ import annotations

from functools import cache

from gpuwaste.bootstrap import delivery, pipeline
from gpuwaste.bootstrap.batch import DeadLetterBatchProcessor
from gpuwaste.errors import ConfigError
from gpuwaste.ports import FindingStore
from gpuwaste.services.tickets import TicketService
from gpuwaste.settings import GpuWasteConfig


@cache
def ticket_service() -> TicketService:
    """TicketService over Jira (token from the config or Secrets Manager) and the DynamoDB lifecycle store.

    Raises:
        ConfigError: no configuration, Jira not configured, or FINDINGS_TABLE_NAME not set.
    """
    settings = pipeline.config().delivery
    sink = delivery.jira_sink(settings)
    if sink is None:
        raise ConfigError("delivery.jira.base_url: create_tickets needs a Jira site")
    return TicketService(sink=sink, store=delivery.lambda_store(), settings=settings, now=pipeline.SystemClock().now)


def local_ticket_service(config: GpuWasteConfig, store: FindingStore | None) -> TicketService | None:
    """TicketService for the local chain, or None when Jira is not configured."""
    sink = delivery.jira_sink(config.delivery)
    if sink is None:
        return None
    return TicketService(sink=sink, store=store, settings=config.delivery, now=pipeline.SystemClock().now)


__all__ = ["DeadLetterBatchProcessor", "local_ticket_service", "ticket_service"]

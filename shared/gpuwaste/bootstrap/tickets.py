"""Bootstrap: composition root of create_tickets (tickets queue → Jira Cloud); the local chain's ticket service is
in `bootstrap.local_delivery`."""

from __future__ import annotations

from functools import cache

from gpuwaste.bootstrap import delivery, pipeline
from gpuwaste.bootstrap.batch import process_batch
from gpuwaste.bootstrap.pipeline import LOG_HANDLER as LOG_HANDLER  # the function's log handler
from gpuwaste.errors import ConfigError
from gpuwaste.services.tickets import TicketService


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
    return TicketService(sink=sink, store=delivery.lambda_store(), settings=settings, now=pipeline.SystemClock().now,
                         message_link=delivery.message_link(settings))


__all__ = ["process_batch", "ticket_service"]

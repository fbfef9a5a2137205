"""Bootstrap: composition root of create_tickets (tickets queue → Jira Cloud)."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import cache

from rich.console import Console

from gpuwaste.bootstrap import delivery, pipeline
from gpuwaste.bootstrap.batch import process_batch
from gpuwaste.errors import ConfigError
from gpuwaste.ports import FindingStore, TicketSink
from gpuwaste.services.tickets import TicketService, dedupe_label
from gpuwaste.settings import GpuWasteConfig
from gpuwaste.sinks.terminal_tickets import LOCAL_PROJECT, TerminalTicketSink


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


def local_ticket_service(config: GpuWasteConfig, store: FindingStore | None, *, terminal: bool = False,
                         console: Console | None = None) -> TicketService | None:
    """TicketService for the local chain: Jira when `delivery.jira.base_url` is set; else, with `terminal`,
    a sink that prints the ticket it would open (`LOCAL-<n>`, projects default to LOCAL); else None.

    The terminal sink continues the `LOCAL-<n>` numbering of the state file and finds tickets earlier runs
    "created" (by their dedupe label), so a ticket is created once per finding across runs.

    Raises:
        ConfigError: Jira is half configured (see `delivery.jira_sink`).
    """
    sink: TicketSink | None = delivery.jira_sink(config.delivery)
    settings = config.delivery
    if sink is None:
        if not terminal:
            return None
        sink = terminal_sink(store, console)
        if not settings.jira.default_project:
            settings = settings.model_copy(update={
                "jira": settings.jira.model_copy(update={"default_project": LOCAL_PROJECT})})
    return TicketService(sink=sink, store=store, settings=settings, now=pipeline.SystemClock().now,
                         message_link=delivery.message_link(settings))


def terminal_sink(store: FindingStore | None, console: Console | None = None) -> TerminalTicketSink:
    """A TerminalTicketSink that knows the `LOCAL-<n>` tickets already recorded in `store`."""
    keys: dict[str, str] = {}
    if store is not None:
        everything = store.history(since=datetime(1970, 1, 1, tzinfo=UTC), until=datetime(9999, 1, 1, tzinfo=UTC))
        keys = {dedupe_label(r.fingerprint): r.ticket_key for r in everything
                if r.ticket_key and r.ticket_key.startswith(f"{LOCAL_PROJECT}-")}
    numbers = [int(k.rsplit("-", 1)[1]) for k in keys.values() if k.rsplit("-", 1)[1].isdigit()]
    return TerminalTicketSink(console, first_number=max(numbers, default=0) + 1, existing=keys.get)


__all__ = ["process_batch", "local_ticket_service", "terminal_sink", "ticket_service"]

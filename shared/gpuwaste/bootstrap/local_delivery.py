"""Bootstrap: the local command's delivery (gpuwaste run / demo): Slack or Jira when configured, else the
terminal (alerts as panels, tickets as `LOCAL-<n>` lines).

Part of the local composition root with `bootstrap.local`; the Lambda roots (`bootstrap.notify`,
`bootstrap.tickets`) import nothing from here, so the layer ships without rich.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from rich.console import Console

from gpuwaste.bootstrap import delivery, pipeline
from gpuwaste.config import GpuWasteConfig
from gpuwaste.ports import FindingStore, Notifier, TicketSink
from gpuwaste.services.notify import NotifyService
from gpuwaste.services.tickets import TicketService, dedupe_label
from gpuwaste.sinks.terminal_notify import TerminalNotifier
from gpuwaste.sinks.terminal_tickets import LOCAL_PROJECT, TerminalTicketSink


def local_notifier(config: GpuWasteConfig, console: Console | None = None) -> Notifier:
    """Slack when a bot token is configured (`delivery.slack.bot_token`), else the terminal."""
    if config.delivery.slack.bot_token is not None:
        return delivery.slack_notifier(config.delivery)
    return TerminalNotifier(console)


def local_notify_service(config: GpuWasteConfig, store: FindingStore | None, notifier: Notifier | None = None,
                         console: Console | None = None, now: Callable[[], datetime] | None = None) -> NotifyService:
    """NotifyService for `gpuwaste run` (the in-process chain): Slack when configured, else the terminal; and Teams
    and the JSON webhook when configured (each delivers through the state's outbox, recorded per sink).

    `now` defaults to the system clock; a replay of a recording passes the scan time so ages read right.
    """
    return NotifyService(notifier=notifier or local_notifier(config, console),
                         notifiers=delivery.extra_notifiers(config.delivery), store=store,
                         settings=config.delivery, now=now or pipeline.SystemClock().now)


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


__all__ = ["local_notifier", "local_notify_service", "local_ticket_service", "terminal_sink"]

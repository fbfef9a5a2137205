"""Bootstrap: composition root of notify_slack (alerts queue → Slack), and the local chain's notifier."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import cache

from rich.console import Console

from gpuwaste.bootstrap import delivery, pipeline
from gpuwaste.bootstrap.batch import DeadLetterBatchProcessor
from gpuwaste.bootstrap.cloudwatch import NAMESPACE as METRICS_NAMESPACE
from gpuwaste.bootstrap.cloudwatch import record_delivery
from gpuwaste.ports import FindingStore, Notifier
from gpuwaste.services.notify import NotifyService
from gpuwaste.settings import GpuWasteConfig
from gpuwaste.sinks.terminal_notify import TerminalNotifier


@cache
def notify_service() -> NotifyService:
    """NotifyService over Slack (token from the config or Secrets Manager) and the DynamoDB lifecycle store.

    Raises:
        ConfigError: no configuration, no Slack token, or FINDINGS_TABLE_NAME not set.
    """
    settings = pipeline.config().delivery
    return NotifyService(notifier=delivery.slack_notifier(settings), store=delivery.lambda_store(),
                         settings=settings, now=pipeline.SystemClock().now)


def local_notifier(config: GpuWasteConfig, console: Console | None = None) -> Notifier:
    """Slack when a bot token is configured (`delivery.slack.bot_token`), else the terminal."""
    if config.delivery.slack.bot_token is not None:
        return delivery.slack_notifier(config.delivery)
    return TerminalNotifier(console)


def local_notify_service(config: GpuWasteConfig, store: FindingStore | None, notifier: Notifier | None = None,
                         console: Console | None = None, now: Callable[[], datetime] | None = None) -> NotifyService:
    """NotifyService for `gpuwaste run` (the in-process chain): terminal output unless Slack is configured.

    `now` defaults to the system clock; a replay of a recording passes the scan time so ages read right.
    """
    return NotifyService(notifier=notifier or local_notifier(config, console), store=store,
                         settings=config.delivery, now=now or pipeline.SystemClock().now)


__all__ = ["METRICS_NAMESPACE", "DeadLetterBatchProcessor", "local_notifier", "local_notify_service", "notify_service",
           "record_delivery"]

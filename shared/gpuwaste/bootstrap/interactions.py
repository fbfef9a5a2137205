"""Bootstrap: composition root of slack_interactions (Lambda Function URL → lifecycle store)."""

from __future__ import annotations

from functools import cache

from gpuwaste.bootstrap import delivery, pipeline
from gpuwaste.services.interactions import InteractionService
from gpuwaste.services.tickets import TicketService


@cache
def interaction_service() -> InteractionService:
    """InteractionService with the signing secret, the DynamoDB store, Slack for replies and Jira when configured.

    Raises:
        ConfigError: no configuration, no signing secret / token, or FINDINGS_TABLE_NAME not set.
    """
    settings = pipeline.config().delivery
    store = delivery.lambda_store()
    now = pipeline.SystemClock().now
    sink = delivery.jira_sink(settings)
    tickets = TicketService(sink=sink, store=store, settings=settings, now=now) if sink is not None else None
    return InteractionService(
        signing_secret=delivery.slack_signing_secret(settings),
        store=store,
        now=now,
        notifier=delivery.slack_notifier(settings),
        tickets=tickets,
        max_age_s=settings.slack.request_max_age_s,
    )

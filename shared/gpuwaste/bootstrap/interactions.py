"""Bootstrap: composition root of slack_interactions (Lambda Function URL → lifecycle store).

The request is verified first, with nothing but the signing secret: read from the secret named by SLACK_SECRET_ARN
(template.yaml sets it), or, without it, from the configuration document. Only a verified request loads the
configuration, the store, the bot token and Jira — a flood of forged requests costs one HMAC each.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cache

from gpuwaste.bootstrap import delivery, pipeline
from gpuwaste.bootstrap.pipeline import LOG_HANDLER as LOG_HANDLER  # the function's log handler
from gpuwaste.errors import RequestSignatureError
from gpuwaste.services.interactions import HttpReply, InteractionService, refused
from gpuwaste.services.tickets import TicketService
from gpuwaste.sinks.slack_blocks import details_text
from gpuwaste.sinks.slack_interactions import read_request
from gpuwaste.sinks.slack_signature import SlackSignatureVerifier


@cache
def request_verifier() -> SlackSignatureVerifier:
    """Slack's request verifier over the signing secret alone (SLACK_SECRET_ARN's `signing_secret`, else the config).

    Raises:
        ConfigError: the signing secret cannot be read.
    """
    arn = os.environ.get(delivery.SLACK_SECRET_ENV)
    if arn:
        return SlackSignatureVerifier(delivery._secret_field(arn, "signing_secret"))
    settings = pipeline.config().delivery
    return SlackSignatureVerifier(delivery.slack_signing_secret(settings), max_age_s=settings.slack.request_max_age_s)


@cache
def interaction_service() -> InteractionService:
    """InteractionService (requests already verified) over the DynamoDB store, Slack for replies, Jira when configured.

    Raises:
        ConfigError: no configuration, no token, or FINDINGS_TABLE_NAME not set.
    """
    settings = pipeline.config().delivery
    store = delivery.lambda_store()
    now = pipeline.SystemClock().now
    sink = delivery.jira_sink(settings)
    tickets = TicketService(sink=sink, store=store, settings=settings, now=now,
                            message_link=delivery.message_link(settings)) if sink is not None else None
    return InteractionService(verifier=None, reader=read_request, store=store, now=now, notifier=delivery.slack_notifier(settings),
                              tickets=tickets, details_text=details_text)


def handle(headers: Mapping[str, str], body: bytes) -> HttpReply:
    """Verify the request, then (only then) build the service and act on it."""
    try:
        request_verifier().verify(headers, body)
    except RequestSignatureError as exc:
        return refused(exc)
    return interaction_service().handle(headers=headers, body=body)


__all__ = ["handle", "interaction_service", "request_verifier"]

"""Bootstrap: composition root of slack_interactions (Lambda Function URL → lifecycle store).

The request is verified first, with nothing but the signing secret: read from the secret named by SLACK_SECRET_ARN
(template.yaml sets it), or, without it, from the configuration document; its timestamp may be at most
SLACK_REQUEST_MAX_AGE_S old (template.yaml's `SlackRequestMaxAgeSeconds`; at most 300 s, Slack's own limit). Only a
verified request loads the configuration, the store, the bot token and Jira — a flood of forged requests costs one HMAC
each. A verified request is then accepted once: its signature is claimed in the table (`store.once`, kept past the age
window), so the same signed request sent again inside the window — a replay — is refused. The service verifies once
more against the configuration document's `delivery.slack.request_max_age_s`, so a stricter configured age holds too.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from functools import cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from gpuwaste.bootstrap import delivery, pipeline
from gpuwaste.bootstrap.pipeline import LOG_HANDLER as LOG_HANDLER  # the function's log handler
from gpuwaste.errors import RequestSignatureError
from gpuwaste.models.notices import ChatAction
from gpuwaste.ports import OnceLedger
from gpuwaste.services.interactions import HttpReply, InteractionService, refused
from gpuwaste.services.notify import NotifyService
from gpuwaste.services.reclaim import ReclaimService
from gpuwaste.services.tickets import TicketService
from gpuwaste.sinks.slack_blocks import details_text
from gpuwaste.sinks.slack_forms import reason_view
from gpuwaste.sinks.slack_interactions import read_request
from gpuwaste.sinks.slack_signature import LIBRARY_MAX_AGE_S, SlackSignatureVerifier
from gpuwaste.store.once import DynamoDbOnceLedger

#: How long a signed request's claim is kept: past any age window (the request is refused as stale after that anyway).
REPLAY_KEEP = timedelta(seconds=2 * LIBRARY_MAX_AGE_S)


class InteractionEnv(BaseSettings):
    """The Function URL's own settings (env vars, set by template.yaml).

    Attributes:
        slack_request_max_age_s: the oldest request timestamp accepted, seconds (SLACK_REQUEST_MAX_AGE_S, from the
            stack parameter SlackRequestMaxAgeSeconds; Slack's library refuses more than 300 s in any case).
    """

    model_config = SettingsConfigDict(extra="ignore")

    slack_request_max_age_s: int = Field(LIBRARY_MAX_AGE_S, ge=1, le=LIBRARY_MAX_AGE_S)


@cache
def request_verifier() -> SlackSignatureVerifier:
    """Slack's request verifier over the signing secret alone (SLACK_SECRET_ARN's `signing_secret`, else the config),
    refusing timestamps older than SLACK_REQUEST_MAX_AGE_S.

    Raises:
        ConfigError: the signing secret cannot be read.
        pydantic.ValidationError: SLACK_REQUEST_MAX_AGE_S is not an integer in 1..300.
    """
    max_age_s = InteractionEnv().slack_request_max_age_s
    arn = pipeline.environment(pipeline.SecretArnEnvironment).slack_secret_arn
    if arn:
        return SlackSignatureVerifier(delivery._secret_field(arn, "signing_secret"), max_age_s=max_age_s)
    settings = pipeline.config().delivery
    return SlackSignatureVerifier(delivery.slack_signing_secret(settings),
                                  max_age_s=min(max_age_s, settings.slack.request_max_age_s))


@cache
def replay_ledger() -> OnceLedger:
    """Where verified requests are claimed (FINDINGS_TABLE_NAME's once-records).

    Raises:
        ConfigError: FINDINGS_TABLE_NAME is not set.
    """
    table = pipeline.environment(pipeline.DeliveryEnvironment).findings_table_name
    return DynamoDbOnceLedger(client=pipeline.client("dynamodb"), table_name=table)


def first_use(headers: Mapping[str, str]) -> bool:
    """Claim a verified request by its signature; False when it was received before (a replay).

    Raises:
        StoreError: the table cannot be reached (the Function URL answers 500; Slack shows an error).
    """
    lower = {k.lower(): v for k, v in headers.items()}
    key = f"slack-request#{lower.get('x-slack-request-timestamp', '')}#{lower.get('x-slack-signature', '')}"
    now = pipeline.SystemClock().now()
    return replay_ledger().claim(key, now=now, hold_until=now + REPLAY_KEEP, keep_until=now + REPLAY_KEEP) == "claimed"


@cache
def interaction_service() -> InteractionService:
    """InteractionService (requests already verified) over the DynamoDB store, Slack for replies, Jira when configured,
    and, with `reclaim.enabled`, the reclaim service without an actuator (Keep/Approve are recorded in the store; the
    acting itself is done by `gpuwaste serve` or `gpuwaste reclaim`, which hold the cluster's acting role).

    Raises:
        ConfigError: no configuration, no token, or FINDINGS_TABLE_NAME not set.
    """
    settings = pipeline.config().delivery
    store = delivery.lambda_store()
    now = pipeline.SystemClock().now
    sink = delivery.jira_sink(settings)
    tickets = TicketService(sink=sink, store=store, settings=settings, now=now,
                            message_link=delivery.message_link(settings)) if sink is not None else None
    # verified again against the configuration's age (request_verifier checked the stack's before loading anything)
    verifier = SlackSignatureVerifier(delivery.slack_signing_secret(settings), max_age_s=settings.slack.request_max_age_s)
    notifier = delivery.slack_notifier(settings)

    def ask_reason(action: ChatAction) -> bool:
        return bool(action.trigger_id) and notifier.open_form(trigger_id=str(action.trigger_id), view=reason_view(action))

    # reclaim (opt-in): the function holds no cluster credentials, so it performs nothing; "Keep" is a justification
    # in the store and "Approve" records the approval, which the next `gpuwaste serve`/`gpuwaste reclaim` run performs
    config = pipeline.config()
    reclaim = ReclaimService(store=store, actuator=None, notifier=notifier, settings=config.reclaim,
                             now=now) if config.reclaim.enabled else None
    # a ticket a click opens is shown in the finding's message, as one the pipeline opens (edited in place)
    edits = NotifyService(notifier=notifier, store=store, settings=settings, now=now) if tickets is not None else None
    return InteractionService(verifier=verifier, reader=read_request, store=store, now=now,
                              notifier=notifier, tickets=tickets, details_text=details_text, ask_reason=ask_reason,
                              source="slack", reclaim=reclaim, ticket_edits=edits)


def handle(headers: Mapping[str, str], body: bytes) -> HttpReply:
    """Verify the request, refuse a replay of it, then (only then) build the service and act on it."""
    try:
        request_verifier().verify(headers, body)
    except RequestSignatureError as exc:
        return refused(exc)
    if not first_use(headers):
        return refused(RequestSignatureError("request received before (replay refused)"))
    return interaction_service().handle(headers=headers, body=body)


__all__ = ["InteractionEnv", "first_use", "handle", "interaction_service", "replay_ledger", "request_verifier"]

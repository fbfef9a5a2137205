"""Bootstrap: what the delivery functions share — secrets, the Slack notifier, the Jira sink, the store."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

from gpuwaste.bootstrap import pipeline
from gpuwaste.errors import ConfigError
from gpuwaste.settings import DeliverySettings
from gpuwaste.sinks.jira import JiraTicketSink
from gpuwaste.models.notices import MessageRef
from gpuwaste.sinks.slack import SlackNotifier, thread_link
from gpuwaste.store.dynamodb import DynamoDbFindingStore

SECRET_MAX_AGE_S = 300
#: Env vars template.yaml sets; they take precedence over the config document's `*_secret_arn` fields.
SLACK_SECRET_ENV = "SLACK_SECRET_ARN"
JIRA_SECRET_ENV = "JIRA_SECRET_ARN"


def _slack_arn(settings: DeliverySettings) -> str | None:
    return os.environ.get(SLACK_SECRET_ENV) or settings.slack.secret_arn


def _jira_arn(settings: DeliverySettings) -> str | None:
    return os.environ.get(JIRA_SECRET_ENV) or settings.jira.api_token_secret_arn


def _secret(arn: str) -> str:
    """The secret string at `arn` (Powertools parameters, cached `SECRET_MAX_AGE_S`).

    Raises:
        ConfigError: the secret cannot be read.
    """
    from aws_lambda_powertools.utilities import parameters

    try:
        return str(parameters.get_secret(arn, max_age=SECRET_MAX_AGE_S))
    except parameters.exceptions.GetParameterError as exc:
        raise ConfigError(f"{arn}: cannot read the secret: {exc}") from exc


def _secret_field(arn: str, name: str) -> str:
    text = _secret(arn)
    try:
        data = json.loads(text)
    except ValueError:
        return text  # a plain-string secret holds the value itself
    if isinstance(data, dict) and data.get(name):
        return str(data[name])
    raise ConfigError(f"{arn}: the secret has no {name!r} key")


def slack_bot_token(settings: DeliverySettings) -> str:
    """The bot token: `delivery.slack.bot_token`, else the `bot_token` key of the secret (SLACK_SECRET_ARN or
    `delivery.slack.secret_arn`).

    Raises:
        ConfigError: neither is set, or the secret cannot be read.
    """
    if settings.slack.bot_token is not None:
        return settings.slack.bot_token.get_secret_value()
    if arn := _slack_arn(settings):
        return _secret_field(arn, "bot_token")
    raise ConfigError("delivery.slack: set bot_token (local) or secret_arn (Secrets Manager)")


def slack_signing_secret(settings: DeliverySettings) -> str:
    """The signing secret: `delivery.slack.signing_secret`, else the `signing_secret` key of the secret.

    Raises:
        ConfigError: neither is set, or the secret cannot be read.
    """
    if settings.slack.signing_secret is not None:
        return settings.slack.signing_secret.get_secret_value()
    if arn := _slack_arn(settings):
        return _secret_field(arn, "signing_secret")
    raise ConfigError("delivery.slack: set signing_secret (local) or secret_arn (Secrets Manager)")


def slack_notifier(settings: DeliverySettings, *, sleep: Callable[[float], None] = time.sleep) -> SlackNotifier:
    """A SlackNotifier with the configured timeout and retry handlers.

    Raises:
        ConfigError: no bot token.
    """
    return SlackNotifier.from_settings(settings.slack, token=slack_bot_token(settings),
                                       default_channel=settings.default_channel, sleep=sleep)


def message_link(settings: DeliverySettings) -> Callable[[MessageRef], tuple[str, str] | None]:
    """What tickets link to: the finding's Slack thread when `delivery.slack.workspace_url` is set."""
    return thread_link(settings.slack.workspace_url)


def jira_sink(settings: DeliverySettings) -> JiraTicketSink | None:
    """A JiraTicketSink, or None when `delivery.jira.base_url` is not set (tickets off).

    Raises:
        ConfigError: base_url set but no e-mail or API token.
    """
    jira = settings.jira
    if not jira.base_url:
        return None
    email = jira.email
    arn = _jira_arn(settings)
    if jira.api_token is not None:
        token = jira.api_token.get_secret_value()
    elif arn:
        token = _secret_field(arn, "api_token")
        if not email:
            email = _secret_field(arn, "email")
    else:
        raise ConfigError("delivery.jira: set api_token (local) or api_token_secret_arn / JIRA_SECRET_ARN")
    if not email:
        raise ConfigError("delivery.jira.email: the Atlassian account e-mail is required with base_url")
    return JiraTicketSink.from_settings(jira.model_copy(update={"email": email}), api_token=token)


def lambda_store() -> DynamoDbFindingStore:
    """The lifecycle table named by FINDINGS_TABLE_NAME.

    Raises:
        ConfigError: FINDINGS_TABLE_NAME is not set.
    """
    return DynamoDbFindingStore(client=pipeline.client("dynamodb"), table_name=pipeline.env().require("findings_table_name"))

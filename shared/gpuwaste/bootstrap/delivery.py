"""Bootstrap: what the delivery functions share — secrets, the chat sinks (Slack, Teams, a JSON webhook), the Jira
sink, the store."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from gpuwaste.bootstrap import pipeline
from gpuwaste.errors import ConfigError
from gpuwaste.models.notices import MessageRef
from gpuwaste.models.settings import DeliverySettings, outbound_url_problem
from gpuwaste.ports import Notifier
from gpuwaste.sinks.http_delivery import JsonPoster
from gpuwaste.sinks.jira import JiraTicketSink
from gpuwaste.sinks.slack import SlackNotifier, thread_link
from gpuwaste.sinks.teams import TeamsNotifier
from gpuwaste.sinks.webhook import WebhookNotifier
from gpuwaste.store.dynamodb import DynamoDbFindingStore

SECRET_MAX_AGE_S = 300
#: Env vars template.yaml sets; they take precedence over the config document's `*_secret_arn` fields.
SLACK_SECRET_ENV = "SLACK_SECRET_ARN"
JIRA_SECRET_ENV = "JIRA_SECRET_ARN"
TEAMS_SECRET_ENV = "TEAMS_SECRET_ARN"
WEBHOOK_SECRET_ENV = "WEBHOOK_SECRET_ARN"


def _slack_arn(settings: DeliverySettings) -> str | None:
    return pipeline.environment(pipeline.SecretArnEnvironment).slack_secret_arn or settings.slack.secret_arn


def _jira_arn(settings: DeliverySettings) -> str | None:
    return pipeline.environment(pipeline.SecretArnEnvironment).jira_secret_arn or settings.jira.api_token_secret_arn


def _secret(arn: str) -> str:
    """The secret string at `arn` (Powertools parameters, cached `SECRET_MAX_AGE_S`).

    Raises:
        ConfigError: the secret cannot be read.
    """
    from aws_lambda_powertools.utilities import parameters

    try:
        text = str(parameters.get_secret(arn, max_age=SECRET_MAX_AGE_S))
    except parameters.exceptions.GetParameterError as exc:
        raise ConfigError(f"{arn}: cannot read the secret: {exc}") from exc
    pipeline.remember_secret_text(text)
    return text


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


def slack_configured(settings: DeliverySettings) -> bool:
    """A Slack bot token is configured (directly, or through SLACK_SECRET_ARN / `delivery.slack.secret_arn`)."""
    return settings.slack.bot_token is not None or _slack_arn(settings) is not None


def teams_webhook_urls(settings: DeliverySettings) -> dict[str, str]:
    """Teams webhook name → URL: `delivery.msteams.webhooks`, then the JSON object of TEAMS_SECRET_ARN /
    `delivery.msteams.secret_arn` (its names win). The URLs are secrets: never logged.

    Raises:
        ConfigError: the secret cannot be read or is not a JSON object of names to URLs.
    """
    urls = {name: url.get_secret_value() for name, url in settings.msteams.webhooks.items()}
    arn = pipeline.environment(pipeline.SecretArnEnvironment).teams_secret_arn or settings.msteams.secret_arn
    if arn:
        try:
            data = json.loads(_secret(arn))
        except ValueError:
            data = None
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise ConfigError(f"{arn}: the Teams secret must be a JSON object of webhook name → URL")
        for name, url in data.items():
            _check_secret_url(url, where=f"{arn}: webhook {name!r}", allow=settings.msteams.allow_link_local_urls)
        urls.update({str(k): v for k, v in data.items()})
    return urls


def _check_secret_url(url: str, *, where: str, allow: bool) -> None:
    """Refuse a destination URL read from a secret as the config refuses one written in it (http/https only, no
    link-local or metadata-service host unless the section allows it); the message names where, never the URL.

    Raises:
        ConfigError: the URL is refused.
    """
    problem = outbound_url_problem(url, allow_link_local=allow, secret=True)
    if problem:
        raise ConfigError(f"{where}: {problem}")


def teams_notifier(settings: DeliverySettings, *, sleep: Callable[[float], None] = time.sleep) -> TeamsNotifier:
    """A TeamsNotifier over the configured webhooks.

    Raises:
        ConfigError: no default webhook, or its URL is missing.
    """
    urls = teams_webhook_urls(settings)
    default = settings.msteams.default_webhook
    if not default or default not in urls:
        raise ConfigError(f"delivery.msteams.default_webhook: {default!r} has no URL (webhooks or secret_arn)")
    return TeamsNotifier(settings, urls, sleep=sleep)


def webhook_notifier(settings: DeliverySettings, *, sleep: Callable[[float], None] = time.sleep) -> WebhookNotifier:
    """A WebhookNotifier (URL and signing secret from the config or WEBHOOK_SECRET_ARN / `delivery.webhook.secret_arn`).

    Raises:
        ConfigError: no URL.
    """
    hook = settings.webhook
    url = hook.url.get_secret_value() if hook.url is not None else None
    secret = hook.signing_secret.get_secret_value() if hook.signing_secret is not None else None
    arn = pipeline.environment(pipeline.SecretArnEnvironment).webhook_secret_arn or hook.secret_arn
    if arn and url is None:
        url = _secret_field(arn, "url")
        _check_secret_url(url, where=f"{arn}: url", allow=hook.allow_link_local_urls)
        try:
            secret = secret or _secret_field(arn, "signing_secret")
        except ConfigError:
            secret = None
    if not url:
        raise ConfigError("delivery.webhook: set url (local) or secret_arn / WEBHOOK_SECRET_ARN")
    poster = JsonPoster(what="json webhook", timeout_s=hook.timeout_s, rate_limit_retries=hook.rate_limit_retries,
                        server_error_retries=hook.server_error_retries, sleep=sleep, max_retry_after_s=hook.max_retry_after_s)
    return WebhookNotifier(url=url, signing_secret=secret, poster=poster, max_payload_bytes=hook.max_payload_bytes)


def extra_notifiers(settings: DeliverySettings, *, sleep: Callable[[float], None] = time.sleep) -> list[Notifier]:
    """The chat sinks besides Slack that are configured: Teams (`delivery.msteams.default_webhook`), the JSON webhook
    (`delivery.webhook`).

    Raises:
        ConfigError: a sink is half configured.
    """
    out: list[Notifier] = []
    if settings.msteams.enabled:
        out.append(teams_notifier(settings, sleep=sleep))
    if settings.webhook.enabled or pipeline.environment(pipeline.SecretArnEnvironment).webhook_secret_arn:
        out.append(webhook_notifier(settings, sleep=sleep))
    return out


def chat_notifiers(settings: DeliverySettings, *, sleep: Callable[[float], None] = time.sleep) -> list[Notifier]:
    """Every configured chat sink (the notify function's): Slack when a token is configured, Teams, the JSON webhook.

    Raises:
        ConfigError: none is configured, or one is half configured.
    """
    out: list[Notifier] = [slack_notifier(settings, sleep=sleep)] if slack_configured(settings) else []
    out += extra_notifiers(settings, sleep=sleep)
    if not out:
        raise ConfigError("delivery: no chat sink configured (delivery.slack, delivery.msteams or delivery.webhook)")
    return out


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
    table = pipeline.environment(pipeline.DeliveryEnvironment).findings_table_name
    return DynamoDbFindingStore(client=pipeline.client("dynamodb"), table_name=table)

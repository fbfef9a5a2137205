"""Adapter: notices → Slack Web API (slack_sdk), with bounded retries and errors translated for the queue.

429 is retried in-process honouring `Retry-After` (slack_sdk's RateLimitErrorRetryHandler), 5xx a bounded
number of times (ServerErrorRetryHandler); what still fails raises DeliveryError, so the SQS message is
not acknowledged and comes back. invalid_auth and malformed payloads raise PermanentDeliveryError. A routed
channel that does not exist falls back to the default channel and the message says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler, ServerErrorRetryHandler
from slack_sdk.http_retry.handler import RetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState

from gpuwaste.errors import DeliveryError, PermanentDeliveryError
from gpuwaste.models.notices import DailySummary, Notice, PostedMessage
from gpuwaste.settings import SlackSettings
from gpuwaste.sinks.slack_blocks import SlackPayload, render_notice, render_summary

logger = logging.getLogger(__name__)

_RETRYABLE = {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
_CHANNEL_MISSING = {"channel_not_found", "is_archived", "not_in_channel"}


class ChannelMissingError(PermanentDeliveryError):
    """The channel does not exist, is archived, or the bot is not in it (the caller may fall back)."""


class MessageMissingError(PermanentDeliveryError):
    """The message to edit no longer exists."""


class RetryAfterHandler(RateLimitErrorRetryHandler):
    """RateLimitErrorRetryHandler that sleeps exactly `Retry-After` seconds through an injectable `sleep`."""

    def __init__(self, max_retry_count: int = 3, sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.sleep = sleep

    def prepare_for_next_attempt(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        """Wait `Retry-After` seconds (1 s when absent), then ask for another attempt."""
        if response is None:
            raise error or DeliveryError("slack: rate limited without a response")
        header = next((v for k, v in response.headers.items() if k.lower() == "retry-after"), None)
        value = header[0] if isinstance(header, list) else header
        try:
            duration = float(value) if value is not None else 1.0
        except ValueError:
            duration = 1.0
        state.next_attempt_requested = True
        self.sleep(duration)
        state.increment_current_attempt()


class ServerErrorHandler(ServerErrorRetryHandler):
    """ServerErrorRetryHandler whose back-off sleep is injectable (tests pass a recorder)."""

    def __init__(self, max_retry_count: int = 1, sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.sleep = sleep

    def prepare_for_next_attempt(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        """Back off (0.5 s, 1 s, …) and ask for another attempt."""
        state.next_attempt_requested = True
        self.sleep(self.interval_calculator.calculate_sleep_duration(state.current_attempt))
        state.increment_current_attempt()


def _translate(exc: SlackClientError, method: str) -> Exception:
    """SlackApiError/transport error → DeliveryError (retry via the queue) or PermanentDeliveryError."""
    if isinstance(exc, SlackApiError):
        status = exc.response.status_code
        error = str(exc.response.get("error") or "")
        if status == 429 or status >= 500 or error in _RETRYABLE:
            return DeliveryError(f"slack {method}: {error or status} (retried; will retry via the queue)")
        if error in ("invalid_auth", "not_authed", "account_inactive", "token_revoked", "missing_scope"):
            return PermanentDeliveryError(f"slack {method}: {error}: check the bot token and its scopes")
        if error in ("message_not_found", "cant_update_message"):
            return MessageMissingError(f"slack {method}: {error}")
        if error in _CHANNEL_MISSING:
            return ChannelMissingError(f"slack {method}: {error}")
        detail = exc.response.get("response_metadata", {}).get("messages") if exc.response.data else None
        extra = f" ({'; '.join(detail)})" if isinstance(detail, list) else ""
        return PermanentDeliveryError(f"slack {method}: {error or status}{extra}")
    return DeliveryError(f"slack {method}: {type(exc).__name__}: {exc}")


class SlackNotifier:
    """Notifier over `slack_sdk.WebClient`.

    Args:
        client: a WebClient built by `from_settings` (timeout and retry handlers set).
        default_channel: where a finding goes when its routed channel does not exist.
        now: clock for "since" ages in messages.
    """

    def __init__(self, client: WebClient, *, default_channel: str, now: Callable[[], datetime] | None = None) -> None:
        self.client = client
        self.default_channel = default_channel
        self._now = now or (lambda: datetime.now(UTC))
        self._user_ids: dict[str, str | None] = {}

    @classmethod
    def from_settings(
        cls,
        settings: SlackSettings,
        *,
        token: str,
        default_channel: str,
        sleep: Callable[[float], None] = time.sleep,
    ) -> SlackNotifier:
        """A notifier with a timeout, 429 retries honouring Retry-After and bounded 5xx retries."""
        handlers: list[RetryHandler] = [
            RetryAfterHandler(max_retry_count=settings.rate_limit_retries, sleep=sleep),
            ServerErrorHandler(max_retry_count=settings.server_error_retries, sleep=sleep),
        ]
        client = WebClient(token=token, base_url=settings.base_url, timeout=int(settings.timeout_s), retry_handlers=handlers)
        return cls(client, default_channel=default_channel)

    def _call(self, method: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self.client.api_call(method, json=kwargs)
        except SlackClientError as exc:
            raise _translate(exc, method) from exc
        return dict(response.data) if isinstance(response.data, dict) else {}

    def _send(self, method: str, payload: SlackPayload, channel: str, **extra: Any) -> tuple[dict[str, Any], str | None]:
        """Send, falling back to the default channel once when the routed one is missing."""
        try:
            return self._call(method, channel=channel, **payload.as_kwargs(), **extra), None
        except ChannelMissingError:
            if channel == self.default_channel or method != "chat.postMessage":
                raise
        logger.warning("slack channel not found, using the default channel", extra={"channel": channel})
        return {}, channel

    def post(self, notice: Notice, *, channel: str | None = None, thread_ts: str | None = None) -> list[PostedMessage]:
        """See `gpuwaste.ports.Notifier.post`."""
        target = channel or notice.route.channel
        extra = {"thread_ts": thread_ts} if thread_ts else {}
        posted: list[PostedMessage] = []
        fell_back: str | None = None
        for payload in render_notice(notice, now=self._now()):
            data, missing = self._send("chat.postMessage", payload, target, **extra)
            if missing is not None:
                fell_back, target = missing, self.default_channel
                fixed = render_notice(notice, now=self._now(), fell_back_from=fell_back)
                payload = next(p for p in fixed if p.fingerprints == payload.fingerprints)
                data = self._call("chat.postMessage", channel=target, **payload.as_kwargs(), **extra)
            posted.append(
                PostedMessage(channel=str(data.get("channel") or target), ts=str(data["ts"]), fingerprints=payload.fingerprints,
                              fell_back_from=fell_back)
            )
        return posted

    def update(self, notice: Notice, *, channel: str, ts: str) -> PostedMessage:
        """See `gpuwaste.ports.Notifier.update` (a long notice keeps only its first part in the edit)."""
        payload = render_notice(notice, now=self._now())[0]
        try:
            data = self._call("chat.update", channel=channel, ts=ts, **payload.as_kwargs())
        except MessageMissingError:  # the original was deleted: say it in a new message instead
            logger.warning("slack message to edit is gone; posting a new one", extra={"channel": channel})
            data = self._call("chat.postMessage", channel=channel, **payload.as_kwargs())
        return PostedMessage(channel=str(data.get("channel") or channel), ts=str(data.get("ts") or ts),
                             fingerprints=payload.fingerprints)

    def reply(self, *, channel: str, thread_ts: str, text: str) -> PostedMessage:
        """See `gpuwaste.ports.Notifier.reply`."""
        data = self._call("chat.postMessage", channel=channel, thread_ts=thread_ts, text=text)
        return PostedMessage(channel=str(data.get("channel") or channel), ts=str(data["ts"]))

    def user_id(self, email: str) -> str | None:
        """See `gpuwaste.ports.Notifier.user_id` (cached per instance; unknown users are None)."""
        if email not in self._user_ids:
            try:
                data = self._call("users.lookupByEmail", email=email)
                self._user_ids[email] = str(data.get("user", {}).get("id") or "") or None
            except PermanentDeliveryError:
                self._user_ids[email] = None
        return self._user_ids[email]

    def post_summary(
        self, summary: DailySummary, *, channel: str, chart_png: bytes | None, note: str | None = None
    ) -> PostedMessage:
        """See `gpuwaste.ports.Notifier.post_summary`: the message, then the chart in its thread."""
        payload = render_summary(summary, chart_note=note)
        data, missing = self._send("chat.postMessage", payload, channel)
        if missing is not None:
            channel = self.default_channel
            data = self._call("chat.postMessage", channel=channel, **payload.as_kwargs())
        posted = PostedMessage(channel=str(data.get("channel") or channel), ts=str(data["ts"]), fell_back_from=missing)
        if chart_png is not None:
            try:
                self.client.files_upload_v2(
                    channel=posted.channel,
                    thread_ts=posted.ts,
                    content=chart_png,
                    filename=f"gpu-waste-{summary.since:%Y-%m-%d}.png",
                    title="GPU waste per team, by kind (USD)",
                )
            except SlackClientError as exc:
                raise _translate(exc, "files.upload") from exc
        return posted

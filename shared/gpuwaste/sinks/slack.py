"""Adapter: notices → Slack Web API (slack_sdk), with bounded retries and errors translated for the queue.

429 is retried in-process honouring `Retry-After` (slack_sdk's RateLimitErrorRetryHandler), 5xx a bounded
number of times (ServerErrorRetryHandler); what still fails raises DeliveryError, so the SQS message is
not acknowledged and comes back. invalid_auth and malformed payloads raise PermanentDeliveryError. A routed
channel that does not exist falls back to the default channel and the message says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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
from gpuwaste.models.notices import DailySummary, MessageRef, Notice, NoticeKind, PostedMessage
from gpuwaste.models.settings import SlackSettings
from gpuwaste.sinks.http_delivery import retry_after_deferred
from gpuwaste.sinks.slack_blocks import (
    ACTION_PREFIX,
    MESSAGE_TEXT_BUDGET,
    SlackPayload,
    escape,
    render_notice,
    render_summary,
    render_text_only,
)

logger = logging.getLogger(__name__)

_RETRYABLE = {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
_CHANNEL_MISSING = {"channel_not_found", "is_archived", "not_in_channel"}
#: Slack's answers to a message that is too large as a whole (B33); retried smaller, then as text only.
_TOO_LARGE = {"msg_blocks_too_long", "invalid_blocks", "msg_too_long"}
#: `event_type` of the message metadata that marks gpuwaste's top-level posts (so a retry after a crash or a
#: Lambda timeout can find a post Slack accepted but whose answer was lost, instead of posting it again).
DELIVERY_EVENT = "gpuwaste_delivery"
#: Recent channel messages searched for such a post (pages of 200).
HISTORY_PAGES = 3
#: Seconds kept free of in-process waits before the invocation's deadline.
DEADLINE_RESERVE_S = 5.0
#: The sink's registered name (message references and delivery keys carry it).
SINK = "slack"


class ChannelMissingError(PermanentDeliveryError):
    """The channel does not exist, is archived, or the bot is not in it (the caller may fall back)."""


class MessageMissingError(PermanentDeliveryError):
    """The message to edit no longer exists."""


class MessageTooLargeError(PermanentDeliveryError):
    """Slack refused the message for its size or its blocks (`msg_blocks_too_long`, `invalid_blocks`)."""


def _retry_after_s(response: HttpResponse) -> float:
    header = next((v for k, v in response.headers.items() if k.lower() == "retry-after"), None)
    value = header[0] if isinstance(header, list) else header
    try:
        return float(value) if value is not None else 1.0
    except ValueError:
        return 1.0


class RetryAfterHandler(RateLimitErrorRetryHandler):
    """RateLimitErrorRetryHandler that sleeps exactly `Retry-After` seconds through an injectable `sleep`."""

    def __init__(self, max_retry_count: int = 3, sleep: Callable[[float], None] = time.sleep,
                 time_left: Callable[[], float] | None = None, max_retry_after_s: float = 60.0) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.sleep = sleep
        #: outside Lambda (no `time_left`), the longest Retry-After waited; a longer one defers the delivery
        self.max_retry_after_s = max_retry_after_s
        #: seconds left to the caller (a Lambda's remaining time); a longer `Retry-After` is not waited for
        self.time_left = time_left

    def can_retry(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        """Retry a 429 only when its `Retry-After` ends well before the caller's deadline (else the message is
        deferred through the queue: the 429 surfaces as DeliveryError). Outside Lambda a `Retry-After` longer than
        `max_retry_after_s` is not waited out either.

        Raises:
            DeliveryError: outside Lambda, the 429's `Retry-After` is over `max_retry_after_s` (deferred, saying so).
        """
        if not super().can_retry(state=state, request=request, response=response, error=error):
            return False
        if self.time_left is None and response is not None:
            wait = _retry_after_s(response)
            if wait > self.max_retry_after_s:
                raise DeliveryError(retry_after_deferred("slack", wait, self.max_retry_after_s))
        if self.time_left is not None and response is not None:
            wait = _retry_after_s(response)
            if wait > self.time_left() - DEADLINE_RESERVE_S:
                logger.info("slack rate limit outlasts the time left; deferring to the queue",
                            extra={"retry_after_s": wait})
                return False
        return True

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
        state.next_attempt_requested = True
        self.sleep(_retry_after_s(response))
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
        if error in ("message_not_found", "cant_update_message", "thread_not_found"):
            return MessageMissingError(f"slack {method}: {error}")
        if error in _CHANNEL_MISSING:
            return ChannelMissingError(f"slack {method}: {error}")
        detail = exc.response.get("response_metadata", {}).get("messages") if exc.response.data else None
        if error in _TOO_LARGE:
            extra = f" ({'; '.join(detail)})" if isinstance(detail, list) else ""
            return MessageTooLargeError(f"slack {method}: {error}{extra}")
        detail = exc.response.get("response_metadata", {}).get("messages") if exc.response.data else None
        extra = f" ({'; '.join(detail)})" if isinstance(detail, list) else ""
        return PermanentDeliveryError(f"slack {method}: {error or status}{extra}")
    return DeliveryError(f"slack {method}: {type(exc).__name__}: {exc}")


@dataclass
class _PostContext:
    target: str
    thread_ts: str | None
    on_posted: Callable[[PostedMessage], None] | None
    fell_back: str | None = None
    posted: list[PostedMessage] = field(default_factory=list)


def _sub_notice(notice: Notice, fingerprints: tuple[str, ...]) -> Notice:
    keep = set(fingerprints)
    items = tuple(i for i in notice.items if i.fingerprint in keep)
    return notice.model_copy(update={"items": items}) if items else notice


def _family(kind: str) -> str:
    """Alerts and digests are one family (a retried digest may shrink to one alert)."""
    return "new" if kind in (NoticeKind.ALERT.value, NoticeKind.DIGEST.value) else kind


def _marker(notice: Notice, fingerprints: tuple[str, ...]) -> dict[str, Any]:
    """Message metadata naming the scan, the notice kind and the findings (first 16 hex of each fingerprint); with the
    notice's idempotency key (`key`) when it has one, and the findings it shows resolved (`resolved`)."""
    payload: dict[str, Any] = {"scan": notice.scan_id, "kind": notice.kind.value, "fps": [f[:16] for f in fingerprints]}
    if notice.delivery_key:
        payload["key"] = notice.delivery_key
    resolved = [i.fingerprint[:16] for i in notice.items if i.resolved and i.fingerprint in fingerprints]
    if resolved:
        payload["resolved"] = resolved
    return {"event_type": DELIVERY_EVENT, "event_payload": payload}


def _shows(payload: dict[str, Any], notice: Notice) -> bool:
    """The metadata `payload` of a message says it carries `notice` already: its idempotency key, or — for a
    resolution — every finding the notice shows resolved is shown resolved (a later edit of the same message
    carries an earlier one's resolutions, so one edit is not repeated because another came after it)."""
    if notice.delivery_key and payload.get("key") == notice.delivery_key:
        return True
    wanted = {i.fingerprint[:16] for i in notice.items if i.resolved}
    shown = payload.get("resolved")
    return bool(wanted) and isinstance(shown, list) and wanted <= {str(f) for f in shown}


def _posted(channel: str, ts: str, *, thread_ts: str | None = None, fingerprints: tuple[str, ...] = (),
            fell_back_from: str | None = None) -> PostedMessage:
    """A Slack message (channel id, `ts`, thread `ts`) as the neutral reference the lifecycle keeps."""
    return PostedMessage(sink=SINK, destination=channel, message_id=ts, thread=thread_ts, fingerprints=fingerprints,
                         fell_back_from=fell_back_from)


def _thread_ts(message: MessageRef) -> str:
    """The `thread_ts` to reply to `message` with: its thread's, else its own `ts`."""
    return message.thread or message.message_id


class SlackNotifier:
    """Notifier over `slack_sdk.WebClient`.

    Args:
        client: a WebClient built by `from_settings` (timeout and retry handlers set).
        default_channel: where a finding goes when its routed channel does not exist.
        now: clock for "since" ages in messages.
    """

    name = SINK
    threads = True
    edits = True

    def __init__(self, client: WebClient, *, default_channel: str, now: Callable[[], datetime] | None = None) -> None:
        self.client = client
        self.default_channel = default_channel
        self._now = now or (lambda: datetime.now(UTC))
        self._user_ids: dict[str, str | None] = {}
        self._history_denied = False

    def set_time_left(self, time_left: Callable[[], float] | None) -> None:
        """Cap in-process `Retry-After` waits by the caller's remaining seconds (a Lambda's remaining time)."""
        for handler in self.client.retry_handlers:
            if isinstance(handler, RetryAfterHandler):
                handler.time_left = time_left

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
            RetryAfterHandler(max_retry_count=settings.rate_limit_retries, sleep=sleep, max_retry_after_s=settings.max_retry_after_s),
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

    def post(self, notice: Notice, *, reply_to: MessageRef | None = None,
             on_posted: Callable[[PostedMessage], None] | None = None) -> list[PostedMessage]:
        """See `gpuwaste.ports.Notifier.post`.

        Each part is handed to `on_posted` as soon as Slack accepts it (so the caller records it before the next
        part is tried). A part Slack refuses for its size (`msg_blocks_too_long`, `invalid_blocks`) is split at half
        the text budget and retried, then sent as text only: never dropped for its size. Top-level posts carry
        message metadata naming the scan and findings, which `find_posted` looks for.
        """
        if reply_to is not None and reply_to.sink == SINK and reply_to.message_id:
            ctx = _PostContext(target=reply_to.destination, thread_ts=_thread_ts(reply_to), on_posted=on_posted)
        else:
            ctx = _PostContext(target=notice.route.channel, thread_ts=None, on_posted=on_posted)
        self._post_payloads(notice, render_notice(notice, now=self._now()), ctx, level=0)
        return ctx.posted

    def _post_payloads(self, notice: Notice, payloads: list[SlackPayload], ctx: _PostContext, *, level: int) -> None:
        for payload in payloads:
            try:
                self._post_payload(notice, payload, ctx)
            except MessageTooLargeError as exc:
                sub = _sub_notice(notice, payload.fingerprints)
                if not payload.blocks:
                    raise  # already text only: nothing smaller to send
                logger.warning("slack refused the message for its size; retrying smaller",
                               extra={"error": str(exc), "level": level, "findings": len(payload.fingerprints)})
                if level == 0:
                    smaller = render_notice(sub, now=self._now(), fell_back_from=ctx.fell_back,
                                            budget=MESSAGE_TEXT_BUDGET // 2)
                    self._post_payloads(sub, smaller, ctx, level=1)
                else:
                    self._post_payloads(sub, render_text_only(sub, now=self._now(), fell_back_from=ctx.fell_back),
                                        ctx, level=2)

    def _post_payload(self, notice: Notice, payload: SlackPayload, ctx: _PostContext) -> None:
        extra: dict[str, Any] = {"thread_ts": ctx.thread_ts} if ctx.thread_ts else {}
        extra["metadata"] = _marker(notice, payload.fingerprints)
        try:
            data = self._call("chat.postMessage", channel=ctx.target, **payload.as_kwargs(), **extra)
        except ChannelMissingError:
            if ctx.target == self.default_channel:
                raise
            logger.warning("slack channel not found, using the default channel", extra={"channel": ctx.target})
            ctx.fell_back, ctx.target = ctx.target, self.default_channel
            sub = _sub_notice(notice, payload.fingerprints)
            for fixed in render_notice(sub, now=self._now(), fell_back_from=ctx.fell_back):
                self._post_payload(sub, fixed, ctx)
            return
        message = _posted(str(data.get("channel") or ctx.target), str(data["ts"]), thread_ts=ctx.thread_ts,
                          fingerprints=payload.fingerprints, fell_back_from=ctx.fell_back)
        ctx.posted.append(message)
        if ctx.on_posted is not None:
            ctx.on_posted(message)

    def find_posted(self, notice: Notice, *, reply_to: MessageRef | None = None) -> list[PostedMessage]:
        """See `gpuwaste.ports.Notifier.find_posted`: with `reply_to` (a Slack message), the messages of its thread
        (`conversations.replies`: the original, edited or not, and its replies) whose metadata carries the notice
        (`_shows`); else recent top-level messages of the routed and the default channel whose metadata names this
        notice's scan and kind, with the notice's findings they carry.

        Needs the `channels:history` scope (and `groups:history` for private channels); without it nothing is found
        (logged once) and the caller posts again: at least once rather than never.
        """
        if self._history_denied:
            return []
        if reply_to is not None and reply_to.sink == SINK and reply_to.message_id:
            return self._find_in_thread(notice, reply_to)
        wanted = {item.fingerprint[:16]: item.fingerprint for item in notice.items}
        found: list[PostedMessage] = []
        for channel in dict.fromkeys((notice.route.channel, self.default_channel)):
            cursor: str | None = None
            for _ in range(HISTORY_PAGES):
                args: dict[str, Any] = {"channel": channel, "limit": 200, "include_all_metadata": True}
                if cursor:
                    args["cursor"] = cursor
                try:
                    data = self._call("conversations.history", **args)
                except ChannelMissingError:
                    break
                except PermanentDeliveryError as exc:
                    logger.warning("cannot read channel history; a retried post may repeat", extra={"error": str(exc)})
                    self._history_denied = True
                    return found
                for message in data.get("messages") or []:
                    meta = message.get("metadata") or {}
                    payload = meta.get("event_payload") or {}
                    if meta.get("event_type") != DELIVERY_EVENT or payload.get("scan") != notice.scan_id \
                            or _family(str(payload.get("kind"))) != _family(notice.kind.value):
                        continue
                    fps = tuple(wanted[p] for p in payload.get("fps") or [] if p in wanted)
                    if fps:
                        found.append(_posted(str(data.get("channel") or channel), str(message.get("ts")),
                                             fingerprints=fps))
                cursor = (data.get("response_metadata") or {}).get("next_cursor") or None
                if not cursor:
                    break
        return found

    def _find_in_thread(self, notice: Notice, ref: MessageRef) -> list[PostedMessage]:
        """Messages of `ref`'s thread (its parent first) whose metadata carries `notice` (`_shows`)."""
        found: list[PostedMessage] = []
        thread_ts = _thread_ts(ref)
        cursor: str | None = None
        for _ in range(HISTORY_PAGES):
            args: dict[str, Any] = {"channel": ref.destination, "ts": thread_ts, "limit": 200,
                                    "include_all_metadata": True}
            if cursor:
                args["cursor"] = cursor
            try:
                data = self._call("conversations.replies", **args)
            except (ChannelMissingError, MessageMissingError):
                return found  # the conversation is gone: nothing of it was accepted that a retry could repeat
            except PermanentDeliveryError as exc:
                logger.warning("cannot read the thread; a retried reply may repeat", extra={"error": str(exc)})
                self._history_denied = True
                return found
            for message in data.get("messages") or []:
                meta = message.get("metadata") or {}
                payload = meta.get("event_payload") or {}
                if meta.get("event_type") == DELIVERY_EVENT and isinstance(payload, dict) and _shows(payload, notice):
                    ts = str(message.get("ts"))
                    found.append(_posted(ref.destination, ts, thread_ts=None if ts == thread_ts else thread_ts,
                                         fingerprints=tuple(i.fingerprint for i in notice.items)))
            cursor = (data.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                break
        return found

    def update(self, notice: Notice, *, message: MessageRef) -> PostedMessage:
        """See `gpuwaste.ports.Notifier.update` (a long notice keeps only its first part in the edit)."""
        channel, ts = message.destination, message.message_id
        payload = render_notice(notice, now=self._now())[0]
        try:
            data = self._call("chat.update", channel=channel, ts=ts, metadata=_marker(notice, payload.fingerprints),
                              **payload.as_kwargs())
        except MessageMissingError:  # the original was deleted: say it in a new message instead
            logger.warning("slack message to edit is gone; posting a new one", extra={"channel": channel})
            data = self._call("chat.postMessage", channel=channel, metadata=_marker(notice, payload.fingerprints),
                              **payload.as_kwargs())
        return _posted(str(data.get("channel") or channel), str(data.get("ts") or ts), thread_ts=message.thread,
                       fingerprints=payload.fingerprints)

    def reply(self, *, message: MessageRef, text: str) -> PostedMessage:
        """See `gpuwaste.ports.Notifier.reply`."""
        thread_ts = _thread_ts(message)
        data = self._call("chat.postMessage", channel=message.destination, thread_ts=thread_ts, text=text)
        return _posted(str(data.get("channel") or message.destination), str(data["ts"]), thread_ts=thread_ts)

    def announce(self, *, message: MessageRef, text: str, buttons: Sequence[tuple[str, str, str]]) -> PostedMessage:
        """See `gpuwaste.ports.ReclaimNotifier.announce`: a thread reply with the text and `gpuwaste_<action>` buttons."""
        thread_ts = _thread_ts(message)
        blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": escape(text)[:2900]}}]
        if buttons:
            blocks.append({"type": "actions", "block_id": f"gpuwaste_reclaim_{buttons[0][2][:16]}", "elements": [
                {"type": "button", "action_id": f"{ACTION_PREFIX}{action}", "text": {"type": "plain_text", "text": label},
                 "value": f"{action}|{fingerprint}", **({"style": "primary"} if action.endswith("keep") else {})}
                for action, label, fingerprint in buttons]})
        data = self._call("chat.postMessage", channel=message.destination, thread_ts=thread_ts, text=text[:3000],
                          blocks=blocks)
        return _posted(str(data.get("channel") or message.destination), str(data["ts"]), thread_ts=thread_ts)

    def open_form(self, *, trigger_id: str, view: dict[str, Any]) -> bool:
        """Open a modal (`views.open`) in answer to a click; False when Slack refused it (an expired trigger)."""
        try:
            self._call("views.open", trigger_id=trigger_id, view=view)
        except (PermanentDeliveryError, DeliveryError) as exc:
            logger.warning("views.open failed", extra={"error": str(exc)[:200]})
            return False
        return True

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
        posted = _posted(str(data.get("channel") or channel), str(data["ts"]), fell_back_from=missing)
        if chart_png is not None:
            try:
                self.client.files_upload_v2(
                    channel=posted.destination,
                    thread_ts=posted.message_id,
                    content=chart_png,
                    filename=f"gpu-waste-{summary.since:%Y-%m-%d}.png",
                    title="GPU waste per team, by kind (USD)",
                )
            except SlackClientError as exc:
                raise _translate(exc, "files.upload") from exc
        return posted


def thread_link(workspace_url: str | None) -> Callable[[MessageRef], tuple[str, str] | None]:
    """(heading, permalink) of a Slack message (https://WORKSPACE.slack.com/archives/CHANNEL/pTS) for tickets; None
    for other sinks' messages or without `delivery.slack.workspace_url`."""

    def link(ref: MessageRef) -> tuple[str, str] | None:
        if not (workspace_url and ref.sink == SINK and ref.destination and ref.message_id):
            return None
        ts = ref.thread or ref.message_id
        return "Slack thread", f"{workspace_url.rstrip('/')}/archives/{ref.destination}/p{ts.replace('.', '')}"

    return link

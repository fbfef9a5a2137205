"""Service: Slack button clicks (snooze 1 day / 7 days, expected, create ticket) → the finding lifecycle.

Every request is authenticated with Slack's signing secret: `v0=` + hex HMAC-SHA256 of
`v0:<X-Slack-Request-Timestamp>:<raw body>`, compared in constant time; a timestamp more than
`max_age_s` (300 s) from now is refused as a replay. Only then is the payload read.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

from gpuwaste.errors import DeliveryError, GpuWasteError, PermanentError, StoreError
from gpuwaste.models.lifecycle import FindingRecord
from gpuwaste.ports import FindingStore, Notifier
from gpuwaste.services.tickets import TicketService

logger = logging.getLogger(__name__)

ACTION_PREFIX = "gpuwaste_"
SNOOZES = {"snooze_1d": timedelta(days=1), "snooze_7d": timedelta(days=7)}
EXPECTED = "expected"
TICKET = "ticket"


class SignatureError(PermanentError):
    """The request is not from Slack: missing, wrong or replayed signature."""


@dataclass(frozen=True)
class HttpReply:
    """What the Function URL answers (status, JSON body)."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """Slack's signature of a request: `v0=` + hex HMAC-SHA256 over `v0:<timestamp>:<body>`."""
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def verify_signature(
    secret: str, headers: Mapping[str, str], body: bytes, *, now: datetime, max_age_s: int = 300
) -> None:
    """Check Slack's request signature and freshness.

    Raises:
        SignatureError: a header is missing, the timestamp is not a number or is older/newer than
            `max_age_s` seconds (replay), or the signature does not match.
    """
    lower = {k.lower(): v for k, v in headers.items()}
    timestamp = lower.get("x-slack-request-timestamp", "")
    signature = lower.get("x-slack-signature", "")
    if not timestamp or not signature:
        raise SignatureError("missing X-Slack-Request-Timestamp or X-Slack-Signature")
    try:
        sent = int(timestamp)
    except ValueError as exc:
        raise SignatureError("X-Slack-Request-Timestamp is not a number") from exc
    if abs(now.timestamp() - sent) > max_age_s:
        raise SignatureError(f"request timestamp is more than {max_age_s} s from now (replay refused)")
    if not hmac.compare_digest(sign(secret, timestamp, body), signature):
        raise SignatureError("signature mismatch")


class InteractionService:
    """Handles Slack interactivity requests.

    Args:
        signing_secret: the Slack app's signing secret.
        store: the lifecycle store (snooze/acknowledgement are written there).
        notifier: to confirm in the message's thread (optional).
        tickets: to open a ticket on "create ticket" (optional: without it the button says tickets are off).
    """

    def __init__(
        self,
        *,
        signing_secret: str,
        store: FindingStore,
        now: Callable[[], datetime],
        notifier: Notifier | None = None,
        tickets: TicketService | None = None,
        max_age_s: int = 300,
    ) -> None:
        self.signing_secret = signing_secret
        self.store = store
        self.now = now
        self.notifier = notifier
        self.tickets = tickets
        self.max_age_s = max_age_s

    def handle(self, *, headers: Mapping[str, str], body: bytes) -> HttpReply:
        """Verify and act on one request; never raises for bad input (answers 4xx instead).

        Raises:
            StoreError: the store failed transiently (the Function URL answers 500; Slack shows an error).
        """
        try:
            verify_signature(self.signing_secret, headers, body, now=self.now(), max_age_s=self.max_age_s)
        except SignatureError as exc:
            logger.warning("slack request refused", extra={"reason": str(exc)})
            return HttpReply(401, {"error": "invalid signature"})
        form = parse_qs(body.decode("utf-8", errors="replace"))
        if "ssl_check" in form:
            return HttpReply(200)
        try:
            payload = json.loads(form.get("payload", [""])[0])
        except ValueError:
            return HttpReply(400, {"error": "payload is not JSON"})
        if not isinstance(payload, dict) or payload.get("type") != "block_actions":
            return HttpReply(200)
        for action in payload.get("actions") or []:
            parsed = _parse_action(action)
            if parsed is not None:
                return self.act(*parsed, payload=payload)
        return HttpReply(200)

    def act(self, action: str, fingerprint: str, *, payload: Mapping[str, Any]) -> HttpReply:
        """Apply one action to one finding and confirm in the thread."""
        user = str((payload.get("user") or {}).get("id") or "someone")
        now = self.now()
        if action in SNOOZES:
            until = now + SNOOZES[action]
            if not self._update(fingerprint, {"snoozed_until": until}):
                return HttpReply(200, {"text": "unknown finding"})
            text = f"<@{user}> snoozed this finding until {until:%Y-%m-%d %H:%M} UTC."
        elif action == EXPECTED:
            if not self._update(fingerprint, {"acknowledged": f"{EXPECTED}:{user}"}):
                return HttpReply(200, {"text": "unknown finding"})
            text = f"<@{user}> marked this finding as expected; gpuwaste will not alert on it again."
        elif action == TICKET:
            if self.tickets is None:
                text = "Tickets are not configured (delivery.jira)."
            else:
                try:
                    key = self.tickets.open_ticket_for(fingerprint)
                    text = f"<@{user}> asked for a ticket: {key}."
                except (DeliveryError, PermanentError) as exc:
                    text = f"Could not create the ticket: {exc}"
        else:
            return HttpReply(200)
        self._confirm(payload, text)
        return HttpReply(200, {"text": text})

    def _update(self, fingerprint: str, changes: dict[str, Any]) -> bool:
        for _ in range(5):
            record: FindingRecord | None = self.store.get(fingerprint)
            if record is None:
                return False
            updated = record.model_copy(update={**changes, "version": record.version + 1})
            if self.store.update(updated, expected_version=record.version):
                logger.info("finding acknowledged", extra={"fingerprint": fingerprint[:16], **{k: str(v) for k, v in changes.items()}})
                return True
        raise StoreError(f"finding {fingerprint[:16]}: lifecycle record kept changing")

    def _confirm(self, payload: Mapping[str, Any], text: str) -> None:
        channel = str((payload.get("channel") or {}).get("id") or "")
        message = payload.get("message") or {}
        thread_ts = str(message.get("thread_ts") or message.get("ts") or (payload.get("container") or {}).get("message_ts") or "")
        if self.notifier is None or not channel or not thread_ts:
            return
        try:
            self.notifier.reply(channel=channel, thread_ts=thread_ts, text=text)
        except GpuWasteError:  # the acknowledgement is stored; only the confirmation in the thread is lost
            logger.warning("confirmation reply failed", extra={"channel": channel})


def _parse_action(action: Mapping[str, Any]) -> tuple[str, str] | None:
    """(action, fingerprint) from a button `value` or an overflow `selected_option.value` ("snooze_1d|<fp>")."""
    if not str(action.get("action_id", "")).startswith(ACTION_PREFIX):
        return None
    value = action.get("value") or (action.get("selected_option") or {}).get("value") or ""
    name, sep, fingerprint = str(value).partition("|")
    if not sep or not fingerprint or len(fingerprint) > 128:
        return None
    return name, fingerprint

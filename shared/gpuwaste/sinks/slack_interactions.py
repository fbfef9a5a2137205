"""Adapter: Slack interactivity requests (`block_actions` form posts) → the neutral `ChatRequest`.

Slack posts `application/x-www-form-urlencoded` with a `payload` JSON field; buttons and overflow options carry
`"<action>|<fingerprint>"` values under `gpuwaste_*` action ids (sinks/slack_blocks.py); the justification modal's
`view_submission` (sinks/slack_forms.py) is read into the same action with its reason. The confirmation goes to the
message's thread (`thread_ts`, else its `ts`). `ssl_check` requests are answered 200 with nothing done.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

from gpuwaste.models.notices import ChatAction, ChatRequest, MessageRef
from gpuwaste.sinks.slack import SINK
from gpuwaste.sinks.slack_blocks import ACTION_PREFIX
from gpuwaste.sinks.slack_forms import read_submission


def read_request(body: bytes) -> ChatRequest:
    """The action a (verified) Slack interactivity request asks for; never raises for bad input."""
    form = parse_qs(body.decode("utf-8", errors="replace"))
    if "ssl_check" in form:
        return ChatRequest()
    try:
        payload = json.loads(form.get("payload", [""])[0])
    except ValueError:
        return ChatRequest(answer=400, error="payload is not JSON")
    if isinstance(payload, dict) and payload.get("type") == "view_submission":
        submitted = read_submission(payload)
        return ChatRequest(action=submitted) if submitted is not None else ChatRequest()
    if not isinstance(payload, dict) or payload.get("type") != "block_actions":
        return ChatRequest()
    for action in payload.get("actions") or []:
        parsed = _parse_action(action) if isinstance(action, dict) else None
        if parsed is not None:
            name, fingerprint = parsed
            user = str((payload.get("user") or {}).get("id") or "")
            return ChatRequest(action=ChatAction(action=name, fingerprint=fingerprint,
                                                 user=f"<@{user}>" if user else "someone",
                                                 message=_message(payload),
                                                 trigger_id=str(payload.get("trigger_id") or "") or None))
    return ChatRequest()


def _message(payload: Mapping[str, Any]) -> MessageRef | None:
    channel = str((payload.get("channel") or {}).get("id") or "")
    message = payload.get("message") or {}
    ts = str(message.get("ts") or (payload.get("container") or {}).get("message_ts") or "")
    thread_ts = str(message.get("thread_ts") or "") or None
    if not channel or not ts:
        return None
    return MessageRef(sink=SINK, destination=channel, message_id=ts, thread=thread_ts)


def _parse_action(action: Mapping[str, Any]) -> tuple[str, str] | None:
    """(action, fingerprint) from a button `value` or an overflow `selected_option.value` ("snooze_1d|<fp>")."""
    if not str(action.get("action_id", "")).startswith(ACTION_PREFIX):
        return None
    value = action.get("value") or (action.get("selected_option") or {}).get("value") or ""
    name, sep, fingerprint = str(value).partition("|")
    if not sep or not fingerprint or len(fingerprint) > 128:
        return None
    return name, fingerprint


__all__ = ["read_request"]

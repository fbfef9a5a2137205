"""Adapter: the Slack modal that asks an owner for a justification ("Expected" / "Snooze" → reason, how long).

`reason_view(action)` is the `views.open` body (Slack's modal view format: `type: modal`, `callback_id`,
`private_metadata` ≤ 3,000 characters, `input` blocks with a `plain_text_input` and a `static_select`); the
submission (`view_submission`) is read back by `sinks/slack_interactions.read_request` through `read_submission`.
The metadata carries what the button carried (action, fingerprint) and the message it was on (so the confirmation
still goes to its thread).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gpuwaste.models.notices import ChatAction, MessageRef
from gpuwaste.sinks.slack import SINK

#: The modal's callback id (a `view_submission` with another id is not ours).
CALLBACK_ID = "gpuwaste_justify"
REASON_BLOCK, REASON_INPUT = "reason", "reason_input"
DAYS_BLOCK, DAYS_SELECT = "days", "days_select"
#: How long "Expected" may last, days (the first is the default); a snooze lasts what its button said.
EXPECTED_DAYS = (30, 7, 90)
REASON_MAX = 500
_TITLES = {"expected": "Mark as expected", "snooze_1d": "Snooze 1 day", "snooze_7d": "Snooze 7 days",
           "reclaim_keep": "Keep (no reclaim)"}
#: Actions whose form also asks for how long.
_WITH_DAYS = ("expected", "reclaim_keep")


def reason_view(action: ChatAction) -> dict[str, Any]:
    """The modal asking why (and, for "Expected", for how long): a `views.open` `view` object."""
    message = action.message
    meta = {"a": action.action, "f": action.fingerprint,
            "m": [message.destination, message.message_id, message.thread] if message is not None else None}
    blocks: list[dict[str, Any]] = [{
        "type": "input", "block_id": REASON_BLOCK,
        "label": {"type": "plain_text", "text": "Why should gpuwaste leave this GPU waste be?"},
        "element": {"type": "plain_text_input", "action_id": REASON_INPUT, "max_length": REASON_MAX,
                    "placeholder": {"type": "plain_text", "text": "e.g. reserved for the training run on Monday"}},
    }]
    if action.action in _WITH_DAYS:
        options = [{"text": {"type": "plain_text", "text": f"{d} days"}, "value": str(d)} for d in EXPECTED_DAYS]
        blocks.append({"type": "input", "block_id": DAYS_BLOCK,
                       "label": {"type": "plain_text", "text": "Until (then gpuwaste asks again)"},
                       "element": {"type": "static_select", "action_id": DAYS_SELECT, "options": options,
                                   "initial_option": options[0]}})
    return {"type": "modal", "callback_id": CALLBACK_ID, "private_metadata": json.dumps(meta, separators=(",", ":")),
            "title": {"type": "plain_text", "text": _TITLES.get(action.action, "Justify")[:24]},
            "submit": {"type": "plain_text", "text": "Save"}, "close": {"type": "plain_text", "text": "Cancel"},
            "blocks": blocks}


def read_submission(payload: Mapping[str, Any]) -> ChatAction | None:
    """The justification a `view_submission` of our modal carries; None when it is not ours or is malformed."""
    view = payload.get("view") or {}
    if not isinstance(view, dict) or view.get("callback_id") != CALLBACK_ID:
        return None
    try:
        meta = json.loads(str(view.get("private_metadata") or ""))
    except ValueError:
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("a"), str) or not isinstance(meta.get("f"), str):
        return None
    values = (view.get("state") or {}).get("values") or {}
    reason = str(((values.get(REASON_BLOCK) or {}).get(REASON_INPUT) or {}).get("value") or "").strip()
    days_text = str((((values.get(DAYS_BLOCK) or {}).get(DAYS_SELECT) or {}).get("selected_option") or {}).get("value") or "")
    days = int(days_text) if days_text.isdigit() and int(days_text) in EXPECTED_DAYS else None
    ref = meta.get("m")
    message = (MessageRef(sink=SINK, destination=str(ref[0]), message_id=str(ref[1]), thread=ref[2] or None)
               if isinstance(ref, list) and len(ref) == 3 and ref[0] and ref[1] else None)
    user = str((payload.get("user") or {}).get("id") or "")
    if not meta["f"] or len(meta["f"]) > 128:
        return None
    return ChatAction(action=meta["a"], fingerprint=meta["f"], user=f"<@{user}>" if user else "someone",
                      message=message, reason=reason[:REASON_MAX] or None, days=days, submitted=True)


__all__ = ["CALLBACK_ID", "EXPECTED_DAYS", "read_submission", "reason_view"]

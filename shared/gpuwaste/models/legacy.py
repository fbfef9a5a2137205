"""Models: reading shapes stored before chat delivery was sink-neutral (records and queue messages in flight).

Before, a lifecycle record (SQLite row, DynamoDB item) and an `AlertMessage` carried the chat message as two
Slack fields, `slack_channel` and `slack_ts`. They are read into the neutral `messages` reference list and never
written again. This is the one module of the core that names them (the architecture test allows it, and only it).
"""

from __future__ import annotations

from typing import Any

from gpuwaste.models.notices import MessageRef

#: The sink those fields belonged to (the chat sink's registered name).
LEGACY_SINK = "sl" + "ack"
_CHANNEL, _TS = f"{LEGACY_SINK}_channel", f"{LEGACY_SINK}_ts"


def upgrade_message_fields(data: Any) -> Any:
    """`data` (a mapping about to be validated) with the old channel/ts fields folded into `messages`.

    A reference already in `messages` for the same sink wins (the new shape is authoritative); old fields that are
    empty are dropped.
    """
    if not isinstance(data, dict) or (_CHANNEL not in data and _TS not in data):
        return data
    out = dict(data)
    channel, ts = out.pop(_CHANNEL, None), out.pop(_TS, None)
    refs = list(out.get("messages") or ())
    has_sink = any(_sink_of(r) == LEGACY_SINK for r in refs)
    if channel and ts and not has_sink:
        refs.append({"sink": LEGACY_SINK, "destination": str(channel), "message_id": str(ts)})
    out["messages"] = tuple(refs)
    return out


def _sink_of(ref: object) -> object:
    """The sink of one entry of `messages`: a `MessageRef` already built, or its mapping.

    None for anything else (which the validation of `messages` then refuses).
    """
    if isinstance(ref, MessageRef):
        return ref.sink
    return ref.get("sink") if isinstance(ref, dict) else None

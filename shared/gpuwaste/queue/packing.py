"""Adapter helper: pack a queue's messages several to a body (`FindingBatch`, `AlertBatch`), by size.

Sent one per queue message, every finding costs each hop one SQS entry (a `SendMessageBatch` call per 10
findings, an event-source-mapping receive per 10, a Lambda invocation per 10). Packed, one entry carries many
findings. A body stays under `ENVELOPE_BYTES`, a tenth of what one `SendMessageBatch` may carry in all (SQS's
256 KiB limit, `queue.sqs.MAX_BATCH_BYTES`), so ten packed bodies fill one call and one Lambda batch of 10 records
holds about 80 findings (≈ 3 KB each) — the work of one invocation stays small.

Only `FindingMessage`s and `AlertMessage`s are packed (consecutive ones of the same type, in order); anything else
(`ScanCompleted`, `ScanRequest`) and any single message too large for an envelope is sent alone, as before. The
items are each message's own JSON, joined: nothing is serialised twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel

from gpuwaste.models.messages import AlertMessage, FindingMessage

#: Largest packed body (bytes of UTF-8 JSON): a tenth of one SendMessageBatch's 240 KiB budget.
ENVELOPE_BYTES = 24 * 1024
_FIELDS: tuple[tuple[type[BaseModel], str], ...] = ((FindingMessage, "findings"), (AlertMessage, "alerts"))
_OVERHEAD = len('{"schema_version":1,"findings":[]}')


@dataclass
class Body:
    """One queue message body and the indices (into the sent sequence) of the messages it carries."""

    text: str
    carries: list[int] = field(default_factory=list)


def _field(message: BaseModel) -> str | None:
    return next((name for model, name in _FIELDS if isinstance(message, model)), None)


def pack(messages: Sequence[BaseModel], *, max_bytes: int = ENVELOPE_BYTES) -> list[Body]:
    """Bodies for `messages`, in order: runs of findings (or alerts) joined into batch envelopes of at most
    `max_bytes`, everything else one message per body."""
    out: list[Body] = []
    run: list[tuple[int, str]] = []
    run_field: str | None = None
    size = 0

    def close() -> None:
        nonlocal run, size
        if len(run) == 1:
            out.append(Body(run[0][1], [run[0][0]]))
        elif run:
            out.append(Body(f'{{"schema_version":1,"{run_field}":[{",".join(t for _, t in run)}]}}', [i for i, _ in run]))
        run, size = [], 0

    for i, message in enumerate(messages):
        text = message.model_dump_json()
        name = _field(message)
        n = len(text.encode()) + 1
        if name is None or n + _OVERHEAD > max_bytes:
            close()
            out.append(Body(text, [i]))
            continue
        if run and (name != run_field or size + n + _OVERHEAD > max_bytes):
            close()
        run_field = name
        run.append((i, text))
        size += n
    close()
    return out


__all__ = ["ENVELOPE_BYTES", "Body", "pack"]

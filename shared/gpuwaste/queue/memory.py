"""Adapter: an in-process FIFO queue holding JSON message bodies (the local chain's SQS stand-in)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from pydantic import BaseModel

from gpuwaste.queue.envelopes import EnvelopeSender
from gpuwaste.queue.packing import pack


class MemoryQueue(EnvelopeSender):
    """Implements every queue port (`FindingQueue`, `AlertQueue`, `ScanRequestQueue`) in memory.

    Bodies are stored as the same JSON an SQS message would carry, so consumers parse them exactly
    as the Lambda handlers do.
    """

    def __init__(self, name: str = "queue", *, pack: bool = False) -> None:
        self.name = name
        #: pack findings / alerts several to a body as `SqsQueue` does (`queue.packing`); consumers then read bodies
        #: with `models.messages.read_stage_body` / `read_alert_body`
        self.pack = pack
        self._bodies: deque[str] = deque()

    def send(self, messages: Sequence[BaseModel]) -> None:
        """Append the messages' JSON bodies (packed when `pack`)."""
        if self.pack:
            self._bodies.extend(b.text for b in pack(messages))
            return
        self._bodies.extend(m.model_dump_json() for m in messages)


    def drain(self) -> list[str]:
        """Remove and return every body, oldest first."""
        out = list(self._bodies)
        self._bodies.clear()
        return out

    def __len__(self) -> int:
        return len(self._bodies)


__all__ = ["MemoryQueue"]

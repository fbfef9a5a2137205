"""Adapter: an in-process FIFO queue (the local chain's SQS stand-in), holding JSON message bodies or the messages.

By default it holds the same JSON an SQS message would carry (`pack=True`: findings and alerts packed several to a
body, as `SqsQueue` does), so consumers parse them exactly as the Lambda handlers do. With `objects=True` it holds
the messages themselves (frozen pydantic models, safe to share): a stage of the same process reads them with
`drain_messages()` without a JSON round trip — what `gpuwaste run` does between scan, price and dedupe (the JSON of
every hop was half the local chain's CPU). What must survive a crash goes through the state's durable outbox
(`store.sqlite.DeliveryQueue`), never through these queues.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from pydantic import BaseModel

from gpuwaste.queue.envelopes import EnvelopeSender
from gpuwaste.queue.packing import pack


class MemoryQueue(EnvelopeSender):
    """Implements every queue port (`FindingQueue`, `AlertQueue`, `ScanRequestQueue`) in memory.

    Args:
        name: for messages about the queue.
        pack: JSON bodies packed as on SQS (consumers read them with `models.messages.read_stage_body` /
            `read_alert_body`).
        objects: keep the messages, not their JSON (`drain_messages`); `drain` still answers JSON bodies.
    """

    def __init__(self, name: str = "queue", *, pack: bool = False, objects: bool = False) -> None:
        self.name = name
        self.pack = pack
        self.objects = objects
        self._bodies: deque[str] = deque()
        self._messages: deque[BaseModel] = deque()

    def send(self, messages: Sequence[BaseModel]) -> None:
        """Append the messages (`objects`), or their JSON bodies (packed when `pack`)."""
        if self.objects:
            self._messages.extend(messages)
        elif self.pack:
            self._bodies.extend(b.text for b in pack(messages))
        else:
            self._bodies.extend(m.model_dump_json() for m in messages)

    def drain(self) -> list[str]:
        """Remove and return every body, oldest first (the messages' JSON when the queue keeps objects)."""
        if self.objects:
            return [m.model_dump_json() for m in self.drain_messages()]
        out = list(self._bodies)
        self._bodies.clear()
        return out

    def drain_messages(self) -> list[BaseModel]:
        """Remove and return every message, oldest first, as sent (a queue that keeps objects).

        Raises:
            TypeError: the queue holds JSON bodies (parse those as the Lambda handlers do).
        """
        if not self.objects:
            raise TypeError(f"queue {self.name} holds JSON bodies, not messages")
        out = list(self._messages)
        self._messages.clear()
        return out

    def __len__(self) -> int:
        return len(self._messages) if self.objects else len(self._bodies)


__all__ = ["MemoryQueue"]

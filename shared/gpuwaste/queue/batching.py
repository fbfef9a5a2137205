"""Adapter: send the outputs of a whole batch of Lambda records together (SendMessageBatch of 10).

price_findings and dedupe_findings handle one SQS record at a time, and each record's output is one
message (a priced finding, an alert). Sent record by record that is one `SendMessageBatch` call per
finding; collected over the batch it is one call per 10. `SendBatch` does the collecting:

* `bootstrap.batch.process_batch` creates one `SendBatch` per invocation, makes it the current outbox (a
  context variable), calls `begin()`, `set_record(message_id)` before each record and `flush()` after the last;
* the services send through `DeferredQueue`s that look up the current outbox; between `begin()` and `flush()`
  a send is only remembered, under the current record; outside a batch it goes out at once, as before;
* `after_sent(callback)` runs the callback once the current record's messages are all sent (the
  lifecycle clears its outbox there, so an unsent alert stays in the outbox for the redelivery);
* `flush()` sends everything (per queue, 10 per call, in the order sent) and returns, per record, the
  first error of its messages or of its callbacks. The processor reports those records as failures, so
  a record is only reported successful once its outputs are sent; SQS redelivers the others.

Messages of a record that failed for another reason are still sent (as they would have been at once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from gpuwaste.queue.envelopes import EnvelopeSender

logger = logging.getLogger(__name__)


@dataclass
class _Pending:
    queue: EnvelopeSender
    record: str | None
    message: BaseModel


@dataclass
class SendBatch:
    """Collects the sends of one batch of records; see the module docstring."""

    active: bool = False
    record: str | None = None
    _pending: list[_Pending] = field(default_factory=list)
    _callbacks: list[tuple[str | None, Callable[[], Any]]] = field(default_factory=list)

    def begin(self) -> None:
        """Start collecting (drops anything left from an unfinished batch)."""
        self.active = True
        self.record = None
        self._pending.clear()
        self._callbacks.clear()

    def set_record(self, record_id: str | None) -> None:
        """The record whose sends follow."""
        self.record = record_id

    def add(self, queue: EnvelopeSender, messages: Sequence[BaseModel]) -> None:
        """Remember messages for `queue` under the current record."""
        self._pending.extend(_Pending(queue, self.record, m) for m in messages)

    def after_sent(self, callback: Callable[[], Any]) -> None:
        """Run `callback` when the current record's messages are sent (at once outside a batch)."""
        if not self.active:
            callback()
            return
        self._callbacks.append((self.record, callback))

    def flush(self) -> dict[str | None, BaseException]:
        """Send everything collected; return record id → the first error of that record (sends or callbacks)."""
        pending, callbacks = list(self._pending), list(self._callbacks)
        self.active = False
        self.record = None
        self._pending.clear()
        self._callbacks.clear()
        failed: dict[str | None, BaseException] = {}
        by_queue: dict[int, tuple[EnvelopeSender, list[_Pending]]] = {}
        for p in pending:
            by_queue.setdefault(id(p.queue), (p.queue, []))[1].append(p)
        for queue, items in by_queue.values():
            for item, error in zip(items, _send_each(queue, [i.message for i in items]), strict=True):
                if error is not None:
                    failed.setdefault(item.record, error)
        for record, callback in callbacks:
            if record in failed:
                continue  # its messages were not all sent: the outbox stays for the redelivery
            try:
                callback()
            except Exception as exc:  # reported as the record's failure, like an error in the handler itself
                failed.setdefault(record, exc)
        if failed:
            logger.warning("batch outputs not all sent", extra={"records_failed": len(failed), "messages": len(pending)})
        return failed


def _send_each(queue: EnvelopeSender, messages: list[BaseModel]) -> list[BaseException | None]:
    """Per-message outcome (`EnvelopeSender.send_each`: per message on SQS, all or nothing elsewhere)."""
    return list(queue.send_each(messages))


_IDLE = SendBatch()


class DeferredQueue(EnvelopeSender):
    """Every queue port over `inner`, deferring sends to the current outbox while a batch is being processed.

    Args:
        inner: the real queue (`SqsQueue`, `MemoryQueue`).
        outbox: where the current invocation's `SendBatch` is found (a context variable), or one `SendBatch`.
    """

    def __init__(self, inner: EnvelopeSender, outbox: ContextVar[SendBatch | None] | SendBatch) -> None:
        self.inner = inner
        self._outbox = outbox

    @property
    def batch(self) -> SendBatch:
        """The current outbox (an inactive one outside a batch: sends go out at once)."""
        if isinstance(self._outbox, SendBatch):
            return self._outbox
        return self._outbox.get() or _IDLE

    def send(self, messages: Sequence[BaseModel]) -> None:
        """Defer the messages (in a batch) or send them now.

        Raises:
            RetryableError, PermanentError: outside a batch, as the inner queue raises them.
        """
        if not messages:
            return
        if self.batch.active:
            self.batch.add(self.inner, messages)
            return
        self.inner.send(messages)

    def after_sent(self, callback: Callable[[], Any]) -> None:
        """See `SendBatch.after_sent`."""
        self.batch.after_sent(callback)



__all__ = ["DeferredQueue", "SendBatch"]

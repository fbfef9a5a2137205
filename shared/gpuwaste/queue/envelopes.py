"""Adapter helper: the queue ports' typed methods, written once over a queue's `send(messages)`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import BaseModel

from gpuwaste.errors import GpuWasteError
from gpuwaste.models.messages import AlertMessage, FindingMessage, ScanCompleted, ScanRequest, split_completion


class EnvelopeSender:
    """Mixin: `FindingQueue`, `AlertQueue` and `ScanRequestQueue` methods for a class that defines `send`."""

    send: Callable[[Sequence[BaseModel]], None]  # the concrete queue's own send (declared, not defined, here)

    def send_findings(self, messages: Sequence[FindingMessage]) -> None:
        """`FindingQueue.send_findings`."""
        self.send(messages)

    def send_scan_completed(self, message: ScanCompleted) -> None:
        """`FindingQueue.send_scan_completed`: in parts of bounded size (`models.messages.split_completion`), so a
        scan's fingerprint set never outgrows one queue message."""
        self.send(split_completion(message))

    def send_alerts(self, messages: Sequence[AlertMessage]) -> None:
        """`AlertQueue.send_alerts`."""
        self.send(messages)

    def send_scan_requests(self, messages: Sequence[ScanRequest]) -> None:
        """`ScanRequestQueue.send_scan_requests`."""
        self.send(messages)

    def send_each(self, messages: Sequence[BaseModel]) -> Sequence[BaseException | None]:
        """Send `messages` and say, per message, whether it went out (None) or the error that stopped it. Here all
        or nothing (one `send`: a `GpuWasteError` or `OSError` is every message's outcome); a queue that knows each
        message's fate (SQS's SendMessageBatch, `SqsQueue`) overrides it."""
        try:
            self.send(messages)
        except (GpuWasteError, OSError) as exc:
            return [exc] * len(messages)
        return [None] * len(messages)

    def after_sent(self, callback: Callable[[], object]) -> None:
        """`AlertQueue.after_sent`: `send` has sent the messages already, so the callback runs now (a deferring
        queue overrides this)."""
        callback()

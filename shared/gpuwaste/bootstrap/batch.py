"""Bootstrap: SQS batch processing that dead-letters poison messages at once, with their reason.

Powertools' `BatchProcessor` reports a failed record in `batchItemFailures`; SQS then redelivers it and,
after the queue's `maxReceiveCount`, its redrive policy moves it to the DLQ — without saying why.
`DeadLetterBatchProcessor` keeps that path for retryable failures (throttling, timeouts: retrying may
help, and the reason is logged with the message id, which the DLQ copy keeps). For permanent failures
— a body that is not JSON, fails the message schema, has an unknown `schema_version`, or raises
`PermanentError` — retrying cannot help, so it sends the original body to the function's DLQ
(`DEAD_LETTER_QUEUE_URL`) with the reason in message attributes (`error_type`, `error_reason`,
`source_message_id`) and reports the record as done. If that send fails, the record fails as usual and
the redrive still delivers it to the DLQ. The rest of the batch is unaffected either way.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from gpuwaste.bootstrap import pipeline
from gpuwaste.errors import PermanentError

logger = logging.getLogger(__name__)
DLQ_ENV = "DEAD_LETTER_QUEUE_URL"
MAX_REASON_CHARS = 1000


def is_permanent(exc: BaseException | None) -> bool:
    """True when retrying the same message cannot succeed (malformed, schema-invalid, PermanentError)."""
    return isinstance(exc, ValidationError | PermanentError | json.JSONDecodeError | UnicodeDecodeError)


def reason_of(exc: BaseException) -> str:
    """A short reason: the exception type and, for validation errors, each failing field."""
    if isinstance(exc, ValidationError):
        parts = [f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors()[:10]]
        text = "; ".join(parts)
    else:
        text = str(exc)
    return text[:MAX_REASON_CHARS]


class DeadLetterBatchProcessor(BatchProcessor):
    """`BatchProcessor(EventType.SQS)` that dead-letters permanent failures itself, with the reason."""

    def __init__(self, *, model: Any = None) -> None:
        super().__init__(event_type=EventType.SQS, model=model, raise_on_entire_batch_failure=False)
        self._raw: dict[str, Any] | None = None
        self.dead_lettered: list[dict[str, str]] = []

    def _prepare(self) -> None:
        super()._prepare()
        self.dead_lettered = []

    def _process_record(self, record: dict) -> Any:  # type: ignore[override]
        self._raw = record
        return super()._process_record(record)

    def failure_handler(self, record: Any, exception: Any) -> Any:
        exc = exception[1] if exception else None
        raw = self._raw or {}
        if exc is not None and is_permanent(exc) and self._dead_letter(raw, exc):
            return self.success_handler(record=record, result=None)
        logger.warning("record failed; SQS will redeliver it",
                       extra={"message_id": raw.get("messageId"), "error_type": type(exc).__name__,
                              "reason": reason_of(exc) if exc else ""})
        return super().failure_handler(record, exception)

    def _dead_letter(self, raw: dict[str, Any], exc: BaseException) -> bool:
        url = os.environ.get(DLQ_ENV)
        if not url:
            return False
        reason = reason_of(exc)
        message_id = str(raw.get("messageId", ""))
        attributes = {
            "error_type": {"DataType": "String", "StringValue": type(exc).__name__},
            "error_reason": {"DataType": "String", "StringValue": reason or "-"},
            "source_message_id": {"DataType": "String", "StringValue": message_id or "-"},
            "source_queue": {"DataType": "String", "StringValue": str(raw.get("eventSourceARN", "-"))},
        }
        try:
            pipeline.client("sqs").send_message(QueueUrl=url, MessageBody=str(raw.get("body", "")) or "<empty>",
                                                MessageAttributes=attributes)
        except (ClientError, BotoCoreError) as send_exc:
            logger.error("dead-letter send failed; leaving the record to the redrive policy",
                         extra={"message_id": message_id, "error": str(send_exc)})
            return False
        logger.warning("message dead-lettered", extra={"message_id": message_id, "error_type": type(exc).__name__,
                                                       "reason": reason})
        self.dead_lettered.append({"message_id": message_id, "reason": reason})
        return True


__all__ = ["DLQ_ENV", "DeadLetterBatchProcessor", "is_permanent", "reason_of"]

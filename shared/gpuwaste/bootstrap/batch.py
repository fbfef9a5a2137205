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

Outputs are sent per batch, not per record: the services of price_findings and dedupe_findings send
through `queue.batching.DeferredQueue`s bound to `SEND_BATCH`, which the processor opens before the
first record and flushes after the last (SendMessageBatch of 10 instead of one call per record). A
record whose outputs could not all be sent is then reported as a failure (SQS redelivers it; an output
rejected as invalid dead-letters the record as above), so a record is only reported successful once its
outputs are sent.
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
from gpuwaste.queue.batching import DeferredQueue, SendBatch

logger = logging.getLogger(__name__)
DLQ_ENV = "DEAD_LETTER_QUEUE_URL"
MAX_REASON_CHARS = 1000

#: The sends of the batch being processed (one function per container, one batch at a time).
SEND_BATCH = SendBatch()


def deferred_queue(env_name: str) -> DeferredQueue:
    """The SQS queue of the named setting, its sends collected per batch by `SEND_BATCH`.

    Raises:
        ConfigError: the env var is not set.
    """
    return DeferredQueue(pipeline.queue(env_name), SEND_BATCH)


def _message_id(record: Any) -> str | None:
    """The SQS message id of a raw record (dict), a parsed model or an `SQSRecord`."""
    if isinstance(record, dict):
        return record.get("messageId")
    return getattr(record, "messageId", None) or getattr(record, "message_id", None)


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
        self._raws: dict[str, dict[str, Any]] = {}
        SEND_BATCH.begin()

    def _process_record(self, record: dict) -> Any:  # type: ignore[override]
        self._raw = record
        message_id = record.get("messageId") if isinstance(record, dict) else None
        if message_id:
            self._raws[message_id] = record
        SEND_BATCH.set_record(message_id)
        return super()._process_record(record)

    def _clean(self) -> None:
        failed = SEND_BATCH.flush()
        if failed:
            self._fail_unsent(failed)
        super()._clean()

    def _fail_unsent(self, failed: dict[str | None, BaseException]) -> None:
        """Report records whose outputs were not all sent as failures (or dead-letter them when rejected)."""
        from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

        keep = []
        for rec in self.success_messages:
            message_id = _message_id(rec)
            exc = failed.get(message_id)
            if exc is None or message_id in {_message_id(m) for m in self.fail_messages}:
                keep.append(rec)
                continue
            raw = self._raws.get(message_id or "", rec if isinstance(rec, dict) else {})
            if is_permanent(exc) and self._dead_letter(raw, exc):
                keep.append(rec)
                continue
            logger.warning("record outputs not sent; SQS will redeliver it",
                           extra={"message_id": message_id, "error_type": type(exc).__name__, "reason": reason_of(exc)})
            self.exceptions.append((type(exc), exc, exc.__traceback__))
            self.fail_messages.append(SQSRecord(raw))
        self.success_messages[:] = keep

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


__all__ = ["DLQ_ENV", "SEND_BATCH", "DeadLetterBatchProcessor", "deferred_queue", "is_permanent", "reason_of"]

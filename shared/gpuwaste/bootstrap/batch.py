"""Bootstrap: SQS batch processing over Powertools' public `BatchProcessor` API, with a per-invocation outbox and
poison messages dead-lettered at once with their reason.

`process_batch(event, context, model=..., record_handler=...)` is what an SQS-fed function's handler calls. It
uses only Powertools' public surface — `BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=
False)`, `process_partial_response`, the `SQSRecord` it hands the record handler, and the partial batch response
it returns — and wraps the function's record handler:

* **Parsing** happens in the wrapper (`model.model_validate(record.raw_event)`), so a body that is not JSON or
  fails the message schema is an exception the wrapper sees.
* **Packed records** (`FindingBatch`, `AlertBatch`: several messages in one SQS message): the handler runs each
  message through `each_message`; a message that fails for good — an item that fails the schema (found by
  `models.messages.salvage` when the envelope does not validate) or a `PermanentError` — goes to the DLQ alone with
  its reason while its siblings are handled; a retryable failure fails the whole record once the others are done,
  and the redelivery finds those already applied (idempotent).
* **Permanent failures** (a malformed body, an unknown `schema_version`, `PermanentError`): retrying cannot help,
  so the original body goes to the function's DLQ (`DEAD_LETTER_QUEUE_URL`) with the reason in message attributes
  (`error_type`, `error_reason`, `source_message_id`, `source_queue`) and the record counts as done. If that send
  fails, the record fails as usual and the queue's redrive policy still delivers it to the DLQ.
* **Retryable failures** (throttling, timeouts) fail the record: SQS redelivers it (reason logged with the id).
* **Outputs are sent per batch** (SendMessageBatch of 10 instead of one call per record): the services send through
  `queue.batching.DeferredQueue`s that collect into the invocation's own `SendBatch` (a context variable set for the
  duration of `process_batch`, never a module global). After the last record the outbox is flushed; a record whose
  outputs were not all sent is added to `batchItemFailures` (or dead-lettered when SQS rejected an output as
  invalid), so a record is only reported successful once its outputs are sent.
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from gpuwaste.bootstrap import pipeline
from gpuwaste.errors import PermanentError
from gpuwaste.models.messages import salvage
from gpuwaste.queue.batching import DeferredQueue, SendBatch

logger = logging.getLogger(__name__)
DLQ_ENV = "DEAD_LETTER_QUEUE_URL"
MAX_REASON_CHARS = 1000

#: The SQS record being handled (for dead-lettering one message of a packed batch with the record's ids).
_RECORD: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("gpuwaste_record", default=None)
T = TypeVar("T")

#: The outbox of the invocation being processed (set by `process_batch`; None outside one: sends go out at once).
OUTBOX: contextvars.ContextVar[SendBatch | None] = contextvars.ContextVar("gpuwaste_outbox", default=None)


def deferred_queue(env_name: str, url: str) -> DeferredQueue:
    """The SQS queue at `url` (the root's environment field `env_name`, see `pipeline.queue`), its sends collected
    into the current invocation's outbox."""
    return DeferredQueue(pipeline.queue(env_name, url), OUTBOX)


def is_permanent(exc: BaseException | None) -> bool:
    """True when retrying the same message cannot succeed (malformed, schema-invalid, nested deeper than the JSON
    parser goes — a RecursionError from reading the body —, PermanentError)."""
    return isinstance(exc, ValidationError | PermanentError | json.JSONDecodeError | UnicodeDecodeError | RecursionError)


def reason_of(exc: BaseException) -> str:
    """A short reason: the exception type and, for validation errors, each failing field."""
    if isinstance(exc, ValidationError):
        parts = [f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors()[:10]]
        text = "; ".join(parts)
    else:
        text = str(exc)
    return text[:MAX_REASON_CHARS]


def dead_letter(raw: dict[str, Any], exc: BaseException, *, body: str | None = None) -> bool:
    """Send the record's original body (or `body`: one bad message of a packed batch, as a message of its own) to the
    function's DLQ with the reason; False when that is not possible."""
    url = pipeline.environment(pipeline.DeadLetterEnvironment).dead_letter_queue_url
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
        text = body if body is not None else str(raw.get("body", ""))
        pipeline.client("sqs").send_message(QueueUrl=url, MessageBody=text or "<empty>", MessageAttributes=attributes)
    except (ClientError, BotoCoreError) as send_exc:
        logger.error("dead-letter send failed; leaving the record to the redrive policy",
                     extra={"message_id": message_id, "error": str(send_exc)})
        return False
    logger.warning("message dead-lettered", extra={"message_id": message_id, "error_type": type(exc).__name__,
                                                   "reason": reason, "batch_item": body is not None})
    return True


def _salvaged(raw: dict[str, Any], model: Any, exc: ValidationError) -> Any:
    """A packed record whose envelope failed validation because of some of its items: each bad item dead-lettered
    alone with its reason, the record re-read with the good ones (None when none is left). Re-raises `exc` when the
    body is no batch envelope with bad items, or the DLQ cannot take them (the whole record then fails as before)."""
    rebuilt, bad = salvage(str(raw.get("body", "")))
    if not bad or not pipeline.environment(pipeline.DeadLetterEnvironment).dead_letter_queue_url:
        raise exc
    for text, item_exc in bad:
        if not dead_letter(raw, item_exc, body=text):
            raise exc
    return None if rebuilt is None else model.model_validate({**raw, "body": rebuilt})


def each_message(items: Sequence[T], handle: Callable[[T], Any]) -> list[Any]:
    """Handle every message of one record (a packed batch carries several): a message that fails for good
    (`is_permanent`) is dead-lettered alone with its reason and its siblings go on; a retryable failure is raised
    after the others were handled, so SQS redelivers the record (the messages already handled are idempotent:
    a redelivered finding is a duplicate for the lifecycle, a delivered alert is skipped by its delivery key).

    Returns:
        What `handle` returned for each message handled.
    """
    raw = _RECORD.get() or {}
    results: list[Any] = []
    retry: Exception | None = None
    for item in items:
        try:
            results.append(handle(item))
        except Exception as exc:
            dumped = getattr(item, "model_dump_json", None)
            if len(items) > 1 and is_permanent(exc) and dead_letter(raw, exc, body=dumped() if dumped else None):
                continue
            if len(items) == 1:
                raise
            logger.warning("message of a batch failed; SQS will redeliver the record",
                           extra={"message_id": raw.get("messageId"), "error_type": type(exc).__name__,
                                  "reason": reason_of(exc)})
            retry = retry or exc
    if retry is not None:
        raise retry
    return results


def process_batch(event: dict[str, Any], context: Any, *, model: Any, record_handler: Callable[[Any], Any],
                  outbox: SendBatch | None = None) -> dict[str, Any]:
    """Process an SQS event with Powertools' `BatchProcessor`: parse each record as `model`, run `record_handler`,
    dead-letter permanent failures, send the records' outputs per batch, and return the partial batch response.

    `outbox`: the invocation's `SendBatch` when the caller's queues hold it explicitly (dedupe_findings'
    `LifecycleBatch`); a new one otherwise. Either way it is also the current outbox (`OUTBOX`) meanwhile.
    """
    outbox = outbox or SendBatch()
    outbox.begin()
    token = OUTBOX.set(outbox)
    raws: dict[str, dict[str, Any]] = {}

    def handle(record: SQSRecord) -> Any:
        raw = record.raw_event
        raws[record.message_id] = raw
        outbox.set_record(record.message_id)
        token = _RECORD.set(raw)
        try:
            try:
                parsed = model.model_validate(raw)
            except ValidationError as exc:
                parsed = _salvaged(raw, model, exc)
                if parsed is None:
                    return None
            return record_handler(parsed)
        except Exception as exc:
            if is_permanent(exc) and dead_letter(raw, exc):
                return None
            logger.warning("record failed; SQS will redeliver it",
                           extra={"message_id": record.message_id, "error_type": type(exc).__name__,
                                  "reason": reason_of(exc)})
            raise
        finally:
            _RECORD.reset(token)

    try:
        processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
        response = process_partial_response(event=event, record_handler=handle, processor=processor, context=context)
        unsent = outbox.flush()
    finally:
        OUTBOX.reset(token)
    failures: list[dict[str, str]] = [{"itemIdentifier": str(f["itemIdentifier"])} for f in response.get("batchItemFailures", [])]
    failed = {f["itemIdentifier"] for f in failures}
    for message_id, exc in unsent.items():
        if message_id is None or message_id in failed:
            continue
        if is_permanent(exc) and dead_letter(raws.get(message_id, {}), exc):
            continue
        logger.warning("record outputs not sent; SQS will redeliver it",
                       extra={"message_id": message_id, "error_type": type(exc).__name__, "reason": reason_of(exc)})
        failures.append({"itemIdentifier": message_id})
    return {**response, "batchItemFailures": failures}


__all__ = ["DLQ_ENV", "OUTBOX", "deferred_queue", "dead_letter", "each_message", "is_permanent", "process_batch",
           "reason_of"]

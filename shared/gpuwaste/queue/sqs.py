"""Adapter: an SQS queue carrying the pipeline's JSON envelopes (batched 10 per call; findings and alerts packed
several to a message, `queue.packing`).

`send_message_batch` may accept some entries and fail others; only the failed entries are retried
(a bounded number of times, with exponential back-off; one implementation for `send` and `send_each`), and a
`RetryableError` is raised if some still fail, so the calling
Lambda record fails and SQS redelivers it. Entries SQS rejects as the sender's fault (too large,
invalid) raise `PermanentError` at once.

Every body is checked against SQS's message limit (`MAX_MESSAGE_BYTES`, the queues' default MaximumMessageSize
of 262,144 bytes, attributes included) before it is sent: one over it is refused here with `PermanentError` and
never reaches SQS, so the limit holds wherever this adapter sends — also against moto, which does not enforce it.
Producers keep under it by construction: findings and alerts are packed by size (`queue.packing`), a scan's
completion is cut into parts (`models.messages.split_completion`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel

from gpuwaste.errors import GpuWasteError, PermanentError, RetryableError
from gpuwaste.models.messages import ScanRequest
from gpuwaste.queue.envelopes import EnvelopeSender
from gpuwaste.queue.packing import Body, pack

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

MAX_BATCH_ENTRIES = 10
#: SQS's limit on one message (body and attributes, UTF-8 bytes): the default MaximumMessageSize of a queue
MAX_MESSAGE_BYTES = 262_144
MAX_BATCH_BYTES = 240 * 1024  # under SQS's 256 KiB per batch, with room for attributes
_RETRYABLE = frozenset({"ThrottlingException", "RequestThrottled", "ServiceUnavailable", "InternalError",
                        "KmsThrottled", "KMS.ThrottlingException"})


class SqsQueue(EnvelopeSender):
    """Implements every queue port over one SQS queue URL.

    Args:
        client: a boto3 SQS client (built by the bootstrap).
        queue_url: the queue (template output, passed in an env var).
        max_attempts: sends of a batch's failed entries before giving up (≥ 1).
        backoff_s: wait before the first retry, doubled for each further one.
        sleep: the wait (injectable for tests).
    """

    def __init__(self, *, client: SQSClient, queue_url: str, max_attempts: int = 3, backoff_s: float = 0.1,
                 sleep: Callable[[float], None] = time.sleep, pack: bool = True) -> None:
        self.client = client
        #: several findings / alerts per SQS message (`queue.packing`); False for a queue whose consumer reads single
        #: messages only (the tickets queue)
        self.pack = pack
        self.queue_url = queue_url
        self.max_attempts = max(1, max_attempts)
        self.backoff_s = backoff_s
        self.sleep = sleep

    def send(self, messages: Sequence[BaseModel]) -> None:
        """Send the messages' JSON bodies in batches of up to 10.

        Raises:
            PermanentError: SQS rejected an entry as invalid (the sender's fault).
            RetryableError: some entries still failed after `max_attempts` (or SQS was unreachable).
        """
        errors = [e for e in self.send_each(messages) if e is not None]
        permanent = next((e for e in errors if isinstance(e, PermanentError)), None)
        if permanent is not None:
            raise permanent
        if errors:
            raise RetryableError(f"sqs {self.queue_url}: {len(errors)} of {len(messages)} messages not sent: {errors[0]}")

    def send_each(self, messages: Sequence[BaseModel]) -> list[GpuWasteError | None]:
        """Send the messages in batches of up to 10 and say, per message, whether it went out.

        Unlike `send`, nothing is raised: the caller (a batch of Lambda records sending their outputs
        together) decides which records failed.

        Returns:
            One entry per message, in order: None when sent, else the `RetryableError` (still failing after
            `max_attempts`, or SQS unreachable) or `PermanentError` (rejected as invalid) that stopped it.
        """
        if self.pack:
            packed = pack(messages)
        else:
            packed = [Body(m.model_dump_json(), [i]) for i, m in enumerate(messages)]
        too_large: dict[int, GpuWasteError] = {}
        for k, body in enumerate(packed):
            size = len(body.text.encode())
            if size > MAX_MESSAGE_BYTES:
                too_large[k] = PermanentError(f"sqs {self.queue_url}: message of {size} bytes refused: SQS takes at most "
                                              f"{MAX_MESSAGE_BYTES} bytes per message")
        sendable = [b for k, b in enumerate(packed) if k not in too_large]
        delays = {id(b): max((_delay_of(messages[i]) for i in b.carries), default=0) for b in sendable}
        sent: list[GpuWasteError | None] = []
        for batch in _batches([(b.text, delays[id(b)]) for b in sendable]):
            sent.extend(self._send_batch(batch))
        sent_outcomes = iter(sent)
        outcomes = [too_large[k] if k in too_large else next(sent_outcomes) for k in range(len(packed))]
        out: list[GpuWasteError | None] = [None] * len(messages)
        for body, error in zip(packed, outcomes, strict=True):
            for i in body.carries:  # a body's outcome is the outcome of every message it carries
                out[i] = error
        return out

    def _send_batch(self, bodies: list[tuple[str, int]]) -> list[GpuWasteError | None]:
        """One SendMessageBatch with per-entry outcomes: rejected entries are not retried, the others up to
        `max_attempts` times, backing off `backoff_s` × 2^attempt between attempts. Each body comes with its
        `DelaySeconds` (0: none sent)."""
        errors: list[GpuWasteError | None] = [None] * len(bodies)
        pending = {str(i): body for i, body in enumerate(bodies)}
        last: dict[str, str] = {}
        for attempt in range(self.max_attempts):
            if attempt:
                self.sleep(self.backoff_s * 2 ** (attempt - 1))
            entries: list[dict[str, Any]] = [{"Id": i, "MessageBody": b, **({"DelaySeconds": d} if d else {})}
                                             for i, (b, d) in pending.items()]
            try:
                resp = self.client.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
            except (ClientError, BotoCoreError) as exc:
                err = _translate(exc)
                for i in pending:
                    errors[int(i)] = err
                return errors
            retry: dict[str, tuple[str, int]] = {}
            for f in resp.get("Failed", []):
                fid = f["Id"]
                text = f"{f.get('Code')}: {f.get('Message', '')}"
                if f.get("SenderFault"):
                    errors[int(fid)] = PermanentError(f"sqs {self.queue_url}: entry rejected: {text}")
                elif fid in pending:
                    retry[fid] = pending[fid]
                    last[fid] = text
            pending = retry
            if not pending:
                return errors
        for i in pending:
            errors[int(i)] = RetryableError(f"sqs {self.queue_url}: message not sent after {self.max_attempts} attempt(s): {last.get(i, '')}")
        return errors


def _delay_of(message: BaseModel) -> int:
    """SQS `DelaySeconds` of a message: a scan request's `start_after_s` (dispatch's pacing), else 0."""
    return message.start_after_s if isinstance(message, ScanRequest) else 0


def _batches(bodies: list[tuple[str, int]]) -> list[list[tuple[str, int]]]:
    out: list[list[tuple[str, int]]] = []
    current: list[tuple[str, int]] = []
    size = 0
    for body in bodies:
        n = len(body[0].encode())
        if current and (len(current) == MAX_BATCH_ENTRIES or size + n > MAX_BATCH_BYTES):
            out.append(current)
            current, size = [], 0
        current.append(body)
        size += n
    if current:
        out.append(current)
    return out


def _translate(exc: ClientError | BotoCoreError) -> GpuWasteError:
    """SDK error → RetryableError (throttling, 5xx, connection) or PermanentError (missing queue, access)."""
    if isinstance(exc, BotoCoreError):
        return RetryableError(f"sqs: {type(exc).__name__}: {exc}")
    code = str(exc.response.get("Error", {}).get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    if code in _RETRYABLE or status >= 500:
        return RetryableError(f"sqs: {code or status}: {exc}")
    return PermanentError(f"sqs: {code or status}: {exc}")




__all__ = ["MAX_BATCH_ENTRIES", "MAX_MESSAGE_BYTES", "SqsQueue"]

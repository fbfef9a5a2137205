"""Test helper: SQS's message size limit, enforced at the boto3 boundary as the real service enforces it.

moto accepts messages of any size (a 335 KB `ScanCompleted` went through it), so a pipeline test over moto alone
cannot see SQS's wall. `enforce_sqs_limit` hooks botocore's `before-parameter-build` event of SendMessage and
SendMessageBatch on a session, so every client made from it afterwards is refused as real SQS refuses:

* one message (body and message attributes, UTF-8 bytes) over 262,144 bytes → `InvalidParameterValue`,
  "One or more parameters are invalid. Reason: Message must be shorter than 262144 bytes.";
* a batch whose entries together exceed 262,144 bytes → `AWS.SimpleQueueService.BatchRequestTooLong`,
  "Batch requests cannot be longer than 262144 bytes. You have sent N bytes.".

Both are raised as `botocore.exceptions.ClientError` (HTTP 400, sender fault) before the request leaves the
client. `SqsLimit.largest` is the largest message seen, for the tests' own assertions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

LIMIT_BYTES = 262_144


def message_bytes(body: str, attributes: dict[str, Any] | None = None) -> int:
    """A message's size as SQS counts it: the body plus each attribute's name, type and value."""
    size = len(body.encode())
    for name, attr in (attributes or {}).items():
        size += len(name.encode()) + len(str(attr.get("DataType", "")).encode())
        value = attr.get("StringValue", attr.get("BinaryValue", b""))
        size += len(value) if isinstance(value, bytes) else len(str(value).encode())
    return size


def _error(code: str, message: str, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message, "Type": "Sender"},
                        "ResponseMetadata": {"HTTPStatusCode": 400}}, operation)


@dataclass
class SqsLimit:
    """What the hook saw: the largest message and how many sends it refused."""

    limit: int = LIMIT_BYTES
    largest: int = 0
    messages: int = 0
    refused: int = 0

    def _check(self, sizes: list[int], operation: str) -> None:
        self.messages += len(sizes)
        self.largest = max([self.largest, *sizes])
        over = [s for s in sizes if s > self.limit]
        if operation == "SendMessageBatch" and sum(sizes) > self.limit:
            self.refused += 1
            raise _error("AWS.SimpleQueueService.BatchRequestTooLong",
                         f"Batch requests cannot be longer than {self.limit} bytes. You have sent {sum(sizes)} bytes.",
                         operation)
        if over:
            self.refused += 1
            raise _error("InvalidParameterValue", "One or more parameters are invalid. Reason: Message must be "
                         f"shorter than {self.limit} bytes.", operation)

    def on_send_message(self, params: dict[str, Any], **_: Any) -> None:
        self._check([message_bytes(params.get("MessageBody", ""), params.get("MessageAttributes"))], "SendMessage")

    def on_send_message_batch(self, params: dict[str, Any], **_: Any) -> None:
        sizes = [message_bytes(e.get("MessageBody", ""), e.get("MessageAttributes")) for e in params.get("Entries", [])]
        self._check(sizes, "SendMessageBatch")


def enforce_sqs_limit(session: Any, limit: int = LIMIT_BYTES) -> SqsLimit:
    """Make every SQS client created from `session` (a boto3 or botocore session) from now on refuse oversized
    messages as SQS does. Returns the counters."""
    events = session.events if hasattr(session, "events") else session.get_component("event_emitter")
    seen = SqsLimit(limit=limit)
    events.register("before-parameter-build.sqs.SendMessage", seen.on_send_message)
    events.register("before-parameter-build.sqs.SendMessageBatch", seen.on_send_message_batch)
    return seen


__all__ = ["LIMIT_BYTES", "SqsLimit", "enforce_sqs_limit", "message_bytes"]

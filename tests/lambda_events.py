"""Test helpers for the Lambda handlers: the `events/*.json` files (the same ones `sam local invoke -e` takes),
SQS event factories for variants, and loading a function's `app.py` by path."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EVENTS = ROOT / "events"
FUNCTIONS = ROOT / "functions"


def load_event(name: str) -> dict[str, Any]:
    """The parsed `events/<name>` (".json" may be omitted)."""
    path = EVENTS / (name if name.endswith(".json") else f"{name}.json")
    return json.loads(path.read_text())


def sqs_record(body: str, *, message_id: str | None = None, queue_arn: str = "arn:aws:sqs:us-east-1:123456789012:q",
               receive_count: int = 1) -> dict[str, Any]:
    """One SQS record as Lambda delivers it, with `body` as given."""
    digest = hashlib.md5(body.encode()).hexdigest()  # noqa: S324 - the field SQS itself fills with an MD5
    return {
        "messageId": message_id or f"{digest[:8]}-0000-4000-8000-{digest[8:20]}",
        "receiptHandle": f"AQEB{digest}",
        "body": body,
        "attributes": {"ApproximateReceiveCount": str(receive_count), "SentTimestamp": "1704072000000",
                       "SenderId": "AROAEXAMPLE:test", "ApproximateFirstReceiveTimestamp": "1704072000001"},
        "messageAttributes": {},
        "md5OfBody": digest,
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": "us-east-1",
    }


def sqs_event(*bodies: str) -> dict[str, Any]:
    """An SQS event holding one record per body."""
    return {"Records": [sqs_record(b) for b in bodies]}


def load_handler(function: str) -> ModuleType:
    """Import `functions/<function>/app.py` under a unique module name (every function's module is `app`)."""
    name = f"gpuwaste_fn_{function}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, FUNCTIONS / function / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class FakeLambdaContext:
    """The attributes Powertools reads from a Lambda context."""

    function_name = "gpuwaste-test"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:gpuwaste-test"
    memory_limit_in_mb = 512
    aws_request_id = "00000000-0000-4000-8000-000000000000"
    log_group_name = "/aws/lambda/gpuwaste-test"
    log_stream_name = "test"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


__all__ = ["FakeLambdaContext", "load_event", "load_handler", "sqs_event", "sqs_record"]

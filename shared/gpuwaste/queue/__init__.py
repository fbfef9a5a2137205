"""Adapters: message queues between pipeline stages — in-process for local runs, SQS for the pipeline.

Both carry the versioned envelopes of `gpuwaste.models.messages` as JSON text, so a body produced by
one is readable by the other (and by the Lambda handlers' parsers).
"""

from __future__ import annotations

from gpuwaste.queue.memory import MemoryQueue

__all__ = ["MemoryQueue"]

"""Errors: one hierarchy for the whole product, translated at the edges.

`RetryableError` means the same input may succeed later (timeouts, throttling, 5xx); queue consumers let
it propagate so SQS redelivers. `PermanentError` means retrying cannot help (bad input, bad config, 4xx);
the message ends in a dead-letter queue with its reason.
"""

from __future__ import annotations


class GpuWasteError(Exception):
    """Base of every error raised by gpuwaste."""


class RetryableError(GpuWasteError):
    """A transient failure: timeouts, throttling, HTTP 5xx, Slack 429 after retries."""


class PermanentError(GpuWasteError):
    """A failure that retrying cannot fix: validation, HTTP 4xx, bad configuration."""


class ConfigError(PermanentError):
    """The configuration is invalid; the message names the field path and what is allowed."""


class InputFormatError(PermanentError):
    """A recording or message is malformed.

    Attributes:
        source: file name or other origin of the input ("<stdin>" when unknown).
        line: 1-based line number of the offending line, or None when not line-oriented.
    """

    def __init__(self, message: str, *, source: str = "<input>", line: int | None = None) -> None:
        self.source = source
        self.line = line
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {message}")


class SourceUnavailableError(RetryableError):
    """A telemetry or cluster-state source could not be reached (connection refused, timeout, 5xx)."""


class SourceAnswerError(PermanentError):
    """A source answered, but not with anything usable: malformed, refused (HTTP 4xx), redirected, or over its size
    cap. The command line exits 3 for it, as for an unreachable source (the source, not the user's input, is at fault)."""


class SourceAuthError(PermanentError):
    """A source rejected our credentials (HTTP 401/403)."""


class StoreError(RetryableError):
    """The finding store failed transiently (throttling, transaction conflict)."""


class StateInUseError(StoreError):
    """Another process holds the local state file (`gpuwaste run` on the same `--state`) past the wait."""


class DeadlineError(RetryableError):
    """A message not started because its invocation was about to end (the queue redelivers it)."""


class DeliveryError(RetryableError):
    """A Slack or Jira delivery failed and must be retried through the queue."""


class PermanentDeliveryError(PermanentError):
    """A Slack or Jira delivery failed in a way retrying cannot fix (invalid_auth, 4xx other than 429)."""


class RequestSignatureError(PermanentError):
    """An inbound request is not from the chat service: missing, wrong or replayed signature."""


class ActionRefusedError(PermanentError):
    """The cluster refused a reclaim action (403 Forbidden, 404 gone, 409/422 invalid): reported, never retried as
    another verb. `status` is the apiserver's HTTP status."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status

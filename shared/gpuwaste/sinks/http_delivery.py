"""Adapter: one JSON POST to a webhook (Teams Workflows, a generic JSON receiver) with bounded retries, errors
translated for the queue, and the URL kept out of every message and log (it is a secret: it authorises posting).

* 2xx: accepted (Workflows answers 202 with an empty body).
* 429: waits `Retry-After` seconds (1 s when absent) up to `rate_limit_retries` times, never longer than the caller's
  time left minus `DEADLINE_RESERVE_S` (in Lambda) or `max_retry_after_s` (elsewhere); then DeliveryError (the queue
  or the local outbox brings the message back).
* 5xx, timeouts, connection errors: `server_error_retries` retries with back-off (0.5 s, 1 s, …); then DeliveryError.
* 413: PayloadTooLargeError (the caller re-renders smaller). Other 4xx: PermanentDeliveryError (a bad URL, a
  disabled flow, a refused payload): retrying would not help.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import requests

from gpuwaste.errors import DeliveryError, PermanentDeliveryError

logger = logging.getLogger(__name__)

#: Seconds kept free of in-process waits before the invocation's deadline.
DEADLINE_RESERVE_S = 5.0
#: Characters of an error answer quoted in an error (receivers' answers, never our URL).
_ANSWER_CHARS = 200


class PayloadTooLargeError(PermanentDeliveryError):
    """The receiver refused the body for its size (HTTP 413)."""


def _retry_after_s(response: requests.Response) -> float:
    try:
        return max(0.0, float(response.headers.get("Retry-After") or 1.0))
    except ValueError:
        return 1.0


def retry_after_deferred(name: str, wait: float, cap: float) -> str:
    """The message of a delivery deferred because its `Retry-After` is longer than the configured maximum."""
    return (f"{name}: 429 rate limited with Retry-After {wait:g} s, over max_retry_after_s={cap:g}: deferred, not "
            "waited out (it stays in the outbox for the next run)")


@dataclass
class JsonPoster:
    """POSTs JSON bodies with the retry rules above.

    Args:
        what: how errors name the receiver ("teams webhook ml"): never the URL.
        sleep: injectable (tests record the waits). time_left: the caller's remaining seconds (a Lambda's).
    """

    what: str
    timeout_s: float = 10.0
    rate_limit_retries: int = 3
    server_error_retries: int = 1
    #: outside Lambda (no `time_left`), the longest Retry-After waited in-process; a longer one defers the delivery
    max_retry_after_s: float = 60.0
    sleep: Callable[[float], None] = time.sleep
    time_left: Callable[[], float] | None = None
    session: requests.Session = field(default_factory=requests.Session)

    def post(self, url: str, body: bytes, headers: Mapping[str, str] | None = None,
             *, what: str | None = None) -> requests.Response:
        """POST `body` (JSON) to `url`; the accepted response.

        Raises:
            DeliveryError: 429 or 5xx after the in-process retries, a timeout or a connection error.
            PayloadTooLargeError: 413. PermanentDeliveryError: any other 4xx, or a 3xx.
        """
        name = what or self.what
        sent = {"Content-Type": "application/json", **(headers or {})}
        limited = failed = 0
        while True:
            try:
                response = self.session.post(url, data=body, headers=sent, timeout=self.timeout_s, allow_redirects=False)
            except requests.RequestException as exc:  # str(exc) names the URL: only the type is kept
                failed += 1
                if failed > self.server_error_retries:
                    raise DeliveryError(f"{name}: {type(exc).__name__} (will retry via the queue)") from None
                self.sleep(0.5 * 2 ** (failed - 1))
                continue
            status = response.status_code
            if 200 <= status < 300:
                return response
            if status == 429:
                limited += 1
                wait = _retry_after_s(response)
                if self.time_left is None and wait > self.max_retry_after_s:
                    raise DeliveryError(retry_after_deferred(name, wait, self.max_retry_after_s))
                left = self.time_left() - DEADLINE_RESERVE_S if self.time_left is not None else float("inf")
                if limited > self.rate_limit_retries or wait > left:
                    raise DeliveryError(f"{name}: 429 rate limited (Retry-After {wait:g} s; will retry via the queue)")
                logger.info("webhook rate limited; waiting", extra={"receiver": name, "retry_after_s": wait})
                self.sleep(wait)
                continue
            if status >= 500:
                failed += 1
                if failed > self.server_error_retries:
                    raise DeliveryError(f"{name}: HTTP {status} (will retry via the queue)")
                self.sleep(0.5 * 2 ** (failed - 1))
                continue
            answer = response.text[:_ANSWER_CHARS].replace(url, "<webhook URL>")
            if status == 413:
                raise PayloadTooLargeError(f"{name}: HTTP 413 payload too large: {answer}")
            if status in (401, 403, 404):
                raise PermanentDeliveryError(f"{name}: HTTP {status}: the webhook URL was refused (check the secret; "
                                             f"a deleted or turned-off flow answers 404)")
            raise PermanentDeliveryError(f"{name}: HTTP {status}: {answer}")


__all__ = ["DEADLINE_RESERVE_S", "JsonPoster", "PayloadTooLargeError", "retry_after_deferred"]

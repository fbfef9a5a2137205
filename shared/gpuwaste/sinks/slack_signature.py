"""Adapter: Slack request signatures (the interactions endpoint), verified by `slack_sdk.signature.SignatureVerifier`.

Slack signs each request with the app's signing secret: `v0=` + hex HMAC-SHA256 of `v0:<timestamp>:<raw body>` in
`X-Slack-Signature`, the timestamp in `X-Slack-Request-Timestamp`. The library computes and compares the signature
(in constant time) and refuses requests more than 5 minutes from now; a stricter `max_age_s` is checked first so
the refusal says why.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime

from slack_sdk.signature import Clock, SignatureVerifier

from gpuwaste.errors import RequestSignatureError

#: slack_sdk's own freshness limit (seconds): a larger `max_age_s` cannot widen it.
LIBRARY_MAX_AGE_S = 300


class _InjectedClock(Clock):
    def __init__(self, now: Callable[[], datetime] | None) -> None:
        self._now = now

    def now(self) -> float:
        return self._now().timestamp() if self._now is not None else time.time()


class SlackSignatureVerifier:
    """`ports.RequestVerifier` for Slack.

    Args:
        signing_secret: the Slack app's signing secret.
        now: clock (UTC), injectable for tests; default the system clock.
        max_age_s: requests whose timestamp is further from now are refused as replays (at most 300 s is enforced
            by the library in any case).
    """

    def __init__(self, signing_secret: str, *, now: Callable[[], datetime] | None = None,
                 max_age_s: int = LIBRARY_MAX_AGE_S) -> None:
        self._clock = _InjectedClock(now)
        self._verifier = SignatureVerifier(signing_secret, clock=self._clock)
        self.max_age_s = max_age_s

    def verify(self, headers: Mapping[str, str], body: bytes) -> None:
        """Check the request's signature and freshness.

        Raises:
            RequestSignatureError: a header is missing, the timestamp is not a number or too far from now (replay),
                the body is not UTF-8, or the signature does not match.
        """
        lower = {k.lower(): v for k, v in headers.items()}
        timestamp = lower.get("x-slack-request-timestamp", "")
        signature = lower.get("x-slack-signature", "")
        if not timestamp or not signature:
            raise RequestSignatureError("missing X-Slack-Request-Timestamp or X-Slack-Signature")
        try:
            sent = int(timestamp)
        except ValueError as exc:
            raise RequestSignatureError("X-Slack-Request-Timestamp is not a number") from exc
        if abs(self._clock.now() - sent) > min(self.max_age_s, LIBRARY_MAX_AGE_S):
            raise RequestSignatureError(f"request timestamp is more than {min(self.max_age_s, LIBRARY_MAX_AGE_S)} s "
                                        "from now (replay refused)")
        try:
            valid = self._verifier.is_valid(body=body, timestamp=timestamp, signature=signature)
        except UnicodeDecodeError as exc:
            raise RequestSignatureError("request body is not UTF-8") from exc
        if not valid:
            raise RequestSignatureError("signature mismatch")


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """Slack's signature of a request (what Slack sends; for tests and local tools)."""
    signature = SignatureVerifier(secret).generate_signature(timestamp=timestamp, body=body)
    assert signature is not None
    return signature


__all__ = ["LIBRARY_MAX_AGE_S", "SlackSignatureVerifier", "sign"]

"""Test server: a generic JSON webhook receiver (what a PagerDuty/Opsgenie relay or an internal bus runs).

``POST /hooks/<name>`` with a JSON body. Like a careful receiver:

* checks the HMAC signature itself (``X-Gpuwaste-Signature: v1=<hex HMAC-SHA256(secret, "<X-Gpuwaste-Timestamp>." +
  body)>``, timestamps older than 300 s refused) — written here from the documented rule, not imported from the
  product — and answers **401** on a bad or missing signature;
* answers **200** ``{"status": "accepted"}`` and keeps the event in ``events``; an ``id`` seen before is answered
  **200** ``{"status": "duplicate"}`` and counted in ``duplicates`` (receivers deduplicate on it);
* refuses bodies over ``limit_bytes`` with **413** and non-JSON with **400**;
* ``fail_next(status, times=…, retry_after=…)`` injects 429/5xx (counted in ``faults_served``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from tests.servers import FakeHttpServer, HttpRequest, HttpResponse

__all__ = ["FakeJsonWebhook"]


@dataclass
class _Fault:
    status: int
    times: int
    retry_after: float | None = None


class FakeJsonWebhook(FakeHttpServer):
    """A JSON webhook receiver; ``url`` is ``<base>/hooks/gpuwaste``."""

    server_name = "fake-webhook"

    def __init__(self, *, secret: str = "whsec-test-2f9c", limit_bytes: int = 512_000) -> None:
        super().__init__()
        self.secret = secret
        self.limit_bytes = limit_bytes
        self.events: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.duplicates = 0
        self.bad_signatures = 0
        self.requests = 0
        self.faults_served: Counter[str] = Counter()
        self._faults: list[_Fault] = []
        self.clock = time.time

    @property
    def url(self) -> str:
        """The hook's URL."""
        return f"{self.base_url}/hooks/gpuwaste"

    def reset(self) -> None:
        """Forget events, faults and counters."""
        with self._lock:
            self.events.clear()
            self.headers.clear()
            self.duplicates = self.bad_signatures = self.requests = 0
            self.faults_served.clear()
            self._faults.clear()

    def heal(self) -> None:
        """Drop the faults still queued (the outage is over)."""
        with self._lock:
            self._faults.clear()

    def fail_next(self, status: int, *, times: int = 1, retry_after: float | None = None) -> None:
        """Answer the next `times` requests with `status`."""
        with self._lock:
            self._faults.append(_Fault(status, times, retry_after))

    def _signed(self, request: HttpRequest) -> bool:
        timestamp = request.headers.get("x-gpuwaste-timestamp", "")
        given = request.headers.get("x-gpuwaste-signature", "")
        try:
            if abs(self.clock() - int(timestamp)) > 300:
                return False
        except ValueError:
            return False
        expected = "v1=" + hmac.new(self.secret.encode(), f"{timestamp}.".encode() + request.body,
                                    hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, given)

    def handle(self, request: HttpRequest) -> HttpResponse:
        with self._lock:
            self.requests += 1
            if request.method != "POST" or request.path != "/hooks/gpuwaste":
                return HttpResponse.json_body(404, {"error": "not found"})
            if self._faults:
                fault = self._faults[0]
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.pop(0)
                self.faults_served[f"webhook {fault.status}"] += 1
                headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
                return HttpResponse.json_body(fault.status, {"error": "injected"}, headers=headers)
            if not self._signed(request):
                self.bad_signatures += 1
                return HttpResponse.json_body(401, {"error": "bad signature"})
            if len(request.body) > self.limit_bytes:
                return HttpResponse.json_body(413, {"error": "too large"})
            try:
                event = json.loads(request.body)
            except ValueError:
                return HttpResponse.json_body(400, {"error": "not JSON"})
            if any(e.get("id") == event.get("id") for e in self.events):
                self.duplicates += 1
                return HttpResponse.json_body(200, {"status": "duplicate"})
            self.events.append(event)
            self.headers.append(dict(request.headers))
            return HttpResponse.json_body(200, {"status": "accepted"})

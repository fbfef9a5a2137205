"""The harness's `AuditedSlack` attributes each accepted call to its own request, also when requests overlap.

What the hardening tests count comes from `AuditedSlack.accepted`; a call attributed to another thread's request
(it used to take the params of the fake's latest call, which under concurrency is often another request's) would
make a duplicate look like two distinct posts, or a loss look delivered.
"""

from __future__ import annotations

import threading
import time

from slack_sdk import WebClient

from tests.hardening.harness import AuditedSlack
from tests.servers import HttpRequest, HttpResponse
from tests.servers.slack_api import FakeSlack

THREADS = 8
POSTS_EACH = 25


class _SlowAnswers(FakeSlack):
    """The fake Slack taking a moment between handling a call and answering it (as a network does)."""

    def handle(self, request: HttpRequest) -> HttpResponse:
        response = super().handle(request)
        time.sleep(0.005)
        return response


class _AuditedSlowSlack(AuditedSlack, _SlowAnswers):
    """`AuditedSlack` over a fake that answers a little late (its auditing code unchanged)."""


def test_overlapping_requests_are_each_attributed_to_their_own_params() -> None:
    with _AuditedSlowSlack() as slack:
        # GIVEN many clients posting at once, each message with its own text
        def post(worker: int) -> None:
            client = WebClient(token=slack.token, base_url=slack.url, timeout=10)
            for n in range(POSTS_EACH):
                client.chat_postMessage(channel=f"#c{worker}", text=f"w{worker}-m{n}")

        threads = [threading.Thread(target=post, args=(w,)) for w in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # THEN every accepted call carries the params of the request that the fake answered with that message
        accepted = [a for a in slack.accepted if a.method == "chat.postMessage"]
        assert len(accepted) == THREADS * POSTS_EACH
        wrong = [(a.params.get("text"), a.response["message"]["text"]) for a in accepted
                 if a.params.get("text") != a.response["message"]["text"]]
        assert not wrong, f"{len(wrong)} mis-attributed, e.g. {wrong[:3]}"
        assert sorted(str(a.params["text"]) for a in accepted) == sorted(
            f"w{w}-m{n}" for w in range(THREADS) for n in range(POSTS_EACH))

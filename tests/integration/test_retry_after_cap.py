"""A `Retry-After` longer than the configured maximum is not waited out outside Lambda: the delivery is deferred (kept
in the state's outbox), `gpuwaste run` exits 4 saying so, and the next run delivers it once. Inside Lambda the
invocation's time left stays the cap. Counted at the fake Slack, Teams and JSON webhook."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app
from gpuwaste.errors import DeliveryError
from gpuwaste.models.settings import SlackSettings
from gpuwaste.sinks.http_delivery import JsonPoster
from gpuwaste.sinks.slack import SlackNotifier
from tests.servers.json_webhook import FakeJsonWebhook
from tests.servers.slack_api import FakeSlack
from tests.servers.teams_webhook import FakeTeams

pytestmark = pytest.mark.integration

DEMO = local.demo_recording()
EXIT_UNDELIVERED = 4
HOUR = 3600


def _run(config: Path, state: Path):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, ["run", "--recording", str(DEMO), "--state", str(state), "--config", str(config),
                                    "--no-summary", "--no-tickets"], env={"COLUMNS": "200"})


def test_run_defers_a_slack_retry_after_of_an_hour_and_delivers_it_next_run(tmp_path: Path, slack_api: FakeSlack) -> None:
    # GIVEN Slack answers every post with 429 Retry-After: 3600 (max_retry_after_s is the default 60)
    config, state = tmp_path / "config.json", tmp_path / "state.db"
    config.write_text(json.dumps({"delivery": {"slack": {"bot_token": slack_api.token, "base_url": slack_api.url,
                                                         "server_error_retries": 0}}}))
    slack_api.fail_next("chat.postMessage", 429, retry_after=HOUR, times=10_000)
    # WHEN `gpuwaste run` runs
    t0 = time.monotonic()
    first = _run(config, state)
    wall = time.monotonic() - t0
    # THEN it did not wait the hour: it exited 4 at once, saying the deliveries were deferred, and nothing was posted
    assert wall < 60, wall
    assert first.exit_code == EXIT_UNDELIVERED, first.output
    assert "over max_retry_after_s=60: deferred" in first.output
    assert sum(slack_api.faults_served.values()) > 0 and not slack_api.messages
    # AND once Slack accepts again, the next run posts the deferred alerts, each once
    slack_api.reset()
    second = _run(config, state)
    assert second.exit_code == 0, second.output
    texts = [m.get("text") for m in slack_api.messages.values()]
    assert texts and len(texts) == len(set(zip(slack_api.messages.keys(), texts, strict=True)))
    third = _run(config, state)
    assert third.exit_code == 0 and len(slack_api.calls_to("chat.postMessage")) == len(slack_api.messages)


def test_run_defers_teams_and_webhook_retry_after_over_the_cap(tmp_path: Path, teams: FakeTeams,
                                                               json_webhook: FakeJsonWebhook) -> None:
    # GIVEN Teams and the JSON webhook both throttle with Retry-After: 3600, and a cap of 5 s
    config, state = tmp_path / "config.json", tmp_path / "state.db"
    general = teams.add_flow("general")
    config.write_text(json.dumps({"delivery": {
        "msteams": {"webhooks": {"general": general}, "default_webhook": "general", "server_error_retries": 0,
                    "max_retry_after_s": 5},
        "webhook": {"url": json_webhook.url, "signing_secret": json_webhook.secret, "server_error_retries": 0,
                    "max_retry_after_s": 5},
    }}))
    teams.fail_next(429, times=10_000, retry_after=HOUR)
    json_webhook.fail_next(429, times=10_000, retry_after=HOUR)
    # WHEN `gpuwaste run` runs
    t0 = time.monotonic()
    first = _run(config, state)
    wall = time.monotonic() - t0
    # THEN neither hour was waited: exit 4, deferred, nothing accepted at either receiver
    assert wall < 60, wall
    assert first.exit_code == EXIT_UNDELIVERED, first.output
    assert "over max_retry_after_s=5: deferred" in first.output
    assert not teams.posts and not json_webhook.events
    # AND after both recover the next run delivers every deferred alert once
    teams.heal()
    json_webhook.reset()
    second = _run(config, state)
    assert second.exit_code == 0, second.output
    assert teams.posts and json_webhook.events and json_webhook.duplicates == 0


def _signed(hook: FakeJsonWebhook, body: bytes) -> dict[str, str]:
    ts = str(int(hook.clock()))
    mac = hmac.new(hook.secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Gpuwaste-Timestamp": ts, "X-Gpuwaste-Signature": f"v1={mac}"}


class _Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def test_inside_lambda_the_time_left_is_the_cap_not_max_retry_after(slack_api: FakeSlack, json_webhook: FakeJsonWebhook) -> None:
    # GIVEN Retry-After 90 s (over the 60 s default cap) and a Lambda invocation with 10 minutes left
    sleeps = _Sleeps()
    notifier = SlackNotifier.from_settings(SlackSettings(base_url=slack_api.url, server_error_retries=0), token=slack_api.token,
                                           default_channel="#gpu-waste", sleep=sleeps)
    notifier.set_time_left(lambda: 600.0)
    slack_api.fail_next("auth.test", 429, retry_after=90)
    poster = JsonPoster(what="json webhook", sleep=sleeps, time_left=lambda: 600.0, server_error_retries=0)
    json_webhook.fail_next(429, retry_after=90)
    # WHEN each posts
    notifier.client.api_call("auth.test")
    poster.post(json_webhook.url, b'{"x": 1}', headers=_signed(json_webhook, b'{"x": 1}'))
    # THEN each waited the 90 s (the time left allows it), as before this cap existed
    assert sleeps == [90.0, 90.0]
    assert len(json_webhook.events) == 1
    # AND outside Lambda the same 90 s is deferred at once (no wait)
    sleeps.clear()
    outside = JsonPoster(what="json webhook", sleep=sleeps, server_error_retries=0)
    json_webhook.fail_next(429, retry_after=90)
    with pytest.raises(DeliveryError, match="deferred"):
        outside.post(json_webhook.url, b'{"x": 1}')
    assert sleeps == []

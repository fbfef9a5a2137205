"""Teams and the JSON webhook end to end: `gpuwaste run` (the local chain, through the state's outbox) and the notify
function (the pipeline's Lambda handler). Counted at the fake Teams webhooks and the fake JSON receiver."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import local, pipeline
from gpuwaste.cli import app
from gpuwaste.models.messages import AlertMessage
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.delivery_helpers import ROOT, LambdaContext, load_app, record_for
from tests.servers.json_webhook import FakeJsonWebhook
from tests.servers.teams_webhook import FakeTeams

pytestmark = pytest.mark.integration

DEMO = local.demo_recording()
EXIT_UNDELIVERED = 4


def _config(path: Path, teams: FakeTeams, hook: FakeJsonWebhook) -> Path:
    urls = {"general": teams.add_flow("general"), "ml-serving": teams.add_flow("ml-serving")}
    path.write_text(json.dumps({"delivery": {
        "teams": {"ml-serving": {"teams_webhook": "ml-serving"}},
        "msteams": {"webhooks": urls, "default_webhook": "general", "server_error_retries": 0},
        "webhook": {"url": hook.url, "signing_secret": hook.secret, "server_error_retries": 0},
    }}))
    return path


def _run(config: Path, state: Path):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, ["run", "--recording", str(DEMO), "--state", str(state), "--config", str(config),
                                    "--no-summary", "--no-tickets"], env={"COLUMNS": "200"})


def test_gpuwaste_run_delivers_to_teams_and_the_webhook_through_the_outbox(tmp_path: Path, teams: FakeTeams,
                                                                          json_webhook: FakeJsonWebhook) -> None:
    # GIVEN a config with Teams (team ml-serving routed to its own webhook) and a JSON webhook; Teams down at first
    config, state = _config(tmp_path / "config.json", teams, json_webhook), tmp_path / "state.db"
    teams.fail_next(503, times=1000)
    # WHEN `gpuwaste run` runs, then runs again once Teams is back, then a third time
    first = _run(config, state)
    events_after_first, posts_after_first = len(json_webhook.events), len(teams.posts)
    teams.heal()
    second = _run(config, state)
    posts_after_second = len(teams.posts)
    third = _run(config, state)
    # THEN the first run delivered to the webhook, kept the Teams deliveries pending and exited with the documented code
    assert first.exit_code == EXIT_UNDELIVERED, first.output
    assert events_after_first > 0 and posts_after_first == 0 and teams.faults_served["teams 503"] > 0
    # AND the second delivered every alert to Teams without re-sending any webhook event; the third sent nothing
    assert second.exit_code == 0 and third.exit_code == 0, second.output + third.output
    assert len(json_webhook.events) == events_after_first and json_webhook.duplicates == 0
    assert posts_after_second > 0 and not teams.refused
    assert {p.flow for p in teams.posts} == {"general", "ml-serving"}
    assert len(teams.posts) == posts_after_second and json_webhook.duplicates == 0
    # AND every finding the webhook heard about is recorded as delivered to both sinks
    store = SqliteFindingStore(state)
    try:
        for event in json_webhook.events:
            rec = store.get(event["dedup_key"])
            assert rec is not None
            sinks = {k.rsplit(":", 1)[1] for k in rec.delivery_keys}
            assert {"webhook", "teams", "terminal"} <= sinks, rec.delivery_keys
    finally:
        store.close()


def test_notify_function_delivers_to_each_sink_and_a_teams_failure_retries_only_teams(
        tmp_path: Path, teams: FakeTeams, json_webhook: FakeJsonWebhook, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the notify function configured with Teams and the webhook only (no Slack), over a SQLite store
    config = _config(tmp_path / "config.json", teams, json_webhook)
    monkeypatch.setenv("CONFIG_FILE", str(config))
    monkeypatch.delenv("DEAD_LETTER_QUEUE_URL", raising=False)
    app_module = load_app("notify_slack")
    store = SqliteFindingStore(":memory:")
    monkeypatch.setattr(app_module.bootstrap.delivery, "lambda_store", lambda: store)
    pipeline.reset()
    app_module.bootstrap.notify_service.cache_clear()
    event = json.loads((ROOT / "events" / "sqs_alerts.json").read_text())
    for r in event["Records"]:
        msg = AlertMessage.model_validate_json(r["body"])
        store.put_new(record_for(msg.finding, messages=msg.messages))
    teams.fail_next(503, times=1000)
    # WHEN the batch is handled with Teams down, then redelivered (SQS) with Teams back
    first = app_module.lambda_handler(event, LambdaContext())
    teams.heal()
    failed_ids = {f["itemIdentifier"] for f in first["batchItemFailures"]}
    again = {**event, "Records": [r for r in event["Records"] if r["messageId"] in failed_ids]}
    second = app_module.lambda_handler(again, LambdaContext())
    # THEN every record failed the first time (Teams), the webhook got each event once across both invocations,
    # and Teams got the cards on the second
    assert failed_ids == {r["messageId"] for r in event["Records"]}
    assert second["batchItemFailures"] == []
    assert json_webhook.duplicates == 0 and len(json_webhook.events) == len(event["Records"])
    assert len(teams.posts) == len(event["Records"])
    pipeline.reset()
    app_module.bootstrap.notify_service.cache_clear()

"""Records and queue messages written before delivery was sink-neutral (`slack_channel` / `slack_ts`) still load: the
old fields become the neutral message reference, threads continue, and what is written back has the new shape."""

from __future__ import annotations

import json
import sqlite3

import boto3
import pytest

from gpuwaste.models.messages import AlertAction, AlertMessage
from gpuwaste.models.notices import message_for
from gpuwaste.models.settings import DeliverySettings, SlackSettings
from gpuwaste.services.notify import NotifyService
from gpuwaste.sinks.slack import SlackNotifier
from gpuwaste.store.dynamodb import DynamoDbFindingStore, to_item
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.aws_resources import create_stack
from tests.delivery_helpers import NOW, ROOT, alert, finding, record_for
from tests.servers.slack_api import FakeSlack

pytestmark = pytest.mark.integration

OLD_CHANNEL, OLD_TS = "C0GPUWASTE", "1704060000.000100"


def _old_body(record_json: str) -> str:
    """A record body as stored before: two Slack fields, no `messages`."""
    data = json.loads(record_json)
    data.pop("messages", None)
    data.update({"slack_channel": OLD_CHANNEL, "slack_ts": OLD_TS})
    return json.dumps(data)


def test_old_sqlite_record_loads_threads_on_and_is_written_back_new(tmp_path, slack_api: FakeSlack) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a SQLite state whose record was written by the earlier version (slack_channel/slack_ts in its body)
    path = tmp_path / "state.db"
    store = SqliteFindingStore(path)
    f = finding("trainer")
    store.put_new(record_for(f))
    store.close()
    with sqlite3.connect(path) as db:
        (body,) = db.execute("SELECT body FROM findings").fetchone()
        db.execute("UPDATE findings SET body = ?", (_old_body(body),))
    store = SqliteFindingStore(path)
    # WHEN it is read, and the finding gets worse
    rec = store.get(f.fingerprint)
    settings = DeliverySettings(slack=SlackSettings(base_url=slack_api.url))
    notifier = SlackNotifier.from_settings(settings.slack, token=slack_api.token, default_channel="#gpu-waste")
    NotifyService(notifier=notifier, store=store, settings=settings, now=lambda: NOW).deliver(
        [alert(f, AlertAction.WORSE, scan_id="scan-2", reason="cost up 40 %")])
    # THEN the old fields are the Slack reference, the update is a reply in the old thread (counted at the fake Slack)
    assert rec is not None and rec.messages[0].model_dump() == {
        "sink": "slack", "destination": OLD_CHANNEL, "message_id": OLD_TS, "thread": None, "carries": ()}
    (reply,) = slack_api.calls_to("chat.postMessage")
    assert reply["thread_ts"] == OLD_TS and reply["channel"] == OLD_CHANNEL
    # AND the record written back has the new shape only
    store.close()
    with sqlite3.connect(path) as db:
        (body,) = db.execute("SELECT body FROM findings").fetchone()
    stored = json.loads(body)
    assert "slack_ts" not in stored and "slack_channel" not in stored
    assert stored["messages"][0]["message_id"] == OLD_TS


def test_old_dynamodb_item_loads_and_is_written_back_new(aws) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a DynamoDB item written by the earlier version (slack_channel/slack_ts attributes, no messages)
    ddb = boto3.client("dynamodb")
    stack = create_stack(boto3.client("sqs"), ddb)
    store = DynamoDbFindingStore(client=ddb, table_name=stack.table_name)
    f = finding("trainer")
    item = to_item(record_for(f))
    item.pop("messages", None)
    item.update({"slack_channel": {"S": OLD_CHANNEL}, "slack_ts": {"S": OLD_TS}})
    ddb.put_item(TableName=stack.table_name, Item=item)
    # WHEN it is read and updated
    rec = store.get(f.fingerprint)
    assert rec is not None
    ref = message_for(rec.messages, "slack")
    assert ref is not None and (ref.destination, ref.message_id) == (OLD_CHANNEL, OLD_TS)
    assert store.update(rec.model_copy(update={"version": rec.version + 1}), expected_version=rec.version)
    # THEN the stored item has the new attribute and not the old ones
    raw = ddb.get_item(TableName=stack.table_name, Key={"fingerprint": {"S": f.fingerprint}}, ConsistentRead=True)["Item"]
    assert "slack_ts" not in raw and "slack_channel" not in raw
    assert raw["messages"]["L"][0]["M"]["message_id"] == {"S": OLD_TS}


def test_alert_messages_in_flight_with_the_old_fields_still_load() -> None:
    # GIVEN the sample SQS alerts (written by the earlier version: slack_ts/slack_channel in each body)
    event = json.loads((ROOT / "events" / "sqs_alerts.json").read_text())
    bodies = [json.loads(r["body"]) for r in event["Records"]]
    assert any(b.get("slack_ts") for b in bodies)
    # WHEN they are parsed as AlertMessages
    messages = [AlertMessage.model_validate_json(r["body"]) for r in event["Records"]]
    # THEN a body with a Slack message carries it as the neutral reference; one without carries none; none is lost
    for body, message in zip(bodies, messages, strict=True):
        ref = message_for(message.messages, "slack")
        if body.get("slack_ts"):
            assert ref is not None and (ref.destination, ref.message_id) == (body["slack_channel"], body["slack_ts"])
        else:
            assert message.messages == ()
        # AND re-sent, the message has the new shape only
        again = json.loads(message.model_dump_json())
        assert "slack_ts" not in again and "slack_channel" not in again
        assert AlertMessage.model_validate_json(message.model_dump_json()) == message

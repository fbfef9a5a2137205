"""store.once.DynamoDbOnceLedger over moto's server, on the template's FindingsTable."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from gpuwaste.store.once import DynamoDbOnceLedger
from tests.aws_resources import create_stack

pytestmark = pytest.mark.integration
T0 = datetime(2024, 1, 2, 8, 0, tzinfo=UTC)
HOLD, KEEP = timedelta(minutes=15), timedelta(days=3)


@pytest.fixture
def ledger(aws: Any) -> DynamoDbOnceLedger:
    ddb = boto3.client("dynamodb")
    stack = create_stack(boto3.client("sqs"), ddb)
    return DynamoDbOnceLedger(client=ddb, table_name=stack.table_name)


def claim(ledger: DynamoDbOnceLedger, at: datetime) -> str:
    return ledger.claim("summary#2024-01-02#slack#C1", now=at, hold_until=at + HOLD, keep_until=at + KEEP)


def test_once_ledger_claim_is_taken_once_until_done(ledger: DynamoDbOnceLedger) -> None:
    # GIVEN a claim taken
    first = claim(ledger, T0)
    # WHEN another invocation claims it while held, after the hold ran out, then after it was confirmed
    held = claim(ledger, T0 + timedelta(minutes=1))
    taken_over = claim(ledger, T0 + HOLD + timedelta(seconds=1))
    ledger.confirm("summary#2024-01-02#slack#C1", keep_until=T0 + KEEP)
    done = claim(ledger, T0 + HOLD + timedelta(minutes=1))
    expired = claim(ledger, T0 + KEEP + timedelta(seconds=1))
    # THEN only the first, the take-over of a dead holder and the claim after expiry win
    assert (first, held, taken_over, done, expired) == ("claimed", "held", "claimed", "done", "claimed")


def test_once_ledger_release_lets_the_next_claim_in(ledger: DynamoDbOnceLedger) -> None:
    # GIVEN a claim released (the post was refused)
    claim(ledger, T0)
    ledger.release("summary#2024-01-02#slack#C1")
    # WHEN claimed again at once / THEN it is taken; the record is kept under the once# prefix, outside the indexes
    assert claim(ledger, T0 + timedelta(seconds=1)) == "claimed"
    items = ledger.client.scan(TableName=ledger.table_name)["Items"]
    assert [i["fingerprint"]["S"] for i in items] == ["once#summary#2024-01-02#slack#C1"]
    assert not {"activity_day", "cluster_state"} & set(items[0])

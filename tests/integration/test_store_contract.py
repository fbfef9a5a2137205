"""Contract: the SQLite and DynamoDB (moto server) finding stores behave the same; every write is conditional."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import boto3
import pytest

from gpuwaste.models.lifecycle import FindingRecord, FindingState
from gpuwaste.models.messages import ScanCompleted
from gpuwaste.models.notices import MessageRef
from gpuwaste.ports import FindingStore
from gpuwaste.store.dynamodb import DynamoDbFindingStore
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.aws_resources import create_stack

pytestmark = pytest.mark.integration
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "dynamodb"])
def store(request: pytest.FixtureRequest, tmp_path) -> Iterator[FindingStore]:  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        s = SqliteFindingStore(tmp_path / "state.db")
        yield s
        s.close()
        return
    request.getfixturevalue("aws")
    ddb = boto3.client("dynamodb")
    stack = create_stack(boto3.client("sqs"), ddb)
    yield DynamoDbFindingStore(client=ddb, table_name=stack.table_name)


def record(fp: str = "fp-1", *, cluster: str = "c1", at: datetime = T0, version: int = 1, **extra: object) -> FindingRecord:
    fields: dict[str, object] = {"activity_at": at, **extra}
    return FindingRecord(fingerprint=fp, cluster=cluster, namespace="ml", workload="trainer", kind="idle_allocation",
                         detector="idle_allocation", first_seen=at, last_seen=at, last_scan_id="s0",
                         usd_per_day=Decimal("12.34"), cumulative_usd=Decimal("0.5"), version=version,
                         expires_at=1_800_000_000, **fields)  # type: ignore[arg-type]


def test_store_put_new_then_get_round_trips_every_field(store: FindingStore) -> None:
    # GIVEN a record with money, times, optional fields and a tuple
    r = record(messages=(MessageRef(sink="slack", destination="C1", message_id="1704060000.000100"),), snoozed_until=T0 + timedelta(days=1), delivery_keys=("k1", "k2"),
               peak_usd_per_day=Decimal("20.5"), missed_scans=2, outbox_json='[{"a": 1}]')
    # WHEN it is created and read back
    created = store.put_new(r)
    got = store.get("fp-1")
    # THEN it is equal, Decimal money and tz-aware times included
    assert created is True
    assert got == r
    assert isinstance(got.usd_per_day, Decimal) and got.first_seen.tzinfo is not None  # type: ignore[union-attr]


def test_store_put_new_twice_returns_false(store: FindingStore) -> None:
    # GIVEN an existing record
    store.put_new(record())
    # WHEN the same fingerprint is created again (a duplicate delivery)
    second = store.put_new(record(version=7))
    # THEN the store refuses without raising, and the first record is kept
    assert second is False
    assert store.get("fp-1").version == 1  # type: ignore[union-attr]


def test_store_update_with_expected_version_succeeds(store: FindingStore) -> None:
    # GIVEN a record at version 1
    store.put_new(record())
    # WHEN it is updated expecting version 1
    ok = store.update(record(version=2, missed_scans=1), expected_version=1)
    # THEN the write lands
    assert ok is True and store.get("fp-1").missed_scans == 1  # type: ignore[union-attr]


def test_store_update_with_stale_version_returns_false(store: FindingStore) -> None:
    # GIVEN a record already moved to version 2 by another consumer
    store.put_new(record())
    store.update(record(version=2), expected_version=1)
    # WHEN a consumer that read version 1 writes
    ok = store.update(record(version=2, missed_scans=5), expected_version=1)
    # THEN the conditional write fails quietly and changes nothing
    assert ok is False and store.get("fp-1").missed_scans == 0  # type: ignore[union-attr]


def test_store_update_of_missing_record_returns_false(store: FindingStore) -> None:
    # GIVEN an empty store
    # WHEN an update expects a version of a record that does not exist
    ok = store.update(record(version=2), expected_version=1)
    # THEN it fails quietly (nothing is created)
    assert ok is False and store.get("fp-1") is None


def test_store_get_missing_returns_none(store: FindingStore) -> None:
    # GIVEN an empty store
    # WHEN an unknown fingerprint is read
    # THEN None
    assert store.get("nope") is None


def test_store_open_for_cluster_lists_only_open_records_of_that_cluster(store: FindingStore) -> None:
    # GIVEN open and resolved records in two clusters
    store.put_new(record("a"))
    store.put_new(record("b"))
    store.put_new(record("c", state=FindingState.RESOLVED, resolved_at=T0))
    store.put_new(record("d", cluster="c2"))
    # WHEN the open records of c1 are listed
    got = store.open_for_cluster("c1")
    # THEN a and b, by fingerprint
    assert [r.fingerprint for r in got] == ["a", "b"]


def test_store_resolving_removes_from_open_list(store: FindingStore) -> None:
    # GIVEN an open record
    store.put_new(record("a"))
    # WHEN it is resolved by a conditional update
    store.update(record("a", version=2, state=FindingState.RESOLVED, resolved_at=T0 + timedelta(minutes=30),
                        activity_at=T0 + timedelta(minutes=30)), expected_version=1)
    # THEN the open list no longer has it
    assert store.open_for_cluster("c1") == []


def test_store_history_returns_records_active_in_range_across_days(store: FindingStore) -> None:
    # GIVEN records last active on three days
    store.put_new(record("day0", at=T0 - timedelta(days=1)))
    store.put_new(record("day1-early", at=T0))
    store.put_new(record("day2", at=T0 + timedelta(days=1, hours=2)))
    store.put_new(record("day3", at=T0 + timedelta(days=2, hours=5)))
    # WHEN the history of [T0, T0 + 1 day 3 h] is read
    got = store.history(since=T0, until=T0 + timedelta(days=1, hours=3))
    # THEN only the records active in that range, across the day boundary
    assert sorted(r.fingerprint for r in got) == ["day1-early", "day2"]


def test_store_open_fingerprints_lists_open_keys_of_that_cluster_sorted(store: FindingStore) -> None:
    # GIVEN 40 open records in c1 (spread over the index's buckets), one resolved, one in another cluster
    fps = [f"fp-{i:02d}" for i in range(40)]
    for fp in reversed(fps):
        store.put_new(record(fp))
    store.put_new(record("gone", state=FindingState.RESOLVED, resolved_at=T0))
    store.put_new(record("other", cluster="c2"))
    # WHEN the open fingerprints of c1 are listed
    got = store.open_fingerprints("c1")
    # THEN every open one of c1, sorted, and nothing else
    assert got == sorted(fps)


def test_store_a_resolved_record_leaves_the_open_fingerprints(store: FindingStore) -> None:
    # GIVEN an open record
    store.put_new(record("a"))
    # WHEN it is resolved
    store.update(record("a", version=2, state=FindingState.RESOLVED, resolved_at=T0), expected_version=1)
    # THEN it is no longer listed
    assert store.open_fingerprints("c1") == []


def completion_part(part: int, parts: int, *fps: str, shard: int = 0, shard_count: int = 1) -> ScanCompleted:
    return ScanCompleted(scan_id="scan-9", cluster="c1", scheduled_time=T0, fingerprints=fps, part=part, parts=parts,
                         shard=shard, shard_count=shard_count)


def test_store_scan_parts_complete_once_every_part_of_every_shard_is_in(store: FindingStore) -> None:
    # GIVEN a scan over 2 shards: shard 0 in 2 parts, shard 1 in 1
    s0p0, s0p1 = completion_part(0, 2, "a", shard_count=2), completion_part(1, 2, "b", shard_count=2)
    s1p0 = completion_part(0, 1, "c", shard=1, shard_count=2)
    # WHEN the parts arrive, shard 0's first part twice (a redelivery)
    first = store.record_scan_part(s0p0, expires_at=1_800_000_000)
    again = store.record_scan_part(s0p0, expires_at=1_800_000_000)
    second = store.record_scan_part(s1p0, expires_at=1_800_000_000)
    last = store.record_scan_part(s0p1, expires_at=1_800_000_000)
    redelivered_last = store.record_scan_part(s0p1, expires_at=1_800_000_000)
    late_copy = store.record_scan_part(s1p0, expires_at=1_800_000_000)
    # THEN only the completing part (and its redelivery) gets the parts, all three; the others get None
    assert (first, again, second, late_copy) == (None, None, None, None)
    assert last is not None and sorted(p.part_token for p in last) == ["0:0/2", "0:1/2", "1:0/1"]
    assert redelivered_last is not None and {fp for p in redelivered_last for fp in p.fingerprints} == {"a", "b", "c"}

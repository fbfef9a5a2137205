"""Adapter: the finding lifecycle store in DynamoDB (the pipeline's FindingsTable).

Items are keyed by `fingerprint`. Every write is conditional: `put_new` on
`attribute_not_exists(fingerprint)`, `update` on `version = :expected`; a failed condition
(`ConditionalCheckFailedException`) is a normal outcome returned as False, never raised. Throttling,
transaction conflicts and connection failures become `StoreError` (retryable) through `_translate`.

Two global secondary indexes serve the queries (they must match template.yaml's FindingsTable):
`ByClusterState` (`cluster_state` = "<cluster>#<state>", sort `last_seen`) for open findings of a
cluster, and `ByActivityDay` (`activity_day` = "YYYY-MM-DD", sort `activity_ts`: the record's latest activity) for the daily summary.
Money is stored as DynamoDB numbers from `Decimal` (boto3 rejects float); times as UTC ISO 8601 strings
with a fixed format so they sort as text; `expires_at` (epoch seconds) is the table's TTL attribute.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import Enum
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import BotoCoreError, ClientError

from gpuwaste.errors import GpuWasteError, PermanentError, StoreError
from gpuwaste.models.lifecycle import FindingRecord, FindingState

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

BY_CLUSTER_STATE = "ByClusterState"
BY_ACTIVITY_DAY = "ByActivityDay"
_RETRYABLE = frozenset({
    "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
    "TransactionConflictException", "TransactionInProgressException", "InternalServerError",
    "ServiceUnavailable", "LimitExceededException",
})
_INT_FIELDS = ("version", "missed_scans", "expires_at")
_INDEX_ONLY = ("cluster_state", "activity_day", "activity_ts")  # derived on write, never part of the record
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def _time(value: datetime) -> str:
    return value.astimezone(UTC).strftime(_TIME_FORMAT)


def _activity(record: FindingRecord) -> datetime:
    return record.activity_at or max(t for t in (record.last_seen, record.resolved_at) if t is not None)


_SERIALIZER = TypeSerializer()
_DESERIALIZER = TypeDeserializer()


def to_item(record: FindingRecord) -> dict[str, Any]:
    """A record as a DynamoDB item in the low-level wire format ({"S": ...}, {"N": ...}), via boto3's TypeSerializer.

    Times become fixed-format UTC strings (they sort as text), enums their values, tuples lists; empty strings and
    None are left out.
    """
    item: dict[str, Any] = {}
    for name, value in record.model_dump(mode="python").items():
        if value is None or value == "":
            continue
        item[name] = _SERIALIZER.serialize(_plain(value))
    activity = _activity(record)
    item["cluster_state"] = _SERIALIZER.serialize(f"{record.cluster}#{record.state.value}")
    item["activity_ts"] = _SERIALIZER.serialize(_time(activity))
    item["activity_day"] = _SERIALIZER.serialize(activity.astimezone(UTC).date().isoformat())
    return item


def _plain(value: Any) -> Any:
    """A record value in the types TypeSerializer takes (str, Decimal/int, bool, list)."""
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, datetime):
        return _time(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    return value


def from_item(item: dict[str, Any]) -> FindingRecord:
    """A DynamoDB item (wire format) back to a record, via boto3's TypeDeserializer.

    Raises:
        PermanentError: the item does not hold a valid record.
    """
    data: dict[str, Any] = {}
    for name, attr in item.items():
        if name in _INDEX_ONLY:
            continue
        value = _DESERIALIZER.deserialize(attr)
        data[name] = int(value) if name in _INT_FIELDS and isinstance(value, Decimal) else value
    try:
        return FindingRecord.model_validate(data)
    except (ValueError, TypeError) as exc:
        raise PermanentError(f"dynamodb store: item {item.get('fingerprint')} is not a finding record: {exc}") from exc


class DynamoDbFindingStore:
    """`ports.FindingStore` over the FindingsTable.

    Args:
        client: a boto3 DynamoDB client (the bootstrap builds it; constructors do no I/O).
        table_name: the table (template output FindingsTableName).
    """

    def __init__(self, *, client: DynamoDBClient, table_name: str) -> None:
        self.client = client
        self.table_name = table_name

    def get(self, fingerprint: str) -> FindingRecord | None:
        """The record (strongly consistent read), or None."""
        try:
            resp = self.client.get_item(TableName=self.table_name, Key={"fingerprint": {"S": fingerprint}},
                                        ConsistentRead=True)
        except (ClientError, BotoCoreError) as exc:
            raise _translate(exc) from exc
        item = resp.get("Item")
        return from_item(item) if item else None

    def get_many(self, fingerprints: list[str]) -> dict[str, FindingRecord]:
        """Records of the given fingerprints (strongly consistent BatchGetItem, 100 keys per call; absent ones left
        out). Unprocessed keys (throttling) are asked again, then read one by one."""
        out: dict[str, FindingRecord] = {}
        keys = list(dict.fromkeys(fingerprints))
        for k in range(0, len(keys), 100):
            pending = [{"fingerprint": {"S": fp}} for fp in keys[k:k + 100]]
            for _ in range(3):
                if not pending:
                    break
                try:
                    resp = self.client.batch_get_item(RequestItems={self.table_name: {"Keys": pending, "ConsistentRead": True}})
                except (ClientError, BotoCoreError) as exc:
                    raise _translate(exc) from exc
                for item in resp.get("Responses", {}).get(self.table_name, []):
                    record = from_item(item)
                    out[record.fingerprint] = record
                pending = list(resp.get("UnprocessedKeys", {}).get(self.table_name, {}).get("Keys", []))
            for key in pending:  # still unprocessed: read them one by one
                record_or_none = self.get(key["fingerprint"]["S"])
                if record_or_none is not None:
                    out[record_or_none.fingerprint] = record_or_none
        return out

    def update_many(self, updates: list[tuple[FindingRecord, int]]) -> list[bool]:
        """`update` for each (record, expected_version): conditional puts in TransactWriteItems of up to 100 (one
        call instead of one per record). A failed condition is that record's False; the others are written."""
        results: list[bool | None] = [None] * len(updates)
        for k in range(0, len(updates), 100):
            todo = list(range(k, min(k + 100, len(updates))))
            for _ in range(3):
                if not todo:
                    break
                todo = self._transact(updates, todo, results)
            for i in todo:  # kept conflicting with other transactions: one by one
                record, version = updates[i]
                results[i] = self.update(record, expected_version=version)
        return [bool(r) for r in results]

    def _transact(self, updates: list[tuple[FindingRecord, int]], todo: list[int], results: list[bool | None]) -> list[int]:
        items = [{"Put": {"TableName": self.table_name, "Item": to_item(updates[i][0]),
                          "ConditionExpression": "version = :expected",
                          "ExpressionAttributeValues": {":expected": {"N": str(updates[i][1])}}}} for i in todo]
        try:
            self.client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            if _code(exc) != "TransactionCanceledException":
                raise _translate(exc) from exc
            reasons = exc.response.get("CancellationReasons") or []
            retry = []
            for i, reason in zip(todo, reasons, strict=False):
                code = (reason or {}).get("Code", "None")
                if code == "ConditionalCheckFailed":
                    results[i] = False
                else:
                    retry.append(i)  # written by nobody: the transaction was cancelled because of another item
            return retry if len(reasons) == len(todo) else todo
        except BotoCoreError as exc:
            raise _translate(exc) from exc
        for i in todo:
            results[i] = True
        return []

    def put_new(self, record: FindingRecord) -> bool:
        """Create the record; False when the fingerprint exists."""
        return self._conditional_put(record, "attribute_not_exists(fingerprint)", {})

    def update(self, record: FindingRecord, *, expected_version: int) -> bool:
        """Replace the record if the stored version is `expected_version`; False on a conflict."""
        return self._conditional_put(record, "version = :expected", {":expected": {"N": str(expected_version)}})

    def _conditional_put(self, record: FindingRecord, condition: str, values: dict[str, Any]) -> bool:
        kwargs: dict[str, Any] = {"TableName": self.table_name, "Item": to_item(record), "ConditionExpression": condition}
        if values:
            kwargs["ExpressionAttributeValues"] = values
        try:
            self.client.put_item(**kwargs)
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise _translate(exc) from exc
        except BotoCoreError as exc:
            raise _translate(exc) from exc
        return True

    def open_for_cluster(self, cluster: str) -> list[FindingRecord]:
        """Open records of a cluster (index ByClusterState), by fingerprint."""
        items = self._query(
            IndexName=BY_CLUSTER_STATE,
            KeyConditionExpression="cluster_state = :cs",
            ExpressionAttributeValues={":cs": {"S": f"{cluster}#{FindingState.OPEN.value}"}},
        )
        return sorted((from_item(i) for i in items), key=lambda r: r.fingerprint)

    def history(self, *, since: datetime, until: datetime) -> list[FindingRecord]:
        """Records whose latest activity is in [since, until] (index ByActivityDay, one query per day)."""
        out: list[FindingRecord] = []
        day = since.astimezone(UTC).date()
        last = until.astimezone(UTC).date()
        while day <= last:
            items = self._query(
                IndexName=BY_ACTIVITY_DAY,
                KeyConditionExpression="activity_day = :d AND activity_ts BETWEEN :s AND :u",
                ExpressionAttributeValues={":d": {"S": day.isoformat()}, ":s": {"S": _time(since)}, ":u": {"S": _time(until)}},
            )
            out.extend(from_item(i) for i in items)
            day += timedelta(days=1)
        return out

    def _query(self, **kwargs: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        start: dict[str, Any] | None = None
        try:
            while True:
                page = self.client.query(TableName=self.table_name, **kwargs, **({"ExclusiveStartKey": start} if start else {}))
                items.extend(page.get("Items", []))
                start = page.get("LastEvaluatedKey")
                if not start:
                    return items
        except (ClientError, BotoCoreError) as exc:
            raise _translate(exc) from exc


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _translate(exc: ClientError | BotoCoreError) -> GpuWasteError:
    """SDK error → StoreError (retryable: throttling, conflicts, 5xx, connection) or PermanentError."""
    if isinstance(exc, BotoCoreError):
        return StoreError(f"dynamodb store: {type(exc).__name__}: {exc}")
    code = _code(exc)
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    if code in _RETRYABLE or status >= 500:
        return StoreError(f"dynamodb store: {code or status}: {exc}")
    return PermanentError(f"dynamodb store: {code or status}: {exc}")


__all__ = ["BY_ACTIVITY_DAY", "BY_CLUSTER_STATE", "DynamoDbFindingStore", "from_item", "to_item"]

"""Adapter: the finding lifecycle store in DynamoDB (the pipeline's FindingsTable).

Items are keyed by `fingerprint`. Every write is conditional: `put_new` on
`attribute_not_exists(fingerprint)`, `update` on `version = :expected`; a failed condition
(`ConditionalCheckFailedException`) is a normal outcome returned as False, never raised. Throttling,
transaction conflicts and connection failures become `StoreError` (retryable) through `_translate`.

Two global secondary indexes serve the queries (they must match template.yaml's FindingsTable). Both project keys
only and key on attributes that do not change on a sighting, so rewriting a record on a sighting writes neither
index (DynamoDB writes an index only when the item's index keys or projected attributes change), and both spread a
key over `KEY_BUCKETS` partitions (a stable hash of the fingerprint), so no single partition takes every write of a
cluster or of a day:

* `OpenByClusterShard`: sparse — only open records carry `open_key` = "<cluster>#<bucket>" (sort `fingerprint`).
  `open_fingerprints` queries the cluster's buckets and reads fingerprints only (≈100 bytes per record, not the
  record's ≈4 KB); a resolution removes the entry (one index write per open period, not per sighting).
* `ByActivityDayShard`: `activity_key` = "<YYYY-MM-DD of the latest activity>#<bucket>" (sort `fingerprint`): for
  the daily summary; its key moves once a day at most. `history` queries the days in range, then reads the records
  (BatchGetItem) and keeps those whose activity is in range.

A scan completion sent in parts (`models.messages.split_completion`) is gathered in the same table
(`record_scan_part`): one item per part ("scan#<scan_id>#<shard>:<part>/<parts>", its message compressed) and one
progress item per scan ("scan#<scan_id>": the part tokens received, written with conditional puts on its version),
both with a short TTL; none carries an index attribute. Attribution coverage (`record_coverage`) is kept per cluster
and UTC hour under "coverage#" keys, the allocation ledger (`record_allocation`, issue 24) the same way under "ledger#"
keys (`store.ledger_items`), both with the records' retention as TTL; no index attribute either.
Money is stored as DynamoDB numbers from `Decimal` (boto3 rejects float); times as UTC ISO 8601 strings
with a fixed format so they sort as text; `expires_at` (epoch seconds) is the table's TTL attribute.
"""

from __future__ import annotations

import hashlib
import logging
import zlib
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import Enum
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import BotoCoreError, ClientError

from gpuwaste.errors import GpuWasteError, PermanentError, StoreError
from gpuwaste.models.coverage import CoverageTally, KindCoverage, coverage_hour, sum_kinds
from gpuwaste.models.lifecycle import FindingRecord, FindingState
from gpuwaste.models.messages import ScanCompleted, completion_is_whole
from gpuwaste.models.spend import AllocationTally, add_allocation
from gpuwaste.store.ledger_items import LEDGER_PREFIX, MAX_ITEM_BYTES, item_bytes, packed, unpacked

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

logger = logging.getLogger(__name__)

OPEN_BY_CLUSTER = "OpenByClusterShard"
BY_ACTIVITY_DAY = "ByActivityDayShard"
#: partitions each cluster's open set and each day's activity are spread over (index keys "<cluster|day>#<0..15>")
KEY_BUCKETS = 16
#: the progress and part items of a scan completion sent in parts: fingerprint key prefix
SCAN_PREFIX = "scan#"
#: the attribution coverage items ("coverage#<day>": the day's clusters; "coverage#<YYYY-MM-DDTHH>#<cluster>": an hour)
COVERAGE_PREFIX = "coverage#"
#: most shard digests one hour item holds (16 hex digits each: ~132 KB of the 400 KB item; one scan a minute over
#: 136 shards fits)
MAX_COVERAGE_SCANS = 8192
#: most bytes of cluster names one day's index item holds
MAX_COVERAGE_CLUSTER_BYTES = 300_000
_RETRYABLE = frozenset({
    "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
    "TransactionConflictException", "TransactionInProgressException", "InternalServerError",
    "ServiceUnavailable", "LimitExceededException",
})
_INT_FIELDS = ("version", "missed_scans", "expires_at")
# derived on write, never part of the record (the last three: written by earlier versions)
_INDEX_ONLY = ("open_key", "activity_key", "cluster_state", "activity_day", "activity_ts")
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
    bucket = key_bucket(record.fingerprint)
    if record.state is FindingState.OPEN:
        item["open_key"] = {"S": f"{record.cluster}#{bucket}"}
    item["activity_key"] = {"S": f"{_activity(record).astimezone(UTC).date().isoformat()}#{bucket}"}
    return item


def key_bucket(fingerprint: str) -> int:
    """The index partition (0..KEY_BUCKETS-1) of a fingerprint: CRC-32 of its text, stable across processes."""
    return zlib.crc32(fingerprint.encode()) % KEY_BUCKETS


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
        keys = [{"fingerprint": {"S": fp}} for fp in dict.fromkeys(fingerprints)]
        for k in range(0, len(keys), 100):
            items, pending = self._batch_get(keys[k:k + 100], tries=3)
            for item in items:
                record = from_item(item)
                out[record.fingerprint] = record
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
        return self._put(to_item(record), condition, values)

    def open_fingerprints(self, cluster: str) -> list[str]:
        """Fingerprints of the open records of a cluster, sorted: `KEY_BUCKETS` keys-only queries of index
        OpenByClusterShard (eventually consistent, like any index read); no record is read."""
        out: list[str] = []
        for bucket in range(KEY_BUCKETS):
            items = self._query(IndexName=OPEN_BY_CLUSTER, KeyConditionExpression="open_key = :k",
                                ExpressionAttributeValues={":k": {"S": f"{cluster}#{bucket}"}},
                                ProjectionExpression="fingerprint")
            out.extend(i["fingerprint"]["S"] for i in items)
        return sorted(out)

    def open_for_cluster(self, cluster: str) -> list[FindingRecord]:
        """Open records of a cluster, by fingerprint (`open_fingerprints`, then the records by key)."""
        found = self.get_many(self.open_fingerprints(cluster))
        return [found[fp] for fp in sorted(found) if found[fp].state is FindingState.OPEN]

    def history(self, *, since: datetime, until: datetime) -> list[FindingRecord]:
        """Records whose latest activity is in [since, until], oldest activity first: the keys of each day in range
        (index ByActivityDayShard, `KEY_BUCKETS` keys-only queries per day), then the records by key, filtered."""
        keys: list[str] = []
        day = since.astimezone(UTC).date()
        last = until.astimezone(UTC).date()
        while day <= last:
            for bucket in range(KEY_BUCKETS):
                items = self._query(IndexName=BY_ACTIVITY_DAY, KeyConditionExpression="activity_key = :k",
                                    ExpressionAttributeValues={":k": {"S": f"{day.isoformat()}#{bucket}"}},
                                    ProjectionExpression="fingerprint")
                keys.extend(i["fingerprint"]["S"] for i in items)
            day += timedelta(days=1)
        found = self.get_many(keys).values()
        return sorted((r for r in found if since <= _activity(r) <= until), key=lambda r: (_activity(r), r.fingerprint))

    # -- a scan completion in parts ------------------------------------------------------------------------
    def record_scan_part(self, part: ScanCompleted, *, expires_at: int) -> list[ScanCompleted] | None:
        """Store one part of a scan's completion and count it on the scan's progress item (conditional puts on its
        version: a redelivered part is stored and counted once). Returns every part of the scan when they are all
        in and this part is the one that completed it (also on its redelivery, so an interrupted resolution is
        redone), else None.

        Raises:
            StoreError: throttling, a transient failure, or the progress item kept changing (retryable).
        """
        scan_key = f"{SCAN_PREFIX}{part.scan_id}"
        token = part.part_token
        self._put({"fingerprint": {"S": f"{scan_key}#{token}"}, "expires_at": {"N": str(expires_at)},
                   "part": {"B": zlib.compress(part.model_dump_json().encode())}}, None, {})
        for _ in range(10):
            item = self._get_raw(scan_key)
            version = int(item["version"]["N"]) if item else 0
            tokens = set(item["tokens"]["SS"]) if item and "tokens" in item else set()
            done_by = item["done_by"]["S"] if item and "done_by" in item else None
            shard_count = int(item["shard_count"]["N"]) if item else part.shard_count
            if token in tokens:  # a redelivered part: counted already (the scan was not whole without it)
                return self._scan_parts(scan_key, tokens) if done_by == token else None
            tokens.add(token)
            whole = completion_is_whole(tokens, shard_count)
            new: dict[str, Any] = {"fingerprint": {"S": scan_key}, "version": {"N": str(version + 1)},
                                   "tokens": {"SS": sorted(tokens)}, "shard_count": {"N": str(shard_count)},
                                   "cluster": {"S": part.cluster}, "expires_at": {"N": str(expires_at)}}
            if whole:
                new["done_by"] = {"S": token}
            condition = ("version = :v", {":v": {"N": str(version)}}) if item else ("attribute_not_exists(fingerprint)", {})
            if self._put(new, condition[0], condition[1]):
                return self._scan_parts(scan_key, tokens) if whole else None
        raise StoreError(f"dynamodb store: scan {part.scan_id}: progress item kept changing")

    # -- attribution coverage per cluster and hour ----------------------------------------------------------
    def record_coverage(self, completion: ScanCompleted, *, expires_at: int) -> bool:
        """`ports.FindingStore.record_coverage`: the cluster is added to the day's index item ("coverage#<day>",
        its clusters), then the shard's figures to the hour's item ("coverage#<YYYY-MM-DDTHH>#<cluster>": kinds →
        {a: allocated, t: attributed} GPU-hours, `scan_count`, and a 16-hex-digit digest of "<scan_id>#<shard>" per
        shard counted, so a redelivery is counted once), each with a conditional put on its version (GetItem and
        PutItem only: the dedupe function's grants). Within DynamoDB's 400 KB item: an hour holds at most
        `MAX_COVERAGE_SCANS` shard digests (~132 KB), a day's index at most `MAX_COVERAGE_CLUSTER_BYTES` of names;
        past either the scan is left out of the figure (logged, False).

        Raises:
            StoreError: throttling, a transient failure, or an item kept changing (retryable).
        """
        hour = coverage_hour(completion.scheduled_time)
        if not self._add_to_day_index(hour, completion.cluster, expires_at):
            logger.warning("coverage: day index full", extra={"cluster": completion.cluster, "day": hour.date().isoformat()})
            return False
        key = f"{COVERAGE_PREFIX}{hour:%Y-%m-%dT%H}#{completion.cluster}"
        digest = hashlib.sha256(f"{completion.scan_id}#{completion.shard}".encode()).hexdigest()[:16]
        for _ in range(10):
            item = self._get_raw(key)
            version = int(item["version"]["N"]) if item else 0
            digests = set(item["scans"]["SS"]) if item and "scans" in item else set()
            if digest in digests:
                return False
            if len(digests) >= MAX_COVERAGE_SCANS:
                logger.warning("coverage: hour item full", extra={"cluster": completion.cluster, "hour": hour.isoformat()})
                return False
            kinds = [*(_kind_of(k, v) for k, v in (item or {}).get("kinds", {}).get("M", {}).items()), *completion.coverage]
            count = int(item["scan_count"]["N"]) if item and "scan_count" in item else 0
            new: dict[str, Any] = {
                "fingerprint": {"S": key}, "version": {"N": str(version + 1)}, "cluster": {"S": completion.cluster},
                "hour": {"S": _time(hour)}, "scans": {"SS": sorted(digests | {digest})},
                "scan_count": {"N": str(count + (1 if completion.shard == 0 else 0))},
                "kinds": {"M": {k.kind: {"M": {"a": {"N": _number(k.allocated_gpu_hours)},
                                               "t": {"N": _number(k.attributed_gpu_hours)}}} for k in sum_kinds(kinds)}},
                "expires_at": {"N": str(expires_at)},
            }
            condition = ("version = :v", {":v": {"N": str(version)}}) if item else ("attribute_not_exists(fingerprint)", {})
            if self._put(new, condition[0], condition[1]):
                return True
        raise StoreError(f"dynamodb store: {key}: coverage item kept changing")

    def _add_to_day_index(self, hour: datetime, cluster: str, expires_at: int, prefix: str = COVERAGE_PREFIX) -> bool:
        key = f"{prefix}{hour:%Y-%m-%d}"
        for _ in range(10):
            item = self._get_raw(key)
            clusters = set(item["clusters"]["SS"]) if item and "clusters" in item else set()
            if cluster in clusters:
                return True
            if sum(len(c.encode()) for c in clusters) + len(cluster.encode()) > MAX_COVERAGE_CLUSTER_BYTES:
                return False
            version = int(item["version"]["N"]) if item else 0
            new = {"fingerprint": {"S": key}, "version": {"N": str(version + 1)},
                   "clusters": {"SS": sorted(clusters | {cluster})},
                   "expires_at": {"N": str(max(expires_at, int(item["expires_at"]["N"]) if item and "expires_at" in item else 0))}}
            condition = ("version = :v", {":v": {"N": str(version)}}) if item else ("attribute_not_exists(fingerprint)", {})
            if self._put(new, condition[0], condition[1]):
                return True
        raise StoreError(f"dynamodb store: {key}: coverage index kept changing")

    # -- the allocation ledger per cluster and hour (issue 24) ----------------------------------------------
    #: the largest item `record_allocation` writes (DynamoDB's limit; an instance may set less)
    max_item_bytes = MAX_ITEM_BYTES

    def record_allocation(self, completion: ScanCompleted, *, expires_at: int) -> bool:
        """`ports.FindingStore.record_allocation`: the cluster is added to the day's index ("ledger#<day>"), then the
        shard's allocation ledger to the hour's item ("ledger#<YYYY-MM-DDTHH>#<cluster>": the sums, compressed; the
        scans counted; a digest per shard so a redelivery counts once), each a conditional put on its version
        (GetItem and PutItem only). An item that would exceed `max_item_bytes` (DynamoDB's 400 KB, measured by
        `store.ledger_items.item_bytes`) is not written: the shard is left out of the figures (logged, False).

        Raises:
            StoreError: throttling, a transient failure, or an item kept changing (retryable).
        """
        if completion.allocation is None:
            return False
        hour = coverage_hour(completion.scheduled_time)
        if not self._add_to_day_index(hour, completion.cluster, expires_at, LEDGER_PREFIX):
            logger.warning("allocation ledger: day index full", extra={"cluster": completion.cluster})
            return False
        key = f"{LEDGER_PREFIX}{hour:%Y-%m-%dT%H}#{completion.cluster}"
        digest = hashlib.sha256(f"{completion.scan_id}#{completion.shard}".encode()).hexdigest()[:16]
        first = completion.shard == 0
        for _ in range(10):
            item = self._get_raw(key)
            version = int(item["version"]["N"]) if item else 0
            digests = set(item["scans"]["SS"]) if item and "scans" in item else set()
            if digest in digests:
                return False
            sums = add_allocation(unpacked(item["body"]["B"]) if item else None, completion.allocation,
                                  counts_window=first)
            count = int(item["scan_count"]["N"]) if item else 0
            new: dict[str, Any] = {
                "fingerprint": {"S": key}, "version": {"N": str(version + 1)}, "cluster": {"S": completion.cluster},
                "hour": {"S": _time(hour)}, "scans": {"SS": sorted(digests | {digest})},
                "scan_count": {"N": str(count + (1 if first else 0))}, "body": {"B": packed(sums)},
                "expires_at": {"N": str(expires_at)},
            }
            if item_bytes(new) > self.max_item_bytes:
                logger.warning("allocation ledger: hour item full",
                               extra={"cluster": completion.cluster, "hour": hour.isoformat(), "bytes": item_bytes(new)})
                return False
            condition = ("version = :v", {":v": {"N": str(version)}}) if item else ("attribute_not_exists(fingerprint)", {})
            if self._put(new, condition[0], condition[1]):
                return True
        raise StoreError(f"dynamodb store: {key}: allocation ledger item kept changing")

    def allocation(self, *, since: datetime, until: datetime) -> list[AllocationTally]:
        """`ports.FindingStore.allocation`: the day index items of the days in range, then the hour items of their
        clusters for the hours overlapping [since, until), both by BatchGetItem (100 keys a call)."""
        hours: list[datetime] = []
        h = coverage_hour(since)
        while h < until:
            hours.append(h)
            h += timedelta(hours=1)
        clusters: dict[str, set[str]] = {}
        for item in self._batch_all(sorted({f"{LEDGER_PREFIX}{x:%Y-%m-%d}" for x in hours})):
            clusters[item["fingerprint"]["S"][len(LEDGER_PREFIX):]] = set(item.get("clusters", {}).get("SS", []))
        keys = [f"{LEDGER_PREFIX}{x:%Y-%m-%dT%H}#{c}" for x in hours for c in sorted(clusters.get(f"{x:%Y-%m-%d}", ()))]
        out = []
        for item in self._batch_all(keys):
            sums = unpacked(item["body"]["B"])
            out.append(AllocationTally(cluster=item["cluster"]["S"],
                                       hour=datetime.strptime(item["hour"]["S"], _TIME_FORMAT).replace(tzinfo=UTC),
                                       scans=int(item["scan_count"]["N"]), window_s=sums.window_s, allocation=sums))
        return sorted(out, key=lambda t: (t.cluster, t.hour))

    def coverage(self, *, since: datetime, until: datetime) -> list[CoverageTally]:
        """`ports.FindingStore.coverage`: the day index items of the days in range, then the hour items of their
        clusters for the hours overlapping [since, until), both by BatchGetItem (100 keys a call)."""
        first = coverage_hour(since)
        hours: list[datetime] = []
        h = first
        while h < until:
            hours.append(h)
            h += timedelta(hours=1)
        days = sorted({f"{COVERAGE_PREFIX}{x:%Y-%m-%d}" for x in hours})
        clusters: dict[str, set[str]] = {}
        for item in self._batch_all(days):
            clusters[item["fingerprint"]["S"][len(COVERAGE_PREFIX):]] = set(item.get("clusters", {}).get("SS", []))
        keys = [f"{COVERAGE_PREFIX}{x:%Y-%m-%dT%H}#{c}" for x in hours for c in sorted(clusters.get(f"{x:%Y-%m-%d}", ()))]
        out: list[CoverageTally] = []
        for item in self._batch_all(keys):
            kinds = tuple(_kind_of(k, v) for k, v in item.get("kinds", {}).get("M", {}).items())
            out.append(CoverageTally(cluster=item["cluster"]["S"], hour=datetime.strptime(item["hour"]["S"], _TIME_FORMAT).replace(tzinfo=UTC),
                                     scans=int(item.get("scan_count", {}).get("N", "0")), kinds=sum_kinds(kinds)))
        return sorted(out, key=lambda t: (t.cluster, t.hour))

    def _batch_all(self, keys: list[str]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for k in range(0, len(keys), 100):
            items, pending = self._batch_get([{"fingerprint": {"S": x}} for x in keys[k:k + 100]], tries=5)
            if pending:
                raise StoreError(f"dynamodb store: {len(pending)} coverage item(s) not read (throttled)")
            out.extend(items)
        return out

    def _scan_parts(self, scan_key: str, tokens: set[str]) -> list[ScanCompleted]:
        keys = [{"fingerprint": {"S": f"{scan_key}#{t}"}} for t in sorted(tokens)]
        out: list[ScanCompleted] = []
        for k in range(0, len(keys), 100):
            items, pending = self._batch_get(keys[k:k + 100], tries=5)
            out.extend(ScanCompleted.model_validate_json(zlib.decompress(i["part"]["B"])) for i in items)
            if pending:
                raise StoreError(f"dynamodb store: {scan_key}: {len(pending)} part(s) not read (throttled)")
        return out

    def _batch_get(self, keys: list[dict[str, Any]], *, tries: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Strongly consistent BatchGetItem of at most 100 keys, unprocessed keys (throttling) asked again up to
        `tries` calls in all: (the items read, the keys still unprocessed).

        Raises:
            StoreError: the call failed (translated from botocore).
        """
        items: list[dict[str, Any]] = []
        pending = keys
        for _ in range(tries):
            if not pending:
                break
            try:
                resp = self.client.batch_get_item(RequestItems={self.table_name: {"Keys": pending, "ConsistentRead": True}})
            except (ClientError, BotoCoreError) as exc:
                raise _translate(exc) from exc
            items.extend(resp.get("Responses", {}).get(self.table_name, []))
            pending = list(resp.get("UnprocessedKeys", {}).get(self.table_name, {}).get("Keys", []))
        return items, pending

    def _get_raw(self, key: str) -> dict[str, Any] | None:
        try:
            resp = self.client.get_item(TableName=self.table_name, Key={"fingerprint": {"S": key}}, ConsistentRead=True)
        except (ClientError, BotoCoreError) as exc:
            raise _translate(exc) from exc
        item = resp.get("Item")
        return dict(item) if item else None

    def _put(self, item: dict[str, Any], condition: str | None, values: dict[str, Any]) -> bool:
        kwargs: dict[str, Any] = {"TableName": self.table_name, "Item": item}
        if condition:
            kwargs["ConditionExpression"] = condition
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


def _number(value: float) -> str:
    """A GPU-hour figure as a DynamoDB number (rounded to 1e-6, never an exponent)."""
    return format(Decimal(str(round(value, 6))), "f")


def _kind_of(kind: str, attr: dict[str, Any]) -> KindCoverage:
    figures = attr["M"]
    return KindCoverage(kind=kind, allocated_gpu_hours=float(figures["a"]["N"]), attributed_gpu_hours=float(figures["t"]["N"]))


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


__all__ = ["BY_ACTIVITY_DAY", "KEY_BUCKETS", "OPEN_BY_CLUSTER", "DynamoDbFindingStore", "from_item", "key_bucket", "to_item"]

"""Adapter: `ports.OnceLedger` in the pipeline's DynamoDB table (FindingsTable), next to the finding records.

One item per key, under the table's partition key `fingerprint` with the key prefixed `once#` (finding fingerprints
are hex digests: the two never meet; IAM can grant the ledger alone with `dynamodb:LeadingKeys` "once#*"). Items
carry no index attribute, so they stay out of both GSIs (`history`, `open_for_cluster` never see them). Every write is
one `PutItem` (no other permission is needed):

* `claim`: conditional on `attribute_not_exists(fingerprint) OR once_state = released OR (once_state = claimed AND
  hold_until < :now) OR expires_at < :now` (the TTL deletes lazily); a failed condition returns the stored item
  (`ReturnValuesOnConditionCheckFailure=ALL_OLD`), whose state says "done" or "held" — the pattern of Powertools'
  idempotency `DynamoDBPersistenceLayer`.
* `confirm` / `release`: the item rewritten as done (kept until `keep_until`) / released.

`expires_at` (epoch seconds) is the table's TTL attribute: the records go away by themselves.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from gpuwaste.errors import PermanentError, StoreError
from gpuwaste.ports import Claim

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

PREFIX = "once#"
_RETRYABLE = {"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
              "InternalServerError", "ServiceUnavailable", "TransactionConflictException"}


def _epoch(value: datetime) -> str:
    return str(int(value.timestamp()))


class DynamoDbOnceLedger:
    """`ports.OnceLedger` over a DynamoDB table keyed by `fingerprint` with TTL attribute `expires_at`.

    Args:
        client: a boto3 DynamoDB client.
        table_name: the table (FindingsTable).
    """

    def __init__(self, *, client: DynamoDBClient, table_name: str) -> None:
        self.client = client
        self.table_name = table_name

    def _put(self, key: str, state: str, *, keep_until: datetime, hold_until: datetime | None = None,
             **conditional: Any) -> None:
        item: dict[str, Any] = {"fingerprint": {"S": PREFIX + key}, "once_state": {"S": state},
                                "expires_at": {"N": _epoch(keep_until)}}
        if hold_until is not None:
            item["hold_until"] = {"N": _epoch(hold_until)}
        try:
            self.client.put_item(TableName=self.table_name, Item=item, **conditional)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                raise
            raise _translate(exc) from exc
        except BotoCoreError as exc:
            raise StoreError(f"once ledger: {type(exc).__name__}: {exc}") from exc

    def claim(self, key: str, *, now: datetime, hold_until: datetime, keep_until: datetime) -> Claim:
        """See `ports.OnceLedger.claim`."""
        try:
            self._put(key, "claimed", keep_until=keep_until, hold_until=hold_until,
                      ConditionExpression="attribute_not_exists(fingerprint) OR once_state = :released OR "
                                          "(once_state = :claimed AND hold_until < :now) OR expires_at < :now",
                      ExpressionAttributeValues={":released": {"S": "released"}, ":claimed": {"S": "claimed"},
                                                 ":now": {"N": _epoch(now)}},
                      ReturnValuesOnConditionCheckFailure="ALL_OLD")
        except ClientError as exc:  # the condition failed: the stored item says why
            stored = exc.response.get("Item") or {}
            return "done" if stored.get("once_state", {}).get("S") == "done" else "held"
        return "claimed"

    def confirm(self, key: str, *, keep_until: datetime) -> None:
        """See `ports.OnceLedger.confirm`."""
        self._put(key, "done", keep_until=keep_until)

    def release(self, key: str) -> None:
        """See `ports.OnceLedger.release` (the item expires at once: the next claim takes it, the TTL removes it)."""
        self._put(key, "released", keep_until=datetime.fromtimestamp(0).astimezone())


def _translate(exc: ClientError) -> StoreError | PermanentError:
    code = str(exc.response.get("Error", {}).get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    if code in _RETRYABLE or status >= 500:
        return StoreError(f"once ledger: {code or status}: {exc}")
    return PermanentError(f"once ledger: {code or status}: {exc}")


__all__ = ["PREFIX", "DynamoDbOnceLedger"]

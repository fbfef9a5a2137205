"""Adapter helpers: the allocation ledger's DynamoDB items (issue 24) and DynamoDB's item size.

One item per cluster and UTC hour, "ledger#<YYYY-MM-DDTHH>#<cluster>", beside the coverage items (issue 21 §12) and
kept the same way: a day index "ledger#<YYYY-MM-DD>" lists the day's clusters, a 16-hex-digit digest of
"<scan_id>#<shard>" per shard counted makes a redelivery count once, and each write is a conditional put on the
item's version. The hour's sums (`models.spend.ScanAllocation`) are stored as zlib-compressed JSON (`body`, binary):
their groups are bounded (`models.spend.MAX_SPEND_GROUPS` per dimension), and the whole item is measured against
DynamoDB's 400 KB limit before it is written (`item_bytes`).
"""

from __future__ import annotations

import zlib
from typing import Any

from gpuwaste.models.spend import ScanAllocation

#: the allocation ledger items' key prefix ("ledger#<day>": the day's clusters; "ledger#<YYYY-MM-DDTHH>#<cluster>")
LEDGER_PREFIX = "ledger#"
#: DynamoDB's item size limit: 400 KB, attribute names and values included
#: (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html)
MAX_ITEM_BYTES = 400 * 1024
#: a number's largest size in an item (DynamoDB: up to 38 significant digits, "approximately 21 bytes")
NUMBER_BYTES = 21


def item_bytes(item: dict[str, Any]) -> int:
    """An upper bound of a wire-format item's size as DynamoDB counts it.

    Names and string values in UTF-8 bytes, binary values in bytes, every number as `NUMBER_BYTES` (its largest
    size), booleans and nulls 1 byte, sets as their members, lists and maps 3 bytes + 1 per element (the
    documented overheads).
    """
    return sum(len(name.encode()) + _value_bytes(value) for name, value in item.items())


def _value_bytes(attr: dict[str, Any]) -> int:
    (kind, value), = attr.items()
    if kind == "S":
        return len(str(value).encode())
    if kind == "B":
        return len(value)
    if kind == "N":
        return NUMBER_BYTES
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(v).encode()) for v in value)
    if kind == "NS":
        return NUMBER_BYTES * len(value)
    if kind == "BS":
        return sum(len(v) for v in value)
    if kind == "L":
        return 3 + sum(1 + _value_bytes(v) for v in value)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + _value_bytes(v) for k, v in value.items())
    raise ValueError(f"not a DynamoDB attribute value type: {kind!r}")


def packed(allocation: ScanAllocation) -> bytes:
    """The hour's sums as the item's `body` (compressed JSON)."""
    return zlib.compress(allocation.model_dump_json().encode(), 6)


def unpacked(body: bytes) -> ScanAllocation:
    """The item's `body` back to the hour's sums."""
    return ScanAllocation.model_validate_json(zlib.decompress(body))


__all__ = ["LEDGER_PREFIX", "MAX_ITEM_BYTES", "NUMBER_BYTES", "item_bytes", "packed", "unpacked"]

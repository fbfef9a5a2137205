"""Service: what a delivery leaves on a finding's lifecycle record — the idempotency keys, the message reference.

Every delivery has a key `fingerprint:action:scan_id:<sink>` (`delivery_key`; showing a ticket in a message:
`ticket_delivery_key`). It is written to the record right after the sink accepts each part of a message, with a
conditional write that re-reads on version conflicts and retries store errors with back-off (`record_delivery`,
`record_deliveries`): the message is out, so failing there would send it again. `services.notify` delivers.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from pydantic import ValidationError

from gpuwaste.errors import StoreError
from gpuwaste.models.findings import Finding
from gpuwaste.models.lifecycle import FindingRecord
from gpuwaste.models.messages import AlertAction, AlertMessage
from gpuwaste.models.notices import MessageRef, with_message
from gpuwaste.ports import FindingStore

logger = logging.getLogger(__name__)

MAX_DELIVERY_KEYS = 20
_STORE_ATTEMPTS = 5
_STORE_BACKOFF_S = 0.05  # 0.05, 0.1, 0.2, 0.4, 0.8 s between attempts after a store error (1.55 s at most)


def delivery_key(alert: AlertMessage, sink: str) -> str:
    """The idempotency key of one delivery: fingerprint, action, scan id and sink."""
    return f"{alert.fingerprint}:{alert.action.value}:{alert.scan_id or '-'}:{sink}"


def decimal_or_zero(text: str | None) -> Decimal:
    """A decimal string from a message as Decimal (0 when empty or unreadable)."""
    try:
        return Decimal(text) if text else Decimal(0)
    except InvalidOperation:
        return Decimal(0)


def finding_from_record(record: FindingRecord) -> Finding | None:
    """The finding stored in a lifecycle record (`finding_json`), None when absent or unreadable."""
    if not record.finding_json:
        return None
    try:
        data: dict[str, Any] = json.loads(record.finding_json)
        data.pop("fingerprint", None)
        return Finding.model_validate(data)
    except (ValueError, ValidationError):
        logger.warning("stored finding unreadable", extra={"fingerprint": record.fingerprint})
        return None


def _recorded(record: FindingRecord, key: str, changes: dict[str, Any] | None) -> FindingRecord:
    """`record` with delivery `key` added and `changes` applied.

    A `MessageRef` under "message" replaces the reference kept for its sink (the others stay).
    """
    update = dict(changes or {})
    ref = update.pop("message", None)
    if isinstance(ref, MessageRef):
        update["messages"] = with_message(record.messages, ref)
    update["delivery_keys"] = (*record.delivery_keys, key)[-MAX_DELIVERY_KEYS:]
    update["version"] = record.version + 1
    return record.model_copy(update=update)


def record_delivery(
    store: FindingStore | None, fingerprint: str, key: str, changes: dict[str, Any] | None = None,
    *, sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Add `key` (and `changes`) to the record with a conditional write.

    Re-reads on version conflicts and retries store errors (throttling) with back-off: the message was sent, so
    failing here would send it again.

    Raises:
        StoreError: the record kept changing under us, or the store kept failing (retry through the queue).
    """
    if store is None:
        return
    failure: StoreError | None = None
    for attempt in range(_STORE_ATTEMPTS):
        try:
            record = store.get(fingerprint)
            if record is None or key in record.delivery_keys:
                return
            if store.update(_recorded(record, key, changes), expected_version=record.version):
                return
        except StoreError as exc:
            # the message is already out: a throttled or briefly unavailable store must not make the queue
            # redeliver it (that would post it again), so retry here with back-off
            failure = exc
            logger.warning("delivery key not recorded yet; retrying", extra={"fingerprint": fingerprint[:16],
                                                                             "attempt": attempt + 1})
            sleep(_STORE_BACKOFF_S * 2**attempt)
    if failure is not None:
        raise StoreError(f"finding {fingerprint[:16]}: delivery key not recorded after {_STORE_ATTEMPTS} attempts: "
                         f"{failure}") from failure
    raise StoreError(f"finding {fingerprint[:16]}: lifecycle record kept changing; delivery key not recorded")


def record_deliveries(store: FindingStore | None, entries: Sequence[tuple[str, str, dict[str, Any]]],
                      known: dict[str, FindingRecord | None] | None = None) -> None:
    """`record_delivery` for many (fingerprint, key, changes) at once.

    One batch read and one batch write (a digest part's findings), then one by one, with re-reads and back-off, for
    any that lost a race or failed.

    `known`: records the caller read just before (the digest's); they are written on without reading them again
    (the write is conditional on their version: one that changed meanwhile is re-read and retried below).

    Raises:
        StoreError: as `record_delivery`.
    """
    if store is None or not entries:
        return
    try:
        hinted = known or {}
        unknown = [fp for fp, _, _ in entries if hinted.get(fp) is None]
        records = {**{fp: r for fp, r in hinted.items() if r is not None},
                   **(store.get_many(unknown) if unknown else {})}
        updates, pending = [], []
        for fp, key, changes in entries:
            record = records.get(fp)
            if record is None or key in record.delivery_keys:
                continue
            updates.append((_recorded(record, key, changes), record.version))
            pending.append((fp, key, changes))
        outcomes = store.update_many(updates)
    except StoreError:
        outcomes, pending = [], list(entries)
    for ok, (fp, key, changes) in zip(outcomes + [False] * (len(pending) - len(outcomes)), pending, strict=True):
        if not ok:
            record_delivery(store, fp, key, changes)


def ticket_delivery_key(record: FindingRecord, sink: str) -> str:
    """The idempotency key of showing a finding's ticket in its `sink` message: `fingerprint:ticket:KEY:sink`."""
    return f"{record.fingerprint}:ticket:{record.ticket_key}:{sink}"


def _first_scan(record: FindingRecord, sink: str) -> str:
    """The scan whose NEW alert posted the finding's message to `sink` (from its delivery key).

    So an edit keeps the message findable as that scan's alert (`Notifier.find_posted`); "" when not recorded.
    """
    prefix, suffix = f"{record.fingerprint}:{AlertAction.NEW.value}:", f":{sink}"
    return next((k[len(prefix):-len(suffix)] for k in record.delivery_keys
                 if k.startswith(prefix) and k.endswith(suffix)), "")

"""Service helpers: batch reads and writes over a `FindingStore`, falling back to one call per record for a store
that has no batch operations (test doubles, older adapters)."""

from __future__ import annotations

from collections.abc import Sequence

from gpuwaste.models.lifecycle import FindingRecord
from gpuwaste.ports import FindingStore


def get_many(store: FindingStore, fingerprints: Sequence[str]) -> dict[str, FindingRecord]:
    """`store.get_many`, or one `get` per fingerprint."""
    batch = getattr(store, "get_many", None)
    if batch is not None:
        return dict(batch(list(fingerprints)))
    out = {}
    for fp in dict.fromkeys(fingerprints):
        record = store.get(fp)
        if record is not None:
            out[fp] = record
    return out


def update_many(store: FindingStore, updates: Sequence[tuple[FindingRecord, int]]) -> list[bool]:
    """`store.update_many`, or one `update` per record."""
    if not updates:
        return []
    batch = getattr(store, "update_many", None)
    if batch is not None:
        return list(batch(list(updates)))
    return [store.update(record, expected_version=version) for record, version in updates]


__all__ = ["get_many", "update_many"]

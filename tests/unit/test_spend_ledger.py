"""The allocation ledger's arithmetic (issue 24, `models.spend`): groups bounded to the top N + "(other)" without
losing a cent, overlapping scan windows counted once, and DynamoDB's item size measured (`store.ledger_items`)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from gpuwaste.models.spend import (
    MAX_GROUP_NAME,
    MAX_SPEND_GROUPS,
    OTHER,
    AllocationTally,
    FunnelFigures,
    ScanAllocation,
    SpendGroup,
    add_allocation,
    fold,
    spend_of,
)
from gpuwaste.store.ledger_items import MAX_ITEM_BYTES, item_bytes, packed

HOUR = datetime(2026, 3, 9, 9, tzinfo=UTC)


def g(name: str, cents: int, hours: str = "1") -> SpendGroup:
    return SpendGroup(name=name, gpu_hours=Decimal(hours), cents=cents)


def test_fold_keeps_the_costliest_groups_and_adds_the_rest_into_other_to_the_cent() -> None:
    # GIVEN 60 teams of different cost and the two unheld lines
    teams = [g(f"team-{i:02d}", 1000 + i) for i in range(60)] + [g("(unallocated)", 7), g("(unsold slices)", 3)]
    # WHEN folded to the bound
    out = fold(teams)
    # THEN the 50 costliest are kept in cost order, the other 10 are one "(other)" line, the unheld lines come last
    names = [x.name for x in out]
    assert names[:MAX_SPEND_GROUPS] == [f"team-{i:02d}" for i in range(59, 9, -1)]
    assert names[MAX_SPEND_GROUPS:] == [OTHER, "(unsold slices)", "(unallocated)"]
    other = out[MAX_SPEND_GROUPS]
    assert (other.cents, other.gpu_hours) == (sum(1000 + i for i in range(10)), Decimal(10))
    # AND nothing is lost
    assert sum(x.cents for x in out) == sum(x.cents for x in teams)


def test_an_hour_of_ten_minute_scans_over_one_hour_windows_counts_as_their_mean() -> None:
    # GIVEN six scans in one hour, each over a 1-hour window, each charging team a 1001 cents and team b 500 cents
    sums = None
    for n in range(6):
        scan = ScanAllocation(window_s=3600, funnel=FunnelFigures(total_gpu_hours=Decimal(8)),
                              by_team=(g("a", 1001 + (n == 0)), g("b", 500)))
        sums = add_allocation(sums, scan, counts_window=True)
    assert sums is not None
    tally = AllocationTally(cluster="c", hour=HOUR, scans=6, window_s=sums.window_s, allocation=sums)
    # WHEN the hour is read as a period
    period = spend_of([tally])
    # THEN it counts one hour of spend (Σ × 3600 s ÷ 6 h), rounded once and apportioned so the groups add up
    assert tally.factor == Decimal(1) / 6
    assert {x.name: x.cents for x in period.by_team} == {"a": 1001, "b": 500}
    assert period.cents == round((6 * 1001 + 1 + 6 * 500) / 6)
    assert period.fleet.total_gpu_hours == Decimal(8)
    assert period.observed_hours == 1


def test_a_partly_observed_hour_counts_as_it_is_and_says_so() -> None:
    # GIVEN one scan over a 20-minute window in the hour
    scan = ScanAllocation(window_s=1200, by_team=(g("a", 300),))
    period = spend_of([AllocationTally(cluster="c", hour=HOUR, scans=1, window_s=1200, allocation=scan)])
    # THEN its spend is what the scan saw, and a third of the hour is said to be observed
    assert period.cents == 300
    assert period.observed_hours == Decimal("0.333333333")


def test_a_group_name_past_the_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="at most 128"):
        SpendGroup(name="x" * (MAX_GROUP_NAME + 1), gpu_hours=Decimal(1), cents=1)


def test_item_size_counts_names_and_values_as_dynamodb_documents() -> None:
    # GIVEN an item of a string, a binary, a number, a string set and a map
    item = {"fingerprint": {"S": "ledger#x"}, "body": {"B": b"\x00" * 10}, "version": {"N": "3"},
            "scans": {"SS": ["ab", "cde"]}, "m": {"M": {"k": {"S": "vv"}}}}
    # THEN names + values: 11+8, 4+10, 7+21 (a number at its largest), 5+5, 1+(3+1+1+2)
    assert item_bytes(item) == 19 + 14 + 28 + 10 + 8
    with pytest.raises(ValueError, match="not a DynamoDB attribute value type"):
        item_bytes({"x": {"Q": 1}})


def test_the_largest_hour_of_groups_leaves_room_for_thousands_of_scans_in_one_item() -> None:
    # GIVEN the most groups an hour keeps, each with a distinct name of the longest length and odd figures
    def groups(dim: str) -> tuple[SpendGroup, ...]:
        return tuple(SpendGroup(name=(f"{dim}-{i}-" + hashlib.sha256(f"{dim}{i}".encode()).hexdigest() * 3)[:MAX_GROUP_NAME],
                                gpu_hours=Decimal("1234.123456789") + i, cents=123_456_789 + i,
                                effective_gpu_hours=Decimal("987.654321987"), unpriced_gpu_hours=Decimal("0.000000001"))
                     for i in range(MAX_SPEND_GROUPS + 1))
    sums = ScanAllocation(window_s=10**9, funnel=FunnelFigures(total_gpu_hours=Decimal("99999.999999999")),
                          by_team=groups("team"), by_namespace=groups("ns"))
    scans = 20_000  # 16-hex-digit digests: one scan a minute over 13 shards for the whole hour
    item = {"fingerprint": {"S": f"ledger#{HOUR:%Y-%m-%dT%H}#" + "c" * 200}, "version": {"N": "1"},
            "cluster": {"S": "c" * 200}, "hour": {"S": "2026-03-09T09:00:00.000000Z"},
            "scans": {"SS": [f"{n:016x}" for n in range(scans)]}, "scan_count": {"N": "1"},
            "body": {"B": packed(sums)}, "expires_at": {"N": "1900000000"}}
    # THEN it stays under DynamoDB's 400 KB
    assert item_bytes(item) < MAX_ITEM_BYTES

"""Bench: the allocation ledger in the store (issue 24) — what one scan adds and what reading a month costs.

    PYTHONPATH=shared:. .venv/bin/python bench/allocation_ledger.py [CLUSTERS] [DAYS]

Writes, for CLUSTERS clusters, one scan completion an hour for DAYS days into a SQLite state file, each carrying the
largest allocation ledger a completion holds (50 teams and 50 namespaces with 128-character names, "(other)" and the
unheld lines), then reads the whole period back (`FindingStore.allocation` + `models.spend.spend_of`) and prints the
JSON bytes of one completion's ledger, the compressed hour body (what a DynamoDB hour item holds), the write and read
times and the state file's size. No timed assertion: numbers only.
"""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from gpuwaste.models.messages import ScanCompleted
from gpuwaste.models.spend import MAX_GROUP_NAME, MAX_SPEND_GROUPS, FunnelFigures, ScanAllocation, SpendGroup, spend_of
from gpuwaste.store.ledger_items import packed
from gpuwaste.store.sqlite import SqliteFindingStore

START = datetime(2026, 3, 1, tzinfo=UTC)


def largest(hour: int) -> ScanAllocation:
    def groups(dim: str) -> tuple[SpendGroup, ...]:
        return tuple(SpendGroup(name=f"{dim}-{i:03d}-".ljust(MAX_GROUP_NAME, "x"), gpu_hours=Decimal("12.345678912") + i,
                                cents=100_000 + i * 37 + hour, effective_gpu_hours=Decimal("3.5")) for i in range(MAX_SPEND_GROUPS + 1))
    return ScanAllocation(window_s=3600, funnel=FunnelFigures(total_gpu_hours=Decimal(800), allocated_gpu_hours=Decimal(700)),
                          by_team=groups("team"), by_namespace=groups("ns"))


def main(clusters: int, days: int) -> None:
    sample = largest(0)
    print(f"one completion's ledger: {len(sample.model_dump_json())} bytes JSON, {len(packed(sample))} bytes compressed")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.db"
        store = SqliteFindingStore(path)
        n = 0
        t0 = time.perf_counter()
        for h in range(days * 24):
            for c in range(clusters):
                store.record_allocation(ScanCompleted(scan_id=f"s-{c}-{h}", cluster=f"cluster-{c}",
                                                      scheduled_time=START + timedelta(hours=h, minutes=5),
                                                      allocation=largest(h)), expires_at=2_000_000_000)
                n += 1
        t1 = time.perf_counter()
        period = spend_of(store.allocation(since=START, until=START + timedelta(days=days)))
        t2 = time.perf_counter()
        store.close()
        size = path.stat().st_size
    print(f"{clusters} clusters × {days} days hourly: {n} scans written in {t1 - t0:.2f} s "
          f"({(t1 - t0) / n * 1000:.2f} ms each); the period read back in {t2 - t1:.2f} s "
          f"({period.hours} cluster-hours, ${period.cents / 100:,.2f}); state file {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5, int(sys.argv[2]) if len(sys.argv) > 2 else 30)

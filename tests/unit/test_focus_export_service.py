"""The daily FOCUS export's service (`services.focus_export`): one object per cluster and day, keyed so a re-run
replaces it, and a sharded cluster's rows — shard by shard — the same as one whole scan's."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from gpuwaste.bootstrap import local
from gpuwaste.config import GpuWasteConfig
from gpuwaste.services.focus_export import FocusExportService, day_before, object_key
from gpuwaste.services.scan import ScanReport, ScanService

DEMO = local.demo_recording()


class MemoryWriter:
    """`ports.ObjectWriter` in memory: key → last body (a put replaces)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.puts = 0

    def put(self, key: str, body: bytes, *, content_type: str) -> str:
        assert content_type.startswith("text/csv")
        self.objects[key] = body
        self.puts += 1
        return f"mem://{key}"


def demo_scan(cluster: str, at: datetime, window: timedelta, shard: int, shards: int) -> ScanReport:
    cfg = GpuWasteConfig()
    sources = local.recording_sources(DEMO, cfg)
    service = ScanService(cluster_source=sources.cluster, telemetry_source=sources.telemetry, settings=cfg.detectors,
                          window=window, price_book=local.price_book(cfg))
    return service.scan(at=at, shard=shard, shard_count=shards)


def rows(body: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(body.decode())))


def test_a_sharded_cluster_exports_the_rows_of_one_whole_scan_and_a_rerun_replaces_the_object() -> None:
    # GIVEN the demo exported whole and in 3 shards, for 1 January
    whole, sharded = MemoryWriter(), MemoryWriter()
    day = date(2024, 1, 1)
    FocusExportService(scan=demo_scan, writer=whole, clusters=[("demo", 1)]).export(day)
    service = FocusExportService(scan=demo_scan, writer=sharded, clusters=[("demo", 3)])
    service.export(day)
    service.export(day)  # the scheduler's retry
    # THEN one object under the day's key, replaced by the retry, holding the whole scan's rows and cost
    assert list(sharded.objects) == [object_key("demo", day)] == list(whole.objects) and sharded.puts == 2
    a, b = rows(whole.objects[object_key("demo", day)]), rows(sharded.objects[object_key("demo", day)])

    def key(r: dict[str, str]) -> tuple[str, str, str]:
        return r["ResourceId"], r["x_Node"], r["x_LineKind"]

    assert a and sorted(map(key, a)) == sorted(map(key, b))
    assert sum(Decimal(r["BilledCost"]) for r in a) == sum(Decimal(r["BilledCost"]) for r in b)


def test_keys_name_cluster_and_day_and_no_name_makes_another_path() -> None:
    assert object_key("prod-eu.1", date(2024, 1, 1)) == "cluster=prod-eu.1/day=2024-01-01/focus.csv"
    assert object_key("../x/y", date(2024, 1, 1)) == "cluster=.._x_y/day=2024-01-01/focus.csv"


def test_a_tick_exports_the_utc_day_before_it() -> None:
    assert day_before(datetime(2024, 1, 2, 0, 30, tzinfo=UTC)) == date(2024, 1, 1)
    assert day_before(datetime(2024, 3, 1, 23, 59, tzinfo=UTC)) == date(2024, 2, 29)

"""Attribution coverage in the daily summary (issue 21 §12): each scan's coverage per allocation kind is kept by the
lifecycle store — SQLite and DynamoDB (moto server) alike — per cluster and UTC hour, counted once per scan shard, and
the summary's terminal, JSON and HTML outputs show it per cluster and kind."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from rich.console import Console

from gpuwaste.models.coverage import KindCoverage
from gpuwaste.models.messages import ScanCompleted, split_completion
from gpuwaste.models.settings import DeliverySettings, LifecycleSettings
from gpuwaste.ports import FindingStore
from gpuwaste.queue.memory import MemoryQueue
from gpuwaste.services.lifecycle import LifecycleService
from gpuwaste.services.summary import SummaryService
from gpuwaste.sinks.summary_report import render_html, render_json, render_terminal
from gpuwaste.store.dynamodb import DynamoDbFindingStore
from gpuwaste.store.sqlite import SqliteFindingStore
from tests.aws_resources import create_stack

pytestmark = pytest.mark.integration
T0 = datetime(2026, 1, 5, 9, 5, tzinfo=UTC)
EXPIRES = 1_900_000_000


class FixedClock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


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


def cov(**kinds: tuple[float, float]) -> tuple[KindCoverage, ...]:
    return tuple(KindCoverage(kind=k.replace("_", " "), allocated_gpu_hours=a, attributed_gpu_hours=t)
                 for k, (a, t) in kinds.items())


def completion(scan_id: str, at: datetime, coverage: tuple[KindCoverage, ...], *, cluster: str = "prod",
               shard: int = 0, shard_count: int = 1) -> ScanCompleted:
    return ScanCompleted(scan_id=scan_id, cluster=cluster, scheduled_time=at, fingerprints=(), coverage=coverage,
                         shard=shard, shard_count=shard_count)


def test_store_keeps_coverage_per_cluster_and_hour_counting_a_redelivered_shard_once(store: FindingStore) -> None:
    # GIVEN two scans in the 09:00 hour (the second split over two shards, each with its own node set's figures) and one
    # at 10:05, the first delivered twice
    a = completion("s-a", T0, cov(device_plugin=(10.0, 8.0), MIG=(4.0, 0.0)))
    b0 = completion("s-b", T0 + timedelta(minutes=5), cov(device_plugin=(6.0, 6.0)), shard=0, shard_count=2)
    b1 = completion("s-b", T0 + timedelta(minutes=5), cov(DRA=(2.0, 1.0)), shard=1, shard_count=2)
    c = completion("s-c", T0 + timedelta(hours=1), cov(device_plugin=(3.0, 0.0)))
    # WHEN each is recorded
    got = [store.record_coverage(m, expires_at=EXPIRES) for m in (a, a, b0, b1, c)]
    # THEN the redelivery is not counted again
    assert got == [True, False, True, True, True]
    # AND the 09:00 hour sums both scans per kind (two scans: shard 1 adds figures, not a scan); 10:00 its own
    nine, ten = store.coverage(since=T0, until=T0 + timedelta(hours=1, minutes=30))
    assert (nine.cluster, nine.hour, nine.scans) == ("prod", datetime(2026, 1, 5, 9, tzinfo=UTC), 2)
    assert {k.kind: (k.allocated_gpu_hours, k.attributed_gpu_hours) for k in nine.kinds} == {
        "DRA": (2.0, 1.0), "MIG": (4.0, 0.0), "device plugin": (16.0, 14.0)}
    assert (ten.hour, ten.scans, ten.kinds) == (datetime(2026, 1, 5, 10, tzinfo=UTC), 1, cov(device_plugin=(3.0, 0.0)))
    # AND a period starting at 10:00 reads only that hour; one ending at 09:00 none
    assert [t.hour.hour for t in store.coverage(since=T0 + timedelta(minutes=55), until=T0 + timedelta(hours=2))] == [10]
    assert store.coverage(since=T0 - timedelta(hours=3), until=datetime(2026, 1, 5, 9, tzinfo=UTC)) == []


def test_summary_shows_each_clusters_coverage_per_kind_from_the_scans_the_lifecycle_stored(store: FindingStore) -> None:
    # GIVEN the lifecycle handling three scans' completions of cluster "prod" (one after an operator upgrade broke MIG
    # attribution; one sent in two parts, so its figures ride on part 0 only) and one scan of cluster "dev"
    lifecycle = LifecycleService(store=store, alerts=MemoryQueue(), tickets=MemoryQueue(), settings=LifecycleSettings(),
                                 clock=FixedClock(T0))
    many = completion("s-3", T0 + timedelta(minutes=10), cov(device_plugin=(10.0, 10.0), MIG=(2.0, 0.0)))
    parts = split_completion(many.model_copy(update={"fingerprints": tuple(f"fp-{i:04d}" * 4 for i in range(60))}),
                             max_bytes=2048)
    assert len(parts) > 1 and all(p.coverage == many.coverage for p in parts)
    for m in (completion("s-1", T0, cov(device_plugin=(10.0, 10.0), MIG=(2.0, 2.0))),
              completion("s-2", T0 + timedelta(minutes=5), cov(device_plugin=(10.0, 9.0), MIG=(2.0, 0.0))),
              *parts, *parts[:1],  # part 0 redelivered
              completion("d-1", T0, cov(time_slicing=(1.0, 0.25)), cluster="dev")):
        lifecycle.handle_scan_completed(m)
    # WHEN the day's summary is built
    summary = SummaryService(store=store, settings=DeliverySettings(), now=lambda: T0).build(
        since=T0 - timedelta(days=1) + timedelta(minutes=30), until=T0 + timedelta(minutes=30))
    # THEN per cluster: "all" first, then each kind, GPU-hour weighted over the scans (prod MIG: 2 of 6 GPU-h)
    rows = [(c.cluster, c.kind, c.allocated_gpu_hours, c.attributed_gpu_hours, c.ratio, c.scans) for c in summary.coverage]
    assert rows == [("dev", "all", 1.0, 0.25, 0.25, 1), ("dev", "time slicing", 1.0, 0.25, 0.25, 1),
                    ("prod", "all", 36.0, 31.0, 0.8611, 3), ("prod", "MIG", 6.0, 2.0, 0.3333, 3),
                    ("prod", "device plugin", 30.0, 29.0, 0.9667, 3)]
    # AND the JSON, HTML and terminal outputs show it
    doc = json.loads(render_json(summary))
    assert doc["coverage"][3] == {"cluster": "prod", "kind": "MIG", "allocated_gpu_hours": 6.0,
                                  "attributed_gpu_hours": 2.0, "ratio": 0.3333, "scans": 3}
    html = render_html(summary)
    assert "<h2>Attribution coverage</h2>" in html
    assert "<tr><td>prod</td><td>MIG</td><td class=n>33.3%</td><td class=n>6.0</td><td class=n>2.0</td><td class=n>3</td></tr>" in html
    console = Console(file=io.StringIO(), width=120, color_system=None)
    render_terminal(summary, console)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "Attribution coverage" in text and "prod: 86.1% of 36.0 allocated GPU-h (3 scans)" in text
    assert any(line.split()[:3] == ["prod", "MIG", "33.3%"] for line in text.splitlines())
